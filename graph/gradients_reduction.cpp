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

// The reduced axes, normalised (all of them when none are given), and the input's shape with them
// kept as 1; false for noop_with_empty_axes without axes (the identity).
bool reduced_axes(GradCtx& c, std::vector<int64_t>& axes, Shape& kept) {
  const Shape& s = c.in(0).shape;
  const int64_t r = int64_t(s.size());
  if (c.node.has_input(1)) axes = c.graph.value(c.in_id(1)).data.to_i64();
  if (axes.empty() && c.node.i("noop_with_empty_axes")) return false;
  kept = s;
  if (axes.empty()) {
    for (auto& d : kept) d = 1;
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  } else {
    for (int64_t& a : axes) {
      a = normalize_axis(a, r, c.node);
      kept[size_t(a)] = 1;
    }
  }
  return true;
}
}  // namespace

void grad_ReduceSum(GradCtx& c) { c.add(0, spread(c)); }

void grad_ReduceMean(GradCtx& c) {
  int64_t n_in = shape_numel(c.in(0).shape), n_out = shape_numel(c.graph.value(c.out_id(0)).shape);
  ValueId g = spread(c);
  if (n_out != n_in) g = c.emit(Op::Mul, {g, c.scalar(float(double(n_out) / double(n_in)), c.in(0).dtype)});
  c.add(0, g);
}

// dy goes to the elements equal to the maximum (minimum), split evenly among ties (as torch.amax,
// torch.amin): dx = Where(x == y, dy / count, 0) with y, dy and count kept as [.., 1, ..] over
// the reduced axes.
void grad_ReduceMax(GradCtx& c) {
  std::vector<int64_t> axes;
  Shape kept;
  if (!reduced_axes(c, axes, kept)) {  // the identity
    c.add(0, c.dy());
    return;
  }
  const DType t = c.in(0).dtype;
  auto keep = [&](ValueId v) { return c.graph.value(v).shape == kept ? v : c.emit(Op::Reshape, {v, c.ints(kept)}); };
  ValueId hit = c.emit(Op::Equal, {c.in_id(0), keep(c.out_id(0))});
  ValueId ones = c.emit(Op::Cast, {hit}, {{"to", Attr(int64_t(dtype_to_onnx(t)))}});
  ValueId count = c.emit(Op::ReduceSum, {ones, c.ints(axes)}, {{"keepdims", Attr(int64_t(1))}});
  ValueId share = c.emit(Op::Div, {keep(c.dy()), count});
  c.add(0, c.emit(Op::Where, {hit, share, c.scalar(0, t)}));
}

void grad_ReduceMin(GradCtx& c) { grad_ReduceMax(c); }

// dx_i = dy * (the product of the other elements of x_i's set), as torch.prod's backward, zeros
// included and without dividing by them: where x_i != 0 it is y / x_i; where x_i == 0 it is the
// product of the set's non-zero elements if x_i is the set's only zero, else 0.
void grad_ReduceProd(GradCtx& c) {
  std::vector<int64_t> axes;
  Shape kept;
  if (!reduced_axes(c, axes, kept)) {  // the identity
    c.add(0, c.dy());
    return;
  }
  const DType t = c.in(0).dtype;
  const ValueId x = c.in_id(0);
  auto keep = [&](ValueId v) { return c.graph.value(v).shape == kept ? v : c.emit(Op::Reshape, {v, c.ints(kept)}); };
  const std::map<std::string, Attr> keepdims = {{"keepdims", Attr(int64_t(1))}};
  ValueId zero = c.emit(Op::Equal, {x, c.scalar(0, t)});
  ValueId zeros = c.emit(Op::ReduceSum, {c.emit(Op::Cast, {zero}, {{"to", Attr(int64_t(dtype_to_onnx(t)))}}), c.ints(axes)},
                         keepdims);
  ValueId nonzero_prod = c.emit(Op::ReduceProd, {c.emit(Op::Where, {zero, c.scalar(1, t), x}), c.ints(axes)}, keepdims);
  ValueId at_zero = c.emit(Op::Where, {c.emit(Op::Equal, {zeros, c.scalar(1, t)}), nonzero_prod, c.scalar(0, t)});
  ValueId others = c.emit(Op::Where, {zero, at_zero, c.emit(Op::Div, {keep(c.out_id(0)), x})});
  c.add(0, c.emit(Op::Mul, {keep(c.dy()), others}));
}

void grad_ArgMax(GradCtx& c) { no_gradient(c); }
void grad_ArgMin(GradCtx& c) { no_gradient(c); }

// values = GatherElements(x, indices, axis): dy added at the picked elements. The indices output
// has no gradient.
void grad_TopK(GradCtx& c) {
  if (!c.needs(0) || c.dy(0) == kNoValue) return;
  c.add(0, c.emit(Op::GatherElementsGrad, {c.dy(0), c.out_id(1), c.ints(c.in(0).shape)},
                  {{"axis", Attr(c.node.i("axis"))}}));
}

}  // namespace onnxdp
