// ONNX import of the math ops: one function per op (see graph/op_table.h).
//
// Within opsets 7..27 most math ops changed only their type lists (onnxdp's shape rules check
// dtypes), so their import has nothing to normalise. The exceptions:
//   Clip < 11          min / max attributes -> constant inputs 1 / 2
//   Softmax, LogSoftmax < 13: axis defaulted to 1 and the input was coerced to 2-D
//                      [prod(dims[:axis]), prod(dims[axis:])]; rewritten to the opset-13 form.
#include "importer/importer.h"

namespace onnxdp {

namespace {

// Softmax-1 / LogSoftmax-1 / -11 (opset < 13): y = reshape(softmax(flatten(x, axis) along its
// last dim), shape(x)), the axis defaulting to 1. That is the opset-13 op along `axis` whenever
// axis is the last dim, which is what exporters emit (torch: axis = rank - 1), so:
//   axis == -1, or axis == rank - 1 where x's rank is known now  -> keep the node, axis = -1
//   otherwise -> Shape(x), Flatten(x, axis), <op>(axis = -1), and this node becomes the Reshape.
void import_legacy_softmax(ImportCtx& c) {
  if (c.opset >= 13) return;
  int64_t axis = c.node.has("axis") ? c.node.i("axis") : 1;
  if (c.node.inputs.empty() || c.node.inputs[0] == kNoValue) c.fail("input 0 is missing");
  ValueId x = c.node.inputs[0];
  const Value& xv = c.graph.value(x);
  bool rank_known = xv.producer < 0;  // graph inputs, initializers, constants carry their shape
  if (axis == -1 || (rank_known && axis == int64_t(xv.shape.size()) - 1)) {
    c.node.attrs["axis"] = int64_t(-1);
    return;
  }
  Op op = c.node.op;
  ValueId shape = c.add_node(Op::Shape, "input_shape", {x}, {});
  ValueId flat = c.add_node(Op::Flatten, "flatten", {x}, {{"axis", Attr(axis)}});
  ValueId soft = c.add_node(op, std::string(op_name(op)) + "_2d", {flat}, {{"axis", Attr(int64_t(-1))}});
  c.node.op = Op::Reshape;
  c.node.inputs = {soft, shape};
  c.node.attrs = {{"allowzero", Attr(int64_t(1))}};
}

}  // namespace

void import_Add(ImportCtx& c) {}
void import_Sub(ImportCtx& c) {}
void import_Mul(ImportCtx& c) {}
void import_Div(ImportCtx& c) {}
void import_Pow(ImportCtx& c) {}
void import_Min(ImportCtx& c) {}
void import_Max(ImportCtx& c) {}
void import_Sqrt(ImportCtx& c) {}
void import_Exp(ImportCtx& c) {}
void import_Log(ImportCtx& c) {}
void import_Neg(ImportCtx& c) {}
void import_Abs(ImportCtx& c) {}
void import_Reciprocal(ImportCtx& c) {}
void import_Relu(ImportCtx& c) {}
void import_LeakyRelu(ImportCtx& c) {}
void import_Sigmoid(ImportCtx& c) {}
void import_Tanh(ImportCtx& c) {}
void import_Erf(ImportCtx& c) {}
void import_Gelu(ImportCtx& c) {}
void import_Softplus(ImportCtx& c) {}
void import_Sin(ImportCtx& c) {}
void import_Cos(ImportCtx& c) {}
void import_HardSigmoid(ImportCtx& c) {}
void import_HardSwish(ImportCtx& c) {}
void import_Mod(ImportCtx& c) {}
void import_Elu(ImportCtx& c) {}
void import_Selu(ImportCtx& c) {}
void import_Celu(ImportCtx& c) {}
void import_Mish(ImportCtx& c) {}
void import_Sign(ImportCtx& c) {}
void import_PRelu(ImportCtx& c) {}
void import_CumSum(ImportCtx& c) {}

// Clip-6 (opset < 11): float attributes min / max -> f32 scalar constant inputs 1 / 2 (the shape
// rule and kernel accept f32 bounds for an f64 input). An absent attribute leaves its input absent.
void import_Clip(ImportCtx& c) {
  if (c.opset >= 11) return;
  for (auto [attr, index] : {std::pair<const char*, size_t>{"min", 1}, {"max", 2}}) {
    auto it = c.node.attrs.find(attr);
    if (it == c.node.attrs.end()) continue;
    const float* v = std::get_if<float>(&it->second);
    if (!v) c.fail("attribute '{}' must be a float", attr);
    ValueId k = c.add_constant(Tensor::scalar_f32(*v), attr);
    c.node.attrs.erase(it);
    if (c.node.inputs.size() <= index) c.node.inputs.resize(index + 1, kNoValue);
    c.node.inputs[index] = k;
  }
}

void import_Softmax(ImportCtx& c) { import_legacy_softmax(c); }
void import_LogSoftmax(ImportCtx& c) { import_legacy_softmax(c); }
void import_MatMul(ImportCtx& c) {}
// Gemm-7..10 require C, Gemm-11+ make it optional; both broadcast C one way: nothing to change.
void import_Gemm(ImportCtx& c) {}
// onnxdp's own, made by graph/passes/fuse_epilogues.cpp: a model naming it fails.
void import_FusedGemm(ImportCtx& c) { c.fail("internal onnxdp op, not importable"); }
void import_FusedMatMul(ImportCtx& c) { c.fail("internal onnxdp op, not importable"); }

}  // namespace onnxdp
