// The elementwise ops on CUDA, seen from the graph: which nodes run there, and running one.
//
//   if (cuda::elementwise_runs(node, dtype)) cuda::elementwise_forward(node, inputs, out, stream);
//
// Device tensors are DeviceRefs (a device pointer with the Value's dtype and shape). Clip's bounds
// and LeakyRelu's alpha are read from the node / the host copies the caller passes.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor.h"

namespace onnxdp::cuda {

struct DeviceRef {
  void* data = nullptr;  // device memory; nullptr for an absent optional input
  DType dtype = DType::f32;
  const Shape* shape = nullptr;
  int64_t numel = 0;
};

// Clip's bounds as host values of the input's dtype (f64 input with f32 bounds allowed, as on the
// CPU); absent: the type's range.
struct ClipBounds {
  const Tensor* lo = nullptr;
  const Tensor* hi = nullptr;
};

// Ops with a CUDA elementwise kernel: Add Sub Mul Div Pow Min Max Sqrt Exp Log Neg Abs Reciprocal
// Relu LeakyRelu Sigmoid Tanh Erf Gelu GeluGrad Softplus Sin Cos HardSigmoid HardSwish Elu Selu Celu Mish Sign
// Mod PRelu Clip Identity Equal
// Less Greater LessOrEqual GreaterOrEqual And Or Xor Not Where IsNaN IsInf.
bool is_elementwise(Op op);

// Whether this node has a kernel for its input dtypes (f16 / bf16 are not there yet, except Where).
bool elementwise_runs(const Graph& g, const Node& n);

// Runs node n on device tensors; out has the node's output shape. `stream` is a cudaStream_t.
void elementwise_forward(const Node& n, const std::vector<DeviceRef>& inputs, const DeviceRef& out,
                         const ClipBounds& clip = {}, void* stream = nullptr);

// Transpose and Expand as broadcast / strided copies through the elementwise Identity kernel (one
// launch; the input read with permuted strides, or broadcast to the output's shape). Any element
// type the Identity kernel has; at most 8 dims (Transpose) or 8 merged dims (Expand).
bool copy_op_runs(const Graph& g, const Node& n);
// `emulate`: host pointers, the launch run by elementwise_emulate.
void copy_op_forward(const Node& n, const DeviceRef& in, const DeviceRef& out, void* stream, bool emulate);

// elementwise_forward's launches run on the host by elementwise_emulate, on host pointers (the
// emulated CUDA device, exec/device_backend.h).
void elementwise_emulate_forward(const Node& n, const std::vector<DeviceRef>& inputs, const DeviceRef& out,
                                 const ClipBounds& clip = {});

// Number of GPUs; with none, the reason ("no CUDA device", or the runtime's error string such as
// "CUDA driver version is insufficient for CUDA runtime version").
struct DeviceCount {
  int count = 0;
  std::string reason;  // set when count == 0
};
DeviceCount device_count();

}  // namespace onnxdp::cuda
