// What the passes that rewrite nodes in place (fuse_epilogues, fold_transposes) share: how many
// node inputs read each value, the values that must survive (the graph's outputs and the caller's
// `keep`), and which nodes go; finish() removes those and renumbers the producers.
#pragma once
#include <set>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

struct NodeRewrite {
  Graph& g;
  std::vector<int> readers;  // per value: how many node inputs read it
  std::set<ValueId> kept;    // the graph's outputs and the caller's `keep`
  std::vector<bool> drop;    // per node: goes at finish()

  NodeRewrite(Graph& graph, const std::vector<ValueId>& keep)
      : g(graph), readers(count_readers(graph)), kept(keep.begin(), keep.end()), drop(graph.nodes.size(), false) {
    kept.insert(g.outputs.begin(), g.outputs.end());
  }

  // The node producing v, of this op, when v is read by one node input, is not kept and its
  // producer is not dropped yet; else nullptr.
  Node* sole_producer(ValueId v, Op op) {
    if (v == kNoValue) return nullptr;
    const Value& x = g.value(v);
    if (x.producer < 0 || drop[size_t(x.producer)] || readers[size_t(v)] != 1 || kept.count(v)) return nullptr;
    Node& n = g.nodes[size_t(x.producer)];
    return n.op == op ? &n : nullptr;
  }

  // The value of x when it is a one-element constant of dtype t (float32 or float64).
  bool scalar_constant(ValueId x, DType t, double& v) const {
    const Value& c = g.value(x);
    if (c.kind != ValueKind::constant || c.dtype != t || c.data.numel() != 1) return false;
    v = t == DType::f32 ? double(c.data.as<float>()[0]) : c.data.as<double>()[0];
    return true;
  }

  // Node n now reads `inputs` (the readers' counts follow).
  void reads(Node& n, std::vector<ValueId> inputs) {
    for (ValueId v : n.inputs)
      if (v != kNoValue) --readers[size_t(v)];
    n.inputs = std::move(inputs);
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++readers[size_t(v)];
  }

  // Removes the dropped nodes; returns how many went.
  int finish() {
    int gone = 0;
    for (bool d : drop) gone += d;
    if (gone == 0) return 0;
    std::vector<Node> left;
    left.reserve(g.nodes.size() - size_t(gone));
    for (size_t ni = 0; ni < g.nodes.size(); ++ni)
      if (!drop[ni]) left.push_back(std::move(g.nodes[ni]));
    g.nodes = std::move(left);
    index_producers(g);
    return gone;
  }
};

}  // namespace onnxdp
