// The launch interface of the CUDA reduction and Softmax kernels (exec/cuda/reduce.cu), in plain
// C++17 so nvcc and the host compiler both read it. The host side (exec/cuda/reduce.cpp) fills one
// launch from a node; the per-output loops below are the kernels' bodies, also run on the host by
// the *_emulate functions.
//
// Both kernels give each output one thread that walks its reduced elements in order, accumulating
// in double as the CPU kernels do: simple, exact in order, and slow for a few outputs over very
// many elements (a bias gradient over a large batch); a block-wide reduction is the next step.
#pragma once
#include <math.h>

#include <cstdint>

#include "exec/cuda/tensor_ops_launch.h"  // the 16-bit float conversions
#include "exec/functors.h"                 // ONNXDP_HD, fn::m

namespace onnxdp::cuda {

inline constexpr int kRdMaxRank = 8;

enum class RdKind : uint8_t { sum, mean, max };

// Output o reduces the elements at input offsets base(o) + r(j), j < n_red: kept dims give base,
// reduced dims give r (exec/cpu/reduce_dims.h's split, the CPU kernel's).
// Element types of the reductions: stored as T, summed in double. 16-bit floats (their bits) load
// exactly and store rounded once (to odd in float first: the CPU's Elem<DType::bf16>::from_f64).
enum class RdType : uint8_t { f32, f64, f16, bf16 };
struct RdF32 {
  using T = float;
  static ONNXDP_HD double load(T v) { return double(v); }
  static ONNXDP_HD T store(double a) { return T(a); }
};
struct RdF64 {
  using T = double;
  static ONNXDP_HD double load(T v) { return v; }
  static ONNXDP_HD T store(double a) { return a; }
};
struct RdF16 {
  using T = uint16_t;
  static ONNXDP_HD double load(T v) { return double(cast_detail::half_to_f32(v)); }
  static ONNXDP_HD T store(double a) { return cast_detail::f32_to_half(cast_detail::f64_to_f32_odd(a)); }
};
struct RdBf16 {
  using T = uint16_t;
  static ONNXDP_HD double load(T v) { return double(cast_detail::bf16_to_f32(v)); }
  static ONNXDP_HD T store(double a) { return cast_detail::f32_to_bf16(cast_detail::f64_to_f32_odd(a)); }
};

struct ReduceLaunch {
  RdKind kind = RdKind::sum;
  RdType type = RdType::f32;
  int nk = 0, nr = 0;
  int64_t kept_size[kRdMaxRank] = {}, kept_stride[kRdMaxRank] = {};
  int64_t red_size[kRdMaxRank] = {}, red_stride[kRdMaxRank] = {};
  int64_t n_out = 0, n_red = 0;
  const void* in = nullptr;
  void* out = nullptr;
};

template <class E>
ONNXDP_HD inline void reduce_one(const ReduceLaunch& l, int64_t o) {
  using T = typename E::T;
  const T* src = static_cast<const T*>(l.in);
  int64_t base = 0, k = o;
  for (int d = l.nk - 1; d >= 0; --d) {
    base += (k % l.kept_size[d]) * l.kept_stride[d];
    k /= l.kept_size[d];
  }
  double acc = l.kind == RdKind::max ? -INFINITY : 0.0;
  for (int64_t j = 0; j < l.n_red; ++j) {
    int64_t off = base, q = j;
    for (int d = l.nr - 1; d >= 0; --d) {
      off += (q % l.red_size[d]) * l.red_stride[d];
      q /= l.red_size[d];
    }
    const double v = E::load(src[off]);
    if (l.kind == RdKind::max) acc = (v > acc || v != v) ? v : acc;  // NaN wins
    else acc += v;
  }
  if (l.kind == RdKind::mean) acc /= double(l.n_red);  // the empty set: 0 / 0 = NaN
  static_cast<T*>(l.out)[o] = E::store(acc);
}

// Softmax / LogSoftmax over the middle dim of [outer, n, inner]: column c = (q, i) of the
// outer x inner columns. The CPU kernel's arithmetic: max, exp(x - max) in T, sum in double.
struct SoftmaxLaunch {
  bool log = false;
  bool f64 = false;
  int64_t outer = 0, n = 0, inner = 0;
  const void* in = nullptr;
  void* out = nullptr;
};

template <class T>
ONNXDP_HD inline void softmax_one(const SoftmaxLaunch& l, int64_t c) {
  const T* x = static_cast<const T*>(l.in) + (c / l.inner) * l.n * l.inner + c % l.inner;
  T* y = static_cast<T*>(l.out) + (c / l.inner) * l.n * l.inner + c % l.inner;
  const int64_t s = l.inner;
  T mx = x[0];
  for (int64_t j = 1; j < l.n; ++j) mx = x[j * s] > mx ? x[j * s] : mx;
  double sum = 0;
  for (int64_t j = 0; j < l.n; ++j) sum += double(fn::m::exp(T(x[j * s] - mx)));
  if (l.log) {
    const T ls = T(fn::m::log(sum));
    for (int64_t j = 0; j < l.n; ++j) y[j * s] = (x[j * s] - mx) - ls;
  } else {
    const T inv = T(1.0 / sum);
    for (int64_t j = 0; j < l.n; ++j) y[j * s] = fn::m::exp(T(x[j * s] - mx)) * inv;
  }
}

void reduce_launch(const ReduceLaunch& l, void* stream);
void reduce_emulate(const ReduceLaunch& l);
void softmax_launch(const SoftmaxLaunch& l, void* stream);
void softmax_emulate(const SoftmaxLaunch& l);

}  // namespace onnxdp::cuda
