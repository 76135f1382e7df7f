// Building small graphs in tests: graph inputs, a node's output, counting ops.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onnxdp::test {

// A graph input of this name, shape and dtype, appended to g.inputs.
inline ValueId add_input(Graph& g, const std::string& name, Shape s, DType t = DType::f32) {
  Value v;
  v.name = name;
  v.dtype = t;
  v.shape = std::move(s);
  v.kind = ValueKind::input;
  ValueId id = g.add_value(std::move(v));
  g.inputs.push_back(id);
  return id;
}

// A 1-D int64 constant (a shape, axes, repeats ...) of these values.
inline ValueId add_ints(Graph& g, const std::string& name, const std::vector<int64_t>& vals) {
  Value v;
  v.name = name;
  v.dtype = DType::i64;
  v.shape = {int64_t(vals.size())};
  v.kind = ValueKind::constant;
  v.data = Tensor::from_i64(vals);
  return g.add_value(std::move(v));
}

// The first output of node index `node` (as Graph::add_node returns it).
inline ValueId out(Graph& g, int node) { return g.nodes[size_t(node)].outputs[0]; }

inline int count_ops(const Graph& g, Op op) {
  int n = 0;
  for (const Node& x : g.nodes) n += x.op == op;
  return n;
}

}  // namespace onnxdp::test
