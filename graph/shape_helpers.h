// Helpers the shape rules of the tensor / generator / reduction ops share with their CPU kernels
// (exec/cpu/{tensor,generator,reduction}.cpp) and with constant folding (graph/passes/fold.cpp), so that
// the shape a rule promises and the elements a kernel writes come from one computation.
// Implemented in graph/shapes_tensor.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

// ---- argument interpretation (errors name the node) --------------------------------------------

// Shape's output: the dims of `in` from `start` to `end` (attributes, opset 15+), negative values
// counting from the back, both clamped to [0, rank]; empty when start >= end.
std::vector<int64_t> shape_op_dims(const Shape& in, const Node& n);

// Element strides of a contiguous row-major tensor of shape s.
inline std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t d = s.size(); d-- > 0;) {
    st[d] = acc;
    acc *= s[d];
  }
  return st;
}

// One dim of a Slice: element j of the output along this dim reads input index start + j * step.
struct SliceDim {
  int64_t start = 0, step = 1, count = 0;
};
// Slice's per-dim plan for every dim of `in` (dims not sliced read everything). `axes` and `steps`
// may be null (defaults: 0..len-1, all 1). Clamping follows the ONNX spec (opset 10+).
std::vector<SliceDim> slice_plan(const Shape& in, const std::vector<int64_t>& starts,
                                 const std::vector<int64_t>& ends, const std::vector<int64_t>* axes,
                                 const std::vector<int64_t>* steps, const Node& n);

// Pad's amounts per dim of a rank-`rank` tensor: [begin_0 .. begin_{r-1}, end_0 .. end_{r-1}], from
// `pads` (2 * number of axes values) and the optional `axes` (opset 18+; null: all dims).
std::vector<int64_t> pad_amounts(int64_t rank, const std::vector<int64_t>& pads, const std::vector<int64_t>* axes,
                                 const Node& n);

// Reductions: which dims of a rank-`rank` input are reduced. `axes` null or empty means all dims,
// unless noop_with_empty_axes, which reduces none (the op is then the identity). Negative axes
// count from the back; a repeated axis fails.
std::vector<char> reduced_dims(int64_t rank, const std::vector<int64_t>* axes, bool noop_with_empty_axes,
                               const Node& n);

// GatherND's output shape: indices [B.., I.., k] (b = batch_dims leading dims B, the data's too)
// on data [B.., D.. (k dims), S..] -> [B.., I.., S..]. ScatterND's updates have this shape with
// batch_dims 0. Fails naming the node when ranks, k or the batch dims do not fit.
Shape gather_nd_shape(const Shape& data, const Shape& indices, int64_t batch_dims, const Node& n);

// ---- element access by dtype -------------------------------------------------------------------
// Elem<D> describes how an element of dtype D is stored and converted: T is the storage type,
// to_f64 / from_f64 and to_i64 / from_i64 convert (float -> integer truncates toward zero and
// saturates, NaN gives 0; any -> bool is `!= 0`; f64 -> f16/bf16 rounds once, to nearest even).
// dispatch_elem(dtype, f) calls f.template operator()<Elem<dtype>>().

enum class ElemKind { floating, integer, boolean };

// f64 -> f32 rounding to odd (the low mantissa bit records inexactness): a second rounding of the
// result to f16 or bf16 then equals a single correct rounding of the double.
inline float f64_to_f32_round_odd(double d) {
  float f = float(d);
  if (std::isnan(d) || std::isinf(f) || double(f) == d) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate toward zero
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <class I>
inline I saturate_f64_to_int(double v) {
  if (std::isnan(v)) return I(0);
  if (v <= double(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (v >= double(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(v);
}

template <DType D> struct Elem;

template <class Storage, DType D>
struct FloatElem {
  using T = Storage;
  static constexpr DType dtype = D;
  static constexpr ElemKind kind = ElemKind::floating;
  static double to_f64(T v) { return double(v); }
  static T from_f64(double v) { return T(v); }
  static int64_t to_i64(T v) { return saturate_f64_to_int<int64_t>(double(v)); }
  static T from_i64(int64_t v) { return T(v); }
};
template <> struct Elem<DType::f32> : FloatElem<float, DType::f32> {};
template <> struct Elem<DType::f64> : FloatElem<double, DType::f64> {};

template <DType D, float (*Load)(uint16_t), uint16_t (*Store)(float)>
struct HalfElem {
  using T = uint16_t;
  static constexpr DType dtype = D;
  static constexpr ElemKind kind = ElemKind::floating;
  static double to_f64(T v) { return double(Load(v)); }
  static T from_f64(double v) { return Store(f64_to_f32_round_odd(v)); }
  static int64_t to_i64(T v) { return saturate_f64_to_int<int64_t>(double(Load(v))); }
  static T from_i64(int64_t v) { return from_f64(double(v)); }
};
template <> struct Elem<DType::f16> : HalfElem<DType::f16, f16_to_f32, f32_to_f16> {};
template <> struct Elem<DType::bf16> : HalfElem<DType::bf16, bf16_to_f32, f32_to_bf16> {};

template <class Storage, DType D>
struct IntElem {
  using T = Storage;
  static constexpr DType dtype = D;
  static constexpr ElemKind kind = ElemKind::integer;
  static double to_f64(T v) { return double(v); }
  static T from_f64(double v) { return T(saturate_f64_to_int<int64_t>(v)); }  // then wraps, like C
  static int64_t to_i64(T v) { return int64_t(v); }
  static T from_i64(int64_t v) { return T(v); }
};
template <> struct Elem<DType::i64> : IntElem<int64_t, DType::i64> {};
template <> struct Elem<DType::i32> : IntElem<int32_t, DType::i32> {};
template <> struct Elem<DType::i8> : IntElem<int8_t, DType::i8> {};
template <> struct Elem<DType::u8> : IntElem<uint8_t, DType::u8> {};

template <> struct Elem<DType::boolean> {
  using T = bool;
  static constexpr DType dtype = DType::boolean;
  static constexpr ElemKind kind = ElemKind::boolean;
  static double to_f64(T v) { return v ? 1.0 : 0.0; }
  static T from_f64(double v) { return v != 0.0; }  // NaN != 0: true, as numpy
  static int64_t to_i64(T v) { return v ? 1 : 0; }
  static T from_i64(int64_t v) { return v != 0; }
};

template <class F>
decltype(auto) dispatch_elem(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<Elem<DType::f32>>();
    case DType::f64: return f.template operator()<Elem<DType::f64>>();
    case DType::f16: return f.template operator()<Elem<DType::f16>>();
    case DType::bf16: return f.template operator()<Elem<DType::bf16>>();
    case DType::i64: return f.template operator()<Elem<DType::i64>>();
    case DType::i32: return f.template operator()<Elem<DType::i32>>();
    case DType::i8: return f.template operator()<Elem<DType::i8>>();
    case DType::u8: return f.template operator()<Elem<DType::u8>>();
    case DType::boolean: return f.template operator()<Elem<DType::boolean>>();
  }
  return f.template operator()<Elem<DType::f32>>();
}

// Calls f.template operator()<U>() with an unsigned integer type of `bytes` bytes (1, 2, 4, 8):
// data-movement kernels copy elements without looking at their dtype.
template <class F>
decltype(auto) dispatch_bytes(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

}  // namespace onnxdp
