// Gradient checking for tests: loss = sum(out * R) with a fixed random R; autodiff's gradients
// of every parameter against float64 central differences of the forward kernels, held to
// |analytic - numeric| <= 1e-5 + 1e-3 |numeric| (the training issue's bar).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "exec/plan.h"
#include "graph/autodiff.h"
#include "tests/graph/graph_test_util.h"

namespace onnxdp::testing {

struct Case {
  Graph g;
  std::vector<ValueId> params;
  std::mt19937 rng{42};
  DType dtype = DType::f64;

  void set(Tensor& t, int64_t i, double v) {
    if (t.dtype() == DType::f64) t.as<double>()[i] = v;
    else t.as<float>()[i] = float(v);
  }
  static double get(const Tensor& t, int64_t i) {
    return t.dtype() == DType::f64 ? t.as<double>()[i] : double(t.as<float>()[i]);
  }
  // A parameter with uniform values in [lo, hi]; with `signed_away`, |v| in [lo, hi] and a random
  // sign (keeps values away from kinks at 0).
  ValueId param(const std::string& name, Shape s, double lo = -1, double hi = 1, bool signed_away = false) {
    Tensor t(dtype, s);
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = u(rng);
      if (signed_away && (rng() & 1)) v = -v;
      set(t, i, v);
    }
    Value v;
    v.name = name;
    v.dtype = dtype;
    v.shape = s;
    v.kind = ValueKind::parameter;
    v.data = t;
    ValueId id = g.add_value(std::move(v));
    params.push_back(id);
    return id;
  }
  ValueId constant(Tensor t, const std::string& name) { return test::add_constant(g, name, std::move(t)); }
  ValueId scalar(double x, const std::string& name) {
    Tensor t(dtype, {});
    set(t, 0, x);
    return constant(t, name);
  }
  ValueId ints(std::vector<int64_t> v, const std::string& name) { return constant(Tensor::from_i64(v), name); }
  std::vector<ValueId> node_n(Op op, std::vector<ValueId> ins, std::map<std::string, Attr> attrs, int n_out) {
    // fmt rather than "n" + std::to_string(..): GCC 12 warns falsely (-Wrestrict) on the latter.
    std::string nm = fmt::format("n{}", g.nodes.size());
    std::vector<std::string> outs;
    for (int k = 0; k < n_out; ++k) outs.push_back(fmt::format("{}_{}", nm, k));
    int idx = g.add_node(op, nm, std::move(ins), outs, std::move(attrs));
    return g.nodes[size_t(idx)].outputs;
  }
  ValueId node(Op op, std::vector<ValueId> ins, std::map<std::string, Attr> attrs = {}) {
    return node_n(op, std::move(ins), std::move(attrs), 1)[0];
  }
};

// loss = sum(out * R); compares autodiff's gradients with central finite differences.
inline void gradcheck(Case& c, ValueId out, double eps = 1e-6, double rtol = 1e-3, double atol = 1e-5) {
  Tensor r(c.g.value(out).dtype, c.g.value(out).shape);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < r.numel(); ++i) c.set(r, i, u(c.rng));
  ValueId rv = c.constant(r, "R");
  ValueId loss = c.node(Op::ReduceSum, {c.node(Op::Mul, {out, rv})}, {{"keepdims", Attr(int64_t(0))}});

  Graph fwd = c.g;
  fwd.outputs = {loss};
  Plan forward(fwd);
  const std::string loss_name = fwd.value(loss).name;
  auto eval = [&]() { return Case::get(forward.run({}).at(loss_name), 0); };

  Graph bwd = c.g;
  std::vector<ValueId> grads = autodiff(bwd, loss, c.params);
  bwd.outputs.clear();
  for (ValueId gid : grads) {
    REQUIRE(gid != kNoValue);
    bwd.outputs.push_back(gid);
  }
  verify(bwd);
  Plan backward(bwd);
  auto got = backward.run({});

  for (size_t p = 0; p < c.params.size(); ++p) {
    // The forward plan shares the parameter bytes with c.g: perturbing them here is seen by it.
    Tensor& data = c.g.value(c.params[p]).data;
    const Tensor& analytic = got.at(bwd.value(grads[p]).name);
    REQUIRE(analytic.shape() == data.shape());
    for (int64_t i = 0; i < data.numel(); ++i) {
      double saved = Case::get(data, i);
      c.set(data, i, saved + eps);
      double up = eval();
      c.set(data, i, saved - eps);
      double down = eval();
      c.set(data, i, saved);
      double numeric = (up - down) / (2 * eps);
      double a = Case::get(analytic, i);
      INFO("param " << c.g.value(c.params[p]).name << " element " << i << ": autodiff " << a << ", numeric " << numeric);
      CHECK(std::abs(a - numeric) <= atol + rtol * std::abs(numeric));
    }
  }
}

}  // namespace onnxdp::testing
