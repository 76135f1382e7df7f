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

// bool out = f(a, b) / f(a), bool inputs (And, Or, Xor, Not).
template <class F>
bool logical_binary(const Ctx& c, F f) {
  return c.l.type == EwType::boolean && go2<bool, bool, bool>(c, f);
}

template <class F>
bool logical_unary(const Ctx& c, F f) {
  return c.l.type == EwType::boolean && go1<bool, bool>(c, f);
}

// Where copies elements: one instantiation per element size.
template <class F>
bool where(const Ctx& c, F f) {
  switch (c.l.type) {
    case EwType::boolean: return go3<uint8_t, bool, uint8_t, uint8_t>(c, f);
    case EwType::u16: return go3<uint16_t, bool, uint16_t, uint16_t>(c, f);
    case EwType::f32:
    case EwType::i32: return go3<uint32_t, bool, uint32_t, uint32_t>(c, f);
    case EwType::f64:
    case EwType::i64: return go3<uint64_t, bool, uint64_t, uint64_t>(c, f);
  }
  return false;
}

template <class F>
bool pow(const Ctx& c, F f) {
  return with_float(c.l.type, [&](auto base) {
    using T = decltype(base);
    return with_number(c.l.type1, [&](auto exponent) {
      using E = decltype(exponent);
      return go2<T, T, E>(c, f);
    });
  });
}

// Identity: any number, 16-bit floats as their bits (Gemm's C broadcast, the copies).
template <class F>
bool identity(const Ctx& c, F f) {
  if (c.l.type == EwType::u16) return go1<uint16_t, uint16_t>(c, f);
  return unary_number(c, f);
}

// Clip: the functor made per element type from the launch's bounds.
bool clip(const Ctx& c, const EwLaunch& l) {
  return with_number(l.type, [&](auto tag) {
    using T = decltype(tag);
    fn::Clip<T> f{};
    if constexpr (std::is_integral_v<T>) {
      f.lo = T(l.clip_lo_i);
      f.hi = T(l.clip_hi_i);
    } else {
      f.lo = T(l.clip_lo_f);
      f.hi = T(l.clip_hi_f);
    }
    return go1<T, T>(c, f);
  });
}

// The kernel of the launch's op: its family instantiated with its functor (exec/cuda/ops.h).
bool dispatch(const Ctx& c) {
  const EwLaunch& l = c.l;  // the functors' attributes
  switch (l.op) {
#define ONNXDP_X(op, family, ...) \
  case EwOp::op: return family(c, __VA_ARGS__);
    ONNXDP_CUDA_ELEMENTWISE(ONNXDP_X) ONNXDP_CUDA_ELEMENTWISE_FORMS(ONNXDP_X)
#undef ONNXDP_X
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
