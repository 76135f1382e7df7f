// The fuse_masked_softmax pass (graph/passes/fuse_masked_softmax.h): which Where + Softmax pairs
// become MaskedSoftmax and which Where after a SoftmaxGrad goes into it, that the fused graph
// computes the unfused graph's values exactly on the CPU (its kernels: MaskedSoftmax_forward,
// SoftmaxGrad_forward with a mask), and that a device runs the fused nodes through the CPU
// kernels. (The sample causal language model's attention is one FusedAttention node by then:
// tests/graph/test_fuse_attention.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "exec/device_backend.h"
#include "exec/plan.h"
#include "graph/passes/fuse_masked_softmax.h"
#include "tests/graph/graph_test_util.h"

using namespace onnxdp;
using onnxdp::test::add_constant;
using onnxdp::test::add_input;
using onnxdp::test::by_name;
using onnxdp::test::check_same_outputs;
using onnxdp::test::out;
using onnxdp::test::random_feeds;

namespace {

ValueId scalar(Graph& g, const std::string& name, float x) { return add_constant(g, name, Tensor::from_f32({x})); }

// Whether element (row, j) of a mask with rows of n is true: (3 row + 2 j) % 5 < 2, never at
// j = 0 of a row longer than 1, so only a row of one element (a mask broadcast along the softmax's
// axis) is ever all fill.
bool masked(int64_t row, int64_t j, int64_t n) { return (3 * row + 2 * j) % 5 < 2 && (n == 1 || j != 0); }

ValueId mask(Graph& g, const std::string& name, Shape s) {
  Tensor t(DType::boolean, s);
  const int64_t n = s.back();
  for (int64_t i = 0; i < t.numel(); ++i) t.as<bool>()[i] = masked(i / n, i % n, n);
  return add_constant(g, name, std::move(t));
}

// Fused, forward and backward: Where(m, -inf, x) then Softmax (fill_when 1), Where(m, 0, dx) of
// its SoftmaxGrad; Where(m2, x2, -1e9) then Softmax (fill_when 0), with its backward Where; a
// mask [2, 1, 4, 1] (one value per row) with a finite fill, forward only (its SoftmaxGrad's
// output is a graph output).
// Stays: a Softmax along axis 1; a Where also read by a Neg; a fill that is an input, not a
// constant; a backward Where of another mask (its forward fuses).
Graph sample() {
  Graph g;
  const Shape s{2, 3, 4, 5};
  ValueId x = add_input(g, "x", s), x2 = add_input(g, "x2", s), dy = add_input(g, "dy", s), f = add_input(g, "f", {1});
  ValueId m = mask(g, "m", {1, 1, 4, 5}), m2 = mask(g, "m2", {3, 4, 5}), m3 = mask(g, "m3", {2, 1, 4, 1});
  ValueId ninf = scalar(g, "ninf", -std::numeric_limits<float>::infinity()), big = scalar(g, "big", -1e9f);
  ValueId zero = scalar(g, "zero", 0.0f), fin = scalar(g, "fin", -30.0f);
  auto softmax = [&](const std::string& name, ValueId in, int64_t axis = -1) {
    return out(g, g.add_node(Op::Softmax, name, {in}, {name + "/y"}, {{"axis", Attr(axis)}}));
  };
  auto softmax_grad = [&](const std::string& name, ValueId y) {
    return out(g, g.add_node(Op::SoftmaxGrad, name, {dy, y}, {name + "/dx"}, {{"axis", Attr(int64_t(-1))}}));
  };
  auto where = [&](const std::string& name, ValueId c, ValueId a, ValueId b) {
    return out(g, g.add_node(Op::Where, name, {c, a, b}, {name + "/y"}));
  };
  ValueId y1 = softmax("sm1", where("w1", m, ninf, x));
  ValueId g1 = where("bw1", m, zero, softmax_grad("sg1", y1));
  ValueId y2 = softmax("sm2", where("w2", m2, x2, big));
  ValueId g2 = where("bw2", m2, softmax_grad("sg2", y2), zero);
  ValueId y3 = softmax("sm3", where("w3", m3, fin, x));
  ValueId g3 = softmax_grad("sg3", y3);
  ValueId y4 = softmax("sm4", where("w4", m, big, x2), 1);
  ValueId w5 = where("w5", m, big, x);
  ValueId y5 = softmax("sm5", w5);
  ValueId neg = out(g, g.add_node(Op::Neg, "neg", {w5}, {"neg"}));
  ValueId y6 = softmax("sm6", where("w6", m, f, x2));
  ValueId y7 = softmax("sm7", where("w7", m, big, x2));
  ValueId g7 = where("bw7", m2, zero, softmax_grad("sg7", y7));
  g.outputs = {y1, g1, y2, g2, y3, g3, y4, y5, neg, y6, y7, g7};
  return g;
}

}  // namespace

TEST_CASE("fuse_masked_softmax: a Where of a constant fill before a Softmax, and after its gradient, go into them") {
  Graph g = sample();
  // Forward: sm1, sm2, sm3, sm7; backward: bw1, bw2.
  CHECK(fuse_masked_softmax(g) == 6);
  verify(g);
  const auto n = by_name(g);
  for (const char* gone : {"w1", "bw1", "w2", "bw2", "w3", "w7"}) CHECK_MESSAGE(!n.count(gone), gone);
  for (const char* kept : {"w4", "w5", "w6", "bw7"}) CHECK_MESSAGE(n.count(kept), kept);
  const Node& sm1 = *n.at("sm1");
  CHECK(sm1.op == Op::MaskedSoftmax);
  CHECK(g.value(sm1.inputs[0]).name == "x");
  CHECK(g.value(sm1.inputs[1]).name == "m");
  CHECK(std::isinf(sm1.f("fill")));
  CHECK(sm1.i("fill_when") == 1);
  CHECK(n.at("sm2")->i("fill_when") == 0);
  CHECK(n.at("sm2")->f("fill") == -1e9f);
  CHECK(n.at("sm7")->op == Op::MaskedSoftmax);
  for (const char* plain : {"sm4", "sm5", "sm6"}) CHECK_MESSAGE(n.at(plain)->op == Op::Softmax, plain);
  const Node& sg1 = *n.at("sg1");
  REQUIRE(sg1.inputs.size() == 3);
  CHECK(g.value(sg1.inputs[2]).name == "m");
  CHECK(g.value(sg1.outputs[0]).name == "bw1/y");
  CHECK(sg1.i("fill_when") == 1);
  CHECK(n.at("sg2")->i("fill_when") == 0);
  for (const char* plain : {"sg3", "sg7"}) CHECK_MESSAGE(n.at(plain)->inputs.size() == 2, plain);
  CHECK(fuse_masked_softmax(g) == 0);
  // A value the caller keeps is not fused away.
  Graph k = sample();
  CHECK(fuse_masked_softmax(k, {k.find("w1/y"), k.find("sg2/dx")}) == 3);  // sm2, sm3, sm7
  CHECK(by_name(k).at("sm1")->op == Op::Softmax);
  CHECK(by_name(k).at("sg2")->inputs.size() == 2);
}

TEST_CASE("fuse_masked_softmax: the fused graph computes the unfused graph's values on the CPU, bit for bit") {
  Graph plain = sample(), fused = sample();
  REQUIRE(fuse_masked_softmax(fused) == 6);
  const std::map<std::string, Tensor> in = random_feeds(plain, 5);
  const std::map<std::string, Tensor> y = check_same_outputs(std::move(plain), std::move(fused), in, 0);
  // The masked elements: exact zeros of the softmax and of its gradient.
  const Tensor &y1 = y.at("sm1/y"), &g1 = y.at("bw1/y");
  int zeros = 0;
  for (int64_t i = 0; i < y1.numel(); ++i) {
    if (masked((i / 5) % 4, i % 5, 5)) {  // element (row, j) of the [1, 1, 4, 5] mask
      CHECK(y1.as<float>()[i] == 0.0f);
      CHECK(g1.as<float>()[i] == 0.0f);
      ++zeros;
    }
  }
  CHECK(zeros > 0);
}

TEST_CASE("fuse_masked_softmax: a device runs MaskedSoftmax and the masked SoftmaxGrad through the CPU kernels") {
  Graph plain = sample(), fused = sample();
  REQUIRE(fuse_masked_softmax(fused) == 6);
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  Plan cpu(std::move(plain)), gpu(std::move(fused), PlanOptions{.device = dev});
  CHECK(gpu.host_ops() == "MaskedSoftmax x4, SoftmaxGrad x2");
  const std::map<std::string, Tensor> in = random_feeds(sample(), 5);
  const std::map<std::string, Tensor> a = cpu.run(in), b = gpu.run(in);
  for (const auto& [name, t] : a) {
    INFO(name);
    const std::vector<double> x = t.to_f64(), z = b.at(name).to_f64();
    for (size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(x[i] - z[i]) <= 1e-6 * (1 + std::fabs(x[i])));
  }
}
