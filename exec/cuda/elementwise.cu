// CUDA kernels of the elementwise ops: one grid-stride kernel per arity, instantiated with the
// functors of exec/functors.h (the CPU kernels' arithmetic, DESIGN.md convention 6) for the
// element types below. Broadcasting follows the layout the host side computed (EwLayout).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "exec/cuda/check.h"
#include "exec/cuda/launch.h"
#include "exec/cuda/elementwise_launch.h"
#include "exec/functors.h"

namespace onnxdp::cuda {

namespace {

#define ONNXDP_GRID_STRIDE(i, n)                                                              \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// Element i of each arity: shared by the kernels and the host emulation.
template <class TOut, class F, class A>
ONNXDP_HD inline void apply1(const EwLayout& l, const F& f, TOut* out, const A* a, int64_t i) {
  int64_t off[1];
  ew_input_offsets<1>(l, i, off);
  out[i] = f(a[off[0]]);
}

template <class TOut, class F, class A, class B>
ONNXDP_HD inline void apply2(const EwLayout& l, const F& f, TOut* out, const A* a, const B* b, int64_t i) {
  int64_t off[2];
  ew_input_offsets<2>(l, i, off);
  out[i] = f(a[off[0]], b[off[1]]);
}

template <class TOut, class F, class A, class B, class C>
ONNXDP_HD inline void apply3(const EwLayout& l, const F& f, TOut* out, const A* a, const B* b, const C* c,
                             int64_t i) {
  int64_t off[3];
  ew_input_offsets<3>(l, i, off);
  out[i] = f(a[off[0]], b[off[1]], c[off[2]]);
}

template <class TOut, class F, class A>
__global__ void map1(EwLayout l, F f, TOut* out, const A* a) {
  ONNXDP_GRID_STRIDE(i, l.numel) apply1(l, f, out, a, i);
}

template <class TOut, class F, class A, class B>
__global__ void map2(EwLayout l, F f, TOut* out, const A* a, const B* b) {
  ONNXDP_GRID_STRIDE(i, l.numel) apply2(l, f, out, a, b, i);
}

template <class TOut, class F, class A, class B, class C>
__global__ void map3(EwLayout l, F f, TOut* out, const A* a, const B* b, const C* c) {
  ONNXDP_GRID_STRIDE(i, l.numel) apply3(l, f, out, a, b, c, i);
}


// What dispatch does with the kernel it found: nothing (the question was whether it exists), a
// launch on the device, or the same element loop on the host.
enum class Mode { query, launch, emulate };

struct Ctx {
  const EwLaunch& l;
  cudaStream_t stream;
  Mode mode;
};

template <class TOut, class A, class F>
bool go1(const Ctx& c, F f) {
  const EwLayout& l = c.l.layout;
  TOut* out = static_cast<TOut*>(c.l.out);
  const A* a = static_cast<const A*>(c.l.in[0]);
  if (c.mode == Mode::launch && l.numel > 0) {
    map1<TOut, F, A><<<blocks_for(l.numel), kThreads, 0, c.stream>>>(l, f, out, a);
    ONNXDP_CUDA_CHECK_LAUNCH();
  } else if (c.mode == Mode::emulate) {
    for (int64_t i = 0; i < l.numel; ++i) apply1(l, f, out, a, i);
  }
  return true;
}

template <class TOut, class A, class B, class F>
bool go2(const Ctx& c, F f) {
  const EwLayout& l = c.l.layout;
  TOut* out = static_cast<TOut*>(c.l.out);
  const A* a = static_cast<const A*>(c.l.in[0]);
  const B* b = static_cast<const B*>(c.l.in[1]);
  if (c.mode == Mode::launch && l.numel > 0) {
    map2<TOut, F, A, B><<<blocks_for(l.numel), kThreads, 0, c.stream>>>(l, f, out, a, b);
    ONNXDP_CUDA_CHECK_LAUNCH();
  } else if (c.mode == Mode::emulate) {
    for (int64_t i = 0; i < l.numel; ++i) apply2(l, f, out, a, b, i);
  }
  return true;
}

template <class TOut, class A, class B, class C, class F>
bool go3(const Ctx& c, F f) {
  const EwLayout& l = c.l.layout;
  TOut* out = static_cast<TOut*>(c.l.out);
  const A* a = static_cast<const A*>(c.l.in[0]);
  const B* b = static_cast<const B*>(c.l.in[1]);
  const C* cc = static_cast<const C*>(c.l.in[2]);
  if (c.mode == Mode::launch && l.numel > 0) {
    map3<TOut, F, A, B, C><<<blocks_for(l.numel), kThreads, 0, c.stream>>>(l, f, out, a, b, cc);
    ONNXDP_CUDA_CHECK_LAUNCH();
  } else if (c.mode == Mode::emulate) {
    for (int64_t i = 0; i < l.numel; ++i) apply3(l, f, out, a, b, cc, i);
  }
  return true;
}

// Calls fn(T{}) for the C++ type of t among the numbers; false for other types.
template <class Fn>
bool with_number(EwType t, Fn&& fn) {
  switch (t) {
    case EwType::f32: return fn(float{});
    case EwType::f64: return fn(double{});
    case EwType::i32: return fn(int32_t{});
    case EwType::i64: return fn(int64_t{});
    default: return false;
  }
}

template <class Fn>
bool with_float(EwType t, Fn&& fn) {
  switch (t) {
    case EwType::f32: return fn(float{});
    case EwType::f64: return fn(double{});
    default: return false;
  }
}

template <class F>
bool binary_number(const Ctx& c, F f) {
  return with_number(c.l.type, [&](auto tag) {
    using T = decltype(tag);
    return go2<T, T, T>(c, f);
  });
}

template <class F>
bool unary_number(const Ctx& c, F f) {
  return with_number(c.l.type, [&](auto tag) {
    using T = decltype(tag);
    return go1<T, T>(c, f);
  });
}

template <class F>
bool unary_float(const Ctx& c, F f) {
  return with_float(c.l.type, [&](auto tag) {
    using T = decltype(tag);
    return go1<T, T>(c, f);
  });
}

template <class F>
bool binary_float(const Ctx& c, F f) {
  return with_float(c.l.type, [&](auto tag) {
    using T = decltype(tag);
    return go2<T, T, T>(c, f);
  });
}

template <class F>
bool compare(const Ctx& c, F f) {
  if (c.l.type == EwType::boolean) return go2<bool, bool, bool>(c, f);
  return with_number(c.l.type, [&](auto tag) {
    using T = decltype(tag);
    return go2<bool, T, T>(c, f);
  });
}

// bool out = f(a), a f32 / f64 (IsNaN, IsInf).
template <class F>
bool float_test(const Ctx& c, F f) {
  return with_float(c.l.type, [&](auto tag) {
    using T = decltype(tag);
    return go1<bool, T>(c, f);
  });
}

// Where copies elements: one instantiation per element size.
bool where(const Ctx& c) {
  switch (c.l.type) {
    case EwType::boolean: return go3<uint8_t, bool, uint8_t, uint8_t>(c, fn::Select{});
    case EwType::u16: return go3<uint16_t, bool, uint16_t, uint16_t>(c, fn::Select{});
    case EwType::f32:
    case EwType::i32: return go3<uint32_t, bool, uint32_t, uint32_t>(c, fn::Select{});
    case EwType::f64:
    case EwType::i64: return go3<uint64_t, bool, uint64_t, uint64_t>(c, fn::Select{});
  }
  return false;
}

bool pow(const Ctx& c) {
  return with_float(c.l.type, [&](auto base) {
    using T = decltype(base);
    return with_number(c.l.type1, [&](auto exponent) {
      using E = decltype(exponent);
      return go2<T, T, E>(c, fn::Pow{});
    });
  });
}

bool clip(const Ctx& c) {
  return with_number(c.l.type, [&](auto tag) {
    using T = decltype(tag);
    fn::Clip<T> f{};
    if constexpr (std::is_integral_v<T>) {
      f.lo = T(c.l.clip_lo_i);
      f.hi = T(c.l.clip_hi_i);
    } else {
      f.lo = T(c.l.clip_lo_f);
      f.hi = T(c.l.clip_hi_f);
    }
    return go1<T, T>(c, f);
  });
}

bool dispatch(const Ctx& c) {
  switch (c.l.op) {
    case EwOp::Add: return binary_number(c, fn::Add{});
    case EwOp::Sub: return binary_number(c, fn::Sub{});
    case EwOp::Mul: return binary_number(c, fn::Mul{});
    case EwOp::Div: return binary_number(c, fn::Div{});
    case EwOp::Min: return binary_number(c, fn::Min{});
    case EwOp::Max: return binary_number(c, fn::Max{});
    case EwOp::Mod: return binary_number(c, fn::Mod{c.l.fmod});
    case EwOp::PRelu: return binary_number(c, fn::PRelu{});
    case EwOp::Pow: return pow(c);
    case EwOp::Identity:  // 16-bit floats: their bits (Gemm's C broadcast)
      if (c.l.type == EwType::u16) return go1<uint16_t, uint16_t>(c, fn::Identity{});
      return unary_number(c, fn::Identity{});
    case EwOp::Neg: return unary_number(c, fn::Neg{});
    case EwOp::Abs: return unary_number(c, fn::Abs{});
    case EwOp::Relu: return unary_number(c, fn::Relu{});
    case EwOp::Clip: return clip(c);
    case EwOp::Sqrt: return unary_float(c, fn::Sqrt{});
    case EwOp::Exp: return unary_float(c, fn::Exp{});
    case EwOp::Log: return unary_float(c, fn::Log{});
    case EwOp::Reciprocal: return unary_float(c, fn::Reciprocal{});
    case EwOp::LeakyRelu: return unary_float(c, fn::LeakyRelu{c.l.alpha});
    case EwOp::Sigmoid: return unary_float(c, fn::Sigmoid{});
    case EwOp::Tanh: return unary_float(c, fn::Tanh{});
    case EwOp::Erf: return unary_float(c, fn::Erf{});
    case EwOp::Gelu: return unary_float(c, fn::Gelu{});
    case EwOp::GeluTanh: return unary_float(c, fn::GeluTanh{});
    case EwOp::Softplus: return unary_float(c, fn::Softplus{});
    case EwOp::Sin: return unary_float(c, fn::Sin{});
    case EwOp::Cos: return unary_float(c, fn::Cos{});
    case EwOp::HardSigmoid: return unary_float(c, fn::HardSigmoid{c.l.alpha, c.l.beta});
    case EwOp::HardSwish: return unary_float(c, fn::HardSwish{});
    case EwOp::Elu: return unary_float(c, fn::Elu{c.l.alpha});
    case EwOp::Selu: return unary_float(c, fn::Selu{c.l.alpha, c.l.gamma});
    case EwOp::Celu: return unary_float(c, fn::Celu{c.l.alpha});
    case EwOp::Mish: return unary_float(c, fn::Mish{});
    case EwOp::Sign: return unary_number(c, fn::Sign{});
    case EwOp::GeluGrad: return binary_float(c, fn::GeluGrad{});
    case EwOp::GeluTanhGrad: return binary_float(c, fn::GeluTanhGrad{});
    case EwOp::Equal: return compare(c, fn::Equal{});
    case EwOp::Less: return compare(c, fn::Less{});
    case EwOp::Greater: return compare(c, fn::Greater{});
    case EwOp::LessOrEqual: return compare(c, fn::LessOrEqual{});
    case EwOp::GreaterOrEqual: return compare(c, fn::GreaterOrEqual{});
    case EwOp::And: return c.l.type == EwType::boolean && go2<bool, bool, bool>(c, fn::And{});
    case EwOp::Or: return c.l.type == EwType::boolean && go2<bool, bool, bool>(c, fn::Or{});
    case EwOp::Xor: return c.l.type == EwType::boolean && go2<bool, bool, bool>(c, fn::Xor{});
    case EwOp::Not: return c.l.type == EwType::boolean && go1<bool, bool>(c, fn::Not{});
    case EwOp::IsNaN: return float_test(c, fn::IsNaN{});
    case EwOp::IsInf: return float_test(c, fn::IsInf{c.l.inf_negative, c.l.inf_positive});
    case EwOp::Where: return where(c);
  }
  return false;
}

}  // namespace

bool elementwise_supported(EwOp op, EwType type, EwType type1) {
  EwLaunch l;
  l.op = op;
  l.type = type;
  l.type1 = type1;
  return dispatch(Ctx{l, nullptr, Mode::query});
}

void elementwise_launch(const EwLaunch& l, void* stream) {
  if (!dispatch(Ctx{l, static_cast<cudaStream_t>(stream), Mode::launch})) elementwise_no_kernel(l);
}

void elementwise_emulate(const EwLaunch& l) {
  if (!dispatch(Ctx{l, nullptr, Mode::emulate})) elementwise_no_kernel(l);
}

}  // namespace onnxdp::cuda
