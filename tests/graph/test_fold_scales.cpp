// The fold_scales pass (graph/passes/fold_scales.h): which scalar Muls a product takes as its
// alpha, that the graph stays valid and computes the unfolded graph's values on the CPU (to one
// rounding), and that the trainer's graph of gpt-style attention loses its scale Muls.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>

#include "exec/plan.h"
#include "graph/passes/fold_scales.h"
#include "tests/graph/graph_test_util.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::check_same_outputs;
using onnxdp::test::random_feeds;
using onnxdp::test::count_ops;
using onnxdp::test::out;

namespace {

// A one-element float32 value: a constant, or (trained = true) a parameter.
ValueId scalar(Graph& g, const std::string& name, float v, bool trained = false) {
  Value s;
  s.name = name;
  s.dtype = DType::f32;
  s.shape = {};
  s.kind = trained ? ValueKind::parameter : ValueKind::constant;
  s.data = Tensor(DType::f32, {});
  s.data.as<float>()[0] = v;
  return g.add_value(std::move(s));
}

// Attention's scale and its gradient, and the cases that must stay:
//   sc = Mul(MatMul(q [2, 3, 4], kt [2, 4, 3]), s)        -> FusedMatMul(q, kt, alpha s)
//   g = Mul(s, d [2, 3, 3]); gq = MatMul(g, k [2, 3, 4]); gk = FusedMatMul(g, q, transA)
//                                                          -> both read d with alpha s
//   stays: a Mul by a parameter; a product with a bias under a Mul; a Mul read by a Neg too;
//   a product whose output the graph returns too.
Graph sample() {
  Graph g;
  ValueId q = add_input(g, "q", {2, 3, 4}), kt = add_input(g, "kt", {2, 4, 3}), d = add_input(g, "d", {2, 3, 3});
  ValueId k = add_input(g, "k", {2, 3, 4}), w = add_input(g, "w", {4, 3}), b = add_input(g, "b", {3});
  ValueId s = scalar(g, "s", 0.25f), p = scalar(g, "p", 0.5f, true);
  ValueId mm = out(g, g.add_node(Op::MatMul, "mm", {q, kt}, {"mm/y"}));
  ValueId sc = out(g, g.add_node(Op::Mul, "scale", {mm, s}, {"sc"}));
  ValueId gs = out(g, g.add_node(Op::Mul, "gscale", {s, d}, {"gs"}));
  ValueId gq = out(g, g.add_node(Op::MatMul, "gq", {gs, k}, {"gq"}));
  ValueId gk = out(g, g.add_node(Op::FusedMatMul, "gk", {gs, q}, {"gk"}, {{"transA", Attr(int64_t(1))}}));
  // Stays: a trained scale.
  ValueId mp = out(g, g.add_node(Op::MatMul, "mmp", {q, kt}, {"mmp/y"}));
  ValueId sp = out(g, g.add_node(Op::Mul, "scalep", {mp, p}, {"sp"}));
  // Stays: a product with a bias.
  ValueId fb = out(g, g.add_node(Op::FusedMatMul, "fb", {q, w, b}, {"fb/y"}));
  ValueId sb = out(g, g.add_node(Op::Mul, "scaleb", {fb, s}, {"sb"}));
  // Stays: the scaled value read by a Neg as well as a product.
  ValueId gn = out(g, g.add_node(Op::Mul, "gn", {d, s}, {"gn/y"}));
  ValueId gn1 = out(g, g.add_node(Op::MatMul, "gn1", {gn, k}, {"gn1"}));
  ValueId gn2 = out(g, g.add_node(Op::Neg, "gn2", {gn}, {"gn2"}));
  // Stays: the product's output is a graph output too.
  ValueId mo = out(g, g.add_node(Op::MatMul, "mmo", {q, kt}, {"mmo/y"}));
  ValueId so = out(g, g.add_node(Op::Mul, "scaleo", {mo, s}, {"so"}));
  ValueId mo2 = out(g, g.add_node(Op::MatMul, "mmo2", {so, k}, {"mmo2"}));
  g.outputs = {sc, gq, gk, sp, sb, gn1, gn2, mo, so, mo2};
  return g;
}

}  // namespace

TEST_CASE("fold_scales: a constant scalar Mul after a product, or before the products that read it, becomes alpha") {
  Graph g = sample();
  CHECK(fold_scales(g) == 2);
  verify(g);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  for (const char* gone : {"scale", "gscale"}) CHECK_MESSAGE(!by_name.count(gone), gone);
  for (const char* kept : {"scalep", "scaleb", "gn", "scaleo"}) CHECK_MESSAGE(by_name.count(kept), kept);
  const Node& mm = *by_name.at("mm");
  CHECK(mm.op == Op::FusedMatMul);
  CHECK(mm.f("alpha") == 0.25f);
  CHECK(g.value(mm.outputs[0]).name == "sc");
  for (const char* reader : {"gq", "gk"}) {
    const Node& n = *by_name.at(reader);
    CHECK(n.op == Op::FusedMatMul);
    CHECK(n.f("alpha") == 0.25f);
    CHECK(g.value(n.inputs[0]).name == "d");
  }
  CHECK(by_name.at("gk")->i("transA") == 1);
  for (const char* plain : {"mmp", "gn1", "mmo", "mmo2"}) CHECK_MESSAGE(by_name.at(plain)->op == Op::MatMul, plain);
  CHECK(by_name.at("fb")->f("alpha") == 1.0f);
  CHECK(fold_scales(g) == 0);
  // A value the caller keeps is not folded away.
  Graph k = sample();
  CHECK(fold_scales(k, {k.find("mm/y"), k.find("gs")}) == 0);
  CHECK(count_ops(k, Op::Mul) == 6);
}

TEST_CASE("fold_scales: the folded graph computes the unfolded graph's values on the CPU, to one rounding") {
  Graph plain = sample(), folded = sample();
  REQUIRE(fold_scales(folded) == 2);
  const std::map<std::string, Tensor> in = random_feeds(plain, 5);
  check_same_outputs(std::move(plain), std::move(folded), in, 1e-6);
}
