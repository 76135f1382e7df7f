// ONNX import of the tensor ops: one function per op (see graph/op_table.h).
// Older opsets' attribute forms become the inputs of the newest form (op_table.h notes).
#include "importer/importer.h"

namespace onnxdp {

void import_Identity(ImportCtx& c) {}

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
void import_Shape(ImportCtx& c) {}
void import_Size(ImportCtx& c) {}
void import_Flatten(ImportCtx& c) {}
void import_Reshape(ImportCtx& c) {}
void import_Transpose(ImportCtx& c) {}

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

void import_Gather(ImportCtx& c) {}
void import_Expand(ImportCtx& c) {}
void import_Tile(ImportCtx& c) {}

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

void import_Trilu(ImportCtx& c) {}
void import_GatherElements(ImportCtx& c) {}

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

}  // namespace onnxdp
