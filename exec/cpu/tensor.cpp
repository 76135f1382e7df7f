// CPU kernels of the tensor ops (see graph/op_table.h).
//
// Most of these ops only move elements: they copy them as unsigned integers of the element's
// size (dispatch_bytes), whatever the dtype. The output shapes come from the shape rules; the
// per-dim arithmetic a kernel needs beyond them (Slice's starts, Pad's amounts ...) comes from the
// helpers the shape rules use (graph/shape_helpers.h). Arguments are checked before the
// parallel loops (an exception thrown in a share waits for the other shares to end).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "exec/cpu/blocked.h"
#include "exec/cpu/broadcast.h"
#include "exec/cpu/gather_elements.h"
#include "exec/cpu/gather_nd.h"
#include "exec/cpu/resize_interp.h"
#include "exec/kernel.h"
#include "graph/resize.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

namespace {

size_t nbytes(const TensorRef& t) { return size_t(t.numel) * dtype_size(t.dtype); }

// The values of a (small, integer) argument tensor, e.g. Slice's starts or Pad's pads.
std::vector<int64_t> ref_ints(const TensorRef& t) {
  std::vector<int64_t> v(size_t(t.numel));
  dispatch_elem(t.dtype, [&]<class E>() {
    const auto* p = static_cast<const typename E::T*>(t.data);
    for (int64_t i = 0; i < t.numel; ++i) v[size_t(i)] = E::to_i64(p[i]);
  });
  return v;
}

// The output as a contiguous copy of the input (same bytes, another shape or the same one).
void copy_all(const TensorRef& in, const TensorRef& out) {
  if (in.data != out.data && nbytes(out)) std::memcpy(out.data, in.data, nbytes(out));
}

// out[i] = in[base + sum_d idx_d(i) * strides[d]] for every element i of a row-major tensor of
// shape `shape` (strides in elements, possibly 0 or negative). Transpose, Slice and Tile are this
// one loop with different strides.
template <class U>
void strided_copy(const U* in, U* out, Shape shape, std::vector<int64_t> strides, int64_t base) {
  const int64_t numel = shape_numel(shape);
  if (numel == 0) return;
  // Drop size-1 dims and merge dims d-1, d the input reads as one (stride[d-1] == stride[d] * dim[d]),
  // so the innermost loop is as long as possible.
  Shape dims;
  std::vector<int64_t> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty() && st.back() == strides[d] * shape[d]) {
      dims.back() *= shape[d];
      st.back() = strides[d];
    } else {
      dims.push_back(shape[d]);
      st.push_back(strides[d]);
    }
  }
  if (dims.empty()) {
    out[0] = in[base];
    return;
  }
  const int r = int(dims.size());
  const int64_t row = dims[size_t(r - 1)], inner = st[size_t(r - 1)], rows = numel / row;
  if (r >= 2 && inner != 1 && st[size_t(r - 2)] == 1) {
    // The last two dims swapped (Transpose's [.., n, m] -> [.., m, n], attention's perms): each
    // outer index is a [rows2, row] matrix read from a column-major one. Copy it in square tiles
    // so the strided reads of a tile stay in cache; threads split the tiles.
    const int64_t rows2 = dims[size_t(r - 2)], outer = numel / (rows2 * row);
    constexpr int64_t kTile = 32;
    const int64_t ta = (rows2 + kTile - 1) / kTile, tb = (row + kTile - 1) / kTile, per = ta * tb;
    parallel_for(outer * per, numel > parallel_min_elements(), [&](int64_t t) {
      const int64_t o = t / per, a0 = (t % per) / tb * kTile, b0 = (t % per) % tb * kTile;
      int64_t rest = o, off = base;
      for (int d = r - 3; d >= 0; --d) {
        off += (rest % dims[size_t(d)]) * st[size_t(d)];
        rest /= dims[size_t(d)];
      }
      U* om = out + o * rows2 * row;
      const int64_t a1 = std::min(a0 + kTile, rows2), b1 = std::min(b0 + kTile, row);
      for (int64_t a = a0; a < a1; ++a)
        for (int64_t b = b0; b < b1; ++b) om[a * row + b] = in[off + a + b * inner];
    });
    return;
  }
  // Threads take chunks of rows; within a chunk the input offset of the next row is carried
  // through the outer coordinates rather than recomputed by division (rows may be short: 32
  // elements for attention's [b, t, heads, d] -> [b, heads, t, d]).
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  parallel_for(chunks, numel > parallel_min_elements(), [&](int64_t ch) {
    const int64_t i0 = ch * kChunk, i1 = std::min(rows, i0 + kChunk);
    std::vector<int64_t> coord(size_t(r), 0);
    int64_t rest = i0, off = base;
    for (int d = r - 2; d >= 0; --d) {
      coord[size_t(d)] = rest % dims[size_t(d)];
      off += coord[size_t(d)] * st[size_t(d)];
      rest /= dims[size_t(d)];
    }
    for (int64_t i = i0; i < i1; ++i) {
      U* o = out + i * row;
      if (inner == 1) {
        std::memcpy(o, in + off, size_t(row) * sizeof(U));
      } else {
        for (int64_t j = 0; j < row; ++j) o[j] = in[off + j * inner];
      }
      for (int d = r - 2; d >= 0; --d) {  // next row
        ++coord[size_t(d)];
        off += st[size_t(d)];
        if (coord[size_t(d)] < dims[size_t(d)]) break;
        off -= dims[size_t(d)] * st[size_t(d)];
        coord[size_t(d)] = 0;
      }
    }
  });
}

void strided_copy(const TensorRef& in, const TensorRef& out, const Shape& shape, const std::vector<int64_t>& strides,
                  int64_t base) {
  dispatch_bytes(dtype_size(in.dtype), [&]<class U>() {
    strided_copy(in.as<const U>(), out.as<U>(), shape, strides, base);
  });
}

// Element type conversion: integers and bools go through int64 (exact), floats through double.
template <class S, class D>
void cast_elems(const typename S::T* in, typename D::T* out, int64_t n) {
  parallel_for(n, n > parallel_min_elements(), [&](int64_t i) {
    if constexpr (S::kind == ElemKind::floating)
      out[i] = D::from_f64(S::to_f64(in[i]));
    else
      out[i] = D::from_i64(S::to_i64(in[i]));
  });
}

}  // namespace

void Identity_forward(KernelCtx& c) { copy_all(c.in(0), c.out(0)); }

void Cast_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  if (in.dtype == out.dtype) return copy_all(in, out);
  dispatch_elem(in.dtype, [&]<class S>() {
    dispatch_elem(out.dtype, [&]<class D>() {
      cast_elems<S, D>(in.as<const typename S::T>(), out.as<typename D::T>(), in.numel);
    });
  });
}

void CastLike_forward(KernelCtx& c) { Cast_forward(c); }  // the output already has input 1's dtype

void Size_forward(KernelCtx& c) { *c.out(0).as<int64_t>() = c.in(0).numel; }

void Shape_forward(KernelCtx& c) {
  std::vector<int64_t> dims = shape_op_dims(*c.in(0).shape, c.node);
  if (!dims.empty()) std::memcpy(c.out(0).data, dims.data(), dims.size() * sizeof(int64_t));
}

void Flatten_forward(KernelCtx& c) { copy_all(c.in(0), c.out(0)); }
void Reshape_forward(KernelCtx& c) { copy_all(c.in(0), c.out(0)); }
void Squeeze_forward(KernelCtx& c) { copy_all(c.in(0), c.out(0)); }
void Unsqueeze_forward(KernelCtx& c) { copy_all(c.in(0), c.out(0)); }

// out[.., j, ..] = in[.., perm[j], ..]: read the input with its strides permuted.
void Transpose_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  const int r = in.rank();
  std::vector<int64_t> perm;
  if (c.node.has("perm")) {
    perm = c.node.ints("perm");
  } else {
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  }
  const bool bin = blocked_input(c.node, 0), bout = blocked_output(c.node, 0);
  if (!bin && !bout) {
    std::vector<int64_t> in_st = row_major_strides(*in.shape), st(static_cast<size_t>(r));
    for (int d = 0; d < r; ++d) st[size_t(d)] = in_st[size_t(perm[size_t(d)])];
    strided_copy(in, out, *out.shape, st, 0);
    return;
  }
  // A channel-blocked side (exec/cpu/blocked.h): the copy walks the output's storage, where a
  // dim of 16 k channels is two, k blocks and the 16 lanes (a blocked output's lanes innermost,
  // after its spatial dims; a plain output's right after the blocks, which is its own order). A
  // blocked input's channel dim reads its blocks and lanes at their storage strides; a plain
  // dim read as blocks and lanes, 16 of its strides and one.
  const std::vector<int64_t> in_st = row_major_strides(bin ? blocked_storage(*in.shape, size_t(r)) : *in.shape);
  const auto whole = [&](int64_t d) { return in_st[size_t(d)]; };  // d is its own dim in either
  const auto blocks = [&](int64_t d) { return bin && d == 1 ? in_st[1] : kChannelBlock * whole(d); };
  const auto lanes = [&](int64_t d) { return bin && d == 1 ? int64_t(1) : whole(d); };
  Shape shape;
  std::vector<int64_t> st;
  for (int j = 0; j < r; ++j) {
    const int64_t d = perm[size_t(j)], n = in.dim(int(d));
    if ((bout && j == 1) || (bin && d == 1)) {
      shape.push_back(n / kChannelBlock);
      st.push_back(blocks(d));
      if (bout && j == 1) continue;  // its lanes go last
      shape.push_back(kChannelBlock);
      st.push_back(lanes(d));
    } else {
      shape.push_back(n);
      st.push_back(whole(d));
    }
  }
  if (bout) {
    shape.push_back(kChannelBlock);
    st.push_back(lanes(perm[1]));
  }
  strided_copy(in, out, shape, st, 0);
}

// Output [outer, sum of the inputs' axis dims, inner]: each input contributes one block per outer index.
void Concat_forward(KernelCtx& c) {
  const TensorRef& out = c.out(0);
  const int r = out.rank();
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  const size_t es = dtype_size(out.dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < r; ++d) {
    if (d < axis) outer *= out.dim(d);
    if (d > axis) inner *= out.dim(d);
  }
  const size_t out_block = size_t(out.dim(int(axis)) * inner) * es;
  size_t offset = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const TensorRef& in = c.in(int(k));
    const size_t block = size_t(in.dim(int(axis)) * inner) * es;
    const auto* src = static_cast<const uint8_t*>(in.data);
    auto* dst = static_cast<uint8_t*>(out.data) + offset;
    parallel_for(outer, out.numel > parallel_min_elements(),
                 [&](int64_t o) { std::memcpy(dst + size_t(o) * out_block, src + size_t(o) * block, block); });
    offset += block;
  }
}

// The reverse of Concat; each output's size along the axis is in its shape.
void Split_forward(KernelCtx& c) {
  const TensorRef& in = c.in(0);
  const int r = in.rank();
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  const size_t es = dtype_size(in.dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < r; ++d) {
    if (d < axis) outer *= in.dim(d);
    if (d > axis) inner *= in.dim(d);
  }
  const size_t in_block = size_t(in.dim(int(axis)) * inner) * es;
  size_t offset = 0;
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const TensorRef& out = c.out(int(k));
    if (!out.present()) continue;  // (Split's outputs are not optional; kept for safety)
    const size_t block = size_t(out.dim(int(axis)) * inner) * es;
    const auto* src = static_cast<const uint8_t*>(in.data) + offset;
    auto* dst = static_cast<uint8_t*>(out.data);
    parallel_for(outer, in.numel > parallel_min_elements(),
                 [&](int64_t o) { std::memcpy(dst + size_t(o) * block, src + size_t(o) * in_block, block); });
    offset += block;
  }
}

// Output element j along dim d reads input index start_d + j * step_d.
void Slice_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  std::vector<int64_t> starts = ref_ints(c.in(1)), ends = ref_ints(c.in(2)), axes, steps;
  if (c.has_in(3)) axes = ref_ints(c.in(3));
  if (c.has_in(4)) steps = ref_ints(c.in(4));
  auto plan = slice_plan(*in.shape, starts, ends, c.has_in(3) ? &axes : nullptr, c.has_in(4) ? &steps : nullptr, c.node);
  std::vector<int64_t> in_st = row_major_strides(*in.shape), st(plan.size());
  int64_t base = 0;
  for (size_t d = 0; d < plan.size(); ++d) {
    base += plan[d].start * in_st[d];
    st[d] = plan[d].step * in_st[d];
  }
  strided_copy(in, out, *out.shape, st, base);
}

// data [outer, dim, inner], indices [n] (any shape) -> out [outer, n, inner].
void Gather_forward(KernelCtx& c) {
  const TensorRef &data = c.in(0), &out = c.out(0);
  const int r = data.rank();
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  const int64_t dim = data.dim(int(axis));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < r; ++d) {
    if (d < axis) outer *= data.dim(d);
    if (d > axis) inner *= data.dim(d);
  }
  std::vector<int64_t> idx = ref_ints(c.in(1));
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < -dim || idx[i] >= dim)
      c.fail("index {} (element {} of the indices) is out of range for axis {} of size {}", idx[i], i, axis, dim);
    if (idx[i] < 0) idx[i] += dim;
  }
  const int64_t n = int64_t(idx.size());
  const size_t row = size_t(inner) * dtype_size(data.dtype);
  const auto* src = static_cast<const uint8_t*>(data.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  parallel_for(outer * n, out.numel > parallel_min_elements(), [&](int64_t k) {
    const int64_t o = k / n, i = k % n;
    std::memcpy(dst + size_t(k) * row, src + size_t(o * dim + idx[size_t(i)]) * row, row);
  });
}

// out[i] = data[i with its axis coordinate replaced by indices[i]] (negative indices count from
// the end), by element size.
void GatherElements_forward(KernelCtx& c) {
  const TensorRef &data = c.in(0), &out = c.out(0);
  const int64_t axis = normalize_axis(c.node.i("axis"), data.rank(), c.node);
  dispatch_bytes(dtype_size(data.dtype), [&]<class U>() {
    const U* src = data.as<const U>();
    U* dst = out.as<U>();
    for_each_gathered_element(c, *data.shape, *c.in(1).shape, axis, ref_ints(c.in(1)),
                              [&](int64_t e, int64_t off) { dst[e] = src[off]; });
  });
}

// out [B.., I.., S..] = data's slice at each index tuple, in order (exec/cpu/gather_nd.h), by
// element size.
void GatherND_forward(KernelCtx& c) {
  const TensorRef &data = c.in(0), &out = c.out(0);
  const NDSlices s = gather_nd_slices(c, *data.shape, *c.in(1).shape, c.node.i("batch_dims"), ref_ints(c.in(1)));
  const size_t es = dtype_size(data.dtype), row = size_t(s.slice) * es;
  if (row == 0) return;
  const auto* src = static_cast<const uint8_t*>(data.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  parallel_for(int64_t(s.offset.size()), out.numel > parallel_min_elements(), [&](int64_t t) {
    std::memcpy(dst + size_t(t) * row, src + size_t(s.offset[size_t(t)]) * es, row);
  });
}

// out = data, then each update slice combined into the data slice its index tuple addresses, in
// index order: reduction none writes it (a repeated tuple keeps the last; ONNX leaves that order
// undefined), add / mul / max / min combine it with what is there (max / min propagate NaN, as
// numpy's maximum / minimum; on bool add and max are `or`, mul and min `and`).
void ScatterND_forward(KernelCtx& c) {
  const TensorRef &data = c.in(0), &upd = c.in(2), &out = c.out(0);
  const NDSlices s = gather_nd_slices(c, *data.shape, *c.in(1).shape, 0, ref_ints(c.in(1)));
  copy_all(data, out);
  const std::string& reduction = c.node.s("reduction");
  const int64_t n = s.slice, tuples = int64_t(s.offset.size());
  if (reduction == "none") {
    const size_t es = dtype_size(data.dtype), row = size_t(n) * es;
    if (row == 0) return;
    for (int64_t t = 0; t < tuples; ++t)
      std::memcpy(static_cast<uint8_t*>(out.data) + size_t(s.offset[size_t(t)]) * es,
                  static_cast<const uint8_t*>(upd.data) + size_t(t) * row, row);
    return;
  }
  enum { add, mul, max, min } op;
  if (reduction == "add") op = add;
  else if (reduction == "mul") op = mul;
  else if (reduction == "max") op = max;
  else if (reduction == "min") op = min;
  else c.fail("reduction '{}' is not one of none, add, mul, max, min", reduction);
  dispatch_elem(data.dtype, [&]<class E>() {
    using T = typename E::T;
    auto combine = [&](T a, T b) -> T {
      if constexpr (E::kind == ElemKind::floating) {  // in double: one rounding to T, as T's own + and *
        const double x = E::to_f64(a), y = E::to_f64(b);
        if (op == add) return E::from_f64(x + y);
        if (op == mul) return E::from_f64(x * y);
        if (std::isnan(x) || std::isnan(y)) return E::from_f64(std::nan(""));
        return E::from_f64(op == max ? std::max(x, y) : std::min(x, y));
      } else {
        if (op == add) return T(a + b);
        if (op == mul) return T(a * b);
        return op == max ? std::max(a, b) : std::min(a, b);
      }
    };
    T* dst = out.as<T>();
    const T* src = upd.as<const T>();
    for (int64_t t = 0; t < tuples; ++t) {
      T* d = dst + s.offset[size_t(t)];
      const T* u = src + t * n;
      for (int64_t j = 0; j < n; ++j) d[j] = combine(d[j], u[j]);
    }
  });
}

void Expand_forward(KernelCtx& c) {
  // A channel-blocked output reads x through the storage shapes (exec/cpu/blocked.h).
  const auto s = blocked_output(c.node, 0) ? blocked_storages(c, 1) : std::vector<Shape>{};
  dispatch_bytes(dtype_size(c.in(0).dtype), [&]<class U>() {
    if (s.empty()) broadcast_map<U, U>(c.out(0), [](U v) { return v; }, c.in(0));
    else broadcast_map<U, U>(viewed_as(c.out(0), s[0]), [](U v) { return v; }, viewed_as(c.in(0), s[1]));
  });
}

// Tile's output [r0*d0, r1*d1, ...] is, row-major, the tensor [r0, d0, r1, d1, ...] whose
// element (k0, j0, k1, j1, ...) is in[j0, j1, ...]: a strided copy with stride 0 on the k dims.
void Tile_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  const int r = in.rank();
  std::vector<int64_t> in_st = row_major_strides(*in.shape);
  Shape shape;
  std::vector<int64_t> st;
  for (int d = 0; d < r; ++d) {
    const int64_t reps = in.dim(d) == 0 ? 0 : out.dim(d) / in.dim(d);
    shape.insert(shape.end(), {reps, in.dim(d)});
    st.insert(st.end(), {0, in_st[size_t(d)]});
  }
  strided_copy(in, out, shape, st, 0);
}

// Each output coordinate maps to an input coordinate per dim (or to the constant value, -1):
// constant: the padded border is the value; edge: the nearest element; reflect: mirrored without
// repeating the edge element; wrap: periodic. Negative pads crop.
void Pad_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  const int r = in.rank();
  const std::string& mode = c.node.s("mode");
  std::vector<int64_t> pads = ref_ints(c.in(1)), axes;
  if (c.has_in(3)) axes = ref_ints(c.in(3));
  std::vector<int64_t> amounts = pad_amounts(r, pads, c.has_in(3) ? &axes : nullptr, c.node);

  // The constant as the data's element bytes (opsets < 11 give an f32 value for any data dtype).
  uint64_t value_bits = 0;
  if (mode == "constant" && c.has_in(2) && c.in(2).numel > 0) {
    const TensorRef& v = c.in(2);
    if (v.dtype == in.dtype) {
      std::memcpy(&value_bits, v.data, dtype_size(in.dtype));
    } else {
      double x = dispatch_elem(v.dtype, [&]<class E>() { return E::to_f64(*static_cast<const typename E::T*>(v.data)); });
      dispatch_elem(in.dtype, [&]<class E>() {
        typename E::T t = E::from_f64(x);
        std::memcpy(&value_bits, &t, sizeof(t));
      });
    }
  }

  // map[d][o]: input index along dim d read by output index o, or -1 for the constant.
  std::vector<std::vector<int64_t>> map(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) {
    const int64_t n = in.dim(d), begin = amounts[size_t(d)];
    auto& m = map[size_t(d)];
    m.resize(size_t(out.dim(d)));
    for (int64_t o = 0; o < out.dim(d); ++o) {
      int64_t x = o - begin;
      if (x < 0 || x >= n) {
        if (mode == "constant") x = -1;
        else if (mode == "edge") x = x < 0 ? 0 : n - 1;
        else if (mode == "wrap") x = ((x % n) + n) % n;
        else if (n == 1) x = 0;  // reflect
        else {
          const int64_t period = 2 * (n - 1);
          x = ((x % period) + period) % period;
          if (x >= n) x = period - x;
        }
      }
      m[size_t(o)] = x;
    }
  }
  if (r == 0) return copy_all(in, out);
  const int64_t row = out.dim(r - 1);
  if (out.numel == 0) return;
  const int64_t rows = out.numel / row;
  const std::vector<int64_t> in_st = row_major_strides(*in.shape);
  dispatch_bytes(dtype_size(in.dtype), [&]<class U>() {
    U value;
    std::memcpy(&value, &value_bits, sizeof(U));
    const U* src = in.as<const U>();
    U* dst = out.as<U>();
    const auto& last = map[size_t(r - 1)];
    // The last dim's map as one run where it is one (constant mode, or nothing padded along it):
    // `lead` outputs of the value, then `len` consecutive inputs from `first` on, then the value to
    // the end; its rows are then two fills and a copy, not a lookup per element (rope_lm's Pads
    // of rows of 8 to 16: 60 us each a step, on rows of 16 elements).
    int64_t lead = 0, len = 0, first = 0;
    while (lead < row && last[size_t(lead)] < 0) ++lead;
    if (lead < row) first = last[size_t(lead)];
    while (lead + len < row && last[size_t(lead + len)] == first + len) ++len;
    bool one_run = true;
    for (int64_t j = lead + len; j < row; ++j) one_run &= last[size_t(j)] < 0;
    // Each thread's rows in order, their outer coordinates stepped as an odometer (a division per
    // dim per row took most of a Pad of short rows).
    split_rows(rows, out.numel > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
      std::vector<int64_t> at(size_t(r - 1));
      for (int64_t d = r - 2, rest = lo; d >= 0; --d) {
        at[size_t(d)] = rest % out.dim(int(d));
        rest /= out.dim(int(d));
      }
      for (int64_t i = lo; i < hi; ++i) {
        U* o = dst + i * row;
        int64_t off = 0;
        bool border = false;
        for (int d = 0; d + 1 < r; ++d) {
          const int64_t x = map[size_t(d)][size_t(at[size_t(d)])];
          if (x < 0) border = true;
          off += x * in_st[size_t(d)];
        }
        for (int d = r - 2; d >= 0 && ++at[size_t(d)] == out.dim(d); --d) at[size_t(d)] = 0;
        if (border) {
          std::fill(o, o + row, value);
        } else if (one_run) {
          std::fill(o, o + lead, value);
          std::copy(src + off + first, src + off + first + len, o + lead);
          std::fill(o + lead + len, o + row, value);
        } else {
          for (int64_t j = 0; j < row; ++j) o[j] = last[size_t(j)] < 0 ? value : src[off + last[size_t(j)]];
        }
      }
    });
  });
}

// Resize. Mode nearest: every output element copies the input element graph/resize.h picks, axis
// by axis (an odometer over the output, rows of the last axis at a time), any dtype. Modes linear
// and cubic: float tensors, interpolated in double one axis at a time (exec/cpu/resize_interp.h)
// and rounded once to the dtype.
void Resize_forward(KernelCtx& c) {
  const ResizeArgs args = resize_args(c, 1);
  const TensorRef &in = c.in(0), &out = c.out(0);
  if (c.node.s("mode") != "nearest") {
    const ResizeInterp rz = resize_interp(c.node, *in.shape, args.roi(), args.scales(), args.sizes());
    dispatch_elem(in.dtype, [&]<class E>() {
      if constexpr (E::kind != ElemKind::floating) {
        c.fail("mode '{}' interpolates float tensors, input 0 is {}", c.node.s("mode"), dtype_name(in.dtype));
      } else {
        const auto* src = in.as<const typename E::T>();
        std::vector<double> x(size_t(in.numel));
        for (int64_t i = 0; i < in.numel; ++i) x[size_t(i)] = E::to_f64(src[i]);
        const std::vector<double> y =
            resize_interp_forward(rz, *in.shape, std::move(x), double(c.node.f("extrapolation_value")));
        auto* dst = out.as<typename E::T>();
        for (int64_t i = 0; i < out.numel; ++i) dst[i] = E::from_f64(y[size_t(i)]);
      }
    });
    return;
  }
  const ResizeNearest rz = resize_nearest(c.node, *in.shape, args.roi(), args.scales(), args.sizes());
  const int r = in.rank();
  if (out.numel == 0) return;
  if (r == 0) return copy_all(in, out);
  std::vector<int64_t> in_stride(size_t(r), 1);
  for (int d = r - 2; d >= 0; --d) in_stride[size_t(d)] = in_stride[size_t(d + 1)] * in.dim(d + 1);
  const size_t es = dtype_size(in.dtype);
  const int64_t row = rz.out.back(), rows = out.numel / row;
  const auto& last = rz.src.back();
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  std::vector<int64_t> idx(size_t(r), 0);  // the output coordinates of the current row (last axis 0)
  for (int64_t q = 0; q < rows; ++q) {
    int64_t base = 0;
    for (int d = 0; d + 1 < r; ++d) base += rz.src[size_t(d)][size_t(idx[size_t(d)])] * in_stride[size_t(d)];
    char* o = dst + size_t(q * row) * es;
    for (int64_t j = 0; j < row; ++j) std::memcpy(o + size_t(j) * es, src + size_t(base + last[size_t(j)]) * es, es);
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < rz.out[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

// Keeps element (i, j) of each trailing [N, M] matrix where j - i >= k (upper) or j - i <= k
// (lower); the rest become 0.
void Trilu_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  const int r = in.rank();
  const int64_t k = c.has_in(1) ? ref_ints(c.in(1)).at(0) : 0;
  const bool upper = c.node.i("upper") != 0;
  const int64_t rows = in.dim(r - 2), cols = in.dim(r - 1);
  const int64_t mats = rows * cols == 0 ? 0 : in.numel / (rows * cols);
  dispatch_bytes(dtype_size(in.dtype), [&]<class U>() {
    const U* src = in.as<const U>();
    U* dst = out.as<U>();
    parallel_for(mats * rows, in.numel > parallel_min_elements(), [&](int64_t m) {
      const int64_t i = m % rows;
      for (int64_t j = 0; j < cols; ++j) {
        const bool keep = upper ? j - i >= k : j - i <= k;
        dst[m * cols + j] = keep ? src[m * cols + j] : U(0);
      }
    });
  });
}

// out [outer, depth, inner] = on where the index (indices viewed as [outer, inner], cast to int64,
// negative ones counting from the end) equals the position along depth, else off. An index outside
// [-depth, depth - 1] gives a row of off values (ONNX's OneHot).
void OneHot_forward(KernelCtx& c) {
  const TensorRef &idx = c.in(0), &out = c.out(0);
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(idx.rank()) + 1, c.node), depth = out.dim(int(axis));
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out.dim(int(d));
  const int64_t inner = depth ? out.numel / (outer * depth) : 0;
  const std::vector<int64_t> at = ref_ints(idx);
  dispatch_bytes(dtype_size(out.dtype), [&]<class U>() {
    const U off = c.in(2).as<const U>()[0], on = c.in(2).as<const U>()[1];
    U* dst = out.as<U>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = at[size_t(o * inner + i)];
        if (k < 0) k += depth;  // still < 0 when out of range: matches no position
        for (int64_t j = 0; j < depth; ++j) dst[(o * depth + j) * inner + i] = j == k ? on : off;
      }
  });
}

}  // namespace onnxdp
