// Gradient rules of the tensor ops (see graph/autodiff.h).
#include <algorithm>

#include "graph/autodiff.h"

namespace onnxdp {

namespace {
// Ops that only re-view their input's elements in the same order: the gradient is dy re-viewed.
void reshape_back(GradCtx& c) { c.add(0, c.emit(Op::Reshape, {c.dy(), c.ints(c.in(0).shape)})); }
}  // namespace

void grad_Identity(GradCtx& c) { c.add(0, c.dy()); }

void grad_Cast(GradCtx& c) {
  c.add(0, c.emit(Op::Cast, {c.dy()}, {{"to", Attr(int64_t(dtype_to_onnx(c.in(0).dtype)))}}));
}

void grad_Shape(GradCtx& c) { no_gradient(c); }
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

void grad_Slice(GradCtx& c) {
  // Unit steps: dy padded with zeros back to the input's shape. Other steps: not yet.
  const Shape& s = c.in(0).shape;
  const Shape& o = c.graph.value(c.out_id(0)).shape;
  int64_t r = int64_t(s.size());
  std::vector<int64_t> starts = c.graph.value(c.in_id(1)).data.to_i64();
  std::vector<int64_t> axes;
  if (c.node.has_input(3)) axes = c.graph.value(c.in_id(3)).data.to_i64();
  else for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (c.node.has_input(4))
    for (int64_t st : c.graph.value(c.in_id(4)).data.to_i64())
      if (st != 1) gradient_missing(c);
  std::vector<int64_t> pads(size_t(2 * r), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalize_axis(axes[i], r, c.node);
    int64_t b = starts[i] < 0 ? starts[i] + s[size_t(a)] : starts[i];
    b = std::clamp<int64_t>(b, 0, s[size_t(a)]);
    pads[size_t(a)] = b;
    pads[size_t(a + r)] = s[size_t(a)] - b - o[size_t(a)];
  }
  c.add(0, c.emit(Op::Pad, {c.dy(), c.ints(pads)}));
}

void grad_Gather(GradCtx& c) { gradient_missing(c); }

void grad_Expand(GradCtx& c) { c.add(0, c.reduce_to(c.dy(), c.in(0).shape)); }
void grad_Tile(GradCtx& c) { gradient_missing(c); }

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

void grad_Trilu(GradCtx& c) {
  std::vector<ValueId> ins = {c.dy()};
  if (c.node.has_input(1)) ins.push_back(c.in_id(1));
  c.add(0, c.emit(Op::Trilu, ins, {{"upper", Attr(c.node.i("upper"))}}));
}

}  // namespace onnxdp
