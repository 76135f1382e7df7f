// ONNX import of the generator ops: one function per op (see graph/op_table.h).
#include <cstring>

#include "importer/importer.h"

namespace onnxdp {

// Opset 12+ Constant may give its value as value_float / value_floats / value_int / value_ints;
// all become the `value` tensor attribute. Strings and sparse tensors are not onnxdp tensors.
void import_Constant(ImportCtx& c) {
  if (c.node.has("sparse_value")) c.fail("sparse constants (sparse_value) are not supported");
  if (c.node.has("value_string") || c.node.has("value_strings"))
    c.fail("string constants are not supported (onnxdp tensors hold numbers and bools)");
  int given = 0;
  for (const char* a : {"value", "value_float", "value_floats", "value_int", "value_ints"}) given += c.node.has(a);
  if (given != 1) c.fail("exactly one of value, value_float, value_floats, value_int, value_ints is required, {} given", given);
  auto& attrs = c.node.attrs;
  if (auto it = attrs.find("value_float"); it != attrs.end()) {
    attrs["value"] = Tensor::scalar_f32(std::get<float>(it->second));
    attrs.erase("value_float");
  } else if (auto it = attrs.find("value_floats"); it != attrs.end()) {
    const auto& v = std::get<std::vector<float>>(it->second);
    Tensor t(DType::f32, {int64_t(v.size())});
    if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
    attrs["value"] = t;
    attrs.erase("value_floats");
  } else if (auto it = attrs.find("value_int"); it != attrs.end()) {
    attrs["value"] = Tensor::scalar_i64(std::get<int64_t>(it->second));
    attrs.erase("value_int");
  } else if (auto it = attrs.find("value_ints"); it != attrs.end()) {
    const auto& v = std::get<std::vector<int64_t>>(it->second);
    Tensor t(DType::i64, {int64_t(v.size())});
    if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
    attrs["value"] = t;
    attrs.erase("value_ints");
  }
  if (!std::holds_alternative<Tensor>(attrs["value"])) c.fail("attribute 'value' must be a tensor");
}

// The optional value attribute holds one element (its dtype is the output's); default 0 f32.
void import_ConstantOfShape(ImportCtx& c) {
  if (c.node.has("value")) {
    auto* t = std::get_if<Tensor>(&c.node.attrs["value"]);
    if (!t) c.fail("attribute 'value' must be a tensor");
    if (t->numel() != 1) c.fail("attribute 'value' must hold one element, it has shape {}", shape_str(t->shape()));
  }
}

// Opset 27's stash_type (the precision of f16/bf16 ranges) is ignored: onnxdp always computes
// start + i * delta in double and rounds once to the output type, at least as precise as either
// stash type the spec allows (float, double).
// The bounds set the output's length: a float initializer feeding them (torch.arange(2.0, ...)
// exported with its bounds stored as initializers) is a constant of the model, not a parameter, so
// the Range folds at load.
void import_Range(ImportCtx& c) {
  c.ignore_attr("stash_type");
  for (ValueId in : c.node.inputs)
    if (in != kNoValue && c.graph.value(in).kind == ValueKind::parameter) c.graph.value(in).kind = ValueKind::constant;
}

}  // namespace onnxdp
