// The numpy-broadcasting elementwise driver of the CPU kernels.
//
//   broadcast_map<TOut, TIn...>(out, f, in...)   out[i] = f(in_0[..], in_1[..], ...)
//
// `out` has the broadcast shape (the shape rule computed it); each input is read through strides
// that are 0 along the dims it broadcasts over (a missing leading dim counts as 1). Same-shape
// inputs take a flat loop; everything else walks runs of the innermost (merged) dimension, with a
// loop of its own for each way up to 3 inputs are read along a run (once or contiguously), so
// that scalars, a bias or an attention mask vectorize as same-shape inputs do. Large outputs are
// split over the thread team (exec/cpu/threads.h).
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


#include "exec/cpu/clones.h"  // ONNXDP_CPU_CLONES: the loops below are built for x86-64-v3 and the baseline
#include "exec/kernel.h"

namespace onnxdp {

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
ONNXDP_CPU_CLONES void flat_run(TOut* o, int64_t n, const F& f, const TIn*... in) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(in[i]...);
}

// flat_run, its elements split evenly over the threads when there are many.
template <class TOut, class F, class... TIn>
void flat_map(TOut* o, int64_t n, const F& f, const TIn*... in) {
  split_rows(n, n > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) { flat_run(o + lo, hi - lo, f, (in + lo)...); });
}

// An input as one run reads it: Src<true> holds the one value of an input broadcast along the run
// (read once, before the loop), Src<false> points at a contiguous one.
template <bool Broadcast, class T>
struct Src;
template <class T>
struct Src<true, T> {
  T v;
  T operator[](int64_t) const { return v; }
};
template <class T>
struct Src<false, T> {
  const T* p;
  T operator[](int64_t j) const { return p[j]; }
};
template <bool Broadcast, class T>
Src<Broadcast, T> src(const T* q) {
  if constexpr (Broadcast) return {q[0]};
  else return {q};
}

// o[j] = f(in_0[j], ...) for j < len, input k read once when bit k of Z is set, else contiguously.
template <unsigned Z, class TOut, class F, size_t... K, class... TIn>
ONNXDP_CPU_CLONES void run_masked(TOut* o, int64_t len, const F& f, std::index_sequence<K...>, const TIn*... q) {
  const std::tuple<Src<((Z >> K) & 1u) != 0, TIn>...> s{src<((Z >> K) & 1u) != 0>(q)...};
  for (int64_t j = 0; j < len; ++j) o[j] = f(std::get<K>(s)[j]...);
}

// fn.template operator()<Z>() for the Z in [0, 2^N) equal to mask.
template <size_t N, class Fn>
void with_mask(unsigned mask, Fn&& fn) {
  [&]<unsigned... Z>(std::integer_sequence<unsigned, Z...>) {
    ((mask == Z ? (fn.template operator()<Z>(), true) : false) || ...);
  }(std::make_integer_sequence<unsigned, (1u << N)>{});
}

// Up to this many inputs, each combination of broadcast (stride 0) and contiguous (stride 1)
// inputs gets its own vectorizable run loop (2^N of them); more inputs take the general loop.
inline constexpr size_t kMaskedMaxInputs = 3;

// bool elements are read and written as their bytes (0 or 1): GCC vectorizes no loop that loads
// or stores a bool, and a functor's bool parameter takes the byte as it is.
template <class T>
using Storage = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <class TOut, class... TIn, class F, size_t... K>
void broadcast_map_impl(const TensorRef& out, const F& f, const std::array<const TensorRef*, sizeof...(TIn)>& ins,
                        std::index_sequence<K...> ks) {
  constexpr size_t N = sizeof...(TIn);
  Storage<TOut>* o = out.as<Storage<TOut>>();
  const std::tuple<const Storage<TIn>*...> p{static_cast<const Storage<TIn>*>(ins[K]->data)...};
  const int64_t n = out.numel;
  if (n == 0) return;

  bool same = true;
  for (size_t k = 0; k < N; ++k) same = same && *ins[k]->shape == *out.shape;
  if (same) return flat_map(o, n, f, std::get<K>(p)...);

  // Scalars and broadcasts: the loop merges dims (a scalar input has stride 0 throughout, so
  // same-shape-or-scalar inputs make one run per chunk).
  const BroadcastLoop<N> loop(*out.shape, {ins[K]->shape...});
  // The innermost strides are the same for every run. When each is 0 (broadcast along the run) or
  // 1 (contiguous), a run loop made for that combination reads the broadcast inputs once and the
  // rest contiguously, so it vectorizes; other strides take the general loop.
  unsigned mask = 0;
  bool unit_or_zero = N <= kMaskedMaxInputs;
  for (size_t k = 0; k < N; ++k) {
    const int64_t st = loop.strides[k].back();
    mask |= (st == 0 ? 1u : 0u) << k;
    unit_or_zero = unit_or_zero && (st == 0 || st == 1);
  }
  constexpr int64_t chunk = 16384;
  const int64_t chunks = (n + chunk - 1) / chunk;
  if constexpr (N <= kMaskedMaxInputs) {
    if (unit_or_zero) {
      with_mask<N>(mask, [&]<unsigned Z>() {
        auto body = [&](int64_t pos, int64_t len, const std::array<int64_t, N>& off, const std::array<int64_t, N>&) {
          run_masked<Z>(o + pos, len, f, ks, (std::get<K>(p) + off[K])...);
        };
        parallel_for(chunks, n > parallel_min_elements(),
                     [&](int64_t c) { loop.run(c * chunk, std::min(n, (c + 1) * chunk), body); });
      });
      return;
    }
  }
  auto body = [&](int64_t pos, int64_t len, const std::array<int64_t, N>& off, const std::array<int64_t, N>& inner) {
    Storage<TOut>* oo = o + pos;
    for (int64_t j = 0; j < len; ++j) oo[j] = f(std::get<K>(p)[off[K] + j * inner[K]]...);
  };
  parallel_for(chunks, n > parallel_min_elements(),
               [&](int64_t c) { loop.run(c * chunk, std::min(n, (c + 1) * chunk), body); });
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
