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

}  // namespace onnxdp
