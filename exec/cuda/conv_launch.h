// The launch interface of the CUDA pooling kernels (exec/cuda/conv.cu), in plain C++17 so nvcc and
// the host compiler both read it. The host side (exec/cuda/conv.cpp) fills one PoolLaunch from a
// node; the per-item loop bodies below are the kernels' bodies, also run on the host by
// pool_emulate.
//
// Why our own kernels and not cuDNN pooling: the CPU kernels (exec/cpu/pool.cpp, exec/cpu/grad.cpp)
// are the reference, and cuDNN's pooling differs from them where it matters here:
// - MaxPool takes the FIRST maximum of a window in row-major tap order (a NaN tap wins only as the
//   window's first in-input tap) and MaxPoolGrad routes dy to exactly that element; cuDNN documents
//   no tie rule for its backward pass and has its own NaN propagation modes.
// - AveragePool's count_include_pad counts the taps inside the input plus its (explicit or auto)
//   pads, never the taps past the trailing pad that ceil_mode adds; the CPU sums in double.
// - Asymmetric pads, dilations, ceil_mode's extra windows and MaxPool's Indices output (both
//   storage orders) have no cuDNN pooling equivalent (its descriptor has symmetric pads, no
//   dilation, and its output dims are its own formula's).
// So each output (forward) or each input element (backward) is one thread running the CPU's
// arithmetic in the CPU's order:
// - forward: the window's in-input taps in row-major kernel order (MaxPool: first maximum by `>`;
//   AveragePool: sum in double, divided by the count as a double, then rounded to T);
// - backward as a gather (no atomics, deterministic): input element r visits the windows that
//   contain it in ascending output order and adds each one's share to a T accumulator starting at
//   0, exactly the sequence of `dx[r] += share` the CPU's scatter performs for r. MaxPoolGrad
//   recomputes each window's first maximum (the forward's rule) and adds dy where it is r;
//   AveragePoolGrad adds T(double(dy) / double(count)).
// - GlobalAveragePool: one thread per (n, c) plane, double sum in order, divided as a double.
#pragma once
#include <math.h>

#include <cstdint>

#include "exec/functors.h"  // ONNXDP_HD

namespace onnxdp::cuda {

inline constexpr int kPoolMaxSpatial = 3;

enum class PoolKind : uint8_t { max, avg, max_grad, avg_grad, global_avg };
enum class PoolType : uint8_t { f32, f64, i8, u8 };

// One pooling node. Per spatial dim i: input `in`, output `out`, kernel, stride, dilation and the
// resolved leading / trailing pads (auto_pad applied as the CPU kernel does). Output coordinate o
// of dim i covers input coordinates o*stride - pb + k*dil, k < kernel; taps outside [0, in) are
// padding, and count_include_pad counts those inside [-pb, in + pe).
struct PoolLaunch {
  PoolKind kind = PoolKind::max;
  PoolType type = PoolType::f32;
  int nsp = 0;  // spatial dims, 1..kPoolMaxSpatial (0 for global_avg)
  int64_t in[kPoolMaxSpatial] = {}, out[kPoolMaxSpatial] = {}, kernel[kPoolMaxSpatial] = {};
  int64_t stride[kPoolMaxSpatial] = {}, dil[kPoolMaxSpatial] = {}, pb[kPoolMaxSpatial] = {}, pe[kPoolMaxSpatial] = {};
  int64_t planes = 0;    // N * C
  int64_t in_size = 0;   // elements per input plane (global_avg: the spatial size)
  int64_t out_size = 0;  // elements per output plane
  bool include_pad = false;  // AveragePool(Grad): count_include_pad
  bool col_major = false;    // MaxPool Indices: storage_order 1
  const void* x = nullptr;   // max, avg, global_avg, max_grad: x [planes, in_size]
  const void* dy = nullptr;  // max_grad, avg_grad: dy [planes, out_size]
  void* y = nullptr;         // the output: y [planes, out_size] or dx [planes, in_size]
  int64_t* indices = nullptr;  // MaxPool's optional Indices [planes, out_size]

  // The items one thread each: outputs (forward), input elements (backward), planes (global).
  int64_t items() const {
    if (kind == PoolKind::global_avg) return planes;
    if (kind == PoolKind::max_grad || kind == PoolKind::avg_grad) return planes * in_size;
    return planes * out_size;
  }
};

template <class T>
ONNXDP_HD inline T pool_lowest();
template <>
ONNXDP_HD inline float pool_lowest<float>() { return -3.402823466e+38f; }
template <>
ONNXDP_HD inline double pool_lowest<double>() { return -1.7976931348623157e+308; }
template <>
ONNXDP_HD inline int8_t pool_lowest<int8_t>() { return int8_t(-128); }
template <>
ONNXDP_HD inline uint8_t pool_lowest<uint8_t>() { return uint8_t(0); }

// Output p of a plane as coordinates o[0..nsp) (row-major).
ONNXDP_HD inline void pool_out_coords(const PoolLaunch& l, int64_t p, int64_t* o) {
  for (int i = l.nsp - 1; i >= 0; --i) {
    o[i] = p % l.out[i];
    p /= l.out[i];
  }
}

// The first maximum of window o over plane xp: its row-major offset in the plane, or -1 when no
// tap lies in the input (then *best is the lowest value). Taps in row-major kernel order.
template <class T>
ONNXDP_HD inline int64_t pool_argmax(const PoolLaunch& l, const T* xp, const int64_t* o, T* best) {
  int64_t taps = 1;
  for (int i = 0; i < l.nsp; ++i) taps *= l.kernel[i];
  int64_t best_at = -1;
  T b = pool_lowest<T>();
  for (int64_t t = 0; t < taps; ++t) {
    int64_t q = t, off = 0, scale = 1;
    bool inside = true;
    for (int i = l.nsp - 1; i >= 0; --i) {
      const int64_t k = q % l.kernel[i];
      q /= l.kernel[i];
      const int64_t c = o[i] * l.stride[i] - l.pb[i] + k * l.dil[i];
      inside = inside && c >= 0 && c < l.in[i];
      off += c * scale;
      scale *= l.in[i];
    }
    if (!inside) continue;
    if (best_at < 0 || xp[off] > b || (xp[off] != xp[off] && b == b)) b = xp[off], best_at = off;  // NaN wins, as on the CPU
  }
  *best = b;
  return best_at;
}

// The divisor of window o: per dim the taps inside the input (or, with include_pad, inside the
// input plus its pads), multiplied.
ONNXDP_HD inline int64_t pool_count(const PoolLaunch& l, const int64_t* o) {
  int64_t count = 1;
  for (int i = 0; i < l.nsp; ++i) {
    int64_t n = 0;
    for (int64_t k = 0; k < l.kernel[i]; ++k) {
      const int64_t c = o[i] * l.stride[i] - l.pb[i] + k * l.dil[i];
      n += l.include_pad ? (c >= -l.pb[i] && c < l.in[i] + l.pe[i]) : (c >= 0 && c < l.in[i]);
    }
    count *= n;
  }
  return count;
}

// MaxPool: output item = plane * out_size + p.
template <class T>
ONNXDP_HD inline void pool_max_one(const PoolLaunch& l, int64_t item) {
  const int64_t plane = item / l.out_size, p = item % l.out_size;
  int64_t o[kPoolMaxSpatial] = {};
  pool_out_coords(l, p, o);
  T best;
  const int64_t at = pool_argmax<T>(l, static_cast<const T*>(l.x) + plane * l.in_size, o, &best);
  static_cast<T*>(l.y)[item] = best;
  if (!l.indices) return;
  int64_t idx = at;
  if (l.col_major && at >= 0) {  // the same element with the first spatial dim varying fastest
    int64_t rem = at, col = 0, stride = 1;
    int64_t c[kPoolMaxSpatial] = {};
    for (int i = l.nsp - 1; i >= 0; --i) c[i] = rem % l.in[i], rem /= l.in[i];
    for (int i = 0; i < l.nsp; ++i) col += c[i] * stride, stride *= l.in[i];
    idx = col;
  }
  l.indices[item] = idx < 0 ? -1 : plane * l.in_size + idx;
}

// AveragePool: output item = plane * out_size + p.
template <class T>
ONNXDP_HD inline void pool_avg_one(const PoolLaunch& l, int64_t item) {
  const int64_t plane = item / l.out_size, p = item % l.out_size;
  const T* xp = static_cast<const T*>(l.x) + plane * l.in_size;
  int64_t o[kPoolMaxSpatial] = {};
  pool_out_coords(l, p, o);
  int64_t taps = 1;
  for (int i = 0; i < l.nsp; ++i) taps *= l.kernel[i];
  double sum = 0;
  for (int64_t t = 0; t < taps; ++t) {
    int64_t q = t, off = 0, scale = 1;
    bool inside = true;
    for (int i = l.nsp - 1; i >= 0; --i) {
      const int64_t k = q % l.kernel[i];
      q /= l.kernel[i];
      const int64_t c = o[i] * l.stride[i] - l.pb[i] + k * l.dil[i];
      inside = inside && c >= 0 && c < l.in[i];
      off += c * scale;
      scale *= l.in[i];
    }
    if (inside) sum += double(xp[off]);
  }
  const int64_t count = pool_count(l, o);
  static_cast<T*>(l.y)[item] = T(count > 0 ? sum / double(count) : double(NAN));
}

// The windows containing input coordinate c of dim i: o in [lo, hi] (ascending) with
// (c + pb - o*stride) a multiple of dil (checked by the caller). false when there are none.
ONNXDP_HD inline bool pool_window_range(const PoolLaunch& l, int i, int64_t c, int64_t* lo, int64_t* hi) {
  const int64_t s = l.stride[i];
  const int64_t first = c + l.pb[i] - (l.kernel[i] - 1) * l.dil[i];  // o*s >= first
  const int64_t last = c + l.pb[i];                                   // o*s <= last (>= 0: pb >= 0)
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  *hi = last / s < l.out[i] - 1 ? last / s : l.out[i] - 1;
  return *lo <= *hi;
}

// MaxPoolGrad / AveragePoolGrad: input item = plane * in_size + r. Visits the windows that contain
// r in ascending output order (see the top of this file).
template <class T>
ONNXDP_HD inline void pool_grad_one(const PoolLaunch& l, int64_t item) {
  const int64_t plane = item / l.in_size, r = item % l.in_size;
  int64_t c[kPoolMaxSpatial] = {}, lo[kPoolMaxSpatial] = {}, hi[kPoolMaxSpatial] = {}, o[kPoolMaxSpatial] = {};
  int64_t rem = r;
  for (int i = l.nsp - 1; i >= 0; --i) c[i] = rem % l.in[i], rem /= l.in[i];
  T acc = T(0);
  bool any = true;
  for (int i = 0; i < l.nsp; ++i) {
    any = any && pool_window_range(l, i, c[i], &lo[i], &hi[i]);
    o[i] = lo[i];
  }
  const T* dy = static_cast<const T*>(l.dy) + plane * l.out_size;
  const T* xp = l.kind == PoolKind::max_grad ? static_cast<const T*>(l.x) + plane * l.in_size : nullptr;
  while (any) {
    bool tap = true;  // r is a tap of window o in every dim
    int64_t p = 0;
    for (int i = 0; i < l.nsp; ++i) {
      const int64_t d = c[i] + l.pb[i] - o[i] * l.stride[i];
      tap = tap && d >= 0 && d % l.dil[i] == 0 && d / l.dil[i] < l.kernel[i];
      p = p * l.out[i] + o[i];
    }
    if (tap) {
      if (l.kind == PoolKind::max_grad) {
        T best;
        if (pool_argmax<T>(l, xp, o, &best) == r) acc += dy[p];
      } else {
        const int64_t count = pool_count(l, o);
        if (count > 0) acc += T(double(dy[p]) / double(count));
      }
    }
    int i = l.nsp - 1;  // next window, the last dim fastest
    for (; i >= 0; --i) {
      if (++o[i] <= hi[i]) break;
      o[i] = lo[i];
    }
    any = i >= 0;
  }
  static_cast<T*>(l.y)[item] = acc;
}

// GlobalAveragePool: item = plane.
template <class T>
ONNXDP_HD inline void pool_global_avg_one(const PoolLaunch& l, int64_t plane) {
  const T* xp = static_cast<const T*>(l.x) + plane * l.in_size;
  double s = 0;
  for (int64_t i = 0; i < l.in_size; ++i) s += double(xp[i]);
  static_cast<T*>(l.y)[plane] = T(s / double(l.in_size));
}

template <class T>
ONNXDP_HD inline void pool_one(const PoolLaunch& l, int64_t item) {
  switch (l.kind) {
    case PoolKind::max: return pool_max_one<T>(l, item);
    case PoolKind::avg: return pool_avg_one<T>(l, item);
    case PoolKind::max_grad:
    case PoolKind::avg_grad: return pool_grad_one<T>(l, item);
    case PoolKind::global_avg: return pool_global_avg_one<T>(l, item);
  }
}

// Runs every item of l on the device (stream: a cudaStream_t), or on the host.
void pool_launch(const PoolLaunch& l, void* stream);
void pool_emulate(const PoolLaunch& l);

}  // namespace onnxdp::cuda
