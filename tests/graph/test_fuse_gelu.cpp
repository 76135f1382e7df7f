// The fuse_gelu pass (graph/passes/fuse_gelu.h) and the GeluGrad op it leads to: the exported
// five-node GELU becomes one Gelu in tiny_lm and in the other spellings, near misses stay, the
// values stay (CPU, emulated CUDA); GeluGrad on the emulated device equals the CPU kernel.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "exec/device_backend.h"
#include "exec/plan.h"
#include "graph/passes/fuse_gelu.h"
#include "tests/graph/graph_test_util.h"
#include "compile/compile.h"

using namespace onnxdp;
using onnxdp::test::add_constant;
using onnxdp::test::add_input;
using onnxdp::test::count_ops;
using onnxdp::test::out;

namespace {

ValueId scalar(Graph& g, const std::string& name, float v) {
  Tensor t(DType::f32, {});
  t.as<float>()[0] = v;
  return add_constant(g, name, std::move(t));
}

// gelu_a: Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5), torch's legacy export;
// gelu_b: Mul(Mul(0.5, x), Add(1, Erf(Mul(1/sqrt 2, x)))), operands swapped;
// near misses: 0.6 for 0.5, and a GELU whose Erf output is also a graph output.
Graph spellings() {
  Graph g;
  ValueId x = add_input(g, "x", {3, 7});
  ValueId d = out(g, g.add_node(Op::Div, "a/div", {x, scalar(g, "sqrt2", float(M_SQRT2))}, {"a/d"}));
  ValueId e = out(g, g.add_node(Op::Erf, "a/erf", {d}, {"a/e"}));
  ValueId a = out(g, g.add_node(Op::Add, "a/add", {e, scalar(g, "one", 1)}, {"a/a"}));
  ValueId m = out(g, g.add_node(Op::Mul, "a/mul", {x, a}, {"a/m"}));
  ValueId ya = out(g, g.add_node(Op::Mul, "a/half", {m, scalar(g, "half", 0.5f)}, {"ya"}));
  ValueId h = out(g, g.add_node(Op::Mul, "b/half", {g.find("half"), ya}, {"b/h"}));
  ValueId d2 = out(g, g.add_node(Op::Mul, "b/scale", {scalar(g, "rsqrt2", float(M_SQRT1_2)), ya}, {"b/d"}));
  ValueId e2 = out(g, g.add_node(Op::Erf, "b/erf", {d2}, {"b/e"}));
  ValueId a2 = out(g, g.add_node(Op::Add, "b/add", {g.find("one"), e2}, {"b/a"}));
  ValueId yb = out(g, g.add_node(Op::Mul, "b/mul", {h, a2}, {"yb"}));
  // 0.6 instead of 0.5: not a GELU.
  ValueId d3 = out(g, g.add_node(Op::Div, "c/div", {x, g.find("sqrt2")}, {"c/d"}));
  ValueId e3 = out(g, g.add_node(Op::Erf, "c/erf", {d3}, {"c/e"}));
  ValueId a3 = out(g, g.add_node(Op::Add, "c/add", {e3, g.find("one")}, {"c/a"}));
  ValueId m3 = out(g, g.add_node(Op::Mul, "c/mul", {x, a3}, {"c/m"}));
  ValueId yc = out(g, g.add_node(Op::Mul, "c/half", {m3, scalar(g, "six_tenths", 0.6f)}, {"yc"}));
  // The Erf output is a graph output too: stays.
  ValueId d4 = out(g, g.add_node(Op::Div, "d/div", {yc, g.find("sqrt2")}, {"d/d"}));
  ValueId e4 = out(g, g.add_node(Op::Erf, "d/erf", {d4}, {"d/e"}));
  ValueId a4 = out(g, g.add_node(Op::Add, "d/add", {e4, g.find("one")}, {"d/a"}));
  ValueId m4 = out(g, g.add_node(Op::Mul, "d/mul", {yc, a4}, {"d/m"}));
  ValueId yd = out(g, g.add_node(Op::Mul, "d/half", {m4, g.find("half")}, {"yd"}));
  g.outputs = {yb, yd, e4};
  verify(g);
  return g;
}

std::map<std::string, Tensor> feed(const Graph& g) {
  std::mt19937 rng(11);
  std::normal_distribution<double> nd(0, 1.5);
  Tensor x(DType::f32, g.value(g.inputs[0]).shape);
  for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = float(nd(rng));
  return {{g.value(g.inputs[0]).name, x}};
}

void check_close(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b, double eps) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    std::vector<double> x = t.to_f64(), y = b.at(name).to_f64();
    REQUIRE(x.size() == y.size());
    // Relative eps, and eps absolute near 0: in the far negative tail x/2 (1 + erf(x / sqrt 2)) is
    // a difference of nearly equal numbers, where the chain's x / sqrt 2 and Gelu's x * (1 / sqrt 2)
    // may give erf inputs one step apart (about 1e-7 absolute in the result).
    for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == doctest::Approx(x[i]).epsilon(eps).scale(1));
  }
}

}  // namespace

TEST_CASE("fuse_gelu: both spellings become Gelu, near misses stay, values stay") {
  Graph g = spellings();
  CHECK(fuse_gelu(g) == 2);
  verify(g);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  CHECK(by_name.at("a/half")->op == Op::Gelu);
  CHECK(g.value(by_name.at("a/half")->inputs[0]).name == "x");
  CHECK(by_name.at("b/mul")->op == Op::Gelu);
  CHECK(g.value(by_name.at("b/mul")->inputs[0]).name == "ya");
  for (const char* gone : {"a/div", "a/erf", "a/add", "a/mul", "b/half", "b/scale", "b/erf", "b/add"})
    CHECK_MESSAGE(!by_name.count(gone), gone);
  CHECK(count_ops(g, Op::Erf) == 2);  // c and d
  Graph plain = spellings();
  const auto in = feed(plain);
  const auto want = Plan(std::move(plain)).run(in);
  Graph cpu = g;
  check_close(want, Plan(std::move(cpu)).run(in), 1e-6);
#if defined(ONNXDP_HAVE_CUDA)
  Plan dev(std::move(g), PlanOptions{.device = make_device_backend(DeviceKind::cuda_emulated, 0)});
  CHECK(dev.host_ops().empty());
  check_close(want, dev.run(in), 1e-6);
#endif
}

TEST_CASE("fuse_gelu: tiny_lm's GELUs are one Gelu each, its gradient is one GeluGrad, on the device too") {
  Graph g = load_graph(std::string(ONNXDP_SOURCE_DIR) + "/models/tiny_lm/model.onnx");
  const int erfs = count_ops(g, Op::Erf);
  REQUIRE(erfs == 2);
  CHECK(fuse_gelu(g) == erfs);
  CHECK(count_ops(g, Op::Erf) == 0);
  verify(g);
  // GeluGrad (dy, x), both forms, float32 and float64: the emulated CUDA kernel equals the CPU's.
  for (const std::string form : {"none", "tanh"})
    for (DType t : {DType::f32, DType::f64}) {
      CAPTURE(form);
      Graph gg;
      ValueId dy = add_input(gg, "dy", {4, 33}, t), x = add_input(gg, "x", {4, 33}, t);
      gg.outputs = {out(gg, gg.add_node(Op::GeluGrad, "gg", {dy, x}, {"dx"}, {{"approximate", Attr(form)}}))};
      verify(gg);
      std::map<std::string, Tensor> in;
      for (const char* name : {"dy", "x"}) {
        Tensor v(t, {4, 33});
        for (int64_t i = 0; i < v.numel(); ++i) {
          const double val = std::sin(0.37 * double(i) + (name[0] == 'x' ? 0.0 : 1.0)) * 4;
          if (t == DType::f32) v.as<float>()[i] = float(val);
          else v.as<double>()[i] = val;
        }
        in[name] = v;
      }
      Graph copy = gg;
      const auto cpu = Plan(std::move(copy)).run(in);
#if defined(ONNXDP_HAVE_CUDA)
      Plan dev(std::move(gg), PlanOptions{.device = make_device_backend(DeviceKind::cuda_emulated, 0)});
      CHECK(dev.host_ops().empty());
      const auto emu = dev.run(in);
      CHECK(emu.at("dx").to_f64() == cpu.at("dx").to_f64());
#endif
      // Against the derivative by central differences of the Gelu functor (float64).
      std::vector<double> dx = cpu.at("dx").to_f64(), xs = in.at("x").to_f64(), dys = in.at("dy").to_f64();
      for (size_t i = 0; i < dx.size(); ++i) {
        auto gelu = [&](double v) {
          return form == "tanh" ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                                : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        };
        const double h = 1e-5, want = dys[i] * (gelu(xs[i] + h) - gelu(xs[i] - h)) / (2 * h);
        // Gelu' is at most 1.13: the error is a few roundings of dy's magnitude (float32), or the
        // differences' h^2 (float64).
        CHECK(std::abs(dx[i] - want) <= (t == DType::f32 ? 1e-6 : 1e-8) * (std::abs(dys[i]) + 1));
      }
    }
}
