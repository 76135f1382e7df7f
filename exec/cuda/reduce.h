// The reductions and Softmax on CUDA, seen from the graph: ReduceSum, ReduceMean, ReduceMax,
// Softmax and LogSoftmax on f32 / f64, with the axes absent or a constant (read on the host).
#pragma once
#include <vector>

#include "exec/kernel.h"

namespace onnxdp::cuda {

bool is_reduce(Op op);
// Whether node n of g has a kernel here (its dtype; axes absent or constant).
bool reduce_runs(const Graph& g, const Node& n);
// Runs n: in / out hold device pointers, or with `emulate` host pointers and the kernels' loops run
// on the host (exec/cuda/reduce_launch.h). stream: a cudaStream_t.
void reduce_forward(const Graph& g, const Node& n, const std::vector<TensorRef>& in, const TensorRef& out,
                    void* stream, bool emulate);

}  // namespace onnxdp::cuda
