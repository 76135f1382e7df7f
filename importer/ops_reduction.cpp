// ONNX import of the reduction ops that need one (see graph/op_table.h; ArgMax and ArgMin
// take the default, importer/importer.h).
#include "importer/importer.h"

namespace onnxdp {

// The axes moved from an attribute to input 1 in opset 18 (ReduceSum: opset 13).
void import_ReduceMean(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
}
void import_ReduceSum(ImportCtx& c) {
  if (c.opset < 13) c.attr_to_input("axes", 1);
}
void import_ReduceMax(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
}
void import_ReduceMin(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
}
void import_ReduceProd(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
}

// ---- composites (graph/op_table.h): each arrives as a ReduceSum node with its own inputs and
// attributes (keepdims, noop_with_empty_axes; axes as an attribute before opset 18).

namespace {

// x and the axes input of the composite node, with the axes moved to input 1 for older opsets.
ValueId composite_input(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
  if (c.node.inputs.empty() || c.node.inputs[0] == kNoValue) c.fail("input 0 is missing");
  return c.node.inputs[0];
}

// A helper reduction `op` of v over the node's axes, with the node's attributes (keepdims as given).
ValueId reduce_like_node(ImportCtx& c, Op op, const std::string& suffix, ValueId v,
                         std::map<std::string, Attr> attrs) {
  std::vector<ValueId> in{v};
  if (c.node.inputs.size() > 1 && c.node.inputs[1] != kNoValue) in.push_back(c.node.inputs[1]);
  return c.add_node(op, suffix, std::move(in), std::move(attrs));
}

}  // namespace

void import_ReduceSumSquare(ImportCtx& c) {  // ReduceSum(x * x)
  ValueId x = composite_input(c);
  c.node.inputs[0] = c.add_node(Op::Mul, "square", {x, x});
}

void import_ReduceL1(ImportCtx& c) {  // ReduceSum(|x|)
  ValueId x = composite_input(c);
  c.node.inputs[0] = c.add_node(Op::Abs, "abs", {x});
}

void import_ReduceL2(ImportCtx& c) {  // Sqrt(ReduceSum(x * x))
  ValueId x = composite_input(c);
  ValueId sum = reduce_like_node(c, Op::ReduceSum, "sum_square", c.add_node(Op::Mul, "square", {x, x}), c.node.attrs);
  c.node.op = Op::Sqrt;
  c.node.inputs = {sum};
  c.node.attrs.clear();
}

void import_ReduceLogSum(ImportCtx& c) {  // Log(ReduceSum(x))
  ValueId x = composite_input(c);
  ValueId sum = reduce_like_node(c, Op::ReduceSum, "sum", x, c.node.attrs);
  c.node.op = Op::Log;
  c.node.inputs = {sum};
  c.node.attrs.clear();
}

// log(sum(exp(x - m))) + m with m = ReduceMax(x) over the same axes: no exp overflows (as
// torch.logsumexp).
void import_ReduceLogSumExp(ImportCtx& c) {
  ValueId x = composite_input(c);
  std::map<std::string, Attr> kept = c.node.attrs;
  kept["keepdims"] = Attr(int64_t(1));
  ValueId m = reduce_like_node(c, Op::ReduceMax, "max", x, kept);
  ValueId e = c.add_node(Op::Exp, "exp", {c.add_node(Op::Sub, "shifted", {x, m})});
  ValueId sum = reduce_like_node(c, Op::ReduceSum, "sum_exp", e, c.node.attrs);
  const bool keepdims = c.node.i("keepdims") != 0;
  ValueId shift = keepdims ? m : reduce_like_node(c, Op::ReduceMax, "max_dropped", x, c.node.attrs);
  c.node.op = Op::Add;
  c.node.inputs = {c.add_node(Op::Log, "log", {sum}), shift};
  c.node.attrs.clear();
}

// TopK-1 gave k as an attribute (moved to input 1 here); opset 10 made it input 1; opset 11 added
// largest and sorted (defaults keep the old meaning) and negative axes.
void import_TopK(ImportCtx& c) {
  if (c.opset < 10) {
    auto it = c.node.attrs.find("k");
    const int64_t* k = it == c.node.attrs.end() ? nullptr : std::get_if<int64_t>(&it->second);
    if (!k) c.fail("attribute 'k' (an int) is required before opset 10");
    ValueId kv = c.add_constant(Tensor::from_i64({*k}), "k");
    c.node.attrs.erase(it);
    c.node.inputs.resize(1);
    c.node.inputs.push_back(kv);
  }
}

}  // namespace onnxdp
