// ONNX import of the tensor ops that need one (see graph/op_table.h; the others take the default,
// importer/importer.h). Older opsets' attribute forms become the inputs of the newest form
// (op_table.h notes).
#include "importer/importer.h"

namespace onnxdp {

void import_Cast(ImportCtx& c) {
  if (!c.node.has("to")) c.fail("attribute 'to' is required");
  const int64_t to = c.node.i("to");
  DType t;
  if (!dtype_from_onnx(int(to), &t))
    c.fail("cast to {} is not supported; onnxdp holds f32, f64, f16, bf16, i64, i32, i8, u8 and bool",
           onnx_type_name(int(to)));
  // Opset 24+: round_mode only concerns casts to float8e8m0, which onnxdp rejects above.
  c.ignore_attr("round_mode");
}

void import_CastLike(ImportCtx& c) { c.ignore_attr("round_mode"); }

// Opsets < 13 give the axes as an attribute.
void import_Squeeze(ImportCtx& c) {
  if (c.opset < 13) c.attr_to_input("axes", 1);
}
void import_Unsqueeze(ImportCtx& c) {
  if (c.opset < 13) c.attr_to_input("axes", 1);
  if (!c.node.has_input(1)) c.fail("the axes are required (attribute before opset 13, input 1 since)");
}

void import_Concat(ImportCtx& c) {
  if (!c.node.has("axis")) c.fail("attribute 'axis' is required");
}

// Opsets < 13 give the split sizes as an attribute; opset 18 adds num_outputs (kept as is).
void import_Split(ImportCtx& c) {
  if (c.opset < 13) c.attr_to_input("split", 1);
}

// Opsets < 10 give starts, ends and axes as attributes (no steps).
void import_Slice(ImportCtx& c) {
  if (c.opset < 10) {
    if (!c.node.has("starts") || !c.node.has("ends")) c.fail("attributes 'starts' and 'ends' are required");
    c.attr_to_input("starts", 1);
    c.attr_to_input("ends", 2);
    c.attr_to_input("axes", 3);
  }
}

// Opsets < 11 give pads (ints) and value (float, default 0) as attributes. The value becomes an
// f32 scalar input; the kernel converts it to the data's dtype (the data's dtype is not known yet
// when importing).
void import_Pad(ImportCtx& c) {
  if (c.opset < 11) {
    if (!c.node.has("pads")) c.fail("attribute 'pads' is required");
    c.attr_to_input("pads", 1);
    if (c.node.has("value")) {
      auto* v = std::get_if<float>(&c.node.attrs["value"]);
      if (!v) c.fail("attribute 'value' must be a float");
      ValueId id = c.add_constant(Tensor::scalar_f32(*v), "value");
      c.node.inputs.resize(3, kNoValue);
      c.node.inputs[2] = id;
      c.ignore_attr("value");
    }
  }
  const std::string& mode = c.node.s("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    c.fail("mode '{}' is not one of constant, reflect, edge, wrap", mode);
}

// GatherND-11 has no batch_dims (opset 12 added it, 13 bfloat16).
void import_GatherND(ImportCtx& c) {
  if (c.opset < 12 && c.node.i("batch_dims") != 0) c.fail("batch_dims needs opset 12");
}

// ScatterND-11 / 13 write the updates; opset 16 added reduction add and mul, 18 max and min.
void import_ScatterND(ImportCtx& c) {
  const std::string& reduction = c.node.s("reduction");
  if (c.opset < 16 && reduction != "none") c.fail("reduction '{}' needs opset 16", reduction);
  if (c.opset < 18 && (reduction == "max" || reduction == "min")) c.fail("reduction '{}' needs opset 18", reduction);
}

// Resize-10 took (X, scales) and only `mode` (nearest or linear), its coordinates asymmetric
// (x_original = x / scale, as Upsample's): it becomes the newer form with
// coordinate_transformation_mode asymmetric and nearest_mode floor (np.repeat for whole scales,
// as Upsample's reference; PyTorch's nearest). Opset 11 added roi (input 1), sizes (input 3), cubic and
// the coordinate modes; 18 antialias, axes, keep_aspect_ratio_policy; 19 half_pixel_symmetric. A
// float initializer read as roi or scales (the dynamo exporter stores the scales so) is a
// constant of the model, not a parameter: it sets the output's shape.
void import_Resize(ImportCtx& c) {
  if (c.opset < 11) {
    if (c.node.inputs.size() == 2) c.node.inputs = {c.node.inputs[0], kNoValue, c.node.inputs[1]};
    if (c.node.s("mode") != "nearest" && c.node.s("mode") != "linear")
      c.fail("mode '{}': Resize-10 resizes with nearest or linear", c.node.s("mode"));
    c.node.attrs["coordinate_transformation_mode"] = Attr(std::string("asymmetric"));
    c.node.attrs["nearest_mode"] = Attr(std::string("floor"));
  }
  for (size_t k : {size_t(1), size_t(2)})
    if (k < c.node.inputs.size() && c.node.inputs[k] != kNoValue) {
      Value& v = c.graph.value(c.node.inputs[k]);
      if (v.kind == ValueKind::parameter) v.kind = ValueKind::constant;
    }
}

// OneHot 9 and 11 (11: negative indices and axis allowed) have one meaning here. The depth sets the
// output's shape: a float initializer holding it is a constant of the model, not a parameter.
void import_OneHot(ImportCtx& c) {
  if (c.node.has_input(1)) {
    Value& v = c.graph.value(c.node.inputs[1]);
    if (v.kind == ValueKind::parameter) v.kind = ValueKind::constant;
  }
}
// ---- composites (graph/op_table.h): each arrives as a Reshape node with the ONNX node's input and
// attributes, and becomes Reshape -> Transpose -> Reshape of x [N, C, H, W] (4-D; other ranks fail
// at the reshapes, naming this node's helpers). The target shapes come from Shape(x) slices, folded
// to constants at load.

namespace {

// blocksize (>= 1), removed from the node's attributes.
int64_t take_blocksize(ImportCtx& c) {
  auto it = c.node.attrs.find("blocksize");
  const int64_t* b = it == c.node.attrs.end() ? nullptr : std::get_if<int64_t>(&it->second);
  if (!b) c.fail("attribute 'blocksize' (an int) is required");
  if (*b < 1) c.fail("blocksize {} must be at least 1", *b);
  const int64_t v = *b;
  c.node.attrs.erase(it);
  return v;
}

ValueId x_of(ImportCtx& c) {
  if (c.node.inputs.size() != 1 || c.node.inputs[0] == kNoValue) c.fail("takes one input, x");
  return c.node.inputs[0];
}

// Shape(x)[start:end] (end 0: to the end).
ValueId dims(ImportCtx& c, const std::string& suffix, ValueId x, int64_t start, int64_t end = 0) {
  std::map<std::string, Attr> a{{"start", Attr(start)}};
  if (end) a["end"] = Attr(end);
  return c.add_node(Op::Shape, suffix, {x}, std::move(a));
}

ValueId concat(ImportCtx& c, const std::string& suffix, std::vector<ValueId> parts) {
  return c.add_node(Op::Concat, suffix, std::move(parts), {{"axis", Attr(int64_t(0))}});
}

}  // namespace

// DepthToSpace: y [N, C/b², H*b, W*b]. DCR (the default, and the only mode before opset 11) splits C
// as [b, b, C/b²], CRD as [C/b², b, b]; the block's rows and columns then interleave with H and W.
void import_DepthToSpace(ImportCtx& c) {
  const int64_t b = take_blocksize(c);
  std::string mode = "DCR";
  if (auto it = c.node.attrs.find("mode"); it != c.node.attrs.end()) {
    const std::string* m = std::get_if<std::string>(&it->second);
    if (!m || (*m != "DCR" && *m != "CRD")) c.fail("mode must be 'DCR' or 'CRD'");
    mode = *m;
    c.node.attrs.erase(it);
  }
  const ValueId x = x_of(c);
  const bool dcr = mode == "DCR";
  ValueId split = c.add_constant(Tensor::from_i64(dcr ? std::vector<int64_t>{b, b, -1} : std::vector<int64_t>{-1, b, b}),
                                 "channel_split");
  // [N, b, b, C/b², H, W] (DCR) or [N, C/b², b, b, H, W] (CRD)
  ValueId split_shape = concat(c, "split_shape", {dims(c, "n", x, 0, 1), split, dims(c, "hw", x, 2)});
  ValueId blocks = c.add_node(Op::Reshape, "split_channels", {x, split_shape});
  // -> [N, C/b², H, b, W, b]
  const std::vector<int64_t> perm = dcr ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3};
  ValueId moved = c.add_node(Op::Transpose, "interleave", {blocks}, {{"perm", Attr(perm)}});
  ValueId hw_b = c.add_node(Op::Mul, "hw_times_b", {dims(c, "hw_out", x, 2), c.add_constant(Tensor::from_i64({b}), "b")});
  c.node.op = Op::Reshape;
  c.node.inputs = {moved, concat(c, "out_shape", {c.add_constant(Tensor::from_i64({0, -1}), "n_c"), hw_b})};
}

// SpaceToDepth: y [N, C*b², H/b, W/b], the inverse of DCR: x as [N, C, H/b, b, W/b, b], the block's
// rows and columns moved ahead of C. H / b and W / b are exact (a remainder fails the first reshape).
void import_SpaceToDepth(ImportCtx& c) {
  const int64_t b = take_blocksize(c);
  const ValueId x = x_of(c);
  ValueId bv = c.add_constant(Tensor::from_i64({b}), "b");
  ValueId h_b = c.add_node(Op::Div, "h_over_b", {dims(c, "h", x, 2, 3), bv});
  ValueId w_b = c.add_node(Op::Div, "w_over_b", {dims(c, "w", x, 3, 4), bv});
  ValueId split_shape = concat(c, "split_shape", {dims(c, "nc", x, 0, 2), h_b, bv, w_b, bv});
  ValueId blocks = c.add_node(Op::Reshape, "split_space", {x, split_shape});
  // [N, C, H/b, b, W/b, b] -> [N, b, b, C, H/b, W/b]
  ValueId moved = c.add_node(Op::Transpose, "gather_blocks", {blocks},
                             {{"perm", Attr(std::vector<int64_t>{0, 3, 5, 1, 2, 4})}});
  ValueId hw_b = c.add_node(Op::Div, "hw_over_b", {dims(c, "hw", x, 2), bv});
  c.node.op = Op::Reshape;
  c.node.inputs = {moved, concat(c, "out_shape", {c.add_constant(Tensor::from_i64({0, -1}), "n_c"), hw_b})};
}

}  // namespace onnxdp
