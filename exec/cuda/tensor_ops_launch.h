// The launch interface of the CUDA tensor-op kernels (exec/cuda/tensor_ops.cu), in plain C++17 with
// no CUDA, fmt or graph headers so that nvcc and the host compiler both read it. The host side
// (exec/cuda/tensor_ops.cpp) turns a node into launches; the per-element bodies below are the
// kernels' loop bodies, also run on the host by the *_emulate functions (the emulated device).
//
// Every kernel gives each output element one thread (grid-stride loops). Ops that only move
// elements (Gather, Concat, Split, Slice, Tile, Pad, Trilu, inference Dropout) copy them as
// unsigned integers of the element's size, as the CPU kernels do, so any dtype runs.
#pragma once
#include <stdio.h>   // printf (device)
#include <string.h>  // memcpy (host and device)

#include <cstdint>

#include "exec/functors.h"  // ONNXDP_HD
#include "exec/run_scalars.h"
#include "exec/philox.h"    // dropout_uniform (host and device)

namespace onnxdp::cuda {

inline constexpr int kTsMaxRank = 8;

// ---- strided copy: Slice, Tile, Concat (one launch per input), Split (one per output) ----------

// Element i of the iteration space dims[0..rank) (row-major) is copied from
// src[src_base + sum c_d * src_st[d]] to dst[dst_base + sum c_d * dst_st[d]] (in elements;
// source strides may be 0 or negative).
struct CopyLaunch {
  int esize = 4;  // element bytes: 1, 2, 4, 8
  int rank = 0;
  int64_t numel = 0;
  int64_t dims[kTsMaxRank] = {};
  int64_t src_st[kTsMaxRank] = {}, dst_st[kTsMaxRank] = {};
  int64_t src_base = 0, dst_base = 0;
  const void* src = nullptr;
  void* dst = nullptr;
};

template <class U>
ONNXDP_HD inline void copy_one(const CopyLaunch& l, int64_t i) {
  int64_t s = l.src_base, d = l.dst_base, k = i;
  for (int r = l.rank - 1; r >= 0; --r) {
    const int64_t c = k % l.dims[r];
    k /= l.dims[r];
    s += c * l.src_st[r];
    d += c * l.dst_st[r];
  }
  static_cast<U*>(l.dst)[d] = static_cast<const U*>(l.src)[s];
}

// ---- Gather -----------------------------------------------------------------------------------

// data [outer, dim, inner], indices [n] -> out [outer, n, inner]; negative indices count from the
// back. An index outside [-dim, dim) reads as 0; with `checks` set, the launch also checks every
// index once (threads i < n) and records the first bad one in the plan's check slots
// (exec/run_scalars.h), which the Plan turns into the CPU kernel's error after the run (even
// where the output is empty, as the CPU checks).
struct GatherLaunch {
  int esize = 4;
  bool idx64 = true;  // indices int64 or int32
  int64_t outer = 0, dim = 0, n = 0, inner = 0;
  const void* data = nullptr;
  const void* idx = nullptr;
  void* out = nullptr;
  unsigned long long* checks = nullptr;  // null: the indices are known to be in range
  int node = -1;                         // the node's position in the plan (its slots)
};

ONNXDP_HD inline int64_t load_index(const void* idx, bool idx64, int64_t i) {
  return idx64 ? static_cast<const int64_t*>(idx)[i] : int64_t(static_cast<const int32_t*>(idx)[i]);
}

// Element i of node `node`'s indices is bad: the smallest node and element win.
ONNXDP_HD inline void record_bad(unsigned long long* checks, int node, int64_t i) {
#if defined(__CUDA_ARCH__)
  atomicMax(&checks[0], ~(unsigned long long)node);
  atomicMax(&checks[1 + 2 * node], ~(unsigned long long)i);
#else
  if (~(unsigned long long)node > checks[0]) checks[0] = ~(unsigned long long)node;
  if (~(unsigned long long)i > checks[1 + 2 * node]) checks[1 + 2 * node] = ~(unsigned long long)i;
#endif
}

// After the node's launch: the value at its first bad element, for the message (one thread).
ONNXDP_HD inline void record_bad_value(unsigned long long* checks, int node, const void* idx, bool idx64) {
  const unsigned long long e = checks[1 + 2 * node];
  if (e) checks[2 + 2 * node] = (unsigned long long)load_index(idx, idx64, int64_t(~e));
}

// The work items of a Gather launch: the output elements, and with `checks` at least one per index.
ONNXDP_HD inline int64_t gather_items(const GatherLaunch& l) {
  const int64_t total = l.outer * l.n * l.inner;
  return l.checks && l.n > total ? l.n : total;
}

template <class U>
ONNXDP_HD inline void gather_one(const GatherLaunch& l, int64_t k) {
  if (l.checks && k < l.n) {
    const int64_t v = load_index(l.idx, l.idx64, k);
    if (v < -l.dim || v >= l.dim) record_bad(l.checks, l.node, k);
  }
  if (k >= l.outer * l.n * l.inner) return;
  const int64_t j = k % l.inner, i = (k / l.inner) % l.n, o = k / (l.inner * l.n);
  int64_t v = load_index(l.idx, l.idx64, i);
  if (v < 0) v += l.dim;
  U* out = static_cast<U*>(l.out);
  out[k] = v < 0 || v >= l.dim ? U(0) : static_cast<const U*>(l.data)[(o * l.dim + v) * l.inner + j];
}

// ---- GatherGrad (deterministic scatter-add) ---------------------------------------------------

// dy [outer, n, inner], indices [n] -> dx [outer, dim, inner]. Three steps, no float atomics:
//   1. keys[i] = indices[i] normalised to [0, dim) (bad ones recorded, key 0), pos[i] = i;
//   2. a stable sort of (key, pos) by key (cub's radix sort on the device, a stable sort on the
//      host), so each row's positions are in increasing order, and starts[r] = the first sorted
//      entry with key >= r (r = 0 .. dim);
//   3. dx[o, r, j] = 0 + dy[o, p0, j] + dy[o, p1, j] + ... over the row's positions in increasing
//      order: the CPU kernel's additions in its order, in T, so the result is bit-identical.
struct GatherGradLaunch {
  bool f64 = false;
  bool idx64 = true;
  int64_t outer = 0, dim = 0, n = 0, inner = 0;
  const void* dy = nullptr;
  const void* idx = nullptr;
  void* dx = nullptr;
  uint32_t* keys = nullptr;         // [n] step 1's keys
  uint32_t* pos = nullptr;          // [n] step 1's positions
  uint32_t* sorted_keys = nullptr;  // [n]
  uint32_t* sorted_pos = nullptr;   // [n]
  uint32_t* starts = nullptr;       // [dim + 1]
  unsigned long long* checks = nullptr;  // the plan's check slots (every index is checked)
  int node = -1;
};

ONNXDP_HD inline void gather_grad_key(const GatherGradLaunch& l, int64_t i) {
  const int64_t given = load_index(l.idx, l.idx64, i);
  int64_t v = given < 0 ? given + l.dim : given;
  if (v < 0 || v >= l.dim) {
    if (l.checks) record_bad(l.checks, l.node, i);
    v = 0;
  }
  l.keys[i] = uint32_t(v);
  l.pos[i] = uint32_t(i);
}

// starts[r] for r in [0, dim]: lower bound of r in the sorted keys.
ONNXDP_HD inline void gather_grad_start(const GatherGradLaunch& l, int64_t r) {
  int64_t lo = 0, hi = l.n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (int64_t(l.sorted_keys[mid]) < r) lo = mid + 1;
    else hi = mid;
  }
  l.starts[r] = uint32_t(lo);
}

template <class T>
ONNXDP_HD inline void gather_grad_one(const GatherGradLaunch& l, int64_t k) {
  const int64_t j = k % l.inner, r = (k / l.inner) % l.dim, o = k / (l.inner * l.dim);
  const T* dy = static_cast<const T*>(l.dy) + o * l.n * l.inner + j;
  T acc = T(0);
  for (uint32_t e = l.starts[r]; e < l.starts[r + 1]; ++e) acc += dy[int64_t(l.sorted_pos[e]) * l.inner];
  static_cast<T*>(l.dx)[k] = acc;
}

// ---- Cast -------------------------------------------------------------------------------------

// The element types Cast converts between (graph's DType, one for one).
enum class CastType : uint8_t { f32, f64, f16, bf16, i64, i32, i8, u8, boolean };

struct CastLaunch {
  CastType from = CastType::f32, to = CastType::f32;
  int64_t numel = 0;
  const void* src = nullptr;
  void* dst = nullptr;
};

namespace cast_detail {

ONNXDP_HD inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
ONNXDP_HD inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// IEEE half (binary16) -> float: exact.
ONNXDP_HD inline float half_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 13));  // inf, NaN (payload kept)
  if (e != 0) return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  // zero or subnormal: m * 2^-24, exact in float
  const float v = float(m) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

// float -> half, round to nearest even; overflow to inf, NaN stays NaN (quiet bit set).
ONNXDP_HD inline uint16_t f32_to_half(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u, m = x & 0x7fffffu;
  const int32_t e = int32_t((x >> 23) & 0xffu) - 127 + 15;  // biased half exponent
  if (((x >> 23) & 0xffu) == 0xffu) return uint16_t(sign | 0x7c00u | (m ? 0x200u : 0u));
  if (e >= 0x1f) return uint16_t(sign | 0x7c00u);
  if (e <= 0) {  // a half subnormal (or 0): the 24-bit significand shifted right by 14 - e
    if (e < -10) return uint16_t(sign);
    const uint32_t sig = m | 0x800000u, sh = uint32_t(14 - e);
    uint32_t q = sig >> sh;
    const uint32_t rest = sig & ((1u << sh) - 1u), halfway = 1u << (sh - 1u);
    q += (rest > halfway || (rest == halfway && (q & 1u))) ? 1u : 0u;
    return uint16_t(sign | q);
  }
  uint32_t q = sign | (uint32_t(e) << 10) | (m >> 13);
  const uint32_t rest = m & 0x1fffu;
  q += (rest > 0x1000u || (rest == 0x1000u && (q & 1u))) ? 1u : 0u;  // a carry rounds up the exponent
  return uint16_t(q);
}

ONNXDP_HD inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

// float -> bfloat16, round to nearest even; NaN stays NaN (quiet bit set).
ONNXDP_HD inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// double -> float rounding to odd: a second rounding of the result to half / bfloat16 equals one
// correct rounding of the double (graph/shape_helpers.h's conversion, the CPU's).
ONNXDP_HD inline float f64_to_f32_odd(double d) {
  float f = float(d);
  if (d != d || f - f != 0.0f || double(f) == d) return f;  // NaN, inf, exact
  uint32_t u = f32_bits(f);
  if ((f < 0 ? -double(f) : double(f)) > (d < 0 ? -d : d)) --u;  // rounded away from zero: truncate
  return f32_from_bits(u | 1u);
}

ONNXDP_HD inline int64_t f64_to_i64_saturating(double v) {
  if (v != v) return 0;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  return int64_t(v);
}

ONNXDP_HD inline bool is_float(CastType t) {
  return t == CastType::f32 || t == CastType::f64 || t == CastType::f16 || t == CastType::bf16;
}

ONNXDP_HD inline double load_f64(CastType t, const void* p, int64_t i) {
  switch (t) {
    case CastType::f32: return double(static_cast<const float*>(p)[i]);
    case CastType::f64: return static_cast<const double*>(p)[i];
    case CastType::f16: return double(half_to_f32(static_cast<const uint16_t*>(p)[i]));
    default: return double(bf16_to_f32(static_cast<const uint16_t*>(p)[i]));
  }
}

ONNXDP_HD inline int64_t load_i64(CastType t, const void* p, int64_t i) {
  switch (t) {
    case CastType::i64: return static_cast<const int64_t*>(p)[i];
    case CastType::i32: return static_cast<const int32_t*>(p)[i];
    case CastType::i8: return static_cast<const int8_t*>(p)[i];
    case CastType::u8: return static_cast<const uint8_t*>(p)[i];
    default: return static_cast<const uint8_t*>(p)[i] != 0 ? 1 : 0;  // bool
  }
}

ONNXDP_HD inline void store_f64(CastType t, void* p, int64_t i, double v) {
  switch (t) {
    case CastType::f32: static_cast<float*>(p)[i] = float(v); break;
    case CastType::f64: static_cast<double*>(p)[i] = v; break;
    case CastType::f16: static_cast<uint16_t*>(p)[i] = f32_to_half(f64_to_f32_odd(v)); break;
    case CastType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(f64_to_f32_odd(v)); break;
    case CastType::i64: static_cast<int64_t*>(p)[i] = f64_to_i64_saturating(v); break;
    case CastType::i32: static_cast<int32_t*>(p)[i] = int32_t(f64_to_i64_saturating(v)); break;  // then wraps
    case CastType::i8: static_cast<int8_t*>(p)[i] = int8_t(f64_to_i64_saturating(v)); break;
    case CastType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(f64_to_i64_saturating(v)); break;
    case CastType::boolean: static_cast<uint8_t*>(p)[i] = v != 0.0 ? 1 : 0; break;  // NaN: true
  }
}

ONNXDP_HD inline void store_i64(CastType t, void* p, int64_t i, int64_t v) {
  switch (t) {
    case CastType::f32: static_cast<float*>(p)[i] = float(v); break;
    case CastType::f64: static_cast<double*>(p)[i] = double(v); break;
    case CastType::f16:
    case CastType::bf16: store_f64(t, p, i, double(v)); break;  // through double, as the CPU
    case CastType::i64: static_cast<int64_t*>(p)[i] = v; break;
    case CastType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case CastType::i8: static_cast<int8_t*>(p)[i] = int8_t(v); break;
    case CastType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    case CastType::boolean: static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
  }
}

}  // namespace cast_detail

// The CPU's Cast: float sources go through double, integer and bool sources through int64
// (graph/shape_helpers.h's Elem conversions: float -> integer truncates toward zero and
// saturates to int64, NaN gives 0, narrower integers then wrap; f64 -> f16 / bf16 rounds once).
ONNXDP_HD inline void cast_one(const CastLaunch& l, int64_t i) {
  using namespace cast_detail;
  if (is_float(l.from)) store_f64(l.to, l.dst, i, load_f64(l.from, l.src, i));
  else store_i64(l.to, l.dst, i, load_i64(l.from, l.src, i));
}

// ---- Pad --------------------------------------------------------------------------------------

enum class PadMode : uint8_t { constant, reflect, edge, wrap };

// out [out_dims] from in [in_dims], begin[d] elements added before dim d (negative: cropped).
struct PadLaunch {
  int esize = 4;
  PadMode mode = PadMode::constant;
  int rank = 0;
  int64_t numel = 0;  // of the output
  int64_t out_dims[kTsMaxRank] = {}, in_dims[kTsMaxRank] = {}, begin[kTsMaxRank] = {};
  uint64_t value_bits = 0;  // the constant, as the element's bytes
  const void* src = nullptr;
  void* dst = nullptr;
};

// The input index along a dim of size n read by output index o (begin elements padded before),
// or -1 for the constant. The CPU kernel's map.
ONNXDP_HD inline int64_t pad_source(PadMode mode, int64_t o, int64_t begin, int64_t n) {
  int64_t x = o - begin;
  if (x >= 0 && x < n) return x;
  switch (mode) {
    case PadMode::constant: return -1;
    case PadMode::edge: return x < 0 ? 0 : n - 1;
    case PadMode::wrap: return ((x % n) + n) % n;
    case PadMode::reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      x = ((x % period) + period) % period;
      return x >= n ? period - x : x;
    }
  }
  return -1;
}

template <class U>
ONNXDP_HD inline void pad_one(const PadLaunch& l, int64_t i) {
  int64_t off = 0, stride = 1, k = i;
  bool border = false;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t o = k % l.out_dims[d];
    k /= l.out_dims[d];
    const int64_t x = pad_source(l.mode, o, l.begin[d], l.in_dims[d]);
    if (x < 0) border = true;
    off += x * stride;
    stride *= l.in_dims[d];
  }
  U* dst = static_cast<U*>(l.dst);
  if (border) {
    U v;
    memcpy(&v, &l.value_bits, sizeof(U));
    dst[i] = v;
  } else {
    dst[i] = static_cast<const U*>(l.src)[off];
  }
}

// ---- Trilu ------------------------------------------------------------------------------------

// Keeps element (i, j) of each trailing [rows, cols] matrix where j - i >= k (upper) or
// j - i <= k (lower); the rest become 0 (all bits clear).
struct TriluLaunch {
  int esize = 4;
  bool upper = true;
  int64_t rows = 0, cols = 0, k = 0, numel = 0;
  const void* src = nullptr;
  void* dst = nullptr;
};

template <class U>
ONNXDP_HD inline void trilu_one(const TriluLaunch& l, int64_t e) {
  const int64_t j = e % l.cols, i = (e / l.cols) % l.rows;
  const bool keep = l.upper ? j - i >= l.k : j - i <= l.k;
  static_cast<U*>(l.dst)[e] = keep ? static_cast<const U*>(l.src)[e] : U(0);
}

// ---- Dropout (training) -----------------------------------------------------------------------

// Keeps element j when dropout_uniform(seed, step, stream, base + j) >= threshold, scaled by
// scale (T(1 / (1 - ratio)), as the CPU computes it); mask[j] = kept (mask may be null). The
// step, the offsets (base = (sample_offset + batch_offset) * row) and, without a seed attribute,
// the seed are read from the run's RunScalars in device memory when the kernel runs: a recorded
// step draws new masks at every replay.
struct DropoutLaunch {
  bool f64 = false;
  int64_t numel = 0, row = 0;
  const RunScalars* run = nullptr;
  bool has_seed = false;  // the node's seed attribute, else the run's seed
  uint64_t seed = 0;
  uint32_t stream = 0;
  float threshold = 0;
  double scale = 1;  // rounded to T by the body
  const void* x = nullptr;
  void* y = nullptr;
  bool* mask = nullptr;
};

template <class T>
ONNXDP_HD inline void dropout_one(const DropoutLaunch& l, int64_t j) {
  const RunScalars& r = *l.run;
  const uint64_t base = uint64_t((r.sample_offset + r.batch_offset) * l.row);
  const bool keep = dropout_uniform(l.has_seed ? l.seed : r.seed, r.step, l.stream, base + uint64_t(j)) >= l.threshold;
  const T scale = T(l.scale);
  static_cast<T*>(l.y)[j] = keep ? T(static_cast<const T*>(l.x)[j] * scale) : T(0);
  if (l.mask) l.mask[j] = keep;
}

// ---- launches (tensor_ops.cu) and their host emulations ----------------------------------------
// `stream` is a cudaStream_t. GatherGrad's launch sorts on the device (cub) in `sort_temp`
// (sort_temp_bytes from gather_grad_sort_bytes).

void copy_launch(const CopyLaunch& l, void* stream);
void copy_emulate(const CopyLaunch& l);
void gather_launch(const GatherLaunch& l, void* stream);
void gather_emulate(const GatherLaunch& l);
size_t gather_grad_sort_bytes(int64_t n, int64_t dim);
void gather_grad_launch(const GatherGradLaunch& l, void* sort_temp, size_t sort_temp_bytes, void* stream);
void gather_grad_emulate(const GatherGradLaunch& l);
// record_bad_value on the stream (one thread), and on the host.
void bad_value_launch(unsigned long long* checks, int node, const void* idx, bool idx64, void* stream);
void bad_value_emulate(unsigned long long* checks, int node, const void* idx, bool idx64);
void cast_launch(const CastLaunch& l, void* stream);
void cast_emulate(const CastLaunch& l);
void pad_launch(const PadLaunch& l, void* stream);
void pad_emulate(const PadLaunch& l);
void trilu_launch(const TriluLaunch& l, void* stream);
void trilu_emulate(const TriluLaunch& l);
void dropout_launch(const DropoutLaunch& l, void* stream);
void dropout_emulate(const DropoutLaunch& l);

}  // namespace onnxdp::cuda
