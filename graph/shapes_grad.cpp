// Shape rules of the internal gradient ops (category grad in graph/op_table.h). These ops are
// emitted only by gradient rules (graph/gradients_*.cpp), never imported; each rule checks what
// its CPU kernel (exec/cpu/grad.cpp) relies on, so a malformed node fails here naming itself.
#include <string>

#include "graph/attention.h"
#include "graph/checked.h"
#include "graph/graph.h"
#include "graph/resize.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

namespace {

DType require_float(const ShapeCtx& c, int k, const char* what) {
  DType t = c.dtype(k);
  if (t != DType::f32 && t != DType::f64)
    c.fail("input {} ({}) is {}; onnxdp runs this op on float32 and float64", k, what, dtype_name(t));
  return t;
}

void require_same(const ShapeCtx& c, int a, int b) {
  if (c.dtype(a) != c.dtype(b))
    c.fail("inputs {} and {} have different dtypes ({} and {})", a, b, dtype_name(c.dtype(a)), dtype_name(c.dtype(b)));
  if (c.shape(a) != c.shape(b))
    c.fail("inputs {} and {} have different shapes ({} and {})", a, b, shape_str(c.shape(a)), shape_str(c.shape(b)));
}

void require_labels(const ShapeCtx& c, int k) {
  if (c.dtype(k) != DType::i64 && c.dtype(k) != DType::i32)
    c.fail("input {} is {}; expected int64 or int32", k, dtype_name(c.dtype(k)));
}

std::vector<int64_t> const_i64(const ShapeCtx& c, int k, const char* what) {
  const Tensor& t = c.require_constant(k, what);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32)
    c.fail("input {} ({}) is {}; expected int64", k, what, dtype_name(t.dtype()));
  return t.to_i64();
}

std::vector<int64_t> ints_n(const ShapeCtx& c, const char* attr, size_t n, int64_t dflt, int64_t min) {
  std::vector<int64_t> v = c.node.ints_or(attr, std::vector<int64_t>(n, dflt));
  if (v.size() != n) c.fail("attribute '{}' has {} values, expected {}", attr, v.size(), n);
  for (int64_t e : v)
    if (e < min) c.fail("attribute '{}' has value {}, expected >= {}", attr, e, min);
  return v;
}

// Pool output size along one spatial dim (as the forward shape rule, graph/shapes_nn.cpp).
int64_t pool_out_dim(const ShapeCtx& c, size_t i, int64_t in, size_t n) {
  const std::vector<int64_t> kernel = c.node.ints("kernel_shape");
  const std::vector<int64_t> strides = ints_n(c, "strides", n, 1, 1);
  const std::vector<int64_t> dil = ints_n(c, "dilations", n, 1, 1);
  const std::vector<int64_t> pads = ints_n(c, "pads", 2 * n, 0, 0);
  const std::string& ap = c.node.s("auto_pad");
  const int64_t s = strides[i], span = checked_add(checked_mul(kernel[i] - 1, dil[i], "the dilated kernel extent"), 1,
                                                   "the dilated kernel extent");
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER") return ceil_div(in, s);
  if (ap != "NOTSET" && ap != "VALID") c.fail("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
  const bool explicit_pads = ap == "NOTSET";
  const int64_t pb = explicit_pads ? pads[i] : 0, pe = explicit_pads ? pads[i + n] : 0;
  const int64_t room = checked_sub(checked_add(checked_add(in, pb, "the padded input size"), pe, "the padded input size"),
                                   span, "the padded input size");
  if (room < 0) c.fail("spatial dim {} of size {} is smaller than the window extent {}", i, in, span);
  const bool ceil_mode = c.node.i("ceil_mode") != 0;
  int64_t out = (ceil_mode ? ceil_div(room, s) : room / s) + 1;
  if (ceil_mode && out - 1 >= ceil_div(in + pb, s)) --out;  // (out - 1) * s >= in + pb
  return out;
}

// Pool gradients: x [N, C, D..] (or its shape) and dy [N, C, O..] with O the forward's output.
void check_pool(const ShapeCtx& c, const Shape& x, const Shape& dy) {
  if (x.size() < 3) c.fail("the pooled input has shape {}; expected [N, C, D1, ...]", shape_str(x));
  const size_t n = x.size() - 2;
  if (!c.node.has("kernel_shape")) c.fail("attribute 'kernel_shape' is required");
  const std::vector<int64_t> kernel = c.node.ints("kernel_shape");
  if (kernel.size() != n) c.fail("kernel_shape {} has {} dims, the input {} has {}", shape_str(kernel), kernel.size(), shape_str(x), n);
  for (int64_t k : kernel)
    if (k < 1) c.fail("kernel_shape {} has a dim below 1", shape_str(kernel));
  Shape want = {x[0], x[1]};
  for (size_t i = 0; i < n; ++i) want.push_back(pool_out_dim(c, i, x[i + 2], n));
  if (dy != want)
    c.fail("the output gradient has shape {}; pooling {} gives {}", shape_str(dy), shape_str(x), shape_str(want));
}

// Losses: labels [N, d..] for scores [N, C, d..]; weights [C]; dy: labels' shape (reduction
// none) or a scalar.
void check_loss(const ShapeCtx& c, const Shape& scores, int dy_k, int labels_k, int weights_k) {
  if (scores.size() < 2) c.fail("the scores have shape {}; expected [N, C] or [N, C, d1, ...]", shape_str(scores));
  require_labels(c, labels_k);
  Shape labels = {scores[0]};
  labels.insert(labels.end(), scores.begin() + 2, scores.end());
  if (c.shape(labels_k) != labels)
    c.fail("input {} (labels) has shape {}; for scores {} expected {}", labels_k, shape_str(c.shape(labels_k)),
           shape_str(scores), shape_str(labels));
  if (c.has(weights_k)) {
    if (c.dtype(weights_k) != c.dtype(dy_k)) c.fail("input {} (weights) is {}, the gradient {}", weights_k,
                                                    dtype_name(c.dtype(weights_k)), dtype_name(c.dtype(dy_k)));
    if (c.shape(weights_k) != Shape{scores[1]})
      c.fail("input {} (weights) has shape {}, expected [{}]", weights_k, shape_str(c.shape(weights_k)), scores[1]);
  }
  const std::string& r = c.node.s("reduction");
  if (r != "none" && r != "sum" && r != "mean") c.fail("reduction '{}' is not one of none, sum, mean", r);
  Shape dy = r == "none" ? labels : Shape{};
  if (c.shape(dy_k) != dy)
    c.fail("input {} (loss gradient) has shape {}; reduction {} expects {}", dy_k, shape_str(c.shape(dy_k)), r,
           shape_str(dy));
}

}  // namespace

// x [N, C, D..], dy [N, M, O..] -> dW [M, C/group, k..]; pads explicit (n begins, n ends), and
// O = (D + pad_begin + pad_end - span) / stride + 1 as Conv gives.
void shape_ConvGradFilter(ShapeCtx& c) {
  DType t = c.dtype(0);  // float32 / float64, or 16-bit under --mixed-precision
  if (t != DType::f16 && t != DType::bf16) require_float(c, 0, "x");
  if (c.dtype(1) != t) c.fail("input 1 (dy) is {}, input 0 is {}", dtype_name(c.dtype(1)), dtype_name(t));
  const Shape &x = c.shape(0), &dy = c.shape(1);
  if (x.size() < 3 || dy.size() != x.size() || dy[0] != x[0])
    c.fail("inputs have shapes {} and {}; expected x [N, C, D1..] and dy [N, M, O1..] of one rank", shape_str(x),
           shape_str(dy));
  const size_t n = x.size() - 2;
  const int64_t group = c.node.i("group");
  if (group < 1 || x[1] % group != 0 || dy[1] % group != 0)
    c.fail("group {} must divide the input channels {} and the output channels {}", group, x[1], dy[1]);
  if (!c.node.has("kernel_shape")) c.fail("attribute 'kernel_shape' is required");
  const std::vector<int64_t> k = ints_n(c, "kernel_shape", n, 1, 1);
  const std::vector<int64_t> s = ints_n(c, "strides", n, 1, 1), d = ints_n(c, "dilations", n, 1, 1);
  const std::vector<int64_t> pads = ints_n(c, "pads", 2 * n, 0, 0);
  Shape w = {dy[1], x[1] / group};
  for (size_t i = 0; i < n; ++i) {
    const char* what = "the padded input size";
    const int64_t room = checked_sub(checked_add(checked_add(x[i + 2], pads[i], what), pads[i + n], what),
                                     checked_add(checked_mul(k[i] - 1, d[i], "the dilated kernel extent"), 1, what), what);
    if (room < 0 || room / s[i] + 1 != dy[i + 2])
      c.fail("dy {} does not match a convolution of x {} with kernel {}, strides {}, dilations {}, pads {}",
             shape_str(dy), shape_str(x), shape_str(k), shape_str(s), shape_str(d), shape_str(pads));
    w.push_back(k[i]);
  }
  c.set(0, t, w);
}

// x [N, C, D..], dy [N, C, O..] -> dx like x. Attributes as the forward MaxPool's.
void shape_MaxPoolGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "x");
  if (c.dtype(1) != t) c.fail("input 1 (dy) is {}, input 0 is {}", dtype_name(c.dtype(1)), dtype_name(t));
  check_pool(c, c.shape(0), c.shape(1));
  c.set(0, t, c.shape(0));
}

// dy [N, C, O..], x_shape (constant int64 [N, C, D..]) -> dx [N, C, D..]. Attributes as the
// forward AveragePool's.
void shape_AveragePoolGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  std::vector<int64_t> xs = const_i64(c, 1, "input shape");
  for (int64_t v : xs)
    if (v < 0) c.fail("input shape {} has a negative dim", shape_str(xs));
  check_pool(c, xs, c.shape(0));
  c.set(0, t, xs);
}

// dy, x [N, C, ...], scale [C], relu_y? (like x) -> dx like x, dscale [C], dbias [C] (scale's
// dtype).
void shape_BatchNormalizationGrad(ShapeCtx& c) {
  require_float(c, 0, "dy");
  require_same(c, 0, 1);
  if (c.has(3)) require_same(c, 3, 1);
  require_float(c, 2, "scale");
  const Shape& x = c.shape(1);
  if (x.size() < 2) c.fail("input 1 (x) has shape {}; expected [N, C, ...]", shape_str(x));
  if (c.shape(2) != Shape{x[1]}) c.fail("input 2 (scale) has shape {}, expected [{}]", shape_str(c.shape(2)), x[1]);
  c.set(0, c.dtype(1), x);
  c.set(1, c.dtype(2), {x[1]});
  c.set(2, c.dtype(2), {x[1]});
}

// dy, x [d0..d(r-1)], scale (broadcasting to x.shape[axis:]) -> dx like x, dscale and dbias
// shaped x.shape[axis:] (the rule reduces them to Scale's and B's shapes).
void shape_LayerNormalizationGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  require_same(c, 0, 1);
  if (c.dtype(2) != t) c.fail("input 2 (scale) is {}, x is {}", dtype_name(c.dtype(2)), dtype_name(t));
  const Shape& x = c.shape(1);
  if (x.empty()) c.fail("input 1 (x) is a scalar");
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(x.size()), c.node);
  const Shape norm(x.begin() + axis, x.end());
  const Shape& s = c.shape(2);
  bool ok = s.size() <= norm.size();
  for (size_t i = 0; ok && i < s.size(); ++i) {
    const int64_t d = s[s.size() - 1 - i];
    ok = d == 1 || d == norm[norm.size() - 1 - i];
  }
  if (!ok) c.fail("input 2 (scale) has shape {}, which does not broadcast to {}", shape_str(s), shape_str(norm));
  c.set(0, t, x);
  c.set(1, t, norm);
  c.set(2, t, norm);
}

// dy [indices' shape], indices (int), data_shape (constant int64) -> ddata [data_shape].
void shape_GatherElementsGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  require_labels(c, 1);
  std::vector<int64_t> data = const_i64(c, 2, "data shape");
  if (c.shape(0) != c.shape(1) || data.size() != c.shape(1).size())
    c.fail("dy {} and the indices {} must have one shape, of the data's rank {}", shape_str(c.shape(0)),
           shape_str(c.shape(1)), data.size());
  normalize_axis(c.node.i("axis"), int64_t(data.size()), c.node);
  c.set(0, t, Shape(data.begin(), data.end()));
}

// dy [GatherND's output], indices (int) [.., k], data_shape (constant int64) -> ddata [data_shape].
void shape_GatherNDGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  require_labels(c, 1);
  std::vector<int64_t> data = const_i64(c, 2, "data shape");
  for (int64_t v : data)
    if (v < 0) c.fail("data shape {} has a negative dim", shape_str(data));
  const Shape ds(data.begin(), data.end());
  const Shape want = gather_nd_shape(ds, c.shape(1), c.node.i("batch_dims"), c.node);
  if (c.shape(0) != want)
    c.fail("input 0 (dy) has shape {}; gathering {} from {} gives {}", shape_str(c.shape(0)), shape_str(c.shape(1)),
           shape_str(ds), shape_str(want));
  c.set(0, t, ds);
}

// dy [Resize's output], x_shape (constant int64), roi?, scales?, sizes? (Resize's inputs 1..3,
// known) -> dx [x_shape]; mode linear or cubic (nearest's gradient is GatherGrads).
void shape_ResizeGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  std::vector<int64_t> xs = const_i64(c, 1, "input shape");
  for (int64_t v : xs)
    if (v < 0) c.fail("input shape {} has a negative dim", shape_str(xs));
  auto known = [&](int k, const char* what) { return c.has(k) ? &c.require_constant(k, what) : nullptr; };
  const bool crop = c.node.s("coordinate_transformation_mode") == "tf_crop_and_resize";
  const Tensor* roi = crop ? known(2, "roi") : nullptr;
  const Tensor *scales = known(3, "scales"), *sizes = known(4, "sizes");
  if (c.node.s("mode") != "linear" && c.node.s("mode") != "cubic")
    c.fail("mode '{}': ResizeGrad is the gradient of modes linear and cubic", c.node.s("mode"));
  const Shape x(xs.begin(), xs.end()), want = resize_output_shape(c.node, x, roi, scales, sizes);
  if (c.shape(0) != want)
    c.fail("input 0 (dy) has shape {}; resizing {} gives {}", shape_str(c.shape(0)), shape_str(x), shape_str(want));
  c.set(0, t, x);
}

// dy [data[:axis] + indices + data[axis+1:]], indices (int), data_shape (constant int64) ->
// ddata [data_shape]: dy's rows added into the rows the indices picked.
void shape_GatherGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  require_labels(c, 1);
  std::vector<int64_t> data = const_i64(c, 2, "data shape");
  if (data.empty()) c.fail("data shape is empty (Gather needs rank >= 1)");
  for (int64_t v : data)
    if (v < 0) c.fail("data shape {} has a negative dim", shape_str(data));
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(data.size()), c.node);
  Shape want(data.begin(), data.begin() + axis);
  want.insert(want.end(), c.shape(1).begin(), c.shape(1).end());
  want.insert(want.end(), data.begin() + axis + 1, data.end());
  if (c.shape(0) != want)
    c.fail("input 0 (dy) has shape {}; gathering {} from {} on axis {} gives {}", shape_str(c.shape(0)),
           shape_str(c.shape(1)), shape_str(data), axis, shape_str(want));
  c.set(0, t, data);
}

// dy (loss gradient), scores [N, C, d..], labels [N, d..], weights [C]? -> dscores like scores.
void shape_SoftmaxCrossEntropyLossGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  if (c.dtype(1) != t) c.fail("input 1 (scores) is {}, the gradient {}", dtype_name(c.dtype(1)), dtype_name(t));
  check_loss(c, c.shape(1), 0, 2, 3);
  c.set(0, t, c.shape(1));
}

// dy (loss gradient), labels [N, d..], x_shape (constant int64 [N, C, d..]), weights [C]? -> dx.
void shape_NegativeLogLikelihoodLossGrad(ShapeCtx& c) {
  DType t = require_float(c, 0, "dy");
  std::vector<int64_t> xs = const_i64(c, 2, "input shape");
  for (int64_t v : xs)
    if (v < 0) c.fail("input shape {} has a negative dim", shape_str(xs));
  check_loss(c, xs, 0, 1, 3);
  c.set(0, t, xs);
}

namespace {
// An activation's gradient (dy, v): v (the activation's input or output, named `v`) and dy of one
// float dtype (16-bit too) and shape -> dx like v.
void shape_activation_grad(ShapeCtx& c, const char* v) {
  const DType t = c.dtype(1);
  if (!dtype_is_float(t)) c.fail("input 1 ({}) is {}; {} takes floats", v, dtype_name(t), op_name(c.node.op));
  if (c.dtype(0) != t) c.fail("input 0 (dy) is {}, input 1 ({}) is {}", dtype_name(c.dtype(0)), v, dtype_name(t));
  if (c.shape(0) != c.shape(1)) c.fail("dy {} and {} {} differ in shape", shape_str(c.shape(0)), v, shape_str(c.shape(1)));
  c.set(0, t, c.shape(1));
}
}  // namespace

// dy, x of one float dtype (16-bit too) and shape -> dx like x; db (optional) [N], x's last dim,
// of float32 or float64 x of rank 2 or more.
void shape_GeluGrad(ShapeCtx& c) {
  const std::string& a = c.node.s("approximate");
  if (a != "none" && a != "tanh") c.fail("approximate '{}' is not none or tanh", a);
  shape_activation_grad(c, "x");
  if (c.node.outputs.size() < 2 || c.node.outputs[1] == kNoValue) return;
  const Shape& x = c.shape(1);
  const DType t = c.dtype(1);
  if (t != DType::f32 && t != DType::f64) c.fail("db is summed for float32 or float64 x, not {}", dtype_name(t));
  if (x.size() < 2) c.fail("db needs x of rank 2 or more, not {}", shape_str(x));
  c.set(1, t, {x.back()});
}

// dy, y (Relu's output) of one float dtype (16-bit too) and shape -> dx like y.
void shape_ReluGrad(ShapeCtx& c) { shape_activation_grad(c, "y"); }

// dy, x (Clip's input) of one float dtype (16-bit too) and shape -> dx like x; the bounds (inputs 2
// and 3, each optional) one element of x's dtype or float32, as Clip's.
void shape_ClipGrad(ShapeCtx& c) {
  for (int k = 2; k <= 3; ++k) {
    if (!c.has(k)) continue;
    if (shape_numel(c.shape(k)) != 1)
      c.fail("input {} ('{}', the {} bound) has shape {}; it must be a scalar", k, c.in(k).name,
             k == 2 ? "min" : "max", shape_str(c.shape(k)));
    if (c.dtype(k) != c.dtype(1) && c.dtype(k) != DType::f32)
      c.fail("input {} ('{}') is {}, input 1 is {}", k, c.in(k).name, dtype_name(c.dtype(k)), dtype_name(c.dtype(1)));
  }
  shape_activation_grad(c, "x");
}

// dy, y of one dtype (float32, float64) and shape, axis within its rank -> dx like y.
void shape_softmax_grad(ShapeCtx& c) {
  require_float(c, 1, "y");
  require_same(c, 0, 1);
  normalize_axis(c.node.i("axis"), int64_t(c.shape(1).size()), c.node);
  c.set(0, c.dtype(1), c.shape(1));
}

// SoftmaxGrad's mask: bool, broadcast to y, the softmax along y's last axis.
void shape_SoftmaxGrad(ShapeCtx& c) {
  shape_softmax_grad(c);
  if (!c.has(2)) return;
  const int64_t rank = int64_t(c.shape(1).size());
  if (normalize_axis(c.node.i("axis"), rank, c.node) != rank - 1) c.fail("with a mask the axis must be the last");
  if (c.dtype(2) != DType::boolean) c.fail("the mask is {}, not bool", dtype_name(c.dtype(2)));
  Shape b;
  try {
    b = broadcast_shapes(c.shape(2), c.shape(1));
  } catch (const Error&) {
  }
  if (b != c.shape(1)) c.fail("the mask {} does not broadcast to y {}", shape_str(c.shape(2)), shape_str(c.shape(1)));
}
void shape_LogSoftmaxGrad(ShapeCtx& c) { shape_softmax_grad(c); }

// FusedAttentionGrad (dy, q, k, v, p, mask?): FusedAttention's inputs, dy like its y and p like its p, all
// of q's dtype; dq, dk, dv like q, k, v (heads 2: one output, dqkv like qkv).
void shape_FusedAttentionGrad(ShapeCtx& c) {
  const AttentionDims a = check_attention_inputs(c, 1, 5);
  const DType t = c.dtype(1);
  for (int k : {0, 4})
    if (c.dtype(k) != t) c.fail("input {} ('{}') is {}, q is {}", k, c.in(k).name, dtype_name(c.dtype(k)), dtype_name(t));
  if (c.shape(0) != a.y_shape()) c.fail("dy {} is not y's shape {}", shape_str(c.shape(0)), shape_str(a.y_shape()));
  if (c.shape(4) != a.p_shape()) c.fail("p {} is not {}", shape_str(c.shape(4)), shape_str(a.p_shape()));
  const size_t outputs = a.packed ? 1 : 3;
  if (c.node.outputs.size() != outputs)
    c.fail("with heads {} FusedAttentionGrad has {}, not {} outputs", c.node.i("heads"),
           a.packed ? "1 output (dqkv)" : "3 outputs (dq, dk, dv)", c.node.outputs.size());
  for (size_t k = 0; k < outputs; ++k) c.set(int(k), t, c.shape(int(k) + 1));
}

}  // namespace onnxdp
