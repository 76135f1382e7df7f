// The launch interface of the CUDA reduction and Softmax kernels (exec/cuda/reduce.cu), in plain
// C++17 so nvcc and the host compiler both read it. The host side (exec/cuda/reduce.cpp) fills one
// launch from a node; the per-output loops below are the kernels' bodies, also run on the host by
// the *_emulate functions.
//
// The reductions give each output one thread that walks its reduced elements in order,
// accumulating in double as the CPU kernels do; so does the Softmax family for each column when it
// runs along a dim other than the last (along the last, a row goes to a group of lanes, below). A reduction of few outputs over many elements (a bias gradient
// over a large batch) is split: `parts` threads per output each reduce one contiguous share of the
// reduced elements into a double, and a second pass combines an output's shares in order. The
// shares are fixed by the sizes, so the result is the same on every run.
#pragma once
#include <math.h>

#include <cstdint>

#include "exec/cuda/tensor_ops_launch.h"  // the 16-bit float conversions
#include "exec/functors.h"                 // ONNXDP_HD, fn::m

namespace onnxdp::cuda {

inline constexpr int kRdMaxRank = 8;

enum class RdKind : uint8_t { sum, mean, max, min };

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
  // The split: share p of output o goes to partial[p * n_out + o] (parts 1: no split).
  int64_t parts = 1;
  double* partial = nullptr;
};

// acc combined with v: the sum, or the max / min where NaN wins.
ONNXDP_HD inline double rd_combine(const ReduceLaunch& l, double acc, double v) {
  if (l.kind == RdKind::max) return (v > acc || v != v) ? v : acc;
  if (l.kind == RdKind::min) return (v < acc || v != v) ? v : acc;
  return acc + v;
}

// The reduction of the empty set: -inf (max), +inf (min), 0.
ONNXDP_HD inline double rd_init(const ReduceLaunch& l) {
  return l.kind == RdKind::max ? -INFINITY : l.kind == RdKind::min ? INFINITY : 0.0;
}

// Output o's reduction over the reduced elements j0 .. j1 - 1, in order.
template <class E>
ONNXDP_HD inline double reduce_range(const ReduceLaunch& l, int64_t o, int64_t j0, int64_t j1) {
  using T = typename E::T;
  const T* src = static_cast<const T*>(l.in);
  int64_t base = 0, k = o;
  for (int d = l.nk - 1; d >= 0; --d) {
    base += (k % l.kept_size[d]) * l.kept_stride[d];
    k /= l.kept_size[d];
  }
  double acc = rd_init(l);
  for (int64_t j = j0; j < j1; ++j) {
    int64_t off = base, q = j;
    for (int d = l.nr - 1; d >= 0; --d) {
      off += (q % l.red_size[d]) * l.red_stride[d];
      q /= l.red_size[d];
    }
    acc = rd_combine(l, acc, E::load(src[off]));
  }
  return acc;
}

template <class E>
ONNXDP_HD inline void reduce_store(const ReduceLaunch& l, int64_t o, double acc) {
  if (l.kind == RdKind::mean) acc /= double(l.n_red);  // the empty set: 0 / 0 = NaN
  static_cast<typename E::T*>(l.out)[o] = E::store(acc);
}

template <class E>
ONNXDP_HD inline void reduce_one(const ReduceLaunch& l, int64_t o) {
  reduce_store<E>(l, o, reduce_range<E>(l, o, 0, l.n_red));
}

// The split's first pass, i < n_out * parts: share i / n_out of output i % n_out.
template <class E>
ONNXDP_HD inline void reduce_part(const ReduceLaunch& l, int64_t i) {
  const int64_t o = i % l.n_out, p = i / l.n_out, share = (l.n_red + l.parts - 1) / l.parts;
  const int64_t j0 = p * share, j1 = j0 + share < l.n_red ? j0 + share : l.n_red;
  l.partial[i] = reduce_range<E>(l, o, j0 < l.n_red ? j0 : l.n_red, j1);
}

// The second pass: output o from its shares, in order.
template <class E>
ONNXDP_HD inline void reduce_finish(const ReduceLaunch& l, int64_t o) {
  double acc = rd_init(l);
  for (int64_t p = 0; p < l.parts; ++p) acc = rd_combine(l, acc, l.partial[p * l.n_out + o]);
  reduce_store<E>(l, o, acc);
}

// Softmax / LogSoftmax over the middle dim of [outer, n, inner]: column c = (q, i) of the
// outer x inner columns. The CPU kernel's arithmetic: max, exp(x - max) in T, sum in double.
// With `grad`, SoftmaxGrad / LogSoftmaxGrad: `in` is y (the forward's output), `dy` the incoming
// gradient, and as on the CPU the column's sum (of dy * y, or of dy) is a double rounded to T once.
struct SoftmaxLaunch {
  bool log = false;
  bool grad = false;
  bool f64 = false;
  int64_t outer = 0, n = 0, inner = 0;
  const void* in = nullptr;
  const void* dy = nullptr;
  void* out = nullptr;
};

template <class T>
ONNXDP_HD inline void softmax_grad_one(const SoftmaxLaunch& l, int64_t c) {
  const int64_t at = (c / l.inner) * l.n * l.inner + c % l.inner, s = l.inner;
  const T* y = static_cast<const T*>(l.in) + at;
  const T* g = static_cast<const T*>(l.dy) + at;
  T* dx = static_cast<T*>(l.out) + at;
  double sum = 0;
  for (int64_t j = 0; j < l.n; ++j) sum += l.log ? double(g[j * s]) : double(g[j * s]) * double(y[j * s]);
  const T t = T(sum);
  for (int64_t j = 0; j < l.n; ++j)
    dx[j * s] = l.log ? T(g[j * s] - fn::m::exp(y[j * s]) * t) : T(y[j * s] * T(g[j * s] - t));
}

template <class T>
ONNXDP_HD inline void softmax_one(const SoftmaxLaunch& l, int64_t c) {
  if (l.grad) return softmax_grad_one<T>(l, c);
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

// Softmax along the last dim (inner == 1), the attention and classifier case: a row's elements
// are contiguous, so kLanes lanes (a warp on the GPU) share a row. Lane k takes elements k,
// k + kLanes, ...: neighbouring lanes read neighbouring elements. Each lane's partial max and
// partial sums combine across the lanes by a butterfly (at distances 16, 8, 4, 2, 1, each lane
// combining its value with its partner's, own value first), which leaves every lane the same
// result; the host emulation runs the lanes one after another through the same steps. The sums are
// in double, as above; only their order differs from the one-thread-per-column loop.
inline constexpr int kLanes = 32;

// The butterfly's max: NaN wins from either side (the row is NaN then, as on the CPU).
template <class T>
ONNXDP_HD inline T lane_max_of(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return b > a ? b : a;
}

// Lane k's part of row `row`: its elements' max (-inf when it has none).
template <class T>
ONNXDP_HD inline T lane_row_max(const SoftmaxLaunch& l, int64_t row, int k) {
  const T* x = static_cast<const T*>(l.in) + row * l.n;
  T mx = -INFINITY;
  for (int64_t j = k; j < l.n; j += kLanes) mx = lane_max_of(mx, x[j]);
  return mx;
}

// Lane k's part of the row's sum: of exp(x - mx) (forward), of dy * y or dy (the Grads).
template <class T>
ONNXDP_HD inline double lane_row_sum(const SoftmaxLaunch& l, int64_t row, int k, T mx) {
  const T* x = static_cast<const T*>(l.in) + row * l.n;
  const T* g = l.grad ? static_cast<const T*>(l.dy) + row * l.n : nullptr;
  double sum = 0;
  for (int64_t j = k; j < l.n; j += kLanes) {
    if (!l.grad) sum += double(fn::m::exp(T(x[j] - mx)));
    else sum += l.log ? double(g[j]) : double(g[j]) * double(x[j]);
  }
  return sum;
}

// Lane k writes its elements of the row from the combined max (unused by the Grads) and sum.
template <class T>
ONNXDP_HD inline void lane_row_write(const SoftmaxLaunch& l, int64_t row, int k, T mx, double sum) {
  const T* x = static_cast<const T*>(l.in) + row * l.n;
  T* y = static_cast<T*>(l.out) + row * l.n;
  if (l.grad) {
    const T* g = static_cast<const T*>(l.dy) + row * l.n;
    const T t = T(sum);
    for (int64_t j = k; j < l.n; j += kLanes)
      y[j] = l.log ? T(g[j] - fn::m::exp(x[j]) * t) : T(x[j] * T(g[j] - t));
  } else if (l.log) {
    const T ls = T(fn::m::log(sum));
    for (int64_t j = k; j < l.n; j += kLanes) y[j] = (x[j] - mx) - ls;
  } else {
    const T inv = T(1.0 / sum);
    for (int64_t j = k; j < l.n; j += kLanes) y[j] = fn::m::exp(T(x[j] - mx)) * inv;
  }
}

void reduce_launch(const ReduceLaunch& l, void* stream);
void reduce_emulate(const ReduceLaunch& l);
void softmax_launch(const SoftmaxLaunch& l, void* stream);
void softmax_emulate(const SoftmaxLaunch& l);

}  // namespace onnxdp::cuda
