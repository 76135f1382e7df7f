// See autocast.h.
#include "graph/passes/autocast.h"

#include <vector>

namespace onnxdp {

namespace {

ValueId new_value(Graph& g, const std::string& name, DType t, const Shape& s) {
  Value v;
  v.name = name;
  v.dtype = t;
  v.shape = s;
  return g.add_value(std::move(v));
}

// The node y = Cast(x), to y's dtype.
Node cast_node(const Graph& g, ValueId x, ValueId y, const std::string& name) {
  Node n;
  n.name = name;
  n.op = Op::Cast;
  n.inputs = {x};
  n.outputs = {y};
  n.attrs["to"] = Attr(int64_t(dtype_to_onnx(g.value(y).dtype)));
  return n;
}

}  // namespace

int autocast(Graph& g, DType low) {
  if (low != DType::bf16 && low != DType::f16) fail("autocast: {} is not a 16-bit float type", dtype_name(low));
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  int cast = 0;
  for (Node& n : g.nodes) {
    const bool product = n.op == Op::MatMul || n.op == Op::Gemm || n.op == Op::Conv || n.op == Op::ConvTranspose;
    if (!product || g.value(n.outputs.at(0)).dtype != DType::f32) {
      out.push_back(std::move(n));
      continue;
    }
    const std::string base = n.name.empty() ? std::string(op_name(n.op)) : n.name;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ValueId x = n.inputs[k];
      if (x == kNoValue || g.value(x).dtype != DType::f32) continue;
      const std::string name = base + "/autocast/in" + std::to_string(k);
      n.inputs[k] = new_value(g, name, low, g.value(x).shape);
      out.push_back(cast_node(g, x, n.inputs[k], name));
    }
    // The product writes a 16-bit value; a Cast back produces the node's old output.
    const ValueId y = n.outputs[0];
    n.outputs[0] = new_value(g, base + "/autocast/y", low, g.value(y).shape);
    Node back = cast_node(g, n.outputs[0], y, base + "/autocast/out");
    out.push_back(std::move(n));
    out.push_back(std::move(back));
    ++cast;
  }
  g.nodes = std::move(out);
  index_producers(g);
  return cast;
}

int autocast(Graph& g, const std::string& mixed_precision) {
  if (mixed_precision == "no") return 0;
  if (mixed_precision == "bf16") return autocast(g, DType::bf16);
  if (mixed_precision == "fp16") return autocast(g, DType::f16);
  fail("--mixed-precision '{}': expected no, bf16 or fp16", mixed_precision);
}

}  // namespace onnxdp
