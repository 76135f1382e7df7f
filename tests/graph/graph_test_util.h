// Building small graphs in tests: graph inputs, a node's output, counting ops.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/plan.h"
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

// A constant of this name holding t (its dtype and shape).
inline ValueId add_constant(Graph& g, const std::string& name, Tensor t) {
  Value v;
  v.name = name;
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.kind = ValueKind::constant;
  v.data = std::move(t);
  return g.add_value(std::move(v));
}

// The first output of node index `node` (as Graph::add_node returns it).
inline ValueId out(Graph& g, int node) { return g.nodes[size_t(node)].outputs[0]; }

// Every graph input filled with standard normal draws from a generator seeded `seed`, in input
// order (float32 or float64 inputs), by name: what a pass's before-and-after runs are fed.
inline std::map<std::string, Tensor> random_feeds(const Graph& g, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd;
  std::map<std::string, Tensor> f;
  for (ValueId i : g.inputs) {
    const Value& v = g.value(i);
    Tensor t(v.dtype, v.shape);
    for (int64_t k = 0; k < t.numel(); ++k) {
      if (v.dtype == DType::f64) t.as<double>()[k] = nd(rng);
      else t.as<float>()[k] = float(nd(rng));
    }
    f[v.name] = std::move(t);
  }
  return f;
}

// Runs `before` and `after` (a pass's input and output) on the CPU with the same feeds and checks
// every output: bit for bit with rel = 0, else within rel * (1 + |before's value|). Returns
// after's outputs.
inline std::map<std::string, Tensor> check_same_outputs(Graph before, Graph after,
                                                        const std::map<std::string, Tensor>& in, double rel) {
  Plan a(std::move(before)), b(std::move(after));
  const std::map<std::string, Tensor> ya = a.run(in);
  std::map<std::string, Tensor> yb = b.run(in);
  REQUIRE(ya.size() == yb.size());
  for (const auto& [name, t] : ya) {
    INFO(name);
    REQUIRE(t.shape() == yb.at(name).shape());
    const std::vector<double> x = t.to_f64(), z = yb.at(name).to_f64();
    for (size_t i = 0; i < x.size(); ++i) {
      if (rel == 0) CHECK(x[i] == z[i]);
      else CHECK(std::fabs(x[i] - z[i]) <= rel * (1 + std::fabs(x[i])));
    }
  }
  return yb;
}

// The nodes of g by name (a pass test's way to find what it rewrote).
inline std::map<std::string, const Node*> by_name(const Graph& g) {
  std::map<std::string, const Node*> m;
  for (const Node& n : g.nodes) m[n.name] = &n;
  return m;
}

inline int count_ops(const Graph& g, Op op) {
  int n = 0;
  for (const Node& x : g.nodes) n += x.op == op;
  return n;
}

}  // namespace onnxdp::test
