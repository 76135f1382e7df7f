// The numpy-broadcasting elementwise driver of the CPU kernels.
//
//   broadcast_map<TOut, TIn...>(out, f, in...)   out[i] = f(in_0[..], in_1[..], ...)
//
// `out` has the broadcast shape (the shape rule computed it); each input is read through strides
// that are 0 along the dims it broadcasts over (a missing leading dim counts as 1). Same-shape and
// scalar inputs take a flat fast path; everything else walks runs of the innermost (merged)
// dimension. Large outputs are split over OpenMP threads.
//
// Examples:
//   Add (f32):   broadcast_map<float, float, float>(c.out(0), fn::Add{}, c.in(0), c.in(1));
//   Expand (T):  broadcast_map<T, T>(c.out(0), fn::Identity{}, c.in(0));
//   Where:       broadcast_map<T, bool, T, T>(c.out(0), fn::Select{}, c.in(0), c.in(1), c.in(2));
//   f16 / bf16:  half_map<uint16_t>(dtype, c.out(0), fn::Add{}, c.in(0), c.in(1))  (math in float)
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

// Outputs with more elements than this are split over threads.
inline constexpr int64_t kParallelMinElements = 32768;

// Strides, in elements, of a row-major tensor of shape `in` read as the (broadcast) shape `out`:
// 0 along dims where `in` has size 1 (or no dim at all) and `out` does not. Returns out.size()
// strides. `in` must broadcast to `out` (the shape rule checked it).
inline std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  const int r = int(out.size()), lead = int(out.size()) - int(in.size());
  std::vector<int64_t> st;
  st.resize(out.size());
  int64_t s = 1;
  for (int d = r - 1; d >= 0 && d >= lead; --d) {
    int64_t dim = in[size_t(d - lead)];
    st[size_t(d)] = (dim == 1 && out[size_t(d)] != 1) ? 0 : s;
    s *= dim;
  }
  return st;
}

// The iteration space of one broadcast: output dims with adjacent dims merged wherever every input
// reads them as one dim (so [64,128,7,7] + [1,128,1,1] walks [64,128,49] with inner stride 0).
template <size_t N>
struct BroadcastLoop {
  std::vector<int64_t> dims;                     // merged output dims (at least one)
  std::array<std::vector<int64_t>, N> strides;   // per input, per merged dim, in elements
  int64_t numel = 0;

  BroadcastLoop(const Shape& out, const std::array<const Shape*, N>& ins) {
    std::array<std::vector<int64_t>, N> full;
    for (size_t k = 0; k < N; ++k) full[k] = broadcast_strides(*ins[k], out);
    numel = 1;
    for (int64_t d : out) numel *= d;
    // Drop size-1 dims (their stride never matters), then merge dims d-1, d when every input has
    // stride[d-1] == stride[d] * dims[d].
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 1) continue;
      bool merge = !dims.empty();
      for (size_t k = 0; k < N && merge; ++k) merge = strides[k].back() == full[k][d] * out[d];
      if (merge) {
        dims.back() *= out[d];
        for (size_t k = 0; k < N; ++k) strides[k].back() = full[k][d];
      } else {
        dims.push_back(out[d]);
        for (size_t k = 0; k < N; ++k) strides[k].push_back(full[k][d]);
      }
    }
    if (dims.empty()) {  // a scalar or all-ones shape
      dims.push_back(1);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  // Calls body(out_pos, len, offsets, inner) for each run of output elements [out_pos, out_pos+len)
  // in [begin, end) that lies in one innermost row: input k is read at offsets[k] + j * inner[k].
  template <class Body>
  void run(int64_t begin, int64_t end, Body&& body) const {
    if (begin >= end) return;
    const int r = int(dims.size());
    const int64_t row = dims[size_t(r - 1)];
    std::vector<int64_t> coord(size_t(r), 0);   // outer coordinates of the current row
    std::array<int64_t, N> base{}, inner{}, cur{};  // base: offsets at innermost coordinate 0
    int64_t rest = begin / row, col = begin % row;
    for (int d = r - 2; d >= 0; --d) {
      coord[size_t(d)] = rest % dims[size_t(d)];
      rest /= dims[size_t(d)];
      for (size_t k = 0; k < N; ++k) base[k] += coord[size_t(d)] * strides[k][size_t(d)];
    }
    for (size_t k = 0; k < N; ++k) inner[k] = strides[k][size_t(r - 1)];
    int64_t pos = begin;
    while (true) {
      int64_t len = std::min(row - col, end - pos);
      for (size_t k = 0; k < N; ++k) cur[k] = base[k] + col * inner[k];
      body(pos, len, cur, inner);
      pos += len;
      if (pos >= end) break;
      col = 0;
      for (int d = r - 2; d >= 0; --d) {  // next row: carry through the outer dims
        ++coord[size_t(d)];
        for (size_t k = 0; k < N; ++k) base[k] += strides[k][size_t(d)];
        if (coord[size_t(d)] < dims[size_t(d)]) break;
        for (size_t k = 0; k < N; ++k) base[k] -= dims[size_t(d)] * strides[k][size_t(d)];
        coord[size_t(d)] = 0;
      }
    }
  }
};

namespace detail {

// out[i] = f(in_0[i], ...) over n elements. The pointers are plain arguments (not read through a
// tuple the threads share), so the compiler sees them unchanged by the stores and vectorizes.
template <class TOut, class F, class... TIn>
void flat_map(TOut* o, int64_t n, const F& f, const TIn*... in) {
#pragma omp parallel for if (n > kParallelMinElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = f(in[i]...);
}

template <class TOut, class... TIn, class F, size_t... K>
void broadcast_map_impl(const TensorRef& out, const F& f, const std::array<const TensorRef*, sizeof...(TIn)>& ins,
                        std::index_sequence<K...>) {
  constexpr size_t N = sizeof...(TIn);
  TOut* o = out.as<TOut>();
  const std::tuple<const TIn*...> p{static_cast<const TIn*>(ins[K]->data)...};
  const int64_t n = out.numel;
  if (n == 0) return;

  bool same = true, same_or_scalar = true;
  for (size_t k = 0; k < N; ++k) {
    bool eq = *ins[k]->shape == *out.shape;
    same = same && eq;
    same_or_scalar = same_or_scalar && (eq || ins[k]->numel == 1);
  }
  if (same) return flat_map(o, n, f, std::get<K>(p)...);
  if (same_or_scalar) {
    const std::array<int64_t, N> s{(ins[K]->numel == 1 && n != 1 ? int64_t(0) : int64_t(1))...};
    if constexpr (N == 2) {  // one operand a scalar: read it once, so the loop is contiguous
      using T0 = std::tuple_element_t<0, std::tuple<TIn...>>;
      using T1 = std::tuple_element_t<1, std::tuple<TIn...>>;
      const T0* a = std::get<0>(p);
      const T1* b = std::get<1>(p);
      if (s[0] == 0 && s[1] == 1) {
        const T0 av = a[0];
#pragma omp parallel for if (n > kParallelMinElements) schedule(static)
        for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
        return;
      }
      if (s[0] == 1 && s[1] == 0) {
        const T1 bv = b[0];
#pragma omp parallel for if (n > kParallelMinElements) schedule(static)
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
        return;
      }
    }
#pragma omp parallel for if (n > kParallelMinElements) schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = f(std::get<K>(p)[i * s[K]]...);
    return;
  }

  const BroadcastLoop<N> loop(*out.shape, {ins[K]->shape...});
  // The innermost strides are the same for every run: pick a loop whose reads the compiler sees
  // as contiguous (stride 1) or invariant (stride 0) where it can, so it vectorises.
  std::array<int64_t, N> in_st{};
  for (size_t k = 0; k < N; ++k) in_st[k] = loop.strides[k].back();
  bool all_unit = true;
  for (size_t k = 0; k < N; ++k) all_unit = all_unit && in_st[k] == 1;
  int pattern = all_unit ? 1 : 0;  // 1: all contiguous; 2: (1, 0); 3: (0, 1); 0: general
  if constexpr (N == 2) {
    if (in_st[0] == 1 && in_st[1] == 0) pattern = 2;
    if (in_st[0] == 0 && in_st[1] == 1) pattern = 3;
  }
  auto body = [&](int64_t pos, int64_t len, const std::array<int64_t, N>& off,
                  const std::array<int64_t, N>& inner) {
    TOut* oo = o + pos;
    if (pattern == 1) {
      const std::tuple<const TIn*...> q{(std::get<K>(p) + off[K])...};
      for (int64_t j = 0; j < len; ++j) oo[j] = f(std::get<K>(q)[j]...);
      return;
    }
    if constexpr (N == 2) {
      const auto* a = std::get<0>(p) + off[0];
      const auto* b = std::get<1>(p) + off[1];
      if (pattern == 2) {
        const auto bv = b[0];
        for (int64_t j = 0; j < len; ++j) oo[j] = f(a[j], bv);
        return;
      }
      if (pattern == 3) {
        const auto av = a[0];
        for (int64_t j = 0; j < len; ++j) oo[j] = f(av, b[j]);
        return;
      }
    }
    for (int64_t j = 0; j < len; ++j) oo[j] = f(std::get<K>(p)[off[K] + j * inner[K]]...);
  };
  constexpr int64_t chunk = 16384;
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for if (n > kParallelMinElements) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) loop.run(c * chunk, std::min(n, (c + 1) * chunk), body);
}

}  // namespace detail

// out[i] = f(in_0[...], ..., in_{N-1}[...]) over out's shape, each input broadcast to it (numpy
// rules). TOut / TIn are the element types of out / the inputs, in order; out's shape must be the
// broadcast of the inputs' shapes (or one they broadcast to, as Expand does).
template <class TOut, class... TIn, class F, class... Refs>
void broadcast_map(const TensorRef& out, const F& f, const Refs&... ins) {
  static_assert(sizeof...(TIn) == sizeof...(Refs), "one element type per input");
  static_assert(sizeof...(TIn) > 0, "at least one input");
  detail::broadcast_map_impl<TOut, TIn...>(out, f, {&ins...}, std::index_sequence_for<TIn...>{});
}

// f16 / bf16 elementwise on the CPU: each 16-bit input is widened to float, f runs in float and a
// float result is rounded back (a bool result, from a comparison, is kept).
template <class F, bool BF16>
struct ViaFloat {
  F f;
  static float up(uint16_t h) { return BF16 ? bf16_to_f32(h) : f16_to_f32(h); }
  template <class... A>
  auto operator()(A... a) const {
    auto r = f(up(a)...);
    if constexpr (std::is_same_v<decltype(r), bool>) return r;
    else return BF16 ? f32_to_bf16(float(r)) : f32_to_f16(float(r));
  }
};

// broadcast_map for inputs all of dtype `t` when t is f16 or bf16 (computing through ViaFloat);
// TOut is uint16_t (a float result) or bool. Returns false, doing nothing, for any other dtype.
template <class TOut, class F, class... Refs>
bool half_map(DType t, const TensorRef& out, const F& f, const Refs&... ins) {
  if (t == DType::f16) {
    broadcast_map<TOut, std::conditional_t<true, uint16_t, Refs>...>(out, ViaFloat<F, false>{f}, ins...);
    return true;
  }
  if (t == DType::bf16) {
    broadcast_map<TOut, std::conditional_t<true, uint16_t, Refs>...>(out, ViaFloat<F, true>{f}, ins...);
    return true;
  }
  return false;
}

}  // namespace onnxdp
