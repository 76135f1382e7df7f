// Shape rules of the reduction ops (see graph/op_table.h).
#include "graph/graph.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

namespace {

// Reduced dims become 1 (keepdims) or disappear; with noop_with_empty_axes and no axes the
// output is the input.
void shape_reduce(ShapeCtx& c, bool allow_bool) {
  const Shape& in = c.shape(0);
  if (c.dtype(0) == DType::boolean && !allow_bool) c.fail("input 0 is bool, which this reduction does not take");
  std::vector<int64_t> axes;
  if (c.has(1)) {
    const Tensor& t = c.require_constant(1, "axes");
    if (!dtype_is_integer(t.dtype())) c.fail("input 1 (the axes) must be int64, it is {}", dtype_name(t.dtype()));
    if (t.rank() > 1) c.fail("input 1 (the axes) must be 1-D, it has shape {}", shape_str(t.shape()));
    axes = t.to_i64();
  }
  std::vector<char> red = reduced_dims(int64_t(in.size()), c.has(1) ? &axes : nullptr,
                                       c.node.i("noop_with_empty_axes") != 0, c.node);
  const bool keep = c.node.i("keepdims") != 0;
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!red[d]) out.push_back(in[d]);
    else if (keep) out.push_back(1);
  }
  c.set(0, c.dtype(0), out);
}

}  // namespace

void shape_ReduceMean(ShapeCtx& c) { shape_reduce(c, false); }
void shape_ReduceSum(ShapeCtx& c) { shape_reduce(c, false); }
void shape_ReduceMax(ShapeCtx& c) { shape_reduce(c, true); }
void shape_ReduceMin(ShapeCtx& c) { shape_reduce(c, true); }
void shape_ReduceProd(ShapeCtx& c) { shape_reduce(c, false); }

// ArgMax / ArgMin: int64 indices along `axis`, which becomes 1 (keepdims) or disappears.
static void shape_arg(ShapeCtx& c) {
  if (c.dtype(0) == DType::boolean) c.fail("input 0 is bool; {} takes numbers", op_name(c.node.op));
  Shape out = c.shape(0);
  const int64_t r = int64_t(out.size());
  if (r == 0) c.fail("input 0 is a scalar; {} needs an axis", op_name(c.node.op));
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  if (out[size_t(axis)] == 0) c.fail("axis {} has no elements to pick from", axis);
  if (c.node.i("keepdims")) out[size_t(axis)] = 1;
  else out.erase(out.begin() + axis);
  c.set(0, DType::i64, out);
}
void shape_ArgMax(ShapeCtx& c) { shape_arg(c); }
void shape_ArgMin(ShapeCtx& c) { shape_arg(c); }

// TopK(x, K: known, one int64 element) -> values (x's dtype) and int64 indices, x's shape with
// K along `axis`; 0 <= K <= the axis' size.
void shape_TopK(ShapeCtx& c) {
  if (c.dtype(0) == DType::boolean) c.fail("input 0 is bool; TopK takes numbers");
  Shape out = c.shape(0);
  if (out.empty()) c.fail("input 0 is a scalar; TopK needs an axis");
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(out.size()), c.node);
  const Tensor& kt = c.require_constant(1, "K");
  if (!dtype_is_integer(kt.dtype()) || kt.numel() != 1 || kt.rank() > 1)
    c.fail("input 1 (K) must be one int64 element, it is {} of shape {}", dtype_name(kt.dtype()), shape_str(kt.shape()));
  const int64_t k = kt.to_i64()[0];
  if (k < 0 || k > out[size_t(axis)])
    c.fail("K = {} is outside [0, {}] (the size of axis {} of {})", k, out[size_t(axis)], axis, shape_str(out));
  out[size_t(axis)] = k;
  c.set(0, c.dtype(0), out);
  c.set(1, DType::i64, out);
}

}  // namespace onnxdp
