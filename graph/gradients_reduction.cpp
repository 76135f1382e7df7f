// Gradient rules of the reduction ops (see graph/autodiff.h).
#include "graph/autodiff.h"

namespace onnxdp {

namespace {
// dy broadcast back over the reduced axes to the input's shape.
ValueId spread(GradCtx& c) {
  const Shape& s = c.in(0).shape;
  int64_t r = int64_t(s.size());
  std::vector<int64_t> axes;
  if (c.node.has_input(1)) axes = c.graph.value(c.in_id(1)).data.to_i64();
  Shape kept = s;
  if (axes.empty()) {
    if (c.node.i("noop_with_empty_axes")) return c.dy();
    for (auto& d : kept) d = 1;
  } else {
    for (int64_t a : axes) kept[size_t(normalize_axis(a, r, c.node))] = 1;
  }
  ValueId g = c.emit(Op::Reshape, {c.dy(), c.ints(kept)});
  return c.emit(Op::Expand, {g, c.ints(s)});
}
}  // namespace

void grad_ReduceSum(GradCtx& c) { c.add(0, spread(c)); }

void grad_ReduceMean(GradCtx& c) {
  int64_t n_in = shape_numel(c.in(0).shape), n_out = shape_numel(c.graph.value(c.out_id(0)).shape);
  ValueId g = spread(c);
  if (n_out != n_in) g = c.emit(Op::Mul, {g, c.scalar(float(double(n_out) / double(n_in)), c.in(0).dtype)});
  c.add(0, g);
}

void grad_ReduceMax(GradCtx& c) { gradient_missing(c); }

}  // namespace onnxdp
