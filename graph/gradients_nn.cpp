// Gradient rules of the nn ops (see graph/autodiff.h). Where an existing op computes a gradient
// (Conv's input gradient is a ConvTranspose, ConvTranspose's a Conv) the rule emits it; the
// rest use the internal ops of category grad (graph/op_table.h, kernels in exec/cpu/grad.cpp).
#include <algorithm>

#include "graph/autodiff.h"

namespace onnxdp {

namespace {

std::vector<int64_t> spatial(const Shape& s) { return std::vector<int64_t>(s.begin() + 2, s.end()); }

// Axes 0, 2, 3, .. r-1: everything but the channel axis.
std::vector<int64_t> all_but_channels(size_t rank) {
  std::vector<int64_t> axes = {0};
  for (size_t i = 2; i < rank; ++i) axes.push_back(int64_t(i));
  return axes;
}

// Per-channel bias gradient: dy summed over all but axis 1.
ValueId bias_grad(GradCtx& c, ValueId dy) {
  return c.emit(Op::ReduceSum, {dy, c.ints(all_but_channels(c.graph.value(dy).shape.size()))},
                {{"keepdims", Attr(int64_t(0))}});
}

// The floor division by 2 of the ONNX pad split (rounds toward -inf for negative totals).
int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

// A window op's geometry with its padding resolved to explicit begin / end amounts.
struct ConvGeom {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
  int64_t span(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
  std::vector<int64_t> pads() const {
    std::vector<int64_t> p = pad_begin;
    p.insert(p.end(), pad_end.begin(), pad_end.end());
    return p;
  }
};

ConvGeom read_geom(const GradCtx& c, std::vector<int64_t> kernel) {
  const size_t n = kernel.size();
  ConvGeom g;
  g.kernel = std::move(kernel);
  g.strides = c.node.ints_or("strides", std::vector<int64_t>(n, 1));
  g.dilations = c.node.ints_or("dilations", std::vector<int64_t>(n, 1));
  return g;
}

// Conv's pads as its kernel resolves auto_pad (exec/cpu/conv.cpp): in [D..] -> out [O..].
ConvGeom conv_geom(const GradCtx& c, const Shape& xs, const Shape& ws, const Shape& ys) {
  const size_t n = xs.size() - 2;
  ConvGeom g = read_geom(c, spatial(ws));
  const std::string& ap = c.node.s("auto_pad");
  const std::vector<int64_t> pads = c.node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  for (size_t i = 0; i < n; ++i) {
    int64_t pb = 0, pe = 0;
    if (ap == "NOTSET") {
      pb = pads[i];
      pe = pads[i + n];
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (ys[i + 2] - 1) * g.strides[i] + g.span(i) - xs[i + 2]);
      pb = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    }
    g.pad_begin.push_back(pb);
    g.pad_end.push_back(pe);
  }
  return g;
}

std::map<std::string, Attr> window_attrs(const ConvGeom& g, int64_t group) {
  return {{"strides", Attr(g.strides)}, {"dilations", Attr(g.dilations)}, {"group", Attr(group)},
          {"pads", Attr(g.pads())}, {"kernel_shape", Attr(g.kernel)}};
}

// The forward node's attributes without those in `drop`.
std::map<std::string, Attr> attrs_without(const GradCtx& c, std::initializer_list<const char*> drop) {
  std::map<std::string, Attr> a = c.node.attrs;
  for (const char* d : drop) a.erase(d);
  return a;
}

// Fails when the gradient of an output the rule cannot differentiate through is needed.
void refuse_output(GradCtx& c, int k, const char* what) {
  if (c.dy(k) != kNoValue) c.fail("the gradient through output {} ({}) is not supported", k, what);
}

}  // namespace

// y = Conv(x, W, B): x [N, C, D..], W [M, C/g, k..], y [N, M, O..].
//   dx = ConvTranspose(dy, W) with Conv's strides, dilations, group and pads; output_padding
//        r = (D + pads - span) mod stride restores the rows the conv's stride skipped at the end;
//   dW = ConvGradFilter(x, dy);  dB = dy summed over all but the channels.
void grad_Conv(GradCtx& c) {
  ValueId dy = c.dy();
  if (dy == kNoValue) return;
  const Shape &xs = c.in(0).shape, &ws = c.in(1).shape, &ys = c.graph.value(c.out_id(0)).shape;
  const ConvGeom g = conv_geom(c, xs, ws, ys);
  const int64_t group = c.node.i("group");
  if (c.needs(0)) {
    std::vector<int64_t> out_pad;
    for (size_t i = 0; i < g.kernel.size(); ++i)
      out_pad.push_back((xs[i + 2] + g.pad_begin[i] + g.pad_end[i] - g.span(i)) % g.strides[i]);
    std::map<std::string, Attr> a = window_attrs(g, group);
    a["output_padding"] = Attr(out_pad);
    c.add(0, c.emit(Op::ConvTranspose, {dy, c.in_id(1)}, a));
  }
  if (c.needs(1)) c.add(1, c.emit(Op::ConvGradFilter, {c.in_id(0), dy}, window_attrs(g, group)));
  if (c.needs(2)) c.add(2, bias_grad(c, dy));
}

// y = ConvTranspose(x, W, B): x [N, C, D..], W [C, M/g, k..], y [N, M, O..]; the adjoint of a
// Conv from y's grid to x's grid. With the leading pad its kernel resolves (pb) and the trailing
// pad pe = stride*(D-1) + span - O - pb (output_padding counts as negative trailing pad):
//   dx = Conv(dy, W, pads pb, pe);  dW = ConvGradFilter(dy, x);  dB = dy summed.
// A negative pb / pe (an output_shape larger than the taps reach) means output rows no tap hits:
// they are cropped from dy first.
void grad_ConvTranspose(GradCtx& c) {
  ValueId dy = c.dy();
  if (dy == kNoValue) return;
  const Shape &xs = c.in(0).shape, &ws = c.in(1).shape, &ys = c.graph.value(c.out_id(0)).shape;
  const size_t n = xs.size() - 2;
  ConvGeom g = read_geom(c, spatial(ws));
  const std::string& ap = c.node.s("auto_pad");
  const std::vector<int64_t> pads = c.node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  const std::vector<int64_t> out_pad = c.node.ints_or("output_padding", std::vector<int64_t>(n, 0));
  const bool from_total = c.node.has("output_shape") || ap == "SAME_UPPER" || ap == "SAME_LOWER";
  std::vector<int64_t> crop(2 * (n + 2), 0);
  bool cropped = false;
  for (size_t i = 0; i < n; ++i) {
    const int64_t D = xs[i + 2], O = ys[i + 2], s = g.strides[i];
    int64_t pb = 0;
    if (from_total) {
      const int64_t total = s * (D - 1) + out_pad[i] + g.span(i) - O;
      pb = ap == "SAME_UPPER" ? floor_div2(total) : total - floor_div2(total);
    } else if (ap == "NOTSET") {
      pb = pads[i];
    }
    const int64_t pe = s * (D - 1) + g.span(i) - O - pb;
    crop[i + 2] = std::min<int64_t>(pb, 0);
    crop[n + 2 + i + 2] = std::min<int64_t>(pe, 0);
    cropped = cropped || pb < 0 || pe < 0;
    g.pad_begin.push_back(std::max<int64_t>(pb, 0));
    g.pad_end.push_back(std::max<int64_t>(pe, 0));
  }
  const int64_t group = c.node.i("group");
  ValueId dyc = cropped ? c.emit(Op::Pad, {dy, c.ints(crop)}) : dy;
  if (c.needs(0)) c.add(0, c.emit(Op::Conv, {dyc, c.in_id(1)}, window_attrs(g, group)));
  if (c.needs(1)) c.add(1, c.emit(Op::ConvGradFilter, {dyc, c.in_id(0)}, window_attrs(g, group)));
  if (c.needs(2)) c.add(2, bias_grad(c, dy));
}

void grad_MaxPool(GradCtx& c) {  // output 1 (Indices) is integer: only dy of output 0 flows
  if (c.dy() == kNoValue) return;
  c.add(0, c.emit(Op::MaxPoolGrad, {c.in_id(0), c.dy()}, attrs_without(c, {"storage_order"})));
}

void grad_AveragePool(GradCtx& c) {
  c.add(0, c.emit(Op::AveragePoolGrad, {c.dy(), c.ints(c.in(0).shape)}, c.node.attrs));
}

void grad_GlobalAveragePool(GradCtx& c) {  // dx = dy / S expanded over the S spatial elements
  const Shape& xs = c.in(0).shape;
  int64_t S = 1;
  for (size_t i = 2; i < xs.size(); ++i) S *= xs[i];
  ValueId scaled = c.emit(Op::Mul, {c.dy(), c.scalar(float(1.0 / double(S)), c.in(0).dtype)});
  c.add(0, c.emit(Op::Expand, {scaled, c.ints(xs)}));
}

// Training mode: y = (x - mu_B) / sqrt(var_B + eps) * scale + bias with the batch statistics
// (biased variance): BatchNormalizationGrad gives dx, dscale and dbias. The running mean and var
// inputs do not reach y, so they get no gradient (as PyTorch's buffers); the gradient through the
// updated running statistics (outputs 1, 2) is not supported.
// Inference mode: y = (x - mean) * a + bias, a = scale / sqrt(var + eps), all per channel, in
// existing ops; outputs 1, 2 pass mean and var through.
void grad_BatchNormalization(GradCtx& c) {
  const bool training = c.node.i("training_mode") != 0;
  if (training) {
    refuse_output(c, 1, "running_mean");
    refuse_output(c, 2, "running_var");
    if (c.dy() == kNoValue || !(c.needs(0) || c.needs(1) || c.needs(2))) return;
    std::vector<ValueId> g = c.emit_n(Op::BatchNormalizationGrad, {c.dy(), c.in_id(0), c.in_id(1)},
                                      {{"epsilon", Attr(c.node.f("epsilon"))}}, 3);
    for (int k = 0; k < 3; ++k)
      if (c.needs(k)) c.add(k, g[size_t(k)]);
    return;
  }
  for (int k = 1; k < 3; ++k)
    if (c.dy(k) != kNoValue && c.needs(k + 2)) c.add(k + 2, c.dy(k));
  ValueId dy = c.dy();
  if (dy == kNoValue) return;
  const DType t = c.in(0).dtype;
  for (int k = 1; k < 5; ++k)
    if (c.in(k).dtype != t)
      c.fail("input {} is {} and input 0 {}; the inference-mode gradient needs one dtype", k,
             dtype_name(c.in(k).dtype), dtype_name(t));
  const Shape& xs = c.in(0).shape;
  const std::vector<int64_t> axes = all_but_channels(xs.size());
  Shape per_channel = {xs[1]};  // [C] -> [C, 1, .., 1] to broadcast against x
  per_channel.resize(xs.size() - 1, 1);
  auto bc = [&](ValueId v) { return xs.size() > 2 ? c.emit(Op::Reshape, {v, c.ints(per_channel)}) : v; };
  auto sum = [&](ValueId v) { return c.emit(Op::ReduceSum, {v, c.ints(axes)}, {{"keepdims", Attr(int64_t(0))}}); };
  ValueId inv = c.emit(Op::Reciprocal,
                       {c.emit(Op::Sqrt, {c.emit(Op::Add, {c.in_id(4), c.scalar(c.node.f("epsilon"), t)})})});
  ValueId a = c.emit(Op::Mul, {c.in_id(1), inv});
  if (c.needs(0)) c.add(0, c.emit(Op::Mul, {dy, bc(a)}));
  ValueId sum_dy = c.needs(2) || c.needs(3) ? sum(dy) : kNoValue;
  ValueId sum_dy_xc = kNoValue;  // sum(dy * (x - mean))
  if (c.needs(1) || c.needs(4)) sum_dy_xc = sum(c.emit(Op::Mul, {dy, c.emit(Op::Sub, {c.in_id(0), bc(c.in_id(3))})}));
  if (c.needs(1)) c.add(1, c.emit(Op::Mul, {sum_dy_xc, inv}));
  if (c.needs(2)) c.add(2, sum_dy);
  if (c.needs(3)) c.add(3, c.emit(Op::Neg, {c.emit(Op::Mul, {sum_dy, a})}));
  if (c.needs(4)) {  // d/dvar of a = -a / (2 (var + eps))
    ValueId inv2 = c.emit(Op::Mul, {inv, inv});
    ValueId k = c.emit(Op::Mul, {c.emit(Op::Mul, {a, inv2}), c.scalar(-0.5f, t)});
    c.add(4, c.emit(Op::Mul, {sum_dy_xc, k}));
  }
}

// LayerNormalizationGrad gives dx and, shaped x.shape[axis:], dscale and dbias, which are summed
// down to Scale's and B's shapes where those broadcast. Mean / InvStdDev outputs: not supported.
void grad_LayerNormalization(GradCtx& c) {
  refuse_output(c, 1, "Mean");
  refuse_output(c, 2, "InvStdDev");
  if (c.dy() == kNoValue) return;
  std::vector<ValueId> g =
      c.emit_n(Op::LayerNormalizationGrad, {c.dy(), c.in_id(0), c.in_id(1)},
               {{"axis", Attr(c.node.i("axis"))}, {"epsilon", Attr(c.node.f("epsilon"))}}, 3);
  if (c.needs(0)) c.add(0, g[0]);
  for (int k = 1; k < 3; ++k)
    if (c.needs(k)) c.add(k, c.reduce_to(g[size_t(k)], c.in(k).shape));
}

// The mask is a pure function of (seed, step, element position, node name) (exec/philox.h), so
// Dropout applied to dy with the forward node's inputs, attributes AND name draws the same mask:
// dx = dy * mask / (1 - ratio), and a copy of dy outside training.
void grad_Dropout(GradCtx& c) {
  if (c.dy() == kNoValue) return;
  std::vector<ValueId> ins = c.node.inputs;
  ins[0] = c.dy();
  const std::string base = c.node.name.empty() ? std::string("Dropout") : c.node.name;
  int idx = c.graph.add_node(Op::Dropout, c.node.name, ins, {fmt::format("grad{}{}/Dropout", c.counter++, base)},
                             c.node.attrs);
  c.add(0, c.graph.nodes[size_t(idx)].outputs[0]);
}

// Class weights get no gradient (PyTorch: "the derivative for 'weight' is not implemented"); a
// trainer freezes a weights initializer as not reaching the loss. The log_prob output's gradient
// flows back as LogSoftmax's: d - exp(log_prob) * sum(d, classes).
void grad_SoftmaxCrossEntropyLoss(GradCtx& c) {
  if (!c.needs(0)) return;
  ValueId g = kNoValue;
  if (c.dy(0) != kNoValue) {
    std::vector<ValueId> ins = {c.dy(0), c.in_id(0), c.in_id(1)};
    if (c.node.has_input(2)) ins.push_back(c.in_id(2));
    g = c.emit(Op::SoftmaxCrossEntropyLossGrad, ins, c.node.attrs);
  }
  if (c.dy(1) != kNoValue) {
    ValueId s = c.emit(Op::ReduceSum, {c.dy(1), c.ints({1})}, {{"keepdims", Attr(int64_t(1))}});
    ValueId d = c.emit(Op::Sub, {c.dy(1), c.emit(Op::Mul, {c.emit(Op::Exp, {c.out_id(1)}), s})});
    g = g == kNoValue ? d : c.emit(Op::Add, {g, d});
  }
  c.add(0, g);
}

void grad_NegativeLogLikelihoodLoss(GradCtx& c) {  // weights: no gradient, as above
  if (!c.needs(0)) return;
  std::vector<ValueId> ins = {c.dy(), c.in_id(1), c.ints(c.in(0).shape)};
  if (c.node.has_input(2)) ins.push_back(c.in_id(2));
  c.add(0, c.emit(Op::NegativeLogLikelihoodLossGrad, ins, c.node.attrs));
}

}  // namespace onnxdp
