// The fuse_clip_grad pass (graph/passes/fuse_clip_grad.h): which Where / Less / Greater chains
// become one ClipGrad, that the fused graph computes the unfused graph's values bit for bit on the
// CPU (NaN and values on the bounds among them), and that the trainer's CPU graph of a model with a
// Clip takes it and a device's graph does not. ClipGrad's own values: tests/ops/test_grad.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "graph/passes/fuse_clip_grad.h"
#include "tests/graph/graph_test_util.h"
#include "tests/train/tiny_model.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::add_constant;
using onnxdp::test::add_input;
using onnxdp::test::check_same_outputs;
using onnxdp::test::count_ops;
using onnxdp::test::out;
using onnxdp::test::random_feeds;

namespace {

Tensor scalar(float v) {
  Tensor t(DType::f32, {});
  t.as<float>()[0] = v;
  return t;
}

// Where(cmp(x, bound), zero, g) under `name`.
ValueId masked(Graph& g, const std::string& name, Op cmp, ValueId x, ValueId bound, ValueId zero, ValueId dy) {
  const ValueId c = out(g, g.add_node(cmp, name + "/cmp", {x, bound}, {name + "/c"}));
  return out(g, g.add_node(Op::Where, name, {c, zero, dy}, {name + "/y"}));
}

// Fused: "pair" (Clip's rule: lower bound inside, upper outside: one ClipGrad), "upper" (a lone
// Greater), "kept" (its inner Where's output a graph output: two ClipGrads, the inner one kept).
// Stays: "shared" (its Less also read by a Not), "half" (0.5, not 0, where x < lo), "neg"
// (-0: Where writes -0 there, ClipGrad +0).
Graph sample() {
  Graph g;
  const Shape s{3, 4, 5};
  const ValueId dy = add_input(g, "dy", s), x = add_input(g, "x", s), x2 = add_input(g, "x2", s);
  const ValueId lo = add_constant(g, "lo", scalar(-0.5f)), hi = add_constant(g, "hi", scalar(0.5f)),
                zero = add_constant(g, "zero", scalar(0.f)), half = add_constant(g, "half", scalar(0.5f)),
                neg = add_constant(g, "neg0", scalar(-0.f));
  const ValueId pair = masked(g, "pair", Op::Greater, x, hi, zero, masked(g, "pair_in", Op::Less, x, lo, zero, dy));
  const ValueId upper = masked(g, "upper", Op::Greater, x2, hi, zero, dy);
  const ValueId inner = masked(g, "kept_in", Op::Less, x2, lo, zero, dy);
  const ValueId kept = masked(g, "kept", Op::Greater, x2, hi, zero, inner);
  const ValueId shared = masked(g, "shared", Op::Less, x, lo, zero, dy);
  const ValueId not_c = out(g, g.add_node(Op::Not, "not", {g.find("shared/c")}, {"not/y"}));
  const ValueId halves = masked(g, "half", Op::Less, x, lo, half, dy);
  const ValueId negs = masked(g, "neg", Op::Less, x, lo, neg, dy);
  g.outputs = {pair, upper, inner, kept, shared, not_c, halves, negs};
  return g;
}

// Feeds with x on the bounds, past them and NaN in places.
std::map<std::string, Tensor> feeds() {
  std::map<std::string, Tensor> f = random_feeds(sample(), 3);
  for (const char* name : {"x", "x2"}) {
    float* x = f.at(name).as<float>();
    x[0] = -0.5f, x[1] = 0.5f, x[2] = std::numeric_limits<float>::quiet_NaN(), x[3] = -3.f, x[4] = 3.f;
  }
  return f;
}

}  // namespace

TEST_CASE("fuse_clip_grad: Clip's Where / Less / Greater chains become one ClipGrad where nothing else reads them") {
  Graph g = sample();
  CHECK(fuse_clip_grad(g) == 4);  // pair, upper, kept, kept_in
  verify(g);
  const auto by = onnxdp::test::by_name(g);
  for (const char* gone : {"pair_in", "pair/cmp", "pair_in/cmp", "upper/cmp", "kept/cmp", "kept_in/cmp"})
    CHECK_MESSAGE(!by.count(gone), gone);
  const auto names = [&](const Node* n) {
    std::vector<std::string> v;
    for (ValueId i : n->inputs) v.push_back(i == kNoValue ? "" : g.value(i).name);
    return v;
  };
  using S = std::vector<std::string>;
  CHECK(by.at("pair")->op == Op::ClipGrad);
  CHECK(names(by.at("pair")) == S{"dy", "x", "lo", "hi"});
  CHECK(names(by.at("upper")) == S{"dy", "x2", "", "hi"});
  CHECK(names(by.at("kept_in")) == S{"dy", "x2", "lo"});
  CHECK(names(by.at("kept")) == S{"kept_in/y", "x2", "", "hi"});
  for (const char* stays : {"shared", "half", "neg"}) CHECK_MESSAGE(by.at(stays)->op == Op::Where, stays);
  CHECK(fuse_clip_grad(g) == 0);
  // A comparison's output the caller keeps stays.
  Graph k = sample();
  CHECK(fuse_clip_grad(k, {k.find("upper/c")}) == 3);
  CHECK(count_ops(k, Op::Greater) == 1);
}

TEST_CASE("fuse_clip_grad: the fused graph computes the unfused graph's values on the CPU, bit for bit") {
  Graph fused = sample();
  REQUIRE(fuse_clip_grad(fused) == 4);
  const std::map<std::string, Tensor> in = feeds(), y = check_same_outputs(sample(), std::move(fused), in, 0);
  const float* dx = y.at("pair/y").as<float>();
  const float* dy = in.at("dy").as<float>();
  // On the bounds and for NaN x dy passes; past them 0.
  CHECK(dx[0] == dy[0]);
  CHECK(dx[1] == dy[1]);
  CHECK(dx[2] == dy[2]);
  CHECK(dx[3] == 0.f);
  CHECK(dx[4] == 0.f);
}

TEST_CASE("fuse_clip_grad: a Clip model's CPU training graph has one ClipGrad, a device's keeps the Wheres") {
  const std::filesystem::path d = std::filesystem::temp_directory_path() / "onnxdp_test_fuse_clip_grad";
  std::filesystem::create_directories(d);
  TrainOptions o;
  o.model = (d / "clip.onnx").string();
  // y = Clip(x W, 0, 6), W [4, 4].
  const std::vector<float> w = {0.5f, -0.25f, 0.75f, 1.f, -1.f, 0.2f, 0.3f, -0.6f,
                                0.1f, 0.9f,  -0.4f, 0.2f, 0.7f, -0.8f, 0.6f, 0.3f};
  onnxdp::test::write_tiny_model(o.model, 4, w, "Clip", {{"lo", 0.f}, {"hi", 6.f}});
  o.loss = LossKind::mse;
  o.batch_size = 4;
  const TrainingGraph cpu = training_graph(o, 1, 0);
  CHECK(count_ops(cpu.g, Op::ClipGrad) == 1);
  CHECK(count_ops(cpu.g, Op::Where) == 0);
  CHECK(count_ops(cpu.g, Op::Less) == 0);
  CHECK(count_ops(cpu.g, Op::Greater) == 0);
  const TrainingGraph device = training_graph(o, 1, 0, true, false);
  CHECK(count_ops(device.g, Op::ClipGrad) == 0);
  CHECK(count_ops(device.g, Op::Where) == 2);
  std::filesystem::remove_all(d);
}
