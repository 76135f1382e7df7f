// CPU kernels of the reduction ops (see graph/op_table.h).
//
// The input's dims are split into kept dims (K) and reduced dims (R), after dropping size-1 dims
// and merging neighbours of the same kind (reducing the last two dims of [B, C, H, W] walks
// K = [B*C], R = [H*W]). Output element o reduces the R-space at the input offset of o's K
// coordinates. Floats accumulate in double, integers and bools in int64. Many outputs are split
// over the thread team; few outputs with a large R-space split the R-space instead, and combine the
// per-thread partial results in a fixed order (so a run is reproducible for a thread count).
// Two fast paths (see reduce()) cover the common layouts of training graphs: a wide contiguous
// kept block (a Linear's bias gradient) and sums over contiguous reduced rows (Softmax backward, a
// Conv's bias gradient).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "exec/cpu/blocked.h"
#include "exec/cpu/broadcast.h"  // parallel_min_elements()
#include "exec/cpu/reduce_dims.h"
#include "exec/kernel.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

namespace {

enum class ReduceKind { sum, mean, max, min, prod };
template <ReduceKind K>
inline constexpr bool kExtremum = K == ReduceKind::max || K == ReduceKind::min;

// acc[c] = acc[c] + p[c] (sum, mean), acc[c] * p[c] (prod) or the larger / smaller, NaN winning (max, min), for c < w, in double: one
// row segment of a float or double input into fast path 1's block of accumulators (see reduce()).
// Built for x86-64-v3 too: the columns are independent, so the loop runs 4 doubles at a time.
template <ReduceKind K, class T>
ONNXDP_CPU_CLONES void accumulate_segment(double* acc, const T* p, int64_t w) {
  for (int64_t c = 0; c < w; ++c) {
    const double v = double(p[c]);
    if constexpr (K == ReduceKind::max) acc[c] = (v > acc[c] || v != v) ? v : acc[c];
    else if constexpr (K == ReduceKind::min) acc[c] = (v < acc[c] || v != v) ? v : acc[c];
    else if constexpr (K == ReduceKind::prod) acc[c] = acc[c] * v;
    else acc[c] = acc[c] + v;
  }
}

template <class E, ReduceKind K>
void reduce(const TensorRef& in, const TensorRef& out, const std::vector<char>& red) {
  using T = typename E::T;
  using A = std::conditional_t<E::kind == ElemKind::floating, double, int64_t>;
  const T* src = in.as<const T>();
  T* dst = out.as<T>();

  A init;
  if constexpr (K == ReduceKind::prod) init = A(1);  // the empty product
  else if constexpr (!kExtremum<K>) init = A(0);
  else if constexpr (E::kind == ElemKind::floating)
    init = (K == ReduceKind::max ? -1 : 1) * std::numeric_limits<double>::infinity();
  else init = K == ReduceKind::max ? int64_t(std::numeric_limits<T>::lowest()) : int64_t(std::numeric_limits<T>::max());
  auto load = [](T v) -> A {
    if constexpr (E::kind == ElemKind::floating) return E::to_f64(v);
    else return E::to_i64(v);
  };
  auto combine = [](A a, A b) -> A {
    if constexpr (K == ReduceKind::prod) {
      if constexpr (E::kind == ElemKind::floating) return a * b;
      else return int64_t(uint64_t(a) * uint64_t(b));  // wraps (defined) as the element type would
    } else if constexpr (!kExtremum<K>) {
      if constexpr (E::kind == ElemKind::floating) return a + b;
      else return int64_t(uint64_t(a) + uint64_t(b));  // wraps (defined), as numpy's int64 sum
    }
    else if constexpr (K == ReduceKind::max) return (b > a || b != b) ? b : a;  // NaN wins (floats)
    else return (b < a || b != b) ? b : a;
  };

  ReduceDims kd, rd;
  split_dims(*in.shape, red, kd, rd);
  int64_t n_out = 1, n_red = 1;
  for (int64_t s : kd.size) n_out *= s;
  for (int64_t s : rd.size) n_red *= s;
  if (rd.size.empty()) {  // nothing left to reduce over: one element per output
    rd.size.push_back(1);
    rd.stride.push_back(0);
  }
  const int nr = int(rd.size.size());
  const int64_t row = rd.size[size_t(nr - 1)], row_stride = rd.stride[size_t(nr - 1)];

  auto base_of = [&](int64_t o) {
    int64_t off = 0;
    for (size_t d = kd.size.size(); d-- > 0;) {
      off += (o % kd.size[d]) * kd.stride[d];
      o /= kd.size[d];
    }
    return off;
  };
  // The reduction of flat R-positions [rb, re) at input offset `base`, walking whole rows.
  auto partial = [&](int64_t base, int64_t rb, int64_t re) {
    A acc = init;
    if (rb >= re) return acc;  // (also the empty set, where row may be 0)
    int64_t q = rb / row, col = rb % row, j = rb;
    while (j < re) {
      int64_t off = base, rest = q;
      for (int d = nr - 2; d >= 0; --d) {
        off += (rest % rd.size[size_t(d)]) * rd.stride[size_t(d)];
        rest /= rd.size[size_t(d)];
      }
      const int64_t len = std::min(row - col, re - j);
      const T* p = src + off + col * row_stride;
      if (row_stride == 1) {
        for (int64_t t = 0; t < len; ++t) acc = combine(acc, load(p[t]));
      } else {
        for (int64_t t = 0; t < len; ++t) acc = combine(acc, load(p[t * row_stride]));
      }
      j += len;
      ++q;
      col = 0;
    }
    return acc;
  };
  auto store = [&](int64_t o, A acc) {
    if constexpr (K == ReduceKind::mean) {
      dst[o] = E::from_f64(double(acc) / double(n_red));  // empty set: 0 / 0 = NaN (floats)
    } else if constexpr (E::kind == ElemKind::floating) {
      dst[o] = E::from_f64(acc);
    } else {
      dst[o] = E::from_i64(acc);
    }
  };

  const bool parallel = n_out * n_red > parallel_min_elements();
  const int threads = cpu_threads();

  // Fast path 1: the innermost kept dim is contiguous (stride 1) and wide, e.g. a bias gradient
  // ([rows, n] -> [n]). The generic loop walks each output's R-space down a column (a strided,
  // cache-hostile walk); here a task owns a block of w neighbouring outputs and adds whole row
  // segments into a block of accumulators. Each output still sums its R-positions one by one in
  // flat row-major order, from `init` -- the same order as the generic loop, so the results are
  // bit-identical to it and do not depend on the thread count or on w.
  // (Too few blocks to keep the threads busy: the generic loop, which can split the R-space.)
  const int64_t n_inner = kd.size.empty() ? 0 : kd.size.back();
  const int64_t w_min = (n_inner + 4 * threads - 1) / (4 * int64_t(threads));  // 4 blocks a thread
  const int64_t w = std::clamp<int64_t>((w_min + 15) / 16 * 16, 64, 512);
  const int64_t n_blocks = (n_inner + w - 1) / w, n_tasks = (n_inner ? n_out / n_inner : 0) * n_blocks;
  if (!kd.size.empty() && kd.stride.back() == 1 && n_inner >= 16 &&
      (!parallel || threads == 1 || n_tasks >= 2 * int64_t(threads))) {
    const int64_t n = n_inner;
    const bool par = parallel && threads > 1 && n_tasks > 1;
    split_rows(n_tasks, par, [&](int, int64_t lo, int64_t hi) {
      std::vector<A> acc(static_cast<size_t>(w));
      std::vector<int64_t> idx(static_cast<size_t>(nr));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t ob = task / n_blocks, c0 = (task % n_blocks) * w, cw = std::min(w, n - c0);
        const T* base = src + base_of(ob * n) + c0;
        std::fill(acc.begin(), acc.begin() + cw, init);
        std::fill(idx.begin(), idx.end(), 0);
        int64_t off = 0;  // input offset of R-position q (odometer over the R dims)
        for (int64_t q = 0; q < n_red; ++q) {
          const T* p = base + off;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
            accumulate_segment<K>(acc.data(), p, cw);
          else
            for (int64_t c = 0; c < cw; ++c) acc[size_t(c)] = combine(acc[size_t(c)], load(p[c]));
          for (int d = nr - 1; d >= 0; --d) {
            off += rd.stride[size_t(d)];
            if (++idx[size_t(d)] < rd.size[size_t(d)]) break;
            off -= rd.size[size_t(d)] * rd.stride[size_t(d)];
            idx[size_t(d)] = 0;
          }
        }
        for (int64_t c = 0; c < cw; ++c) store(ob * n + c0 + c, acc[size_t(c)]);
      }
    });
    return;
  }

  // Fast path 2: sums whose R-space is contiguous rows (its last dim of stride 1), with enough
  // outputs to split them over threads: Softmax backward (one row, the last axis), a Conv's bias
  // gradient (dy [N, C, H, W] over N, H and W: N rows of H * W per channel). Each row is summed in
  // 8 interleaved lanes (lane l takes elements l, l+8, l+16, ...; each lane in order, from 0), the
  // lanes combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) and the tail elements added in order;
  // the rows' sums are added in row order, from 0. The lanes break the serial add chain (the
  // generic loop below waits on every addition: a bias gradient of 2.4 M elements took 2.1 ms);
  // the order is fixed, so a run is reproducible and does not depend on the thread count. Floats
  // still accumulate in double.
  if constexpr ((K == ReduceKind::sum || K == ReduceKind::mean) && E::kind == ElemKind::floating) {
    if (row_stride == 1 && row >= 32 && (n_out >= 4 * int64_t(threads) || !parallel || threads == 1)) {
      const int64_t rows = n_red / row;
      parallel_for(n_out, parallel, [&](int64_t o) {
        const T* base = src + base_of(o);
        double acc = 0;
        for (int64_t q = 0; q < rows; ++q) {
          int64_t off = 0, rest = q;  // row q's offset: its coordinates in the R dims but the last
          for (int d = nr - 2; d >= 0; --d) {
            off += (rest % rd.size[size_t(d)]) * rd.stride[size_t(d)];
            rest /= rd.size[size_t(d)];
          }
          const T* p = base + off;
          double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          int64_t t = 0;
          for (; t + 8 <= row; t += 8)
            for (int k = 0; k < 8; ++k) l[k] += load(p[t + k]);
          double sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
          for (; t < row; ++t) sum += load(p[t]);
          acc += sum;
        }
        store(o, acc);
      });
      return;
    }
  }

  if (!parallel || n_out >= 4 * int64_t(threads) || threads == 1) {
    parallel_for(n_out, parallel, [&](int64_t o) { store(o, partial(base_of(o), 0, n_red)); });
    return;
  }
  // Few outputs, much to reduce: split each output's R-space into one chunk per thread.
  std::vector<A> parts(static_cast<size_t>(threads));
  for (int64_t o = 0; o < n_out; ++o) {
    const int64_t base = base_of(o), chunk = (n_red + threads - 1) / threads;
    parallel_for(threads, true, [&](int64_t t) {
      parts[size_t(t)] = partial(base, std::min(n_red, t * chunk), std::min(n_red, (t + 1) * chunk));
    });
    A acc = init;
    for (A p : parts) acc = combine(acc, p);
    store(o, acc);
  }
}

template <ReduceKind K>
void reduce_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  std::vector<int64_t> axes;
  if (c.has_in(1)) {
    const TensorRef& a = c.in(1);
    dispatch_elem(a.dtype, [&]<class E>() {
      for (int64_t i = 0; i < a.numel; ++i) axes.push_back(E::to_i64(a.as<const typename E::T>()[i]));
    });
  }
  std::vector<char> red = reduced_dims(in.rank(), c.has_in(1) ? &axes : nullptr,
                                       c.node.i("noop_with_empty_axes") != 0, c.node);
  bool any = false;
  for (char r : red) any = any || r;
  if (!any && in.numel == out.numel) {  // noop_with_empty_axes (or a scalar): the identity
    if (in.data != out.data && out.numel) std::memcpy(out.data, in.data, size_t(out.numel) * dtype_size(out.dtype));
    return;
  }
  if (blocked_input(c.node, 0)) {
    // Channel-blocked x (exec/cpu/blocked.h) with every spatial dim reduced: its storage [N, C / 16,
    // spatial.., 16] reduced over the same dims, the lanes with the channels, leaves the output's
    // plain [N, C] (or [C], or one value) in its order.
    if (in.dtype != DType::f32) c.fail("input 0 is blocked and {}, not float32", dtype_name(in.dtype));
    for (size_t d = 2; d < red.size(); ++d)
      if (!red[d]) c.fail("input 0 is blocked and dim {} is kept: only a reduction over every spatial dim reads it", d);
    const Shape s = blocked_storage(*in.shape, red.size());
    std::vector<char> rs = red;
    rs.push_back(red[1]);
    reduce<Elem<DType::f32>, K>(viewed_as(in, s), out, rs);
    return;
  }
  dispatch_elem(in.dtype, [&]<class E>() { reduce<E, K>(in, out, red); });
}

}  // namespace

void ReduceMean_forward(KernelCtx& c) { reduce_forward<ReduceKind::mean>(c); }
void ReduceSum_forward(KernelCtx& c) { reduce_forward<ReduceKind::sum>(c); }
void ReduceMax_forward(KernelCtx& c) { reduce_forward<ReduceKind::max>(c); }

namespace {

// The index of the largest (ArgMax) or smallest element along the axis: the first one, or with
// select_last_index the last one; a NaN wins as numpy's and torch's argmax / argmin.
template <bool kMax>
void arg_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  const int64_t r = in.rank(), axis = normalize_axis(c.node.i("axis"), r, c.node);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in.dim(int(d));
  for (int64_t d = axis + 1; d < r; ++d) inner *= in.dim(int(d));
  const int64_t n = in.dim(int(axis));
  const bool last = c.node.i("select_last_index") != 0;
  int64_t* dst = out.as<int64_t>();
  dispatch_elem(in.dtype, [&]<class E>() {
    using A = std::conditional_t<E::kind == ElemKind::floating, double, int64_t>;  // exact for int64
    auto load = [](typename E::T v) -> A {
      if constexpr (E::kind == ElemKind::floating) return E::to_f64(v);
      else return E::to_i64(v);
    };
    const auto* src = in.as<const typename E::T>();
    parallel_for(outer * inner, outer * inner * n > parallel_min_elements(), [&](int64_t o) {
      const int64_t q = o / inner, i = o % inner;
      const auto* p = src + q * n * inner + i;
      A best = load(p[0]);
      int64_t at = 0;
      for (int64_t j = 1; j < n; ++j) {
        const A v = load(p[j * inner]);
        if (best != best) {  // a NaN is picked: only a later NaN replaces it, with select_last_index
          if (!last) break;
          if (v != v) at = j;
          continue;
        }
        const bool better = v != v || (kMax ? (last ? v >= best : v > best) : (last ? v <= best : v < best));
        if (better) best = v, at = j;
      }
      dst[o] = at;
    });
  });
}

}  // namespace

void ArgMax_forward(KernelCtx& c) { arg_forward<true>(c); }
void ArgMin_forward(KernelCtx& c) { arg_forward<false>(c); }
void ReduceMin_forward(KernelCtx& c) { reduce_forward<ReduceKind::min>(c); }
// Products accumulate in double (floats) or int64 (integers, wrapping as the element type on store).
void ReduceProd_forward(KernelCtx& c) { reduce_forward<ReduceKind::prod>(c); }

// The K largest (largest = 1) or smallest elements along the axis with their indices, in that
// order whatever `sorted` says (unsorted order is the op's choice). Equal values: the lower index
// first (ONNX); NaN counts as larger than every number (torch.topk), NaNs by index.
void TopK_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &values = c.out(0), &indices = c.out(1);
  const int64_t r = in.rank(), axis = normalize_axis(c.node.i("axis"), r, c.node);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in.dim(int(d));
  for (int64_t d = axis + 1; d < r; ++d) inner *= in.dim(int(d));
  const int64_t n = in.dim(int(axis)), k = values.dim(int(axis));
  const bool largest = c.node.i("largest") != 0;
  int64_t* idx = indices.as<int64_t>();
  dispatch_elem(in.dtype, [&]<class E>() {
    using T = typename E::T;
    using A = std::conditional_t<E::kind == ElemKind::floating, double, int64_t>;  // exact for int64
    auto load = [](T v) -> A {
      if constexpr (E::kind == ElemKind::floating) return E::to_f64(v);
      else return E::to_i64(v);
    };
    const T* src = in.as<const T>();
    T* dst = values.as<T>();
    parallel_for(outer * inner, outer * inner * n > parallel_min_elements(), [&](int64_t o) {
      const int64_t q = o / inner, i = o % inner;
      const T* p = src + q * n * inner + i;
      std::vector<A> v(static_cast<size_t>(n));
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) v[size_t(j)] = load(p[j * inner]), order[size_t(j)] = j;
      // a before b: a's value comes first (NaN above every number), then the lower index.
      auto before = [&](int64_t a, int64_t b) {
        const A x = v[size_t(a)], y = v[size_t(b)];
        const bool xn = x != x, yn = y != y;
        if (xn || yn) {
          if (xn && yn) return a < b;
          return largest ? xn : yn;
        }
        if (x != y) return largest ? x > y : x < y;
        return a < b;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = q * k * inner + j * inner + i;
        dst[at] = p[order[size_t(j)] * inner];
        idx[at] = order[size_t(j)];
      }
    });
  });
}

}  // namespace onnxdp
