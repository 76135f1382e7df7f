// The elementwise ops on CUDA, seen from the graph: which nodes run there, and running one.
//
//   if (cuda::elementwise_runs(g, node)) cuda::elementwise_forward(g, node, inputs, out, stream, emulate);
//
// Which rows run here, with which functor: exec/cuda/ops.h's ONNXDP_CUDA_ELEMENTWISE. Tensors are
// the Plan's TensorRefs holding device pointers (host pointers on the emulated device). Clip's bounds
// are read on the host, from the graph's constants.
#pragma once
#include <string>
#include <vector>

#include "exec/kernel.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace onnxdp::cuda {

// Whether the op is a row of ONNXDP_CUDA_ELEMENTWISE.
bool is_elementwise(Op op);

// Whether this node has a kernel for its input dtypes (f16 / bf16 are not there yet, except Where).
bool elementwise_runs(const Graph& g, const Node& n);
// Whether the inputs the kernels read on the host (Clip's bounds) are constants of g, as the Plan
// needs: its tensors live on the device.
bool elementwise_bounds_known(const Graph& g, const Node& n);

// Runs node n of g; out has the node's output shape. `stream` is a cudaStream_t. `emulate`: host
// pointers, the launches run by elementwise_emulate (the emulated device, exec/device_backend.h).
void elementwise_forward(const Graph& g, const Node& n, const std::vector<TensorRef>& inputs, const TensorRef& out,
                         void* stream, bool emulate);

// Transpose and Expand as broadcast / strided copies through the elementwise Identity kernel (one
// launch; the input read with permuted strides, or broadcast to the output's shape). Any element
// type the Identity kernel has; at most 8 dims (Transpose) or 8 merged dims (Expand).
bool copy_op_runs(const Graph& g, const Node& n);
// `emulate`: host pointers, the launch run by elementwise_emulate.
void copy_op_forward(const Node& n, const TensorRef& in, const TensorRef& out, void* stream, bool emulate);

// Number of GPUs; with none, the reason ("no CUDA device", or the runtime's error string such as
// "CUDA driver version is insufficient for CUDA runtime version").
struct DeviceCount {
  int count = 0;
  std::string reason;  // set when count == 0
};
DeviceCount device_count();

}  // namespace onnxdp::cuda
