// Gradient rules checked against central finite differences of the forward kernels: for each
// case, loss = sum(op(...) * R) with a fixed random R, and every float input is a parameter.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>

#include "exec/plan.h"
#include "graph/autodiff.h"

using namespace onnxdp;

namespace {

struct Case {
  Graph g;
  std::vector<ValueId> params;
  std::mt19937 rng{42};

  // A parameter with uniform values in [lo, hi], random sign when `signed_away` (|v| in [lo, hi]).
  ValueId param(const std::string& name, Shape s, float lo = -1, float hi = 1, bool signed_away = false) {
    Tensor t(DType::f32, s);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v = u(rng);
      if (signed_away && (rng() & 1)) v = -v;
      t.as<float>()[i] = v;
    }
    Value v;
    v.name = name;
    v.dtype = DType::f32;
    v.shape = s;
    v.kind = ValueKind::parameter;
    v.data = t;
    ValueId id = g.add_value(std::move(v));
    params.push_back(id);
    return id;
  }
  ValueId constant(Tensor t, const std::string& name) {
    Value v;
    v.name = name;
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.kind = ValueKind::constant;
    v.data = std::move(t);
    return g.add_value(std::move(v));
  }
  ValueId ints(std::vector<int64_t> v, const std::string& name) { return constant(Tensor::from_i64(v), name); }
  ValueId node(Op op, std::vector<ValueId> ins, std::map<std::string, Attr> attrs = {}) {
    std::string nm = "n" + std::to_string(g.nodes.size());
    int idx = g.add_node(op, nm, std::move(ins), {nm}, std::move(attrs));
    return g.nodes[size_t(idx)].outputs[0];
  }
};

// loss = sum(out * R); compares autodiff's gradients with finite differences.
void gradcheck(Case& c, ValueId out, float eps = 1e-2f, float rtol = 3e-2f, float atol = 3e-3f) {
  const Value& ov = c.g.value(out);
  Tensor r(DType::f32, ov.shape);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < r.numel(); ++i) r.as<float>()[i] = u(c.rng);
  ValueId rv = c.constant(r, "R");
  ValueId loss = c.node(Op::ReduceSum, {c.node(Op::Mul, {out, rv})}, {{"keepdims", Attr(int64_t(0))}});

  Graph fwd = c.g;
  fwd.outputs = {loss};
  Plan forward(fwd);
  auto eval = [&]() { return double(forward.run({}).at(fwd.value(loss).name).as<float>()[0]); };

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
    // The forward plan shares the parameter bytes with c.g, so perturbing them here is seen by it.
    Tensor& data = c.g.value(c.params[p]).data;
    const Tensor& analytic = got.at(bwd.value(grads[p]).name);
    REQUIRE(analytic.shape() == data.shape());
    for (int64_t i = 0; i < data.numel(); ++i) {
      float saved = data.as<float>()[i];
      data.as<float>()[i] = saved + eps;
      double up = eval();
      data.as<float>()[i] = saved - eps;
      double down = eval();
      data.as<float>()[i] = saved;
      double numeric = (up - down) / (2 * eps);
      double a = analytic.as<float>()[i];
      INFO("param " << c.g.value(c.params[p]).name << " element " << i << ": autodiff " << a << ", numeric " << numeric);
      CHECK(std::abs(a - numeric) <= atol + rtol * std::abs(numeric));
    }
  }
}

}  // namespace

TEST_CASE("autodiff: Gemm + Relu, all transposes and bias broadcast") {
  for (int64_t ta = 0; ta < 2; ++ta)
    for (int64_t tb = 0; tb < 2; ++tb) {
      Case c;
      ValueId a = c.param("a", ta ? Shape{4, 3} : Shape{3, 4});
      ValueId b = c.param("b", tb ? Shape{5, 4} : Shape{4, 5});
      ValueId bias = c.param("bias", {5});
      ValueId y = c.node(Op::Gemm, {a, b, bias},
                         {{"transA", Attr(ta)}, {"transB", Attr(tb)}, {"alpha", Attr(0.7f)}, {"beta", Attr(1.3f)}});
      gradcheck(c, c.node(Op::Relu, {y}));
    }
}

TEST_CASE("autodiff: batched broadcasting MatMul") {
  Case c;
  ValueId a = c.param("a", {2, 1, 3, 4});
  ValueId b = c.param("b", {3, 4, 2});
  gradcheck(c, c.node(Op::MatMul, {a, b}));
}

TEST_CASE("autodiff: broadcasting arithmetic") {
  Case c;
  ValueId a = c.param("a", {2, 3}, 0.5f, 1.5f);
  ValueId b = c.param("b", {3}, 0.5f, 1.5f);
  ValueId s = c.node(Op::Sub, {c.node(Op::Add, {a, b}), c.node(Op::Mul, {a, b})});
  ValueId d = c.node(Op::Div, {s, b});
  gradcheck(c, c.node(Op::Pow, {c.node(Op::Add, {d, c.node(Op::Mul, {a, a})}), b}));
}

TEST_CASE("autodiff: unary math") {
  for (Op op : {Op::Sqrt, Op::Exp, Op::Log, Op::Neg, Op::Reciprocal, Op::Sigmoid, Op::Tanh, Op::Erf, Op::Gelu,
                Op::Softplus, Op::Abs, Op::Relu, Op::LeakyRelu}) {
    CAPTURE(op_name(op));
    Case c;
    bool positive = op == Op::Sqrt || op == Op::Log || op == Op::Reciprocal;
    ValueId x = c.param("x", {2, 5}, positive ? 0.5f : 0.2f, positive ? 2.0f : 1.5f, !positive);
    gradcheck(c, c.node(op, {x}));
  }
}

TEST_CASE("autodiff: Clip passes the gradient inside the bounds only") {
  Case c;
  ValueId x = c.param("x", {3, 4}, 0.1f, 2.0f, true);
  ValueId lo = c.constant(Tensor::scalar_f32(-0.5f), "lo");
  ValueId hi = c.constant(Tensor::scalar_f32(0.8f), "hi");
  gradcheck(c, c.node(Op::Clip, {x, lo, hi}));
}

TEST_CASE("autodiff: Softmax and LogSoftmax on inner and outer axes") {
  for (int64_t axis : {-1, 0, 1}) {
    Case c;
    ValueId x = c.param("x", {3, 4, 2});
    ValueId s = c.node(Op::Softmax, {x}, {{"axis", Attr(axis)}});
    gradcheck(c, c.node(Op::Add, {s, c.node(Op::LogSoftmax, {x}, {{"axis", Attr(axis)}})}));
  }
}

TEST_CASE("autodiff: Where routes the gradient by the condition") {
  Case c;
  ValueId x = c.param("x", {2, 3});
  ValueId y = c.param("y", {3});
  Tensor cond(DType::boolean, {2, 3});
  for (int i = 0; i < 6; ++i) cond.as<bool>()[i] = (i % 3) != 1;
  gradcheck(c, c.node(Op::Where, {c.constant(cond, "cond"), x, y}));
}

TEST_CASE("autodiff: tensor ops re-view the gradient") {
  Case c;
  ValueId x = c.param("x", {2, 3, 4});
  ValueId y = c.param("y", {2, 2, 4});
  ValueId t = c.node(Op::Transpose, {x}, {{"perm", Attr(std::vector<int64_t>{1, 0, 2})}});   // [3, 2, 4]
  ValueId r = c.node(Op::Reshape, {t, c.ints({2, 3, 4}, "shape")});                         // [2, 3, 4]
  ValueId cat = c.node(Op::Concat, {r, y}, {{"axis", Attr(int64_t(1))}});                  // [2, 5, 4]
  ValueId sl = c.node(Op::Slice, {cat, c.ints({1, 0}, "st"), c.ints({4, 3}, "en"), c.ints({1, 2}, "ax")});  // [2, 3, 3]
  ValueId pad = c.node(Op::Pad, {sl, c.ints({0, 1, 0, 1, 0, 2}, "pads")});                  // [3, 4, 5]
  ValueId e = c.node(Op::Expand, {c.param("z", {4, 1}), c.ints({3, 4, 5}, "eshape")});
  gradcheck(c, c.node(Op::Mul, {pad, e}));
}

TEST_CASE("autodiff: reductions") {
  Case c;
  ValueId x = c.param("x", {2, 3, 4});
  ValueId s = c.node(Op::ReduceSum, {x, c.ints({1}, "a1")}, {{"keepdims", Attr(int64_t(1))}});
  ValueId m = c.node(Op::ReduceMean, {x, c.ints({0, 2}, "a2")}, {{"keepdims", Attr(int64_t(0))}});
  ValueId all = c.node(Op::ReduceMean, {x}, {{"keepdims", Attr(int64_t(0))}});
  ValueId sm = c.node(Op::Mul, {s, c.node(Op::Unsqueeze, {c.node(Op::Unsqueeze, {m, c.ints({0}, "u0")}), c.ints({2}, "u2")})});
  gradcheck(c, c.node(Op::Add, {sm, all}));
}

TEST_CASE("autodiff: a value used twice accumulates both gradients") {
  Case c;
  ValueId x = c.param("x", {3});
  gradcheck(c, c.node(Op::Mul, {c.node(Op::Exp, {x}), c.node(Op::Tanh, {x})}));
}

TEST_CASE("autodiff: a missing gradient rule names the node") {
  Case c;
  ValueId x = c.param("x", {2, 3});
  ValueId y = c.node(Op::ReduceMax, {x}, {{"keepdims", Attr(int64_t(0))}});
  std::vector<ValueId> ps = c.params;
  CHECK_THROWS_WITH_AS(autodiff(c.g, y, ps), doctest::Contains("(ReduceMax): gradient"), Error);
}
