// The fuse_attention pass (graph/passes/fuse_attention.h) and the FusedAttention / FusedAttentionGrad
// kernels (exec/cpu/attention.h): which attentions become one FusedAttention node (and which stay),
// that the fused graph's values and gradients are the unfused graph's on the CPU (its MatMul,
// Softmax, Where and SoftmaxGrad kernels: an independent computation), causal masks with their
// skipped blocks included, that autodiff's FusedAttentionGrad matches float64 finite differences, and
// that the trainer's graph of the sample causal language model fuses every layer; q, k and v cut
// from one Linear output read in place (heads 2).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include <fmt/format.h>

#include "compile/compile.h"
#include "exec/device_backend.h"
#include "exec/plan.h"
#include "graph/autodiff.h"
#include "graph/passes/fuse_attention.h"
#include "importer/importer.h"
#include "tests/graph/gradcheck.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ops/op_test_util.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::add_constant;
using onnxdp::test::add_input;
using onnxdp::test::by_name;
using onnxdp::test::check_same_outputs;
using onnxdp::test::count_ops;
using onnxdp::test::out;
using onnxdp::test::random_feeds;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

ValueId scalar(Graph& g, const std::string& name, float x) { return add_constant(g, name, Tensor::from_f32({x})); }

// A [1, 1, tq, tk] bool mask: causal (true above the diagonal, offset so the last query row sees
// every key) or a scattered pattern that leaves column 0 of every row unmasked.
ValueId mask(Graph& g, const std::string& name, int64_t tq, int64_t tk, bool causal) {
  Tensor t(DType::boolean, {1, 1, tq, tk});
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = 0; j < tk; ++j)
      t.as<bool>()[i * tk + j] = causal ? j > i + (tk - tq) : (j != 0 && (3 * i + 2 * j) % 5 < 2);
  return add_constant(g, name, std::move(t));
}

struct Layer {
  Graph& g;
  std::string name;
  ValueId node_out(Op op, const std::string& n, std::vector<ValueId> in, std::map<std::string, Attr> attrs = {}) {
    return out(g, g.add_node(op, name + "/" + n, std::move(in), {name + "/" + n + "/y"}, std::move(attrs)));
  }
  ValueId qk(ValueId q, ValueId kt) { return node_out(Op::MatMul, "qk", {q, kt}); }
  ValueId softmax(ValueId x, int64_t axis = -1) { return node_out(Op::Softmax, "softmax", {x}, {{"axis", Attr(axis)}}); }
  ValueId pv(ValueId p, ValueId v) { return node_out(Op::MatMul, "pv", {p, v}); }
  ValueId transpose(const std::string& n, ValueId x, std::vector<int64_t> perm) {
    return node_out(Op::Transpose, n, {x}, {{"perm", Attr(std::move(perm))}});
  }
  // GPT-style: [B, T, H, D] inputs through the head transposes; Mul by a scale; Where(mask,
  // fill, s) (fill_when 1) or Where(mask, s, fill) (0); Softmax; MatMul; Transpose back.
  ValueId heads(ValueId q4, ValueId k4, ValueId v4, ValueId m, ValueId fill, bool fill_when = true) {
    ValueId s = qk(transpose("tq", q4, {0, 2, 1, 3}), transpose("tk", k4, {0, 2, 3, 1}));
    s = node_out(Op::Mul, "scale", {s, scalar(g, name + "/c", 0.35f)});
    if (m != kNoValue) s = node_out(Op::Where, "where", fill_when ? std::vector{m, fill, s} : std::vector{m, s, fill});
    return transpose("back", pv(softmax(s), transpose("tv", v4, {0, 2, 1, 3})), {0, 2, 1, 3});
  }
};

// Fused: a1 (heads 1, causal -inf mask, 40 query rows: two blocks and a part), a2 (q, kt, v as
// given, Div by a scale, Where(mask, s, -1e9): fill_when 0, a finite fill), a3 (no mask, no scale),
// a7 (a -inf fill masking columns inside each row's reach), a8 - a10 and a12 (below).
// Stay: a4 (its probabilities are a graph output), a5 (Softmax along axis 2), a6 (the scale an
// input, not a constant), a11 (an additive mask of -1e9: s - 1e9 is not -1e9 for every score).
Graph sample() {
  Graph g;
  const int64_t b = 2, t = 40, h = 3, d = 4;
  ValueId q4 = add_input(g, "q4", {b, t, h, d}), k4 = add_input(g, "k4", {b, t, h, d}),
          v4 = add_input(g, "v4", {b, t, h, 5});
  ValueId q = add_input(g, "q", {b, h, 7, d}), kt = add_input(g, "kt", {b, h, d, 9}),
          v = add_input(g, "v", {b, h, 9, 6});
  ValueId sc = add_input(g, "sc", {1});
  ValueId causal = mask(g, "causal", t, t, true), scattered = mask(g, "scattered", 7, 9, false);
  ValueId ninf = scalar(g, "ninf", kNegInf), big = scalar(g, "big", -1e9f);
  ValueId y1 = Layer{g, "a1"}.heads(q4, k4, v4, causal, ninf);
  Layer a2{g, "a2"};
  ValueId s2 = a2.node_out(Op::Div, "scale", {a2.qk(q, kt), scalar(g, "a2/c", 2.0f)});
  ValueId y2 = a2.pv(a2.softmax(a2.node_out(Op::Where, "where", {scattered, s2, big})), v);
  Layer a3{g, "a3"};
  ValueId y3 = a3.pv(a3.softmax(a3.qk(q, kt), 3), v);
  Layer a4{g, "a4"};
  ValueId p4 = a4.softmax(a4.qk(q, kt));
  ValueId y4 = a4.pv(p4, v);
  Layer a5{g, "a5"};
  ValueId y5 = a5.pv(a5.softmax(a5.qk(q, kt), 2), v);
  Layer a6{g, "a6"};
  ValueId y6 = a6.pv(a6.softmax(a6.node_out(Op::Mul, "scale", {a6.qk(q, kt), sc})), v);
  Layer a7{g, "a7"};
  ValueId y7 = a7.pv(a7.softmax(a7.node_out(Op::Where, "where", {scattered, ninf, a7.qk(q, kt)})), v);
  // scaled_dot_product_attention as exported: q and kt scaled, an additive mask of 0 and -inf
  // (a Where that a8 and a9 share) or of 0 and the lowest float (a constant, a10).
  ValueId zero = scalar(g, "zero", 0.0f);
  ValueId bias = out(g, g.add_node(Op::Where, "bias", {scattered, ninf, zero}, {"bias/y"}));
  Tensor bt(DType::f32, {7, 9});
  const float lowest = std::numeric_limits<float>::lowest();  // the export's fill
  for (int64_t i = 0; i < bt.numel(); ++i) bt.as<float>()[i] = (i % 9 != 0 && i % 4 == 1) ? lowest : 0.0f;
  ValueId bias_c = add_constant(g, "bias_c", std::move(bt));
  auto sdpa = [&](const std::string& name, ValueId b, bool b_first) {
    Layer a{g, name};
    ValueId c = scalar(g, name + "/c", 0.6f);
    ValueId s = a.qk(a.node_out(Op::Mul, "sq", {q, c}), a.node_out(Op::Mul, "sk", {c, kt}));
    return a.pv(a.softmax(a.node_out(Op::Add, "add", b_first ? std::vector{b, s} : std::vector{s, b})), v);
  };
  ValueId y8 = sdpa("a8", bias, false), y9 = sdpa("a9", bias, true), y10 = sdpa("a10", bias_c, false);
  ValueId y11 = sdpa("a11", out(g, g.add_node(Op::Where, "bias9", {scattered, big, zero}, {"bias9/y"})), false);
  // The export's Where(IsNaN(p), 0, p) after the softmax, a query row masked throughout (NaN).
  Tensor rm(DType::boolean, {1, 1, 7, 9});
  for (int64_t i = 0; i < rm.numel(); ++i) rm.as<bool>()[i] = i / 9 == 3 || (i % 9 > i / 9 + 2);
  ValueId row_masked = add_constant(g, "row_masked", std::move(rm));
  // Inputs of its own: its NaN gradients stay out of the other layers'.
  ValueId q12 = add_input(g, "q12", {b, h, 7, d}), kt12 = add_input(g, "kt12", {b, h, d, 9}),
          v12 = add_input(g, "v12", {b, h, 9, 6});
  Layer a12{g, "a12"};
  ValueId p12 = a12.softmax(a12.node_out(Op::Where, "where", {row_masked, ninf, a12.qk(q12, kt12)}));
  ValueId z12 = a12.node_out(Op::Where, "nan0", {a12.node_out(Op::IsNaN, "isnan", {p12}), zero, p12});
  ValueId y12 = a12.pv(z12, v12);
  g.outputs = {y1, y2, y3, y4, p4, y5, y6, y7, y8, y9, y10, y11, y12};
  return g;
}

}  // namespace

TEST_CASE("fuse_attention: MatMul, scale, mask, Softmax and MatMul become one FusedAttention node") {
  Graph g = sample();
  CHECK(fuse_attention(g) == 8);
  verify(g);
  const auto n = by_name(g);
  // a1: the head transposes went with it; the node is the Transpose back's, writing its output.
  const Node& a1 = *n.at("a1/back");
  CHECK(a1.op == Op::FusedAttention);
  CHECK(a1.i("heads") == 1);
  REQUIRE(a1.inputs.size() == 4);
  CHECK(g.value(a1.inputs[0]).name == "q4");
  CHECK(g.value(a1.inputs[1]).name == "k4");
  CHECK(g.value(a1.inputs[2]).name == "v4");
  CHECK(g.value(a1.inputs[3]).name == "causal");
  CHECK(g.value(a1.outputs[0]).name == "a1/back/y");
  CHECK(g.value(a1.outputs[1]).name == "a1/softmax/y");
  CHECK(std::isinf(a1.f("fill")));
  CHECK(a1.i("fill_when") == 1);
  CHECK(a1.f("scale") == 0.35f);
  for (const char* gone : {"a1/tq", "a1/tk", "a1/tv", "a1/qk", "a1/scale", "a1/where", "a1/softmax", "a1/pv"})
    CHECK_MESSAGE(!n.count(gone), gone);
  const Node& a2 = *n.at("a2/pv");
  CHECK(a2.op == Op::FusedAttention);
  CHECK(a2.i("heads") == 0);
  CHECK(a2.f("scale") == 0.5f);
  CHECK(a2.f("fill") == -1e9f);
  CHECK(a2.i("fill_when") == 0);
  const Node& a3 = *n.at("a3/pv");
  CHECK(a3.op == Op::FusedAttention);
  CHECK(a3.inputs.size() == 3);
  CHECK(a3.f("scale") == 1.0f);
  for (const char* kept : {"a4/softmax", "a5/softmax", "a6/softmax", "a6/scale", "a11/softmax", "bias9"})
    CHECK_MESSAGE(n.count(kept), kept);
  CHECK(count_ops(g, Op::FusedAttention) == 8);
  CHECK(n.at("a12/pv")->i("nan_to_zero") == 1);
  CHECK(g.value(n.at("a12/pv")->outputs[1]).name == "a12/softmax/y");
  for (const char* gone : {"a12/isnan", "a12/nan0", "a12/softmax"}) CHECK_MESSAGE(!n.count(gone), gone);
  for (const char* sdpa : {"a8/pv", "a9/pv", "a10/pv"}) {
    CAPTURE(sdpa);
    const Node& a = *n.at(sdpa);
    CHECK(a.op == Op::FusedAttention);
    CHECK(a.f("scale") == doctest::Approx(0.36));
    CHECK(g.value(a.inputs[0]).name == "q");
    CHECK(g.value(a.inputs[1]).name == "kt");
    CHECK(a.f("fill") == (std::string(sdpa) == "a10/pv" ? std::numeric_limits<float>::lowest() : kNegInf));
    CHECK(a.i("fill_when") == 1);
  }
  CHECK(g.value(n.at("a8/pv")->inputs[3]).name == "scattered");
  CHECK(g.value(n.at("a10/pv")->inputs[3]).dtype == DType::boolean);
  CHECK(!n.count("bias"));  // nothing reads the additive mask any more
  CHECK(n.at("a7/pv")->op == Op::FusedAttention);
  CHECK(fuse_attention(g) == 0);
  // A value the caller keeps is not fused away.
  Graph k = sample();
  CHECK(fuse_attention(k, {k.find("a1/where/y"), k.find("bias/y")}) == 7);
  CHECK(by_name(k).at("a1/softmax")->op == Op::Softmax);
  CHECK(by_name(k).count("bias"));
}

TEST_CASE("fuse_attention: the fused graph computes the unfused graph's values on the CPU") {
  Graph plain = sample(), fused = sample();
  REQUIRE(fuse_attention(fused) == 8);
  const std::map<std::string, Tensor> in = random_feeds(plain, 7);
  const std::map<std::string, Tensor> y = check_same_outputs(std::move(plain), std::move(fused), in, 2e-6);
  CHECK(y.at("a1/back/y").shape() == Shape{2, 40, 3, 5});
  // a12's row 3, masked throughout: NaN after the softmax, so 0 after the export's Where.
  const Tensor& y12 = y.at("a12/pv/y");  // [2, 3, 7, 6]
  for (int64_t head = 0; head < 6; ++head)
    for (int64_t j = 0; j < 6; ++j) CHECK(y12.as<float>()[(head * 7 + 3) * 6 + j] == 0.0f);
}

namespace {

// The graph with loss = sum(y_i * R_i) over its outputs, and its gradients with respect to the
// inputs named (the sample's, by default) as outputs too.
Graph with_gradients(Graph g, const std::vector<std::string>& inputs = {"q4", "k4", "v4", "q", "kt", "v", "q12",
                                                                        "kt12", "v12"}) {
  std::vector<ValueId> terms;
  int i = 0;
  for (ValueId y : g.outputs) {
    Tensor r(DType::f32, g.value(y).shape);
    for (int64_t e = 0; e < r.numel(); ++e) r.as<float>()[e] = float(((e * 7 + i * 13) % 11) - 5) / 5.0f;
    // fmt rather than "R" + std::to_string(..): GCC 12 warns falsely (-Wrestrict) on the latter.
    ValueId rv = add_constant(g, fmt::format("R{}", i), std::move(r));
    ValueId m = out(g, g.add_node(Op::Mul, fmt::format("mul{}", i), {y, rv}, {fmt::format("m{}", i)}));
    terms.push_back(out(g, g.add_node(Op::ReduceSum, fmt::format("sum{}", i), {m}, {fmt::format("s{}", i)},
                                      {{"keepdims", Attr(int64_t(0))}})));
    ++i;
  }
  ValueId loss = terms[0];
  for (size_t k = 1; k < terms.size(); ++k)
    loss = out(g, g.add_node(Op::Add, fmt::format("add{}", k), {loss, terms[k]}, {fmt::format("l{}", k)}));
  std::vector<ValueId> wrt;
  for (const std::string& name : inputs) wrt.push_back(g.find(name));
  std::vector<ValueId> grads = autodiff(g, loss, wrt);
  g.outputs.clear();
  for (ValueId d : grads) g.outputs.push_back(d);
  g.outputs.push_back(loss);
  verify(g);
  return g;
}

}  // namespace

TEST_CASE("fuse_attention: the gradients of the fused graph are the unfused graph's (FusedAttentionGrad)") {
  Graph plain = sample(), fused = sample();
  REQUIRE(fuse_attention(fused) == 8);
  Graph gp = with_gradients(std::move(plain)), gf = with_gradients(std::move(fused));
  CHECK(count_ops(gf, Op::FusedAttentionGrad) == 8);
  CHECK(count_ops(gf, Op::SoftmaxGrad) == 4);  // a4, a5, a6, a11
  // Output names differ (the gradients are named after the nodes they come from): in order.
  const std::map<std::string, Tensor> in = random_feeds(gp, 11);
  Plan a(gp), b(gf);
  const std::map<std::string, Tensor> ya = a.run(in), yb = b.run(in);
  REQUIRE(gp.outputs.size() == gf.outputs.size());
  for (size_t k = 0; k < gp.outputs.size(); ++k) {
    const Tensor &x = ya.at(gp.value(gp.outputs[k]).name), &z = yb.at(gf.value(gf.outputs[k]).name);
    INFO("output " << k << " " << gp.value(gp.outputs[k]).name);
    REQUIRE(x.shape() == z.shape());
    const std::vector<double> xv = x.to_f64(), zv = z.to_f64();
    double scale = 0;
    for (double e : xv) scale = std::max(scale, std::fabs(e));
    // Finite throughout: a12's row masked throughout gets 0 from the masks' gradient, fused or not.
    for (size_t e = 0; e < xv.size(); ++e) CHECK(std::fabs(xv[e] - zv[e]) <= 1e-5 * (1 + scale));
  }
}

TEST_CASE("fuse_attention: FusedAttentionGrad against float64 finite differences (heads 0 and 1, masked)") {
  for (bool heads : {false, true}) {
    CAPTURE(heads);
    testing::Case c;
    const int64_t b = 1, t = 5, h = 2, d = 3;
    ValueId q, k, v;
    if (heads) {
      q = c.param("q", {b, t, h, d});
      k = c.param("k", {b, t, h, d});
      v = c.param("v", {b, t, h, 2});
    } else {
      q = c.param("q", {b, h, t, d});
      k = c.param("kt", {b, h, d, t + 1});
      v = c.param("v", {b, h, t + 1, 2});
    }
    const int64_t tk = heads ? t : t + 1;
    Tensor m(DType::boolean, {1, 1, t, tk});
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < tk; ++j) m.as<bool>()[i * tk + j] = j > i;  // causal: rows reach 1 .. t columns
    ValueId mv = c.constant(m, "mask");
    const std::map<std::string, Attr> attrs = {
        {"scale", Attr(0.7f)}, {"heads", Attr(int64_t(heads))}, {"fill", Attr(kNegInf)}, {"fill_when", Attr(int64_t(1))}};
    ValueId y = c.node_n(Op::FusedAttention, {q, k, v, mv}, attrs, 2)[0];
    testing::gradcheck(c, y);
  }
}

namespace {

// GPT-style layers whose q, k and v a Split cuts from one [B, T, 3 * H * D] input, then Reshapes
// to [B, T, H, D]: p1 packs (heads 2: the Split and Reshapes go); p2 (the Split's outputs taken
// as k, q, v) and p3 (a Split output also a graph output) fuse with heads 1 and keep their Split;
// p4 packs too, its y reshaped to its own shape before the Transpose back (HF GPT-2's export).
Graph packed_sample() {
  Graph g;
  const int64_t b = 2, t = 37, h = 3, d = 4;
  ValueId causal = mask(g, "causal", t, t, true), ninf = scalar(g, "ninf", kNegInf);
  std::vector<ValueId> ys;
  for (const char* name : {"p1", "p2", "p3", "p4"}) {
    const std::string n = name;
    ValueId x = add_input(g, n + "/qkv", {b, t, 3 * h * d});
    ValueId sizes = add_constant(g, n + "/sizes", Tensor::from_i64({h * d, h * d, h * d}, {3}));
    ValueId shape = add_constant(g, n + "/shape", Tensor::from_i64({b, t, h, d}, {4}));
    const int split = g.add_node(Op::Split, n + "/split", {x, sizes}, {n + "/s0", n + "/s1", n + "/s2"},
                                 {{"axis", Attr(int64_t(2))}});
    std::vector<ValueId> parts;
    for (int j = 0; j < 3; ++j)
      parts.push_back(out(g, g.add_node(Op::Reshape, fmt::format("{}/r{}", n, j),
                                        {g.nodes[size_t(split)].outputs[size_t(j)], shape}, {fmt::format("{}/q{}", n, j)})));
    if (n == "p2") std::swap(parts[0], parts[1]);
    if (n == "p4") {  // as Layer::heads, with y reshaped to [B, H, T, D] before the Transpose back
      Layer a{g, n};
      ValueId sc = a.node_out(Op::Mul, "scale", {a.qk(a.transpose("tq", parts[0], {0, 2, 1, 3}),
                                                      a.transpose("tk", parts[1], {0, 2, 3, 1})),
                                                 scalar(g, n + "/c", 0.35f)});
      ValueId y = a.pv(a.softmax(a.node_out(Op::Where, "where", {causal, ninf, sc})),
                       a.transpose("tv", parts[2], {0, 2, 1, 3}));
      y = a.node_out(Op::Reshape, "same", {y, add_constant(g, n + "/bhtd", Tensor::from_i64({b, h, t, d}, {4}))});
      ys.push_back(a.transpose("back", y, {0, 2, 1, 3}));
      continue;
    }
    ys.push_back(Layer{g, n}.heads(parts[0], parts[1], parts[2], causal, ninf));
    if (n == "p3") ys.push_back(g.nodes[size_t(split)].outputs[2]);
  }
  g.outputs = ys;
  return g;
}

}  // namespace

TEST_CASE("fuse_attention: q, k and v split from one Linear output are read there (heads 2), values and gradients") {
  Graph g = packed_sample();
  CHECK(fuse_attention(g) == 4);
  verify(g);
  const auto n = by_name(g);
  for (const char* layer : {"p1", "p4"}) {
    CAPTURE(layer);
    const std::string l = layer;
    const Node& p1 = *n.at(l + "/back");
    CHECK(p1.op == Op::FusedAttention);
    CHECK(p1.i("heads") == 2);
    CHECK(p1.i("num_heads") == 3);
    REQUIRE(p1.inputs.size() == 4);
    CHECK(g.value(p1.inputs[0]).name == l + "/qkv");
    CHECK(p1.inputs[1] == kNoValue);
    CHECK(p1.inputs[2] == kNoValue);
    for (const char* gone : {"/split", "/r0", "/r1", "/r2", "/same"}) CHECK_MESSAGE(!n.count(l + gone), gone);
  }
  for (const char* layer : {"p2", "p3"}) {
    CAPTURE(layer);
    CHECK(n.at(std::string(layer) + "/back")->i("heads") == 1);
    CHECK(n.at(std::string(layer) + "/split")->op == Op::Split);
  }
  // Values: the unfused graph's.
  const std::map<std::string, Tensor> in = random_feeds(g, 5);
  check_same_outputs(packed_sample(), g, in, 2e-6);
  // Gradients with respect to each qkv: the unfused graph's (one dqkv, no Concat, for p1 and p4).
  const std::vector<std::string> qkv = {"p1/qkv", "p2/qkv", "p3/qkv", "p4/qkv"};
  Graph gp = with_gradients(packed_sample(), qkv), gf = with_gradients(std::move(g), qkv);
  CHECK(count_ops(gf, Op::FusedAttentionGrad) == 4);
  CHECK(count_ops(gf, Op::Concat) == 2);  // p2's and p3's; p1's and p4's gradients are written in place
  const std::map<std::string, Tensor> ya = Plan(gp).run(in), yb = Plan(gf).run(in);
  for (size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    const std::vector<double> xv = ya.at(gp.value(gp.outputs[k]).name).to_f64(),
                              zv = yb.at(gf.value(gf.outputs[k]).name).to_f64();
    REQUIRE(xv.size() == zv.size());
    double scale = 0;
    for (double e : xv) scale = std::max(scale, std::fabs(e));
    REQUIRE(scale > 0);
    for (size_t e = 0; e < xv.size(); ++e) CHECK(std::fabs(xv[e] - zv[e]) <= 1e-5 * (1 + scale));
  }
}

TEST_CASE("fuse_attention: FusedAttentionGrad with q, k and v packed (heads 2) against float64 finite differences") {
  testing::Case c;
  const int64_t t = 5, h = 2, d = 3;
  ValueId qkv = c.param("qkv", {2, t, 3 * h * d});
  Tensor m(DType::boolean, {1, 1, t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) m.as<bool>()[i * t + j] = j > i;
  const std::map<std::string, Attr> attrs = {{"scale", Attr(0.7f)},          {"heads", Attr(int64_t(2))},
                                             {"num_heads", Attr(int64_t(h))}, {"fill", Attr(kNegInf)},
                                             {"fill_when", Attr(int64_t(1))}};
  ValueId y = c.node_n(Op::FusedAttention, {qkv, kNoValue, kNoValue, c.constant(m, "mask")}, attrs, 2)[0];
  testing::gradcheck(c, y);
}

TEST_CASE("fuse_attention: the trainer's graph of the sample causal language model has one FusedAttention per layer") {
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/tiny_lm/model.onnx";
  o.batch_size = 4;
  TrainingGraph tg = training_graph(o, 1, 0);
  const int fused = count_ops(tg.g, Op::FusedAttention);
  CHECK(fused >= 1);
  CHECK(count_ops(tg.g, Op::FusedAttentionGrad) == fused);
  CHECK(count_ops(tg.g, Op::Softmax) + count_ops(tg.g, Op::MaskedSoftmax) == 0);
  // Its one Linear for q, k and v: read in place, no Split forward or Concat backward.
  for (const Node& n : tg.g.nodes)
    if (n.op == Op::FusedAttention) CHECK(n.i("heads") == 2);
  CHECK(count_ops(tg.g, Op::Split) == 0);
  CHECK(count_ops(tg.g, Op::Concat) == 0);
  verify(tg.g);
}

TEST_CASE("FusedAttention: the shape rules refuse operands that do not fit, naming them, and a model cannot name the op") {
  Graph g;
  ValueId q = add_input(g, "q", {2, 3, 5, 4}), kt = add_input(g, "kt", {2, 3, 4, 9}), v = add_input(g, "v", {2, 3, 9, 6});
  ValueId bad_kt = add_input(g, "bad_kt", {2, 3, 5, 9}), d64 = add_input(g, "d64", {2, 3, 9, 6}, DType::f64);
  ValueId fmask = add_input(g, "fmask", {1, 1, 5, 9}), wide = mask(g, "wide", 5, 10, true), m = mask(g, "m", 5, 9, true);
  auto add = [&](std::vector<ValueId> in, std::map<std::string, Attr> attrs = {}) {
    return g.add_node(Op::FusedAttention, "att", std::move(in), {"y", "p"}, std::move(attrs));
  };
  CHECK_THROWS_WITH_AS(add({q, bad_kt, v}), doctest::Contains("do not fit"), Error);
  CHECK_THROWS_WITH_AS(add({q, kt, d64}), doctest::Contains("'d64') is f64"), Error);
  CHECK_THROWS_WITH_AS(add({q, kt, v}, {{"heads", Attr(int64_t(1))}}), doctest::Contains("[B, Tq, H, D]"), Error);
  CHECK_THROWS_WITH_AS(add({q, kt, v, m}), doctest::Contains("'fill' is required"), Error);
  CHECK_THROWS_WITH_AS(add({q, kt, v, fmask}, {{"fill", Attr(kNegInf)}}), doctest::Contains("not bool"), Error);
  CHECK_THROWS_WITH_AS(add({q, kt, v, wide}, {{"fill", Attr(kNegInf)}}), doctest::Contains("does not broadcast to p"),
                       Error);
  const int ok = add({q, kt, v, m}, {{"fill", Attr(kNegInf)}});
  CHECK(g.value(g.nodes[size_t(ok)].outputs[0]).shape == Shape{2, 3, 5, 6});
  CHECK(g.value(g.nodes[size_t(ok)].outputs[1]).shape == Shape{2, 3, 5, 9});
  ValueId p = g.nodes[size_t(ok)].outputs[1];
  CHECK_THROWS_WITH_AS(g.add_node(Op::FusedAttentionGrad, "grad", {p, q, kt, v, p}, {"dq", "dk", "dv"}),
                       doctest::Contains("dy [2, 3, 5, 9] is not y's shape [2, 3, 5, 6]"), Error);
  CHECK_THROWS_WITH_AS(add({q, kNoValue, v}), doctest::Contains("input 1 (k) is missing"), Error);
  // heads 2: qkv [B, T, 3 * H * D] alone.
  ValueId qkv = add_input(g, "qkv", {2, 5, 24}), qkv_odd = add_input(g, "qkv_odd", {2, 5, 25});
  const std::map<std::string, Attr> packed = {{"heads", Attr(int64_t(2))}, {"num_heads", Attr(int64_t(2))}};
  CHECK_THROWS_WITH_AS(add({qkv, kt, kNoValue}, packed), doctest::Contains("input 1 is to be absent"), Error);
  CHECK_THROWS_WITH_AS(add({qkv_odd, kNoValue, kNoValue}, packed), doctest::Contains("[B, T, 3 * H * D]"), Error);
  CHECK_THROWS_WITH_AS(add({qkv, kNoValue, kNoValue}, {{"heads", Attr(int64_t(2))}}),
                       doctest::Contains("'num_heads' is 0"), Error);
  CHECK_THROWS_WITH_AS(add({qkv, kNoValue, kNoValue}, {{"heads", Attr(int64_t(3))}}), doctest::Contains("not 0, 1 or 2"),
                       Error);
  const int pk = add({qkv, kNoValue, kNoValue}, packed);
  const Node& pn = g.nodes[size_t(pk)];
  CHECK(g.value(pn.outputs[0]).shape == Shape{2, 5, 2, 4});
  CHECK(g.value(pn.outputs[1]).shape == Shape{2, 2, 5, 5});
  std::map<std::string, Attr> grad_attrs = packed;
  CHECK_THROWS_WITH_AS(g.add_node(Op::FusedAttentionGrad, "pgrad", {pn.outputs[0], qkv, kNoValue, kNoValue, pn.outputs[1]},
                                  {"dq", "dk", "dv"}, grad_attrs),
                       doctest::Contains("with heads 2 FusedAttentionGrad has 1 output (dqkv), not 3 outputs"), Error);
  const int pg = g.add_node(Op::FusedAttentionGrad, "pgrad", {pn.outputs[0], qkv, kNoValue, kNoValue, pn.outputs[1]},
                            {"dqkv"}, grad_attrs);
  CHECK(g.value(g.nodes[size_t(pg)].outputs[0]).shape == Shape{2, 5, 24});

  onnx::ModelProto model = optest::one_node_model(17, "FusedAttention", {Tensor(DType::f32, {1, 2, 3}),
                                                  Tensor(DType::f32, {1, 3, 2}), Tensor(DType::f32, {1, 2, 3})}, {}, 2);
  CHECK_THROWS_WITH_AS(import_graph(model, ".", ImportOptions{}), doctest::Contains("internal onnxdp op, not importable"),
                       Error);
}

TEST_CASE("fuse_attention: a parameter is read as a constant only when the caller says it never changes") {
  auto build = [](ValueId& scale_param) {
    Graph g;
    ValueId q = add_input(g, "q", {1, 2, 4, 3}), kt = add_input(g, "kt", {1, 2, 3, 4}), v = add_input(g, "v", {1, 2, 4, 3});
    Value p;
    p.name = "scale";
    p.dtype = DType::f32;
    p.shape = {};
    p.kind = ValueKind::parameter;
    p.data = Tensor::from_f32({0.5f}).reshaped({});
    scale_param = g.add_value(std::move(p));
    Layer a{g, "a"};
    g.outputs = {a.pv(a.softmax(a.node_out(Op::Mul, "scale", {a.qk(q, kt), scale_param})), v)};
    return g;
  };
  ValueId sp = kNoValue;
  Graph trained = build(sp);
  CHECK(fuse_attention(trained) == 0);  // a parameter that may train stays a node's input
  Graph fixed = build(sp);
  CHECK(fuse_attention(fixed, {}, {sp}) == 1);
  CHECK(by_name(fixed).at("a/pv")->f("scale") == 0.5f);
}

TEST_CASE("FusedAttention: no keys (Tk 0) gives y = 0, as the unfused product of empty p and v does") {
  Graph plain, fused;
  for (Graph* g : {&plain, &fused}) {
    ValueId q = add_input(*g, "q", {1, 2, 3, 4}), kt = add_input(*g, "kt", {1, 2, 4, 0}),
            v = add_input(*g, "v", {1, 2, 0, 5});
    Layer a{*g, "a"};
    g->outputs = {a.pv(a.softmax(a.qk(q, kt)), v)};
  }
  REQUIRE(fuse_attention(fused) == 1);
  const std::map<std::string, Tensor> in = random_feeds(plain, 3);
  const std::map<std::string, Tensor> y = check_same_outputs(std::move(plain), std::move(fused), in, 0);
  for (double e : y.at("a/pv/y").to_f64()) CHECK(e == 0.0);
}
