// The reductions and Softmax on CUDA, seen from the graph: ReduceSum, ReduceMean, ReduceMax
// (f32, f64, f16, bf16), Softmax, LogSoftmax, SoftmaxGrad and LogSoftmaxGrad (f32, f64), with the
// axes absent or a constant (read on the host).
#pragma once
#include <vector>

#include "exec/kernel.h"

namespace onnxdp::cuda {

// Whether node n of g has a kernel here: a reduce row of exec/cuda/ops.h, its dtype, axes absent
// or constant.
bool reduce_runs(const Graph& g, const Node& n);
// Runs n: in / out hold device pointers, or with `emulate` host pointers and the kernels' loops run
// on the host (exec/cuda/reduce_launch.h). stream: a cudaStream_t. scratch: scratch_doubles doubles
// (device memory, host with emulate) the split reduction may use between its two passes; nullptr:
// one thread per output.
void reduce_forward(const Graph& g, const Node& n, const std::vector<TensorRef>& in, const TensorRef& out,
                    void* stream, bool emulate, double* scratch = nullptr, size_t scratch_doubles = 0);
// How many shares each output of a reduction of n_out outputs over n_red elements is split into
// (1: none), given scratch for scratch_doubles partial results.
int64_t reduce_parts(int64_t n_out, int64_t n_red, size_t scratch_doubles);

}  // namespace onnxdp::cuda
