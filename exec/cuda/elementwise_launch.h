// The launch interface of the CUDA elementwise kernels (exec/cuda/elementwise.cu), in plain C++17
// with no CUDA, fmt or graph headers so that nvcc and the host compiler both read it. The host side
// (exec/cuda/elementwise.cpp) turns a Node and its tensors into one EwLaunch; the kernels apply the
// functors of exec/functors.h, the same ones the CPU kernels run.
#pragma once
#include <cstdint>

#include "exec/cuda/ops.h"
#include "exec/functors.h"  // ONNXDP_HD

namespace onnxdp::cuda {

// The elementwise kernels: one per row of exec/cuda/ops.h's ONNXDP_CUDA_ELEMENTWISE, then the
// forms a row picks by attribute (ONNXDP_CUDA_ELEMENTWISE_FORMS).
enum class EwOp : uint8_t {
#define ONNXDP_X(op, ...) op,
  ONNXDP_CUDA_ELEMENTWISE(ONNXDP_X) ONNXDP_CUDA_ELEMENTWISE_FORMS(ONNXDP_X)
#undef ONNXDP_X
};

// The kernel families of exec/cuda/ops.h (the element types each is instantiated for).
enum class EwFamily : uint8_t {
  unary_number, unary_float, binary_number, binary_float, compare, logical_unary, logical_binary, float_test, pow,
  identity, clip, where,
};

constexpr EwFamily ew_family(EwOp op) {
  switch (op) {
#define ONNXDP_X(op, family, ...) \
  case EwOp::op: return EwFamily::family;
    ONNXDP_CUDA_ELEMENTWISE(ONNXDP_X) ONNXDP_CUDA_ELEMENTWISE_FORMS(ONNXDP_X)
#undef ONNXDP_X
  }
  return EwFamily::unary_number;
}

// The inputs a family's kernel reads: Where's three, two for the binary ones, else one (Clip's
// bounds are values of the launch, read on the host).
constexpr int ew_arity(EwFamily f) {
  switch (f) {
    case EwFamily::where: return 3;
    case EwFamily::binary_number:
    case EwFamily::binary_float:
    case EwFamily::compare:
    case EwFamily::logical_binary:
    case EwFamily::pow: return 2;
    default: return 1;
  }
}

// Element types the kernels instantiate (graph's DType has more; the host side maps and refuses).
enum class EwType : uint8_t { f32, f64, i32, i64, boolean, u16 };

inline constexpr int kEwMaxRank = 8;

// The iteration space after merging dims (exec/cpu/broadcast.h's BroadcastLoop): output element i
// has coordinates over dims[0..rank), input k is read at sum(coord[d] * strides[k][d]).
struct EwLayout {
  int rank = 1;
  int64_t numel = 0;
  int64_t dims[kEwMaxRank] = {1};
  int64_t strides[3][kEwMaxRank] = {};
  bool contiguous = false;  // every input has the output's shape, or one element: no index math
  bool scalar[3] = {};      // with contiguous: input k has one element
};

// Offsets of output element i in each of the N inputs: the index math of the kernels, also run
// on the host by elementwise_emulate.
template <int N>
ONNXDP_HD inline void ew_input_offsets(const EwLayout& l, int64_t i, int64_t (&off)[N]) {
  if (l.contiguous) {
    for (int k = 0; k < N; ++k) off[k] = l.scalar[k] ? 0 : i;
    return;
  }
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t n = l.dims[d], c = i % n;
    i /= n;
    for (int k = 0; k < N; ++k) off[k] += c * l.strides[k][d];
  }
}

struct EwLaunch {
  EwOp op = EwOp::Identity;
  EwType type = EwType::f32;   // input 0's type (Where: input 1's)
  EwType type1 = EwType::f32;  // Pow: the exponent's type
  EwLayout layout;
  void* out = nullptr;
  const void* in[3] = {nullptr, nullptr, nullptr};
  float alpha = 0.01f;                 // LeakyRelu, HardSigmoid
  float beta = 0.5f;                   // HardSigmoid
  float gamma = 1.0f;                  // Selu (alpha: Elu, Selu, Celu too)
  bool fmod = false;                   // Mod
  bool inf_negative = true, inf_positive = true;  // IsInf's detect_negative / detect_positive
  int64_t clip_lo_i = 0, clip_hi_i = 0;  // Clip bounds for integer types
  double clip_lo_f = 0, clip_hi_f = 0;   // Clip bounds for float types
};

// Launches on `stream` (a cudaStream_t; nullptr: the default stream) and checks the launch.
// Throws onnxdp::Error for an op / type pair that has no kernel (see elementwise_supported).
void elementwise_launch(const EwLaunch& l, void* stream);

// The same dispatch, layout and functors run by a loop on the host, on host memory: what a launch
// would compute, checkable where there is no GPU (tests/gpu/test_cuda_elementwise.cpp). Only the
// device execution itself (and device math library rounding) is not covered by it.
void elementwise_emulate(const EwLaunch& l);

// Throws onnxdp::Error naming the op and types (defined on the host side, elementwise.cpp).
[[noreturn]] void elementwise_no_kernel(const EwLaunch& l);

// Whether elementwise_launch has a kernel for op on these types (type1: Pow's exponent).
bool elementwise_supported(EwOp op, EwType type, EwType type1 = EwType::f32);

}  // namespace onnxdp::cuda
