// The entry points of the CUDA kernel groups that take a whole KernelCtx (several outputs, the
// RunState for Dropout), as exec/cuda/backend.cpp dispatches them:
//
//   if (cuda::norm_runs(g, n)) cuda::norm_forward(g, ctx, cc);
//
// <group>_runs says whether node n of g has a kernel for its dtypes, shapes and attributes (the
// caller falls back to the CPU kernel otherwise); <group>_forward runs it with ctx's refs holding
// device pointers, or host pointers when cc.emulate (the emulated device: the kernels' loop bodies
// run on the host). Inputs the kernels read on the host (shapes, axes, pads given as tensors) are
// constants: read them from g.value(n.inputs[k]).data, never through ctx (a device pointer).
#pragma once
#include <cstdint>

#include "exec/cuda/ops.h"
#include "exec/kernel.h"

namespace onnxdp::cuda {

// The kernel family of each row of the op table, from exec/cuda/ops.h (none: the CPU kernel with
// copies). A row listed twice, or a name that is no row, does not compile.
enum class KernelFamily : uint8_t { none, elementwise, copy, gemm, reduce, norm, tensor, conv, reshape, collective };

constexpr KernelFamily kernel_family(Op op) {
  switch (op) {
#define ONNXDP_X(op, ...) \
  case Op::op: return KernelFamily::elementwise;
    ONNXDP_CUDA_ELEMENTWISE(ONNXDP_X)
#undef ONNXDP_X
#define ONNXDP_X(op, family) \
  case Op::op: return KernelFamily::family;
    ONNXDP_CUDA_KERNELS(ONNXDP_X)
#undef ONNXDP_X
    default: return KernelFamily::none;
  }
}

struct CudaContext {
  void* stream = nullptr;  // cudaStream_t
  void* cublas = nullptr;  // cublasHandle_t, bound to stream
  void* cudnn = nullptr;   // cudnnHandle_t, bound to stream
  bool emulate = false;    // host memory, host loops (no CUDA call may be made)
};

// LayerNormalization(Grad), BatchNormalization(Grad), SoftmaxCrossEntropyLoss(Grad),
// NegativeLogLikelihoodLoss(Grad): exec/cuda/norm.*
bool norm_runs(const Graph& g, const Node& n);
void norm_forward(const Graph& g, KernelCtx& c, const CudaContext& cc);

// Gather, GatherGrad, Cast, Concat, Slice, Split, Pad, Tile, Trilu, Dropout: exec/cuda/tensor_ops.*
bool tensor_runs(const Graph& g, const Node& n);
void tensor_forward(const Graph& g, KernelCtx& c, const CudaContext& cc);
// The CPU kernel's message for bad element `element` (holding `value`) of node n's indices, as the
// plan's check slots report it after a run (exec/run_scalars.h).
std::string tensor_check_message(const Graph& g, const Node& n, int64_t element, int64_t value);

// Conv, ConvTranspose, ConvGradFilter (cuDNN), MaxPool(Grad), AveragePool(Grad), GlobalAveragePool:
// exec/cuda/conv.*
bool conv_runs(const Graph& g, const Node& n);
void conv_forward(const Graph& g, KernelCtx& c, const CudaContext& cc);

}  // namespace onnxdp::cuda
