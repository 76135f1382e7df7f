// Shape rules of the nn ops (see graph/op_table.h).
//
// Sliding-window ops (Conv, ConvTranspose, MaxPool, AveragePool) read x as [N, C, D1 .. Dn] and
// give [N, C', O1 .. On]; the per-dim output sizes follow the ONNX spec formulas below. The CPU
// kernels take the output shape from here and only re-derive the leading pad of auto_pad modes.
#include <initializer_list>

#include "graph/checked.h"
#include "graph/graph.h"

namespace onnxdp {

namespace {

const std::initializer_list<DType> kFloat = {DType::f32, DType::f64};
// The convolutions also run on 16-bit floats (--mixed-precision; ONNX allows them).
const std::initializer_list<DType> kConvTypes = {DType::f16, DType::bf16, DType::f32, DType::f64};
// MaxPool's type constraint: floats, int8, uint8.
const std::initializer_list<DType> kMaxPoolTypes = {DType::f32, DType::f64, DType::i8, DType::u8};

DType check_dtype(const ShapeCtx& c, int k, std::initializer_list<DType> ok) {
  DType t = c.dtype(k);
  for (DType o : ok)
    if (o == t) return t;
  std::string list;
  for (DType o : ok) list += (list.empty() ? "" : ", ") + std::string(dtype_name(o));
  c.fail("input {} ('{}') is {}; onnxdp runs this op on {}", k, c.in(k).name, dtype_name(t), list);
}

void check_same_dtype(const ShapeCtx& c, int a, int b) {
  if (c.has(b) && c.dtype(a) != c.dtype(b))
    c.fail("inputs {} and {} have different dtypes ({} and {})", a, b, dtype_name(c.dtype(a)), dtype_name(c.dtype(b)));
}

// ---- sliding windows ---------------------------------------------------------------------------

enum class AutoPad { notset, same_upper, same_lower, valid };

AutoPad read_auto_pad(const ShapeCtx& c) {
  const std::string& s = c.node.s("auto_pad");
  if (s == "NOTSET") return AutoPad::notset;
  if (s == "SAME_UPPER") return AutoPad::same_upper;
  if (s == "SAME_LOWER") return AutoPad::same_lower;
  if (s == "VALID") return AutoPad::valid;
  c.fail("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", s);
}

// The window attributes, one entry per spatial dim (pads: n begins then n ends), defaults filled.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
  AutoPad auto_pad = AutoPad::notset;
  int64_t span(size_t i) const {  // dilated extent (k - 1) * d + 1
    return checked_add(checked_mul(kernel[i] - 1, dilations[i], "the dilated kernel extent"), 1,
                       "the dilated kernel extent");
  }
};

std::vector<int64_t> ints_of_len(const ShapeCtx& c, const char* attr, size_t n, int64_t dflt, int64_t min) {
  std::vector<int64_t> v = c.node.ints_or(attr, std::vector<int64_t>(n, dflt));
  if (v.size() != n) c.fail("attribute '{}' has {} values, expected {} (one per spatial dim)", attr, v.size(), n);
  for (int64_t e : v)
    if (e < min) c.fail("attribute '{}' has value {}, expected >= {}", attr, e, min);
  return v;
}

// x is input 0 with rank >= 3; `kernel` is the spatial kernel (from kernel_shape or the weights).
Window read_window(const ShapeCtx& c, std::vector<int64_t> kernel) {
  size_t n = c.shape(0).size() - 2;
  Window w;
  w.kernel = std::move(kernel);
  if (w.kernel.size() != n)
    c.fail("kernel has {} spatial dims, input 0 {} has {}", w.kernel.size(), shape_str(c.shape(0)), n);
  for (int64_t k : w.kernel)
    if (k < 1) c.fail("kernel_shape {} has a dim below 1", shape_str(w.kernel));
  w.strides = ints_of_len(c, "strides", n, 1, 1);
  w.dilations = ints_of_len(c, "dilations", n, 1, 1);
  w.auto_pad = read_auto_pad(c);
  w.pads = ints_of_len(c, "pads", 2 * n, 0, 0);
  return w;
}

void check_spatial_input(const ShapeCtx& c) {
  if (c.shape(0).size() < 3)
    c.fail("input 0 has shape {}; expected [N, C, D1, ...] with at least one spatial dim", shape_str(c.shape(0)));
}

// Output size of one spatial dim of Conv / pooling. ceil_mode only for pooling.
int64_t window_out_dim(const ShapeCtx& c, const Window& w, size_t i, int64_t in, bool ceil_mode) {
  int64_t s = w.strides[i], span = w.span(i), out = 0;
  switch (w.auto_pad) {
    case AutoPad::same_upper:
    case AutoPad::same_lower: out = ceil_div(in, s); break;
    case AutoPad::valid:
    case AutoPad::notset: {
      bool explicit_pads = w.auto_pad == AutoPad::notset;
      int64_t pb = explicit_pads ? w.pads[i] : 0, pe = explicit_pads ? w.pads[i + w.kernel.size()] : 0;
      int64_t room = checked_sub(checked_add(checked_add(in, pb, "the padded input size"), pe, "the padded input size"),
                                 span, "the padded input size");
      if (room < 0)
        c.fail("spatial dim {} of size {} (padded {}) is smaller than the window extent {}", i, in, in + pb + pe, span);
      out = (ceil_mode ? ceil_div(room, s) : room / s) + 1;
      // With ceil_mode the last window must start inside the input or its leading pad.
      if (ceil_mode && out - 1 >= ceil_div(in + pb, s)) --out;  // (out - 1) * s >= in + pb, without the product
      break;
    }
  }
  return out;
}

// Conv / MaxPool / AveragePool output: [N, channels, O1 .. On].
Shape window_out_shape(const ShapeCtx& c, const Window& w, int64_t channels, bool ceil_mode) {
  const Shape& x = c.shape(0);
  Shape out = {x[0], channels};
  for (size_t i = 0; i + 2 < x.size(); ++i) out.push_back(window_out_dim(c, w, i, x[i + 2], ceil_mode));
  return out;
}

std::vector<int64_t> spatial(const Shape& s) { return std::vector<int64_t>(s.begin() + 2, s.end()); }

void pool(ShapeCtx& c, std::initializer_list<DType> types) {
  check_spatial_input(c);
  DType t = check_dtype(c, 0, types);
  if (!c.node.has("kernel_shape")) c.fail("attribute 'kernel_shape' is required");
  Window w = read_window(c, c.node.ints("kernel_shape"));
  int64_t ceil_mode = c.node.i("ceil_mode");
  if (ceil_mode != 0 && ceil_mode != 1) c.fail("ceil_mode is {}, expected 0 or 1", ceil_mode);
  Shape out = window_out_shape(c, w, c.shape(0)[1], ceil_mode == 1);
  c.set(0, t, out);
  c.set(1, DType::i64, out);  // MaxPool's Indices
}

// ---- losses ---------------------------------------------------------------------------------------

// scores [N, C, d1..dk], labels [N, d1..dk] (i32/i64), optional weights [C]; loss [N, d1..dk] for
// reduction none, else a scalar.
void loss(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kFloat);
  const Shape& x = c.shape(0);
  if (x.size() < 2) c.fail("input 0 has shape {}; expected [N, C] or [N, C, d1, ...]", shape_str(x));
  if (c.dtype(1) != DType::i64 && c.dtype(1) != DType::i32)
    c.fail("input 1 (labels) is {}; expected int64 or int32", dtype_name(c.dtype(1)));
  Shape labels = {x[0]};
  labels.insert(labels.end(), x.begin() + 2, x.end());
  if (c.shape(1) != labels)
    c.fail("input 1 (labels) has shape {}; for scores {} expected {}", shape_str(c.shape(1)), shape_str(x),
           shape_str(labels));
  if (c.has(2)) {
    check_same_dtype(c, 0, 2);
    if (c.shape(2) != Shape{x[1]})
      c.fail("input 2 (weights) has shape {}, expected [{}]", shape_str(c.shape(2)), x[1]);
  }
  const std::string& r = c.node.s("reduction");
  if (r != "none" && r != "sum" && r != "mean") c.fail("reduction '{}' is not one of none, sum, mean", r);
  c.set(0, t, r == "none" ? labels : Shape{});
}

}  // namespace

// x [N, C, D1..Dn], W [M, C/group, k1..kn], B [M] -> y [N, M, O1..On].
void shape_Conv(ShapeCtx& c) {
  check_spatial_input(c);
  DType t = check_dtype(c, 0, kConvTypes);
  check_same_dtype(c, 0, 1);
  check_same_dtype(c, 0, 2);
  const Shape &x = c.shape(0), &wt = c.shape(1);
  int64_t group = c.node.i("group");
  if (wt.size() != x.size())
    c.fail("input 1 (weights) has shape {}; for input {} expected rank {}", shape_str(wt), shape_str(x), x.size());
  if (group < 1 || x[1] % group != 0 || wt[0] % group != 0)
    c.fail("group {} must divide the input channels {} and the output channels {}", group, x[1], wt[0]);
  if (wt[1] != x[1] / group)
    c.fail("input 1 (weights) {} has {} channels per group; input 0 {} with group {} needs {}", shape_str(wt), wt[1],
           shape_str(x), group, x[1] / group);
  if (c.has(2) && c.shape(2) != Shape{wt[0]})
    c.fail("input 2 (bias) has shape {}, expected [{}]", shape_str(c.shape(2)), wt[0]);
  std::vector<int64_t> k = spatial(wt);
  if (c.node.has("kernel_shape") && c.node.ints("kernel_shape") != k)
    c.fail("kernel_shape {} differs from the weights' spatial shape {}", shape_str(c.node.ints("kernel_shape")),
           shape_str(k));
  Window w = read_window(c, k);
  c.set(0, t, window_out_shape(c, w, wt[0], false));
}

// x [N, C, D1..Dn], W [C, M/group, k1..kn], B [M] -> y [N, M, O1..On] with
//   O = output_shape when given, else D*stride for SAME_*, else
//   O = stride*(D-1) + output_padding + (k-1)*dilation + 1 - pad_begin - pad_end.
void shape_ConvTranspose(ShapeCtx& c) {
  check_spatial_input(c);
  DType t = check_dtype(c, 0, kConvTypes);
  check_same_dtype(c, 0, 1);
  check_same_dtype(c, 0, 2);
  const Shape &x = c.shape(0), &wt = c.shape(1);
  size_t n = x.size() - 2;
  int64_t group = c.node.i("group");
  if (wt.size() != x.size())
    c.fail("input 1 (weights) has shape {}; for input {} expected rank {}", shape_str(wt), shape_str(x), x.size());
  if (group < 1 || x[1] % group != 0) c.fail("group {} must divide the input channels {}", group, x[1]);
  if (wt[0] != x[1])
    c.fail("input 1 (weights) {} has {} input channels, input 0 {} has {}", shape_str(wt), wt[0], shape_str(x), x[1]);
  int64_t m = checked_mul(wt[1], group, "the output channels (weights' dim 1 * group)");
  if (c.has(2) && c.shape(2) != Shape{m}) c.fail("input 2 (bias) has shape {}, expected [{}]", shape_str(c.shape(2)), m);
  std::vector<int64_t> k = spatial(wt);
  if (c.node.has("kernel_shape") && c.node.ints("kernel_shape") != k)
    c.fail("kernel_shape {} differs from the weights' spatial shape {}", shape_str(c.node.ints("kernel_shape")),
           shape_str(k));
  Window w = read_window(c, k);
  std::vector<int64_t> out_pad = ints_of_len(c, "output_padding", n, 0, 0);
  Shape out = {x[0], m};
  if (c.node.has("output_shape")) {
    // Either the spatial dims or the whole [N, M, O1..On].
    std::vector<int64_t> os = c.node.ints("output_shape");
    if (os.size() == n + 2) os.erase(os.begin(), os.begin() + 2);
    if (os.size() != n) c.fail("output_shape {} has {} dims, expected {}", shape_str(c.node.ints("output_shape")), os.size(), n);
    for (int64_t d : os)
      if (d < 1) c.fail("output_shape {} has a dim below 1", shape_str(os));
    out.insert(out.end(), os.begin(), os.end());
  } else {
    for (size_t i = 0; i < n; ++i) {
      int64_t d = x[i + 2], o;
      if (w.auto_pad == AutoPad::same_upper || w.auto_pad == AutoPad::same_lower) {
        o = checked_mul(d, w.strides[i], "the output size");
      } else {
        int64_t pads = w.auto_pad == AutoPad::valid ? 0 : checked_add(w.pads[i], w.pads[i + n], "the pads");
        const char* what = "the output size (stride * (D - 1) + output_padding + dilated kernel - pads)";
        o = checked_sub(checked_add(checked_add(checked_mul(w.strides[i], d - 1, what), out_pad[i], what), w.span(i), what),
                        pads, what);
      }
      if (o < 1) c.fail("spatial dim {} of the output would be {}; the pads are larger than the output", i, o);
      out.push_back(o);
    }
  }
  c.set(0, t, out);
}

void shape_MaxPool(ShapeCtx& c) {
  pool(c, kMaxPoolTypes);
  int64_t so = c.node.i("storage_order");
  if (so != 0 && so != 1) c.fail("storage_order is {}, expected 0 or 1", so);
}

void shape_AveragePool(ShapeCtx& c) { pool(c, kFloat); }

// x [N, C, D1..Dn] -> [N, C, 1..1]
void shape_GlobalAveragePool(ShapeCtx& c) {
  check_spatial_input(c);
  DType t = check_dtype(c, 0, kFloat);
  Shape out = c.shape(0);
  for (size_t i = 2; i < out.size(); ++i) out[i] = 1;
  c.set(0, t, out);
}

// x [N, C, D1..Dn] (n >= 0), scale/bias/mean/var [C] -> y like x; training outputs running mean
// and var [C].
void shape_BatchNormalization(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kFloat);
  const Shape& x = c.shape(0);
  if (x.size() < 2) c.fail("input 0 has shape {}; expected [N, C, ...]", shape_str(x));
  static const char* names[] = {"", "scale", "bias", "input_mean", "input_var"};
  for (int k = 1; k < 5; ++k) {
    check_dtype(c, k, kFloat);
    if (c.shape(k) != Shape{x[1]})
      c.fail("input {} ({}) has shape {}, expected [{}]", k, names[k], shape_str(c.shape(k)), x[1]);
  }
  check_same_dtype(c, 1, 2);
  check_same_dtype(c, 3, 4);
  const std::string& act = c.node.s("activation");
  if (!act.empty() && act != "Relu") c.fail("activation '{}' is not none or Relu", act);
  c.set(0, t, x);
  c.set(1, c.dtype(3), {x[1]});
  c.set(2, c.dtype(4), {x[1]});
}

// X [d0..d(r-1)] normalised over dims axis..r-1; Scale and B broadcast to X.shape[axis:].
// Mean and InvStdDev: [d0..d(axis-1), 1..1] in the stash type.
void shape_LayerNormalization(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kFloat);
  const Shape& x = c.shape(0);
  if (x.empty()) c.fail("input 0 is a scalar; LayerNormalization needs at least one dim");
  int64_t axis = normalize_axis(c.node.i("axis"), int64_t(x.size()), c.node);
  Shape norm(x.begin() + axis, x.end());
  for (int k = 1; k < 3; ++k) {
    if (!c.has(k)) continue;
    check_same_dtype(c, 0, k);
    // Unidirectional broadcast to the normalised shape.
    const Shape& s = c.shape(k);
    bool ok = s.size() <= norm.size();
    for (size_t i = 0; ok && i < s.size(); ++i) {
      int64_t d = s[s.size() - 1 - i];
      ok = d == 1 || d == norm[norm.size() - 1 - i];
    }
    if (!ok)
      c.fail("input {} ({}) has shape {}, which does not broadcast to the normalised shape {}", k,
             k == 1 ? "Scale" : "B", shape_str(s), shape_str(norm));
  }
  int64_t stash = c.node.i("stash_type");
  DType u;
  if (stash == 1) u = DType::f32;
  else if (stash == 11) u = DType::f64;
  else c.fail("stash_type {} is not supported (1: float, 11: double)", stash);
  Shape stats(x.begin(), x.begin() + axis);
  stats.resize(x.size(), 1);
  c.set(0, t, x);
  c.set(1, u, stats);
  c.set(2, u, stats);
}

// data -> output like data, mask bool like data. ratio: a float scalar; training_mode: a bool scalar.
void shape_Dropout(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kFloat);
  if (c.has(1)) {
    if (!dtype_is_float(c.dtype(1))) c.fail("input 1 (ratio) is {}, expected a float scalar", dtype_name(c.dtype(1)));
    if (shape_numel(c.shape(1)) != 1) c.fail("input 1 (ratio) has shape {}, expected a scalar", shape_str(c.shape(1)));
    if (const Tensor* r = c.constant(1)) {
      double v = r->to_f64()[0];
      if (!(v >= 0 && v < 1)) c.fail("ratio {} is outside [0, 1)", v);
    }
  }
  if (c.has(2)) {
    if (c.dtype(2) != DType::boolean) c.fail("input 2 (training_mode) is {}, expected bool", dtype_name(c.dtype(2)));
    if (shape_numel(c.shape(2)) != 1)
      c.fail("input 2 (training_mode) has shape {}, expected a scalar", shape_str(c.shape(2)));
  }
  c.set(0, t, c.shape(0));
  c.set(1, DType::boolean, c.shape(0));
}

// scores [N, C, d..], labels [N, d..], weights [C] -> loss (see loss()), log_prob like scores.
void shape_SoftmaxCrossEntropyLoss(ShapeCtx& c) {
  loss(c);
  c.set(1, c.dtype(0), c.shape(0));
}

void shape_NegativeLogLikelihoodLoss(ShapeCtx& c) { loss(c); }

}  // namespace onnxdp
