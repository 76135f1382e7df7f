// Gradient rules of the tensor ops (see graph/autodiff.h).
#include <algorithm>
#include <limits>

#include "graph/autodiff.h"
#include "graph/resize.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

namespace {
// Ops that only re-view their input's elements in the same order: the gradient is dy re-viewed.
// allowzero: a 0 in the target shape is a zero-size dim, not "keep the input's dim".
void reshape_back(GradCtx& c) {
  c.add(0, c.emit(Op::Reshape, {c.dy(), c.ints(c.in(0).shape)}, {{"allowzero", Attr(int64_t(1))}}));
}
}  // namespace

void grad_Identity(GradCtx& c) { c.add(0, c.dy()); }

void grad_Cast(GradCtx& c) {
  c.add(0, c.emit(Op::Cast, {c.dy()}, {{"to", Attr(int64_t(dtype_to_onnx(c.in(0).dtype)))}}));
}

void grad_CastLike(GradCtx& c) {  // input 1 gives only its dtype
  if (c.needs(0)) grad_Cast(c);
}

void grad_Shape(GradCtx& c) { no_gradient(c); }
void grad_Size(GradCtx& c) { no_gradient(c); }
void grad_Flatten(GradCtx& c) { reshape_back(c); }
void grad_Reshape(GradCtx& c) { if (c.needs(0)) reshape_back(c); }
void grad_Squeeze(GradCtx& c) { if (c.needs(0)) reshape_back(c); }
void grad_Unsqueeze(GradCtx& c) { if (c.needs(0)) reshape_back(c); }

void grad_Transpose(GradCtx& c) {
  size_t r = c.in(0).shape.size();
  std::vector<int64_t> perm = c.node.has("perm") ? c.node.ints("perm") : std::vector<int64_t>();
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(int64_t(r - 1 - i));
  std::vector<int64_t> inv(r);
  for (size_t i = 0; i < r; ++i) inv[size_t(perm[i])] = int64_t(i);
  c.add(0, c.emit(Op::Transpose, {c.dy()}, {{"perm", Attr(inv)}}));
}

void grad_Concat(GradCtx& c) {  // each input's slice of dy along axis
  int64_t axis = normalize_axis(c.node.i("axis"), int64_t(c.in(0).shape.size()), c.node);
  int64_t start = 0;
  for (int k = 0; k < int(c.node.inputs.size()); ++k) {
    int64_t len = c.in(k).shape[size_t(axis)];
    if (c.needs(k))
      c.add(k, c.emit(Op::Slice, {c.dy(), c.ints({start}), c.ints({start + len}), c.ints({axis})}));
    start += len;
  }
}

void grad_Split(GradCtx& c) {  // concatenation of the outputs' gradients, zeros where none
  int64_t axis = normalize_axis(c.node.i("axis"), int64_t(c.in(0).shape.size()), c.node);
  std::vector<ValueId> parts;
  for (size_t k = 0; k < c.node.outputs.size(); ++k) {
    ValueId g = c.dy(int(k));
    if (g == kNoValue) {
      const Value& o = c.graph.value(c.out_id(int(k)));
      g = c.constant(Tensor(o.dtype, o.shape));
    }
    parts.push_back(g);
  }
  c.add(0, parts.size() == 1 ? parts[0] : c.emit(Op::Concat, parts, {{"axis", Attr(axis)}}));
}

// Output element j along dim d read input index start_d + j * step_d (graph/shape_helpers.h): dy
// goes back to those positions, zeros elsewhere. Per dim: a negative step reverses dy (then the
// positions ascend from the last one read); a step s > 1 interleaves s - 1 zeros after each row
// (Reshape to [.., n, 1, ..], Pad to [.., n, s, ..], Reshape to [.., n*s, ..]); one Pad then
// places the rows at their first position (negative trailing pads crop the excess zeros).
void grad_Slice(GradCtx& c) {
  const Shape& s = c.in(0).shape;
  const int64_t r = int64_t(s.size());
  auto values = [&](int k) { return c.graph.value(c.in_id(k)).data.to_i64(); };
  const std::vector<int64_t> starts = values(1), ends = values(2);
  std::vector<int64_t> axes, steps;
  if (c.node.has_input(3)) axes = values(3);
  if (c.node.has_input(4)) steps = values(4);
  const std::vector<SliceDim> plan = slice_plan(s, starts, ends, c.node.has_input(3) ? &axes : nullptr,
                                                c.node.has_input(4) ? &steps : nullptr, c.node);
  for (const SliceDim& p : plan)
    if (p.count == 0) {  // nothing was read: the gradient is zero
      c.add(0, c.constant(Tensor(c.in(0).dtype, s)));
      return;
    }
  ValueId g = c.dy();
  std::vector<int64_t> pads(size_t(2 * r), 0);
  for (int64_t d = 0; d < r; ++d) {
    const SliceDim& p = plan[size_t(d)];
    int64_t first = p.start, step = p.step, len = p.count;
    if (step < 0) {
      if (p.count > 1)
        g = c.emit(Op::Slice, {g, c.ints({-1}), c.ints({std::numeric_limits<int64_t>::min()}), c.ints({d}),
                               c.ints({-1})});
      first = p.start + (p.count - 1) * step;
      step = -step;
    }
    if (step > 1 && p.count > 1) {
      const Shape gs = c.graph.value(g).shape;
      Shape split = gs;
      split.insert(split.begin() + d + 1, 1);
      std::vector<int64_t> interleave(size_t(2 * (r + 1)), 0);
      interleave[size_t(r + 1 + d + 1)] = step - 1;
      g = c.emit(Op::Pad, {c.emit(Op::Reshape, {g, c.ints(split)}), c.ints(interleave)});
      Shape merged = gs;
      merged[size_t(d)] = p.count * step;
      g = c.emit(Op::Reshape, {g, c.ints(merged)});
      len = p.count * step;
    }
    pads[size_t(d)] = first;
    pads[size_t(d + r)] = s[size_t(d)] - first - len;
  }
  if (std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v != 0; })) g = c.emit(Op::Pad, {g, c.ints(pads)});
  c.add(0, g);
}

// GatherGrad adds each row of dy into the row of data its index picked (repeats accumulate).
void grad_Gather(GradCtx& c) {
  if (!c.needs(0)) return;
  c.add(0, c.emit(Op::GatherGrad, {c.dy(), c.in_id(1), c.ints(c.in(0).shape)}, {{"axis", Attr(c.node.i("axis"))}}));
}

void grad_GatherElements(GradCtx& c) {
  if (!c.needs(0)) return;
  c.add(0, c.emit(Op::GatherElementsGrad, {c.dy(), c.in_id(1), c.ints(c.in(0).shape)}, {{"axis", Attr(c.node.i("axis"))}}));
}

// GatherNDGrad adds each dy slice into the data slice its index tuple picked (repeats accumulate).
void grad_GatherND(GradCtx& c) {
  if (!c.needs(0)) return;
  c.add(0, c.emit(Op::GatherNDGrad, {c.dy(), c.in_id(1), c.ints(c.in(0).shape)},
                  {{"batch_dims", Attr(c.node.i("batch_dims"))}}));
}

// ScatterND, reductions none and add: update slice t lands on the output slice its index tuple
// addresses, so d updates = GatherND(dy, indices). With add the data passes through (d data = dy);
// with none the written slices were overwritten (d data = dy with them zeroed: ScatterND of
// zeros). A tuple repeated under none: every one of its updates gets that slice's dy, though only
// the last written survives (ONNX leaves which one undefined; PyTorch's index_put backward does
// the same). mul, max and min have no gradient rule: the error names the reduction.
void grad_ScatterND(GradCtx& c) {
  const std::string& reduction = c.node.s("reduction");
  if (reduction != "none" && reduction != "add") {
    if (c.needs(0) || c.needs(2))
      c.fail("ScatterND with reduction '{}' has no gradient in onnxdp (reductions none and add have one); freeze "
             "the parameters before it (--freeze)",
             reduction);
    return;
  }
  if (c.needs(2)) c.add(2, c.emit(Op::GatherND, {c.dy(), c.in_id(1)}));
  if (!c.needs(0)) return;
  if (reduction == "add") return c.add(0, c.dy());
  c.add(0, c.emit(Op::ScatterND, {c.dy(), c.in_id(1), c.constant(Tensor(c.in(2).dtype, c.in(2).shape))}));
}

void grad_Expand(GradCtx& c) { c.add(0, c.reduce_to(c.dy(), c.in(0).shape)); }
// y [r0*d0, r1*d1, ..] is, row-major, [r0, d0, r1, d1, ..] with y[k0, j0, ..] = x[j0, ..]: dy
// viewed so is summed over the repeat axes (dims repeated once are left unsplit).
void grad_Tile(GradCtx& c) {
  if (!c.needs(0)) return;
  const Shape& xs = c.in(0).shape;
  const std::vector<int64_t> repeats = c.graph.value(c.in_id(1)).data.to_i64();
  Shape split;
  std::vector<int64_t> axes;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (repeats[d] != 1) {
      axes.push_back(int64_t(split.size()));
      split.push_back(repeats[d]);
    }
    split.push_back(xs[d]);
  }
  if (axes.empty()) {
    c.add(0, c.dy());
    return;
  }
  ValueId g = c.emit(Op::Reshape, {c.dy(), c.ints(split)}, {{"allowzero", Attr(int64_t(1))}});
  c.add(0, c.emit(Op::ReduceSum, {g, c.ints(axes)}, {{"keepdims", Attr(int64_t(0))}}));
}

void grad_Pad(GradCtx& c) {  // constant mode: the interior slice of dy
  if (c.node.s("mode") != "constant" || c.node.has_input(3)) gradient_missing(c);
  const Shape& s = c.in(0).shape;
  std::vector<int64_t> pads = c.graph.value(c.in_id(1)).data.to_i64();
  int64_t r = int64_t(s.size());
  std::vector<int64_t> starts, ends, axes;
  for (int64_t a = 0; a < r; ++a) {
    starts.push_back(pads[size_t(a)]);
    ends.push_back(pads[size_t(a)] + s[size_t(a)]);
    axes.push_back(a);
  }
  c.add(0, c.emit(Op::Slice, {c.dy(), c.ints(starts), c.ints(ends), c.ints(axes)}));
}

// Resize nearest gathers along each axis in turn: its gradient scatter-adds dy back along each
// resized axis in reverse, GatherGrad by GatherGrad (sums where an input element was copied
// several times, as PyTorch's upsample_nearest backward). Linear and cubic: ResizeGrad, the
// adjoint of the interpolation (Resize's roi, scales, sizes and attributes carried over).
void grad_Resize(GradCtx& c) {
  if (!c.needs(0)) return;
  const Shape& in = c.in(0).shape;
  if (c.node.s("mode") != "nearest") {
    std::vector<ValueId> ins = {c.dy(), c.ints(in)};
    for (int k = 1; k <= 3; ++k) ins.push_back(c.node.has_input(k) ? c.in_id(k) : kNoValue);
    while (ins.back() == kNoValue) ins.pop_back();
    c.add(0, c.emit(Op::ResizeGrad, ins, c.node.attrs));
    return;
  }
  auto known = [&](int k) -> const Tensor* {
    return c.node.has_input(k) ? &c.graph.value(c.in_id(k)).data : nullptr;
  };
  const ResizeNearest rz = resize_nearest(c.node, in, known(1), known(2), known(3));
  std::vector<Shape> before(in.size() + 1);  // before[k]: the shape with axes < k resized
  before[0] = in;
  for (size_t k = 0; k < in.size(); ++k) {
    before[k + 1] = before[k];
    before[k + 1][k] = rz.out[k];
  }
  ValueId g = c.dy();
  for (size_t k = in.size(); k-- > 0;) {
    if (rz.identity(k) && rz.out[k] == in[k]) continue;
    g = c.emit(Op::GatherGrad, {g, c.ints(rz.src[k]), c.ints(before[k])}, {{"axis", Attr(int64_t(k))}});
  }
  c.add(0, g);
}

void grad_Trilu(GradCtx& c) {
  std::vector<ValueId> ins = {c.dy()};
  if (c.node.has_input(1)) ins.push_back(c.in_id(1));
  c.add(0, c.emit(Op::Trilu, ins, {{"upper", Attr(c.node.i("upper"))}}));
}

// The indices and depth pick positions: no gradient. values [off, on]: on collects dy where the
// one-hot mask (OneHot with values [0, 1]) is 1, off the rest: [sum(dy) - sum(dy * mask), sum(dy * mask)].
void grad_OneHot(GradCtx& c) {
  if (!c.needs(2)) return;
  const DType t = c.graph.value(c.dy()).dtype;
  Tensor zero_one(t, {2});
  if (t == DType::f64) zero_one.as<double>()[0] = 0, zero_one.as<double>()[1] = 1;
  else if (t == DType::f32) zero_one.as<float>()[0] = 0, zero_one.as<float>()[1] = 1;
  else c.fail("the values' gradient is computed in f32 / f64, the values are {}", dtype_name(t));
  ValueId mask = c.emit(Op::OneHot, {c.in_id(0), c.in_id(1), c.constant(zero_one)}, {{"axis", Attr(c.node.i("axis"))}});
  const std::map<std::string, Attr> all{{"keepdims", Attr(int64_t(0))}};
  ValueId on = c.emit(Op::ReduceSum, {c.emit(Op::Mul, {c.dy(), mask})}, all);
  ValueId off = c.emit(Op::Sub, {c.emit(Op::ReduceSum, {c.dy()}, all), on});
  ValueId axis0 = c.ints({0});
  c.add(2, c.emit(Op::Concat, {c.emit(Op::Unsqueeze, {off, axis0}), c.emit(Op::Unsqueeze, {on, axis0})},
                  {{"axis", Attr(int64_t(0))}}));
}

}  // namespace onnxdp
