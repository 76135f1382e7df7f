// The fuse_bias_grad pass (graph/passes/fuse_bias_grad.h) and GeluGrad's db output: which
// ReduceSums of a GeluGrad's dx become its db, that the graph stays valid and computes the unfused
// graph's values bit for bit on 1, 2 and 3 threads (columns not a multiple of 16, and a tensor
// large enough for the threads to split it), the shape rule's refusals, and that the trainer's
// graph of tiny_lm sums its GELU layer's bias gradient in GeluGrad.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "compile/compile.h"
#include "exec/cpu/threads.h"
#include "exec/plan.h"
#include "graph/passes/fuse_bias_grad.h"
#include "tests/graph/graph_test_util.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::add_ints;
using onnxdp::test::check_same_outputs;
using onnxdp::test::count_ops;
using onnxdp::test::out;
using onnxdp::test::random_feeds;

namespace {

ValueId gelu_grad(Graph& g, const std::string& name, ValueId dy, ValueId x, const char* approximate = "none") {
  return out(g, g.add_node(Op::GeluGrad, name, {dy, x}, {name + "/dx"}, {{"approximate", Attr(std::string(approximate))}}));
}

ValueId reduce_sum(Graph& g, const std::string& name, ValueId x, const std::vector<int64_t>& axes, int64_t keepdims = 0) {
  return out(g, g.add_node(Op::ReduceSum, name, {x, add_ints(g, name + "/axes", axes)}, {name + "/y"},
                           {{"keepdims", Attr(keepdims)}}));
}

// Fused: a [3, 5, 40] GeluGrad's dx summed over [0, 1] (its dx also read by a Neg, as the
// layer's products read it); the tanh form over [-2, -3]; float64; a [16, 24, 100] one (large
// enough for the threads).
// Stays: keepdims 1; over [0] only; over every dim; the sum of another node's output.
Graph sample() {
  Graph g;
  const Shape s{3, 5, 40};
  ValueId dy = add_input(g, "dy", s), x = add_input(g, "x", s);
  ValueId dy64 = add_input(g, "dy64", s, DType::f64), x64 = add_input(g, "x64", s, DType::f64);
  ValueId dyl = add_input(g, "dyl", {16, 24, 100}), xl = add_input(g, "xl", {16, 24, 100});
  ValueId a = gelu_grad(g, "a", dy, x);
  ValueId t = gelu_grad(g, "t", dy, x, "tanh");
  ValueId d = gelu_grad(g, "d", dy64, x64);
  ValueId l = gelu_grad(g, "l", dyl, xl);
  ValueId k = gelu_grad(g, "k", x, dy), o = gelu_grad(g, "o", dy, dy), e = gelu_grad(g, "e", x, x);
  ValueId neg = out(g, g.add_node(Op::Neg, "neg", {a}, {"neg"}));
  g.outputs = {reduce_sum(g, "sa", a, {0, 1}),  reduce_sum(g, "st", t, {-2, -3}), reduce_sum(g, "sd", d, {1, 0}),
               reduce_sum(g, "sl", l, {0, 1}),  reduce_sum(g, "sk", k, {0, 1}, 1), reduce_sum(g, "so", o, {0}),
               reduce_sum(g, "se", e, {0, 1, 2}), reduce_sum(g, "sn", neg, {0, 1}), neg};
  return g;
}

}  // namespace

TEST_CASE("fuse_bias_grad: a GeluGrad's dx summed over all dims but the last becomes its db") {
  Graph g = sample();
  CHECK(fuse_bias_grad(g) == 4);
  verify(g);
  const auto by = onnxdp::test::by_name(g);
  for (const char* name : {"a", "t", "d", "l"}) {
    CAPTURE(name);
    const Node& n = *by.at(name);
    REQUIRE(n.outputs.size() == 2);
    CHECK(g.value(n.outputs[1]).name == std::string("s") + name + "/y");
    CHECK(g.value(n.outputs[1]).shape == Shape{g.value(n.outputs[0]).shape.back()});
    CHECK_FALSE(by.count(std::string("s") + name));
  }
  for (const char* name : {"sk", "so", "se", "sn"}) CHECK_MESSAGE(by.count(name), name);
  for (const char* name : {"k", "o", "e"}) CHECK_MESSAGE(by.at(name)->outputs.size() == 1, name);
  CHECK(fuse_bias_grad(g) == 0);
}

TEST_CASE("fuse_bias_grad: db is the unfused graph's sum bit for bit, on 1, 2 and 3 threads") {
  const int before = cpu_threads();
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    Graph plain = sample(), fused = sample();
    REQUIRE(fuse_bias_grad(fused) == 4);
    check_same_outputs(std::move(plain), std::move(fused), random_feeds(sample(), 3), 0);
  }
  set_cpu_threads(before);
}

TEST_CASE("GeluGrad's shape rule: db for float32 and float64 x of rank 2 or more") {
  for (const auto& [dtype, shape, why] : std::vector<std::tuple<DType, Shape, std::string>>{
           {DType::bf16, {4, 8}, "float32 or float64"}, {DType::f32, {8}, "rank 2 or more"}}) {
    Graph g;
    ValueId dy = add_input(g, "dy", shape, dtype), x = add_input(g, "x", shape, dtype);
    std::string err;
    try {
      g.add_node(Op::GeluGrad, "gg", {dy, x}, {"dx", "db"});
    } catch (const Error& e) {
      err = e.what();
    }
    CAPTURE(err);
    CHECK(err.find(why) != std::string::npos);
  }
}

TEST_CASE("fuse_bias_grad: tiny_lm's GELU layer's bias gradient is summed in GeluGrad") {
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/tiny_lm/model.onnx";
  o.batch_size = 8;
  TrainingGraph tg = training_graph(o, 1, 0);
  int with_db = 0, gelu_grads = 0;
  for (const Node& n : tg.g.nodes)
    if (n.op == Op::GeluGrad) {
      ++gelu_grads;
      with_db += n.outputs.size() == 2;
    }
  CHECK(gelu_grads >= 1);
  CHECK(with_db == gelu_grads);
  verify(tg.g);
}
