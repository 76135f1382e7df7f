// The fuse_relu_grad pass (graph/passes/fuse_relu_grad.h): which ReluGrads a BatchNormalizationGrad
// takes in, that the graph stays valid and computes the unfused graph's values exactly on the CPU,
// and that the trainer's graph of the sample CNN (Conv, BatchNormalization, Relu twice) has none.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "compile/compile.h"
#include "exec/plan.h"
#include "graph/passes/fuse_relu_grad.h"
#include "tests/graph/graph_test_util.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::check_same_outputs;
using onnxdp::test::random_feeds;
using onnxdp::test::count_ops;
using onnxdp::test::out;

namespace {

// Node `name`'s outputs dx, dscale, dbias as values named name/dx, name/ds, name/db.
std::vector<ValueId> bn_grad(Graph& g, const std::string& name, ValueId dy, ValueId x, ValueId scale) {
  const int n = g.add_node(Op::BatchNormalizationGrad, name, {dy, x, scale}, {name + "/dx", name + "/ds", name + "/db"},
                           {{"epsilon", Attr(1e-5f)}});
  return g.nodes[size_t(n)].outputs;
}

// Fused: r = ReluGrad(d, y) read by a BatchNormalizationGrad alone.
// Stays: a ReluGrad also read by a Neg; a ReluGrad whose output the graph returns.
Graph sample() {
  Graph g;
  const Shape s{3, 4, 2, 5};
  ValueId d = add_input(g, "d", s), y = add_input(g, "y", s), x = add_input(g, "x", s), sc = add_input(g, "scale", {4});
  ValueId r = out(g, g.add_node(Op::ReluGrad, "relu", {d, y}, {"r"}));
  std::vector<ValueId> o = bn_grad(g, "bn", r, x, sc);
  ValueId r2 = out(g, g.add_node(Op::ReluGrad, "relu2", {d, x}, {"r2"}));
  std::vector<ValueId> o2 = bn_grad(g, "bn2", r2, y, sc);
  ValueId neg = out(g, g.add_node(Op::Neg, "neg", {r2}, {"neg"}));
  ValueId r3 = out(g, g.add_node(Op::ReluGrad, "relu3", {y, x}, {"r3"}));
  std::vector<ValueId> o3 = bn_grad(g, "bn3", r3, d, sc);
  g.outputs = {o[0], o[1], o[2], o2[0], neg, o3[0], r3};
  return g;
}

}  // namespace

TEST_CASE("fuse_relu_grad: a ReluGrad read by a BatchNormalizationGrad alone goes into it") {
  Graph g = sample();
  CHECK(fuse_relu_grad(g) == 1);
  verify(g);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  CHECK_FALSE(by_name.count("relu"));
  const Node& bn = *by_name.at("bn");
  REQUIRE(bn.inputs.size() == 4);
  CHECK(g.value(bn.inputs[0]).name == "d");
  CHECK(g.value(bn.inputs[3]).name == "y");
  for (const char* kept : {"relu2", "relu3"}) CHECK_MESSAGE(by_name.count(kept), kept);
  CHECK(by_name.at("bn2")->inputs.size() == 3);
  CHECK(by_name.at("bn3")->inputs.size() == 3);
  CHECK(fuse_relu_grad(g) == 0);
  // A value the caller keeps is not fused away.
  Graph k = sample();
  CHECK(fuse_relu_grad(k, {k.find("r")}) == 0);
  CHECK(count_ops(k, Op::ReluGrad) == 3);
}

TEST_CASE("fuse_relu_grad: the fused graph computes the unfused graph's values on the CPU, bit for bit") {
  Graph plain = sample(), fused = sample();
  REQUIRE(fuse_relu_grad(fused) == 1);
  const std::map<std::string, Tensor> in = random_feeds(plain, 11);
  check_same_outputs(std::move(plain), std::move(fused), in, 0);
}

// One replica, and two with --local-bn (BatchNormalization's own statistics; with statistics
// synchronised across replicas the gradient is not a BatchNormalizationGrad).
TEST_CASE("fuse_relu_grad: the trainer's graph of the sample CNN has no ReluGrad left") {
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/cnn/model.onnx";
  o.batch_size = 8;
  for (int world : {1, 2}) {
    CAPTURE(world);
    o.local_bn = world > 1;
    TrainingGraph tg = training_graph(o, world, 0);
    CHECK(count_ops(tg.g, Op::ReluGrad) == 0);
    int with_relu = 0;
    for (const Node& n : tg.g.nodes) with_relu += n.op == Op::BatchNormalizationGrad && n.inputs.size() == 4;
    CHECK(with_relu == 2);
    verify(tg.g);
  }
}
