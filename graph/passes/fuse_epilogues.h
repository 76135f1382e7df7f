// fuse_epilogues: the work after a matrix product (or a BatchNormalization) goes into that node
// (graph/op_table.h), which produces the last fused node's output:
//   - Gemm read only by a Relu: FusedGemm;
//   - MatMul (A of rank >= 2, B [K, N]) read only by an Add of a bias [N] (a Linear layer on N-D
//     input as exporters write it): FusedMatMul with the bias as input 2;
//   - MatMul or such a FusedMatMul read only by a Relu: FusedMatMul with activation Relu;
//   - a BatchNormalization's y read only by a Relu: the node with activation Relu (a ResNet
//     block's BatchNormalization + Relu in one pass over y; BatchNormalization's gradient reads x,
//     not y, and Relu's reads Relu's output, so in a training graph y has no other reader).
// On CUDA each product is one cuBLASLt call with the bias and the Relu as its epilogue
// (exec/cuda/gemm.h), on the CPU the product's kernel and the Add / Relu functors on its output;
// BatchNormalization's kernels apply Relu's functor to each y they write (exec/cpu/norm.cpp,
// exec/cuda/norm_launch.h): the values are those of the nodes it replaces.
//
// Runs on a finished graph (after autodiff: FusedGemm has no gradient rule). Relu's gradient reads
// Relu's output (graph/gradients_math.cpp) and Add's reads neither input, so in a training graph
// the product's output is read by the Add or Relu alone. Only float32 products are fused (the
// fused CUDA kernels are float32). A graph output, or a value in `keep` (read after the run, e.g.
// gradients before they become outputs), is never fused away. Returns the number of nodes fused;
// the product's own output value is left without producer or reader.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

int fuse_epilogues(Graph& g, const std::vector<ValueId>& keep = {});

}  // namespace onnxdp
