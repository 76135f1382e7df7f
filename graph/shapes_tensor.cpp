// Shape rules of the tensor ops (see graph/op_table.h), and the helpers of graph/shape_helpers.h.
#include <algorithm>

#include "graph/checked.h"
#include "graph/graph.h"
#include "graph/resize.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

// ---- helpers shared with the kernels (graph/shape_helpers.h) ----------------------------------

std::vector<int64_t> shape_op_dims(const Shape& in, const Node& n) {
  const int64_t r = int64_t(in.size());
  int64_t start = n.i("start"), end = n.has("end") ? n.i("end") : r;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  if (start >= end) return {};
  return std::vector<int64_t>(in.begin() + start, in.begin() + end);
}

std::vector<SliceDim> slice_plan(const Shape& in, const std::vector<int64_t>& starts,
                                 const std::vector<int64_t>& ends, const std::vector<int64_t>* axes,
                                 const std::vector<int64_t>* steps, const Node& n) {
  const int64_t r = int64_t(in.size());
  const size_t k = starts.size();
  if (ends.size() != k)
    fail("{}: starts has {} values, ends {}; they must have the same length", n.describe(), k, ends.size());
  if (axes && axes->size() != k)
    fail("{}: axes has {} values, starts {}; they must have the same length", n.describe(), axes->size(), k);
  if (steps && steps->size() != k)
    fail("{}: steps has {} values, starts {}; they must have the same length", n.describe(), steps->size(), k);
  if (!axes && int64_t(k) > r)
    fail("{}: {} starts for an input of rank {}", n.describe(), k, r);

  std::vector<SliceDim> plan(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) plan[size_t(d)] = {0, 1, in[size_t(d)]};
  std::vector<char> seen(size_t(r), 0);
  for (size_t i = 0; i < k; ++i) {
    const int64_t axis = axes ? normalize_axis((*axes)[i], r, n) : int64_t(i);
    if (seen[size_t(axis)]) fail("{}: axis {} appears more than once in axes", n.describe(), axis);
    seen[size_t(axis)] = 1;
    const int64_t step = steps ? (*steps)[i] : 1;
    if (step == 0) fail("{}: steps must not be 0 (axis {})", n.describe(), axis);
    const int64_t dim = in[size_t(axis)];
    // Negative indices count from the back; then clamp to the valid range for the direction:
    // [0, dim] going forward, [-1, dim - 1] going backward (-1 is "before the first element").
    // Adding dim to INT64_MIN-like sentinels cannot overflow (dim >= 0).
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t count;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count = e > s ? ceil_div(e - s, step) : 0;
    } else {
      s = std::clamp<int64_t>(s, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      // -INT64_MIN does not exist; any step at least as long as the dim takes one element.
      count = s > e ? ceil_div(s - e, step == INT64_MIN ? INT64_MAX : -step) : 0;
    }
    plan[size_t(axis)] = {count > 0 ? s : 0, step, count};
  }
  return plan;
}

std::vector<int64_t> pad_amounts(int64_t rank, const std::vector<int64_t>& pads, const std::vector<int64_t>* axes,
                                 const Node& n) {
  std::vector<int64_t> ax;
  if (axes) {
    for (int64_t a : *axes) ax.push_back(normalize_axis(a, rank, n));
  } else {
    for (int64_t a = 0; a < rank; ++a) ax.push_back(a);
  }
  const size_t k = ax.size();
  if (pads.size() != 2 * k)
    fail("{}: pads has {} values, expected {} (2 x {} axes)", n.describe(), pads.size(), 2 * k, k);
  std::vector<int64_t> amounts(size_t(2 * rank), 0);
  std::vector<char> seen(size_t(rank), 0);
  for (size_t i = 0; i < k; ++i) {
    if (seen[size_t(ax[i])]) fail("{}: axis {} appears more than once in axes", n.describe(), ax[i]);
    seen[size_t(ax[i])] = 1;
    amounts[size_t(ax[i])] = pads[i];
    amounts[size_t(rank + ax[i])] = pads[k + i];
  }
  return amounts;
}

std::vector<char> reduced_dims(int64_t rank, const std::vector<int64_t>* axes, bool noop_with_empty_axes,
                               const Node& n) {
  std::vector<char> red(size_t(rank), 0);
  if (!axes || axes->empty()) {
    if (!noop_with_empty_axes) std::fill(red.begin(), red.end(), 1);
    return red;
  }
  for (int64_t a : *axes) {
    int64_t d = normalize_axis(a, rank, n);
    if (red[size_t(d)]) fail("{}: axis {} appears more than once in axes", n.describe(), a);
    red[size_t(d)] = 1;
  }
  return red;
}

// ---- shape rules ------------------------------------------------------------------------------

namespace {

// A 1-D (or scalar) integer constant input as int64 values.
std::vector<int64_t> const_ints(ShapeCtx& c, int k, const char* what) {
  const Tensor& t = c.require_constant(k, what);
  if (!dtype_is_integer(t.dtype()))
    c.fail("input {} (the {}) must be an integer tensor, it is {}", k, what, dtype_name(t.dtype()));
  if (t.rank() > 1) c.fail("input {} (the {}) must be 1-D, it has shape {}", k, what, shape_str(t.shape()));
  return t.to_i64();
}

void require_index_type(ShapeCtx& c, int k, const char* what) {
  DType t = c.dtype(k);
  if (t != DType::i64 && t != DType::i32)
    c.fail("input {} (the {}) must be int64 or int32, it is {}", k, what, dtype_name(t));
}

}  // namespace

void shape_Identity(ShapeCtx& c) { c.set(0, c.dtype(0), c.shape(0)); }

void shape_Cast(ShapeCtx& c) {
  int64_t to = c.node.i("to");
  DType t;
  if (!dtype_from_onnx(int(to), &t))
    c.fail("cast to {} is not supported; onnxdp holds f32, f64, f16, bf16, i64, i32, i8, u8 and bool",
           onnx_type_name(int(to)));
  c.set(0, t, c.shape(0));
}

// CastLike: input 0 converted to input 1's dtype (the dynamo exporter's and ONNX functions' form).
void shape_CastLike(ShapeCtx& c) { c.set(0, c.dtype(1), c.shape(0)); }

void shape_Shape(ShapeCtx& c) {
  c.set(0, DType::i64, {int64_t(shape_op_dims(c.shape(0), c.node).size())});
}

void shape_Size(ShapeCtx& c) { c.set(0, DType::i64, {}); }  // folded to a constant (graph/passes/fold.cpp)

void shape_Flatten(ShapeCtx& c) {
  const Shape& s = c.shape(0);
  const int64_t r = int64_t(s.size());
  int64_t axis = c.node.i("axis");
  if (axis < -r || axis > r) c.fail("axis {} is out of range for rank {} (allowed {}..{})", axis, r, -r, r);
  if (axis < 0) axis += r;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? outer : inner) *= s[size_t(d)];
  c.set(0, c.dtype(0), {outer, inner});
}

void shape_Reshape(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  std::vector<int64_t> spec = const_ints(c, 1, "target shape");
  const bool allowzero = c.node.i("allowzero") != 0;
  Shape out(spec.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == -1) {
      if (infer >= 0) c.fail("target shape {} has more than one -1", shape_str(spec));
      infer = int(i);
      continue;
    }
    if (d == 0 && !allowzero) {
      if (i >= in.size())
        c.fail("target shape {} copies dim {} (a 0) but the input {} has rank {}", shape_str(spec), i,
               shape_str(in), in.size());
      d = in[i];
    }
    if (d < 0) c.fail("target shape {} has the invalid dim {}", shape_str(spec), d);
    out[i] = d;
    known = checked_mul(known, d, "the product of the target shape's dims");
  }
  const int64_t numel = shape_numel(in);
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      c.fail("cannot reshape {} ({} elements) to {}: the -1 dim cannot be inferred", shape_str(in), numel,
             shape_str(spec));
    out[size_t(infer)] = numel / known;
  } else if (known != numel) {
    c.fail("cannot reshape {} ({} elements) to {} ({} elements)", shape_str(in), numel, shape_str(out), known);
  }
  c.set(0, c.dtype(0), out);
}

void shape_Transpose(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  const int64_t r = int64_t(in.size());
  std::vector<int64_t> perm;
  if (c.node.has("perm")) {
    perm = c.node.ints("perm");
  } else {
    for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  }
  if (int64_t(perm.size()) != r) c.fail("perm {} has {} values for an input of rank {}", shape_str(perm), perm.size(), r);
  std::vector<char> seen(size_t(r), 0);
  Shape out(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    int64_t p = perm[size_t(d)];
    if (p < 0 || p >= r || seen[size_t(p)]) c.fail("perm {} is not a permutation of 0..{}", shape_str(perm), r - 1);
    seen[size_t(p)] = 1;
    out[size_t(d)] = in[size_t(p)];
  }
  c.set(0, c.dtype(0), out);
}

void shape_Squeeze(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  const int64_t r = int64_t(in.size());
  std::vector<char> drop(size_t(r), 0);
  if (c.has(1)) {
    for (int64_t a : const_ints(c, 1, "axes")) {
      int64_t d = normalize_axis(a, r, c.node);
      if (in[size_t(d)] != 1) c.fail("cannot squeeze axis {}: the input {} has size {} there", a, shape_str(in), in[size_t(d)]);
      drop[size_t(d)] = 1;
    }
  } else {
    for (int64_t d = 0; d < r; ++d) drop[size_t(d)] = in[size_t(d)] == 1;
  }
  Shape out;
  for (int64_t d = 0; d < r; ++d)
    if (!drop[size_t(d)]) out.push_back(in[size_t(d)]);
  c.set(0, c.dtype(0), out);
}

void shape_Unsqueeze(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  std::vector<int64_t> axes = const_ints(c, 1, "axes");
  const int64_t r = int64_t(in.size() + axes.size());
  std::vector<char> ins(size_t(r), 0);
  for (int64_t a : axes) {
    int64_t d = normalize_axis(a, r, c.node);
    if (ins[size_t(d)]) c.fail("axis {} appears more than once in axes", a);
    ins[size_t(d)] = 1;
  }
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < r; ++d) out.push_back(ins[size_t(d)] ? 1 : in[next++]);
  c.set(0, c.dtype(0), out);
}

void shape_Concat(ShapeCtx& c) {
  const Shape& first = c.shape(0);
  const int64_t r = int64_t(first.size());
  if (r == 0) c.fail("cannot concatenate scalars (input 0 has rank 0)");
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  Shape out = first;
  out[size_t(axis)] = 0;
  for (int k = 0; k < c.num_inputs(); ++k) {
    const Shape& s = c.shape(k);
    if (c.dtype(k) != c.dtype(0)) c.fail("input {} is {}, input 0 is {}", k, dtype_name(c.dtype(k)), dtype_name(c.dtype(0)));
    if (int64_t(s.size()) != r) c.fail("input {} has shape {}, input 0 {}: ranks differ", k, shape_str(s), shape_str(first));
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && s[size_t(d)] != first[size_t(d)])
        c.fail("input {} has shape {}, input 0 {}: they differ in dim {}, not only in the axis {}", k, shape_str(s),
               shape_str(first), d, axis);
    out[size_t(axis)] = checked_add(out[size_t(axis)], s[size_t(axis)], "the concatenated dim");
  }
  c.set(0, c.dtype(0), out);
}

void shape_Split(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(in.size()), c.node);
  const int64_t dim = in[size_t(axis)];
  const int64_t n = int64_t(c.node.outputs.size());
  std::vector<int64_t> sizes;
  // (An empty sizes tensor, which some exporters write, means "not given".)
  if (c.has(1) && shape_numel(c.shape(1)) > 0) {
    sizes = const_ints(c, 1, "split sizes");
    if (int64_t(sizes.size()) != n) c.fail("split has {} sizes for {} outputs", sizes.size(), n);
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) c.fail("split sizes {} include a negative size", shape_str(sizes));
      sum = checked_add(sum, s, "the sum of the split sizes");
    }
    if (sum != dim) c.fail("split sizes {} add up to {}, the input has {} along axis {}", shape_str(sizes), sum, dim, axis);
  } else if (c.node.has("num_outputs")) {
    // Opset 18: ceil(dim / n) per chunk, the last one smaller when dim does not divide evenly.
    const int64_t parts = c.node.i("num_outputs");
    if (parts != n) c.fail("num_outputs is {} but the node has {} outputs", parts, n);
    if (parts <= 0) c.fail("num_outputs must be positive, it is {}", parts);
    const int64_t chunk = ceil_div(dim, parts);
    int64_t left = dim;
    for (int64_t k = 0; k < parts; ++k) {
      sizes.push_back(std::min(chunk, left));
      left -= sizes.back();
    }
    if (parts > 1 && sizes.back() == 0 && dim % parts != 0)
      c.fail("cannot split {} elements of axis {} into {} parts", dim, axis, parts);
  } else {
    if (dim % n != 0) c.fail("cannot split {} elements of axis {} into {} equal parts", dim, axis, n);
    sizes.assign(size_t(n), dim / n);
  }
  for (int64_t k = 0; k < n; ++k) {
    Shape s = in;
    s[size_t(axis)] = sizes[size_t(k)];
    c.set(int(k), c.dtype(0), s);
  }
}

void shape_Slice(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  std::vector<int64_t> starts = const_ints(c, 1, "starts"), ends = const_ints(c, 2, "ends");
  std::vector<int64_t> axes, steps;
  if (c.has(3)) axes = const_ints(c, 3, "axes");
  if (c.has(4)) steps = const_ints(c, 4, "steps");
  auto plan = slice_plan(in, starts, ends, c.has(3) ? &axes : nullptr, c.has(4) ? &steps : nullptr, c.node);
  Shape out;
  for (const SliceDim& d : plan) out.push_back(d.count);
  c.set(0, c.dtype(0), out);
}

void shape_Gather(ShapeCtx& c) {
  const Shape& data = c.shape(0);
  const Shape& idx = c.shape(1);
  require_index_type(c, 1, "indices");
  if (data.empty()) c.fail("cannot gather from a scalar (input 0 has rank 0)");
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(data.size()), c.node);
  if (const Tensor* t = c.constant(1)) {  // known indices: report a bad one now, not at run time
    const int64_t dim = data[size_t(axis)];
    std::vector<int64_t> v = t->to_i64();
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] < -dim || v[i] >= dim)
        c.fail("index {} (element {} of the indices) is out of range for axis {} of size {}", v[i], i, axis, dim);
  }
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  c.set(0, c.dtype(0), out);
}

void shape_Expand(ShapeCtx& c) {
  std::vector<int64_t> target = const_ints(c, 1, "target shape");
  for (int64_t d : target)
    if (d < 0) c.fail("target shape {} has a negative dim", shape_str(target));
  Shape out;
  try {
    out = broadcast_shapes(c.shape(0), target);
  } catch (const Error&) {
    c.fail("input shape {} cannot be expanded to {} (numpy broadcasting)", shape_str(c.shape(0)), shape_str(target));
  }
  c.set(0, c.dtype(0), out);
}

void shape_Tile(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  std::vector<int64_t> reps = const_ints(c, 1, "repeats");
  if (reps.size() != in.size()) c.fail("repeats has {} values for an input of rank {}", reps.size(), in.size());
  Shape out(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    if (reps[d] < 0) c.fail("repeats {} has a negative value", shape_str(reps));
    out[d] = checked_mul(in[d], reps[d], "a tiled dim (dim * repeats)");
  }
  c.set(0, c.dtype(0), out);
}

void shape_Pad(ShapeCtx& c) {
  const Shape& in = c.shape(0);
  const int64_t r = int64_t(in.size());
  const std::string& mode = c.node.s("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    c.fail("mode '{}' is not one of constant, reflect, edge, wrap", mode);
  std::vector<int64_t> pads = const_ints(c, 1, "pads"), axes;
  if (c.has(3)) axes = const_ints(c, 3, "axes");
  if (c.has(2) && shape_numel(c.shape(2)) != 1)
    c.fail("constant_value must hold one value, it has shape {}", shape_str(c.shape(2)));
  std::vector<int64_t> amounts = pad_amounts(r, pads, c.has(3) ? &axes : nullptr, c.node);
  Shape out(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const int64_t b = amounts[size_t(d)], e = amounts[size_t(r + d)];
    out[size_t(d)] = checked_add(checked_add(in[size_t(d)], b, "a padded dim"), e, "a padded dim");
    if (out[size_t(d)] < 0) c.fail("pads {} remove more than the {} elements of dim {}", shape_str(pads), in[size_t(d)], d);
    if (mode != "constant" && in[size_t(d)] == 0 && (b > 0 || e > 0))
      c.fail("mode '{}' cannot pad dim {}, which is empty", mode, d);
  }
  c.set(0, c.dtype(0), out);
}

// Resize: roi (with tf_crop_and_resize), scales and sizes must be known; linear and cubic
// interpolate float tensors (graph/resize.h says what else is refused).
void shape_Resize(ShapeCtx& c) {
  auto known = [&](int k, const char* what) { return c.has(k) ? &c.require_constant(k, what) : nullptr; };
  const bool crop = c.node.s("coordinate_transformation_mode") == "tf_crop_and_resize";
  const Tensor* roi = crop ? known(1, "roi") : nullptr;
  const Tensor *scales = known(2, "scales"), *sizes = known(3, "sizes");
  const std::string& mode = c.node.s("mode");
  if (mode != "nearest" && !dtype_is_float(c.dtype(0)))
    c.fail("mode '{}' interpolates float tensors, input 0 is {}", mode, dtype_name(c.dtype(0)));
  c.set(0, c.dtype(0), resize_output_shape(c.node, c.shape(0), roi, scales, sizes));
}

Shape gather_nd_shape(const Shape& data, const Shape& indices, int64_t batch_dims, const Node& n) {
  const int64_t r = int64_t(data.size()), q = int64_t(indices.size()), b = batch_dims;
  if (r < 1 || q < 1) fail("{}: the data {} and the indices {} must have rank >= 1", n.describe(), shape_str(data), shape_str(indices));
  if (b < 0 || b >= std::min(r, q))
    fail("{}: batch_dims {} must be in [0, {}) for data {} and indices {}", n.describe(), b, std::min(r, q),
         shape_str(data), shape_str(indices));
  const int64_t k = indices.back();
  if (k < 1 || k > r - b)
    fail("{}: the index tuples have {} values (the indices' last dim, {}); expected 1 to {} (the data {} less {} "
         "batch dims)",
         n.describe(), k, shape_str(indices), r - b, shape_str(data), b);
  Shape out;
  for (int64_t d = 0; d < b; ++d) {
    if (data[size_t(d)] != indices[size_t(d)])
      fail("{}: batch dim {} differs: the data {} and the indices {}", n.describe(), d, shape_str(data), shape_str(indices));
    out.push_back(data[size_t(d)]);
  }
  for (int64_t d = b; d < q - 1; ++d) out.push_back(indices[size_t(d)]);
  for (int64_t d = b + k; d < r; ++d) out.push_back(data[size_t(d)]);
  return out;
}

void shape_GatherND(ShapeCtx& c) {
  if (c.dtype(1) != DType::i64 && c.dtype(1) != DType::i32)
    c.fail("input 1 (the indices) must be int64 or int32, it is {}", dtype_name(c.dtype(1)));
  c.set(0, c.dtype(0), gather_nd_shape(c.shape(0), c.shape(1), c.node.i("batch_dims"), c.node));
}

// ScatterND(data, indices [.., k], updates [indices[:-1] + data[k:]]) -> data's shape.
void shape_ScatterND(ShapeCtx& c) {
  const std::string& reduction = c.node.s("reduction");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
    c.fail("reduction '{}' is not one of none, add, mul, max, min", reduction);
  if (c.dtype(1) != DType::i64 && c.dtype(1) != DType::i32)
    c.fail("input 1 (the indices) must be int64 or int32, it is {}", dtype_name(c.dtype(1)));
  if (c.dtype(2) != c.dtype(0))
    c.fail("the updates are {}, the data {}: they must have one dtype", dtype_name(c.dtype(2)), dtype_name(c.dtype(0)));
  const Shape want = gather_nd_shape(c.shape(0), c.shape(1), 0, c.node);
  if (c.shape(2) != want)
    c.fail("the updates have shape {}; the indices {} on the data {} need {}", shape_str(c.shape(2)), shape_str(c.shape(1)),
           shape_str(c.shape(0)), shape_str(want));
  c.set(0, c.dtype(0), c.shape(0));
}

// GatherElements(data, indices): the output has the indices' shape (same rank as the data; along
// the other axes no larger than the data).
void shape_GatherElements(ShapeCtx& c) {
  const Shape &d = c.shape(0), &i = c.shape(1);
  if (c.dtype(1) != DType::i64 && c.dtype(1) != DType::i32)
    c.fail("input 1 (the indices) must be int64 or int32, it is {}", dtype_name(c.dtype(1)));
  if (d.size() != i.size() || d.empty())
    c.fail("the indices {} must have the data's rank ({}), at least 1", shape_str(i), shape_str(d));
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(d.size()), c.node);
  for (size_t k = 0; k < d.size(); ++k)
    if (int64_t(k) != axis && i[k] > d[k])
      c.fail("the indices {} are larger than the data {} on axis {}", shape_str(i), shape_str(d), k);
  c.set(0, c.dtype(0), i);
}

void shape_Trilu(ShapeCtx& c) {
  if (c.shape(0).size() < 2) c.fail("input 0 must have rank >= 2, it has shape {}", shape_str(c.shape(0)));
  if (c.has(1)) {
    require_index_type(c, 1, "k");
    if (shape_numel(c.shape(1)) != 1) c.fail("k must hold one value, it has shape {}", shape_str(c.shape(1)));
  }
  c.set(0, c.dtype(0), c.shape(0));
}

// OneHot(indices [S], depth (one known element), values [2]) -> values' dtype, [S] with a dim of
// size depth inserted at `axis` (-rank(S)-1 .. rank(S)). Non-integer indices and depth are cast
// to int64 (truncated), as ONNX says.
void shape_OneHot(ShapeCtx& c) {
  if (c.dtype(0) == DType::boolean) c.fail("input 0 (the indices) is bool; OneHot takes numbers");
  const Tensor& d = c.require_constant(1, "depth");
  if (d.numel() != 1 || d.rank() > 1)
    c.fail("input 1 (the depth) must be a scalar or hold one element, it has shape {}", shape_str(d.shape()));
  if (d.dtype() == DType::boolean) c.fail("input 1 (the depth) is bool; it must be a number");
  const int64_t depth = d.to_i64()[0];
  if (depth < 1) c.fail("depth {} must be at least 1", depth);
  if (c.shape(2).size() != 1 || c.shape(2)[0] != 2)
    c.fail("input 2 (the values [off, on]) must have shape [2], it has shape {}", shape_str(c.shape(2)));
  Shape out = c.shape(0);
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(out.size()) + 1, c.node);
  out.insert(out.begin() + axis, depth);
  c.set(0, c.dtype(2), out);
}

}  // namespace onnxdp
