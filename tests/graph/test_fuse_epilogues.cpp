// The fuse_epilogues pass (graph/passes/fuse_epilogues.h): which Gemm + Relu pairs become one
// FusedGemm, that the graph stays valid and computes the same values on the CPU, and that the
// trainer's graphs of the sample models use it.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>

#include "exec/device_backend.h"
#include "exec/plan.h"
#include "tests/graph/graph_test_util.h"
#include "graph/passes/fuse_epilogues.h"
#include "importer/onnx_io.h"
#include "compile/compile.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::check_same_outputs;
using onnxdp::test::random_feeds;
using onnxdp::test::count_ops;
using onnxdp::test::out;

namespace {

// x [4, 6] -> Gemm(w [5, 6]ᵀ, b [5]) -> Relu -> Gemm(w2 [5, 3]) -> Relu -> y, a MatMul + Relu
// (fused too), and side branches that must stay unfused: a Gemm whose output something else also
// reads, a Gemm output that is a graph output, and a float64 Gemm + Relu.
Graph sample() {
  Graph g;
  ValueId x = add_input(g, "x", {4, 6}), w = add_input(g, "w", {5, 6}), b = add_input(g, "b", {5}), w2 = add_input(g, "w2", {5, 3});
  ValueId h = out(g, g.add_node(Op::Gemm, "fc1", {x, w, b}, {"fc1/y"}, {{"transB", Attr(int64_t(1))}}));
  ValueId r = out(g, g.add_node(Op::Relu, "relu1", {h}, {"relu1/y"}));
  ValueId h2 = out(g, g.add_node(Op::Gemm, "fc2", {r, w2}, {"fc2/y"}, {{"alpha", Attr(0.5f)}}));
  ValueId y = out(g, g.add_node(Op::Relu, "relu2", {h2}, {"y"}));
  // Read twice: by a Relu and a Neg.
  ValueId h3 = out(g, g.add_node(Op::Gemm, "fc3", {r, w2}, {"fc3/y"}));
  ValueId r3 = out(g, g.add_node(Op::Relu, "relu3", {h3}, {"relu3/y"}));
  ValueId n3 = out(g, g.add_node(Op::Neg, "neg3", {h3}, {"neg3/y"}));
  // A graph output.
  ValueId h4 = out(g, g.add_node(Op::Gemm, "fc4", {r, w2}, {"fc4/y"}));
  ValueId r4 = out(g, g.add_node(Op::Relu, "relu4", {h4}, {"relu4/y"}));
  // MatMul + Relu: FusedMatMul.
  ValueId m5 = out(g, g.add_node(Op::MatMul, "mm5", {r, w2}, {"mm5/y"}));
  ValueId r5 = out(g, g.add_node(Op::Relu, "relu5", {m5}, {"relu5/y"}));
  // float64.
  ValueId xd = add_input(g, "xd", {2, 3}, DType::f64), wd = add_input(g, "wd", {3, 2}, DType::f64);
  ValueId h6 = out(g, g.add_node(Op::Gemm, "fc6", {xd, wd}, {"fc6/y"}));
  ValueId r6 = out(g, g.add_node(Op::Relu, "relu6", {h6}, {"relu6/y"}));
  g.outputs = {y, r3, n3, h4, r4, r5, r6};
  return g;
}

}  // namespace

TEST_CASE("fuse_epilogues: a float32 Gemm read only by a Relu becomes one FusedGemm, the rest stays") {
  Graph g = sample();
  const size_t nodes = g.nodes.size();
  CHECK(fuse_epilogues(g) == 3);
  verify(g);
  CHECK(g.nodes.size() == nodes - 3);
  CHECK(count_ops(g, Op::FusedGemm) == 2);
  CHECK(count_ops(g, Op::FusedMatMul) == 1);
  CHECK(count_ops(g, Op::Relu) == 3);  // relu3, relu4, relu6
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  for (const char* gone : {"relu1", "relu2", "relu5"}) CHECK_MESSAGE(!by_name.count(gone), gone);
  for (const char* kept : {"fc3", "fc4", "fc6"}) CHECK_MESSAGE(by_name.at(kept)->op == Op::Gemm, kept);
  CHECK(by_name.at("mm5")->op == Op::FusedMatMul);
  CHECK(by_name.at("mm5")->s("activation") == "Relu");
  CHECK(by_name.at("mm5")->inputs.size() == 2);
  // The fused nodes produce the Relus' outputs and keep the Gemms' inputs and attributes.
  const Node& fc1 = *by_name.at("fc1");
  const Node& fc2 = *by_name.at("fc2");
  CHECK(fc1.op == Op::FusedGemm);
  CHECK(fc1.s("activation") == "Relu");
  CHECK(fc1.i("transB") == 1);
  CHECK(fc1.inputs.size() == 3);
  CHECK(g.value(fc1.outputs[0]).name == "relu1/y");
  CHECK(fc2.f("alpha") == 0.5f);
  CHECK(g.value(fc2.outputs[0]).name == "y");
  // Nothing left to fuse.
  CHECK(fuse_epilogues(g) == 0);
  // A value the caller keeps is not fused away: fc1's output kept, fc2's fused.
  Graph k = sample();
  CHECK(fuse_epilogues(k, {k.find("fc1/y")}) == 2);
  for (const Node& n : k.nodes)
    if (n.name == "fc1") CHECK(n.op == Op::Gemm);
}

TEST_CASE("fuse_epilogues: the fused graph computes the unfused graph's values on the CPU") {
  Graph plain = sample(), fused = sample();
  REQUIRE(fuse_epilogues(fused) == 3);
  const std::map<std::string, Tensor> in = random_feeds(plain, 3);
  // The same kernels: bit for bit.
  const std::map<std::string, Tensor> yb = check_same_outputs(std::move(plain), std::move(fused), in, 0);
  int negatives_zeroed = 0;
  for (double v : yb.at("y").to_f64()) negatives_zeroed += v == 0;
  CHECK(negatives_zeroed > 0);  // the Relu did something
}

namespace {

// x [2, 4, 6] -> MatMul(w [6, 5]) -> Add(b [5]) -> Relu -> MatMul(w2 [5, 3]) -> Add(b2, .) -> y, and
// pairs that must stay: a bias [1, 5], a bias computed after the MatMul, a B of 3 dims.
Graph linear_sample() {
  Graph g;
  ValueId x = add_input(g, "x", {2, 4, 6}), w = add_input(g, "w", {6, 5}), b = add_input(g, "b", {5});
  ValueId w2 = add_input(g, "w2", {5, 3}), b2 = add_input(g, "b2", {3}), b15 = add_input(g, "b15", {1, 5});
  ValueId w3 = add_input(g, "w3", {2, 6, 5});
  ValueId h = out(g, g.add_node(Op::MatMul, "mm1", {x, w}, {"mm1/y"}));
  ValueId hb = out(g, g.add_node(Op::Add, "add1", {h, b}, {"add1/y"}));
  ValueId r = out(g, g.add_node(Op::Relu, "relu1", {hb}, {"relu1/y"}));
  ValueId h2 = out(g, g.add_node(Op::MatMul, "mm2", {r, w2}, {"mm2/y"}));
  ValueId y = out(g, g.add_node(Op::Add, "add2", {b2, h2}, {"y"}));  // bias first
  // [1, 5] bias: stays.
  ValueId h3 = out(g, g.add_node(Op::MatMul, "mm3", {x, w}, {"mm3/y"}));
  ValueId y3 = out(g, g.add_node(Op::Add, "add3", {h3, b15}, {"y3"}));
  // The bias computed after the MatMul: stays.
  ValueId h4 = out(g, g.add_node(Op::MatMul, "mm4", {x, w}, {"mm4/y"}));
  ValueId b4 = out(g, g.add_node(Op::Neg, "neg4", {b}, {"neg4/y"}));
  ValueId y4 = out(g, g.add_node(Op::Add, "add4", {h4, b4}, {"y4"}));
  // B of 3 dims (batched weights): stays.
  ValueId h5 = out(g, g.add_node(Op::MatMul, "mm5", {x, w3}, {"mm5/y"}));
  ValueId y5 = out(g, g.add_node(Op::Add, "add5", {h5, b}, {"y5"}));
  g.outputs = {y, y3, y4, y5};
  return g;
}

}  // namespace

TEST_CASE("fuse_epilogues: MatMul + bias Add (+ Relu) becomes one FusedMatMul, the rest stays") {
  Graph g = linear_sample();
  const size_t nodes = g.nodes.size();
  CHECK(fuse_epilogues(g) == 3);  // add1, relu1, add2
  verify(g);
  CHECK(g.nodes.size() == nodes - 3);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  const Node& mm1 = *by_name.at("mm1");
  CHECK(mm1.op == Op::FusedMatMul);
  CHECK(mm1.s("activation") == "Relu");
  REQUIRE(mm1.inputs.size() == 3);
  CHECK(g.value(mm1.inputs[2]).name == "b");
  CHECK(g.value(mm1.outputs[0]).name == "relu1/y");
  const Node& mm2 = *by_name.at("mm2");
  CHECK(mm2.op == Op::FusedMatMul);
  CHECK(mm2.s("activation").empty());
  CHECK(g.value(mm2.inputs[2]).name == "b2");
  CHECK(g.value(mm2.outputs[0]).name == "y");
  for (const char* kept : {"mm3", "mm4", "mm5"}) CHECK_MESSAGE(by_name.at(kept)->op == Op::MatMul, kept);
  for (const char* kept : {"add3", "add4", "add5"}) CHECK_MESSAGE(by_name.count(kept), kept);
  // The same values on the CPU up to float rounding: FusedMatMul adds the bias inside the
  // product's sum (rounded once), MatMul + Add after it (rounded twice).
  Graph plain = linear_sample();
  const std::map<std::string, Tensor> in = random_feeds(plain, 3);
  check_same_outputs(std::move(plain), std::move(g), in, 1e-6);
}

TEST_CASE("fuse_epilogues: the trainer's graphs of mlp use FusedGemm, Relu's gradient reads Relu's output") {
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/model.onnx";
  o.batch_size = 16;
  for (int world : {1, 2}) {
    CAPTURE(world);
    TrainingGraph tg = training_graph(o, world, 0);
    CHECK(count_ops(tg.g, Op::FusedGemm) == 2);  // fc1 + relu, fc2 + relu (fc3 feeds the loss)
    CHECK(count_ops(tg.g, Op::Relu) == 0);
    CHECK(count_ops(tg.g, Op::Gemm) >= 1);
    verify(tg.g);
  }
  // tiny_lm's Linear layers (MatMul + Add on [batch, time, features]) become FusedMatMul.
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/tiny_lm/model.onnx";
  TrainingGraph lm = training_graph(o, 1, 0);
  CHECK(count_ops(lm.g, Op::FusedMatMul) >= 4);
  verify(lm.g);
}

namespace {

// x [3, 4, 5, 6] -> BatchNormalization (training, its running statistics graph outputs) -> Relu:
// fused; and what stays: a BatchNormalization whose y a Neg reads too, a float64 one.
Graph bn_sample() {
  Graph g;
  const Shape s{3, 4, 5, 6};
  ValueId x = add_input(g, "x", s), xd = add_input(g, "xd", s, DType::f64);
  std::vector<ValueId> outs;
  for (const char* name : {"bn1", "bn2", "bn3"}) {
    const std::string n = name;
    const DType t = n == "bn3" ? DType::f64 : DType::f32;
    std::vector<ValueId> params;
    for (const char* p : {"scale", "bias", "mean", "var"}) params.push_back(add_input(g, n + "/" + p, {4}, t));
    const int bn = g.add_node(Op::BatchNormalization, n, {t == DType::f64 ? xd : x, params[0], params[1], params[2], params[3]},
                              {n + "/y", n + "/rm", n + "/rv"}, {{"training_mode", Attr(int64_t(1))}});
    const std::vector<ValueId> o = g.nodes[size_t(bn)].outputs;
    outs.push_back(out(g, g.add_node(Op::Relu, n + "/relu", {o[0]}, {n + "/r"})));
    outs.push_back(o[1]);
    outs.push_back(o[2]);
    if (n == "bn2") outs.push_back(out(g, g.add_node(Op::Neg, "neg", {o[0]}, {"neg/y"})));
  }
  g.outputs = outs;
  return g;
}

}  // namespace

TEST_CASE("fuse_epilogues: a BatchNormalization read only by a Relu applies it, bit for bit, on the CPU and emulated CUDA") {
  Graph g = bn_sample();
  CHECK(fuse_epilogues(g) == 1);
  verify(g);
  const auto by = onnxdp::test::by_name(g);
  CHECK_FALSE(by.count("bn1/relu"));
  CHECK(by.at("bn1")->s("activation") == "Relu");
  CHECK(g.value(by.at("bn1")->outputs[0]).name == "bn1/r");
  for (const char* kept : {"bn2", "bn3"}) CHECK_MESSAGE(by.at(kept)->s("activation").empty(), kept);
  for (const char* kept : {"bn2/relu", "bn3/relu"}) CHECK_MESSAGE(by.count(kept), kept);
  const std::map<std::string, Tensor> in = random_feeds(g, 5);
  const std::map<std::string, Tensor> y = check_same_outputs(bn_sample(), g, in, 0);
  int zeroed = 0;
  for (double v : y.at("bn1/r").to_f64()) zeroed += v == 0;
  CHECK(zeroed > 0);  // the Relu did something
#if defined(ONNXDP_HAVE_CUDA)
  // The device kernel applies it too: the fused graph on the emulated device equals the unfused one
  // there, bit for bit, with every node on the device.
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  Plan plain(bn_sample(), PlanOptions{.device = dev});
  Plan fused(std::move(g), PlanOptions{.device = dev});
  CHECK(fused.host_ops().empty());
  const std::map<std::string, Tensor> a = plain.run(in), b = fused.run(in);
  for (const auto& [name, t] : a) {
    INFO(name);
    const std::vector<double> u = t.to_f64(), v = b.at(name).to_f64();
    int differ = 0;
    for (size_t i = 0; i < u.size(); ++i) differ += u[i] != v[i];
    CHECK(differ == 0);
  }
#endif
}

TEST_CASE("fuse_epilogues: FusedGemm is onnxdp's own: a model naming it is refused by name") {
  const std::string dir = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp";
  onnx::ModelProto m = load_model_proto(dir + "/model.onnx");
  bool renamed = false;
  for (auto& n : *m.mutable_graph()->mutable_node())
    if (!renamed && n.op_type() == "Gemm") n.set_op_type("FusedGemm"), renamed = true;
  REQUIRE(renamed);
  CHECK_THROWS_WITH(load_graph(m, dir), doctest::Contains("internal onnxdp op, not importable"));
}
