// The fold_transposes pass (graph/passes/fold_transposes.h): which Transposes a product takes as
// an operand flag, that the graph stays valid and computes the same values on the CPU (and on
// the emulated CUDA device, whose FusedMatMul with transA / transB is a cuBLAS(Lt) call with op T),
// and that the trainer's graph of tiny_lm no longer copies its Linear weights, their gradients, or
// the operands of attention's batched products.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "exec/device_backend.h"
#include "exec/plan.h"
#include "graph/passes/fold_transposes.h"
#include "tests/graph/graph_test_util.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::random_feeds;
using onnxdp::test::count_ops;
using onnxdp::test::out;

namespace {

ValueId transpose(Graph& g, const std::string& name, ValueId x, std::vector<int64_t> perm = {}) {
  std::map<std::string, Attr> a;
  if (!perm.empty()) a["perm"] = Attr(perm);
  return out(g, g.add_node(Op::Transpose, name, {x}, {name + "/y"}, a));
}

// A Transpose of a 2-D value (a weight or a weight gradient in these graphs).
bool g_rank2(const Graph& g, const Node& n) { return g.value(n.inputs[0]).shape.size() == 2; }

// A Linear layer as exported, its backward as autodiff writes it, and the cases that must stay:
//   h = MatMul(x [2, 3, 4], Transpose(W [5, 4]))             -> FusedMatMul(x, W, transB)
//   dx = Gemm(dy [6, 5], Transpose(W))                        -> Gemm(dy, W, transB 1)
//   dW = Transpose(Gemm(x2 [6, 4], dy, transA 1))             -> Gemm(dy, x2, transA 1, transB 0)
//   z = Transpose(Transpose(u [2, 3, 4], [0, 2, 1]), [2, 1, 0])  -> one Transpose(u, [1, 2, 0])
//   s = MatMul(q [2, 3, 4, 5], Transpose(k [2, 3, 6, 5], [0, 1, 3, 2]))  -> FusedMatMul(q, k, transB)
//   gq = MatMul(Transpose(p [2, 3, 4, 6], [0, 1, 3, 2]), s)   -> FusedMatMul(p, s, transA)
//   kept: a Transpose that is not of the last two dims under a MatMul (attention's head split), a Gemm with C under a Transpose, a Transpose read by a Neg too, a Transpose of a graph
//   output.
Graph sample() {
  Graph g;
  ValueId x = add_input(g, "x", {2, 3, 4}), w = add_input(g, "W", {5, 4}), dy = add_input(g, "dy", {6, 5});
  ValueId x2 = add_input(g, "x2", {6, 4}), u = add_input(g, "u", {2, 3, 4}), c = add_input(g, "c", {4, 5});
  ValueId wt = transpose(g, "wt", w);
  ValueId h = out(g, g.add_node(Op::MatMul, "mm", {x, wt}, {"h"}));
  ValueId dx = out(g, g.add_node(Op::Gemm, "dx", {dy, wt}, {"dx"}, {{"transB", Attr(int64_t(1))}}));
  ValueId dwt = out(g, g.add_node(Op::Gemm, "dwt", {x2, dy}, {"dwt"}, {{"transA", Attr(int64_t(1))}}));
  ValueId dw = transpose(g, "dw", dwt);
  ValueId t1 = transpose(g, "t1", u, {0, 2, 1});
  ValueId z = transpose(g, "t2", t1, {2, 1, 0});
  // Stays: Gemm with C, its output transposed.
  ValueId gc = out(g, g.add_node(Op::Gemm, "gc", {x2, dy, c}, {"gc"}, {{"transA", Attr(int64_t(1))}}));
  ValueId gct = transpose(g, "gct", gc);
  // Stays: a Transpose something else reads too.
  ValueId w2t = transpose(g, "w2t", dy);
  ValueId neg = out(g, g.add_node(Op::Neg, "neg", {w2t}, {"neg"}));
  ValueId m2 = out(g, g.add_node(Op::MatMul, "mm2", {x2, transpose(g, "x2t", x2)}, {"m2"}));
  // Batched, attention-like.
  ValueId q = add_input(g, "q", {2, 3, 4, 5}), k = add_input(g, "k", {2, 3, 6, 5}), p = add_input(g, "p", {2, 3, 4, 6});
  ValueId v = add_input(g, "v", {2, 6, 3, 5});
  ValueId s = out(g, g.add_node(Op::MatMul, "qk", {q, transpose(g, "kt", k, {0, 1, 3, 2})}, {"s"}));
  ValueId gq = out(g, g.add_node(Op::MatMul, "gq", {transpose(g, "pt", p, {0, 1, 3, 2}), s}, {"gq"}));
  ValueId sv = out(g, g.add_node(Op::MatMul, "sv", {s, transpose(g, "vt", v, {0, 2, 1, 3})}, {"sv"}));
  g.outputs = {h, dx, dw, z, gct, neg, w2t, m2, gq, sv};
  return g;
}

void check_same(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(t.shape() == b.at(name).shape());
    std::vector<double> x = t.to_f64(), z = b.at(name).to_f64();
    // The same sums, up to their order: BLAS may add a transposed operand's products in another
    // order (float32, K <= 6, values of order 1).
    for (size_t i = 0; i < x.size(); ++i) CHECK(z[i] == doctest::Approx(x[i]).epsilon(1e-5).scale(1));
  }
}

}  // namespace

TEST_CASE("fold_transposes: products take transposes as flags, the rest stays, same values") {
  Graph g = sample();
  const size_t nodes = g.nodes.size();
  // wt (both readers folded), dw (into its Gemm), t1 (composed), x2t (into mm2), kt and pt.
  CHECK(fold_transposes(g) == 6);
  verify(g);
  CHECK(g.nodes.size() == nodes - 6);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  const Node& mm = *by_name.at("mm");
  CHECK(mm.op == Op::FusedMatMul);
  CHECK(mm.i("transB") == 1);
  CHECK(g.value(mm.inputs[1]).name == "W");
  const Node& dx = *by_name.at("dx");
  CHECK((dx.i("transA") == 0 && dx.i("transB") == 0));
  CHECK(g.value(dx.inputs[1]).name == "W");
  const Node& dwt = *by_name.at("dwt");  // Gemm(dy, x2) with transA 1, transB 0 writes dw
  CHECK((g.value(dwt.inputs[0]).name == "dy" && g.value(dwt.inputs[1]).name == "x2"));
  CHECK((dwt.i("transA") == 1 && dwt.i("transB") == 0));
  CHECK(g.value(dwt.outputs[0]).name == "dw/y");
  const Node& t2 = *by_name.at("t2");
  CHECK(t2.ints("perm") == std::vector<int64_t>{1, 2, 0});
  CHECK(g.value(t2.inputs[0]).name == "u");
  CHECK(by_name.at("mm2")->op == Op::FusedMatMul);
  const Node &qk = *by_name.at("qk"), &gq = *by_name.at("gq");
  CHECK((qk.op == Op::FusedMatMul && qk.i("transA") == 0 && qk.i("transB") == 1));
  CHECK(g.value(qk.inputs[1]).name == "k");
  CHECK((gq.op == Op::FusedMatMul && gq.i("transA") == 1 && gq.i("transB") == 0));
  CHECK(g.value(gq.inputs[0]).name == "p");
  CHECK(by_name.at("sv")->op == Op::MatMul);
  for (const char* kept : {"gct", "w2t", "vt"}) CHECK_MESSAGE(by_name.count(kept), kept);
  CHECK(by_name.at("gc")->op == Op::Gemm);
  // The same values, on the CPU and on the emulated CUDA device (cuBLAS(Lt) with op T).
  Graph plain = sample();
  const std::map<std::string, Tensor> in = random_feeds(plain, 5);
  Plan a(std::move(plain));
  const std::map<std::string, Tensor> want = a.run(in);
  Graph cpu_graph = g;
  check_same(want, Plan(std::move(cpu_graph)).run(in));
#if defined(ONNXDP_HAVE_CUDA)
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  Plan d(std::move(g), PlanOptions{.device = dev});
  CHECK(d.host_ops().empty());
  check_same(want, d.run(in));
#endif
}

TEST_CASE("fold_transposes: a kept value is not folded away") {
  Graph g = sample();
  const ValueId wt = g.find("wt/y"), dwt = g.find("dwt");
  CHECK(fold_transposes(g, {wt, dwt}) == 4);  // t1, x2t, kt and pt only
  verify(g);
  CHECK(count_ops(g, Op::Transpose) == 6);  // of 10: wt still computed (its readers take W), dw still reads dwt
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  CHECK(by_name.count("wt"));
  CHECK(by_name.at("dwt")->outputs[0] == dwt);
}

// The graph a device replica runs (on the CPU backend's, graph/passes/fuse_attention.h makes
// attention one node that reads its operands as stored).
TEST_CASE("fold_transposes: tiny_lm's training graph reads its Linear weights and attention operands as stored") {
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/tiny_lm/model.onnx";
  o.batch_size = 8;
  TrainingGraph tg = training_graph(o, 1, 0, true, false);
  int weight_transposes = 0, matrix_transposes = 0, trans_a = 0, trans_b = 0;
  for (const Node& n : tg.g.nodes) {
    if (n.op == Op::Transpose && g_rank2(tg.g, n)) ++weight_transposes;
    if (n.op == Op::Transpose && n.ints("perm") == std::vector<int64_t>{0, 1, 3, 2}) ++matrix_transposes;
    if (n.op == Op::FusedMatMul && n.i("transA")) ++trans_a;
    if (n.op == Op::FusedMatMul && n.i("transB")) ++trans_b;
  }
  CHECK(weight_transposes == 0);  // neither the weights nor their gradients are copied transposed
  // Nor attention's keys, nor the operands of its products' gradients (dA = dY Bᵀ, dB = Aᵀ dY).
  CHECK(matrix_transposes == 0);
  CHECK(trans_a >= 2);
  CHECK(trans_b >= 4 + 2);
  verify(tg.g);
}

namespace {

ValueId reshape(Graph& g, const std::string& name, ValueId x, const std::vector<int64_t>& to) {
  return out(g, g.add_node(Op::Reshape, name, {x, onnxdp::test::add_ints(g, name + "/shape", to)}, {name + "/y"}));
}

// Transposes spelled through Reshapes, and what must stay:
//   k: the dynamo exporter's k.transpose(-1, -2) of [B, H, T, D] after the head split,
//      Reshape(Transpose(Reshape(Transpose(x [2, 5, 3, 4], [0, 2, 1, 3]), [6, 5, 4]), [0, 2, 1]),
//      [2, 3, 4, 5])                                      -> Transpose(x, [0, 2, 3, 1])
//   ones: Reshape(Transpose(Reshape(o [2, 1, 3, 4], [2, 12]), [1, 0]), [1, 3, 4, 2])
//                                                         -> Transpose(o, [1, 2, 3, 0])
//   split: the first Reshape splits a dim, Reshape(Transpose(Reshape(s [6, 5], [2, 3, 5]),
//      [1, 0, 2]), [3, 2, 5]): stays (no Transpose of s is that)
//   merged: s2 keeps runs merged, Reshape(Transpose(Reshape(m [2, 3, 4], [6, 4]), [1, 0]),
//      [4, 6]): stays
//   swapped: s2 splits a run in another order, Reshape(Transpose(Reshape(m, [6, 4]), [1, 0]),
//      [4, 3, 2]): stays
//   shared: k's form with its 3-D Transpose also a graph output: rewritten, the Transpose kept
Graph reshaped_transposes() {
  Graph g;
  ValueId x = add_input(g, "x", {2, 5, 3, 4}), o = add_input(g, "o", {2, 1, 3, 4}), s = add_input(g, "s", {6, 5});
  ValueId m = add_input(g, "m", {2, 3, 4}), x2 = add_input(g, "x2", {2, 5, 3, 4});
  ValueId k = reshape(g, "k3", transpose(g, "kt3", reshape(g, "kr3", transpose(g, "kh", x, {0, 2, 1, 3}), {6, 5, 4}),
                                         {0, 2, 1}), {2, 3, 4, 5});
  ValueId ones = reshape(g, "o4", transpose(g, "ot", reshape(g, "o2", o, {2, 12}), {1, 0}), {1, 3, 4, 2});
  ValueId split = reshape(g, "s3", transpose(g, "st", reshape(g, "s2", s, {2, 3, 5}), {1, 0, 2}), {3, 2, 5});
  ValueId merged = reshape(g, "m2", transpose(g, "mt", reshape(g, "m1", m, {6, 4}), {1, 0}), {4, 6});
  ValueId swapped = reshape(g, "w3", transpose(g, "wt", reshape(g, "w1", m, {6, 4}), {1, 0}), {4, 3, 2});
  ValueId shared_t = transpose(g, "xt3", reshape(g, "xr3", x2, {10, 3, 4}), {0, 2, 1});
  ValueId shared = reshape(g, "x4", shared_t, {2, 5, 4, 3});
  g.outputs = {k, ones, split, merged, swapped, shared, shared_t};
  return g;
}

}  // namespace

TEST_CASE("merge_transposes: a transpose spelled through Reshapes becomes one Transpose, same values") {
  Graph g = reshaped_transposes();
  CHECK(merge_transposes(g) == 4);  // k3 (then composed with kh), o4, x4
  verify(g);
  const auto by = onnxdp::test::by_name(g);
  const Node& k = *by.at("k3");
  CHECK(k.op == Op::Transpose);
  CHECK(k.ints("perm") == std::vector<int64_t>{0, 2, 3, 1});
  CHECK(g.value(k.inputs[0]).name == "x");
  for (const char* gone : {"kh", "kr3", "kt3", "o2", "ot"}) CHECK_MESSAGE(!by.count(gone), gone);
  const Node& o4 = *by.at("o4");
  CHECK((o4.op == Op::Transpose && o4.ints("perm") == std::vector<int64_t>{1, 2, 3, 0}));
  for (const char* stays : {"s2", "st", "s3", "m1", "mt", "m2", "w1", "wt", "w3"}) CHECK_MESSAGE(by.count(stays), stays);
  for (const char* reshape : {"s3", "m2", "w3"}) CHECK_MESSAGE(by.at(reshape)->op == Op::Reshape, reshape);
  const Node& x4 = *by.at("x4");
  CHECK((x4.op == Op::Transpose && x4.ints("perm") == std::vector<int64_t>{0, 1, 3, 2}));
  CHECK((by.count("xt3") && by.count("xr3")));  // a graph output reads them
  const Graph before = reshaped_transposes();
  onnxdp::test::check_same_outputs(before, g, random_feeds(before, 9), 0);
}

// HF GPT-2 as the dynamo exporter writes it: its k reaches attention through that form; now
// attention reads q, k and v where the Linear wrote them (heads 2), as for the legacy export.
TEST_CASE("merge_transposes: HF GPT-2's dynamo export fuses its attention with q, k and v in place") {
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/zoo/hf_gpt2_dynamo/model.onnx";
  o.batch_size = 2;
  TrainingGraph tg = training_graph(o, 1, 0);
  int attention = 0;
  for (const Node& n : tg.g.nodes)
    if (n.op == Op::FusedAttention) {
      ++attention;
      CHECK(n.i("heads") == 2);
    }
  CHECK(attention == 2);
  CHECK(count_ops(tg.g, Op::Transpose) == 0);
}
