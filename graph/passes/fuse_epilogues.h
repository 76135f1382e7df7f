// fuse_epilogues: a Gemm whose output only a Relu reads becomes one FusedGemm (graph/op_table.h)
// producing the Relu's output: on CUDA one cuBLASLt call with the bias and the Relu as its
// epilogue (exec/cuda/gemm.h), on the CPU the Gemm kernel and the Relu functor on its output.
// The values are those of the two nodes.
//
// Runs on a finished graph (after autodiff: FusedGemm has no gradient rule). Relu's gradient reads
// Relu's output (graph/gradients_math.cpp), so in a training graph the Gemm's output is read by
// the Relu alone. Only float32 Gemms are fused (a FusedGemm's CUDA kernel is float32). Returns the
// number of nodes fused; the Gemm's own output value is left without producer or reader.
#pragma once
#include "graph/graph.h"

namespace onnxdp {

int fuse_epilogues(Graph& g);

}  // namespace onnxdp
