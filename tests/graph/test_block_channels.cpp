// The block_channels pass (graph/passes/block_channels.h) and the kernels that read its layout:
// which values take the channel-blocked layout and which stay plain, that a graph computes the
// same values in either layout (a hand-made graph with inference and training BatchNormalizations,
// a ConvNeXt-like block, and the training graph of the zoo's ResNet, on 1 and 2 threads; bit for
// bit where oneDNN's 1x1 windows and the depthwise and reduction kernels do not reorder sums), the
// convolution engine's plain-copy path where oneDNN does not run a blocked convolution, and that
// import refuses the layout attributes.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compile/compile.h"
#include "exec/cpu/blocked.h"
#include "exec/cpu/conv_gemm.h"
#include "exec/cpu/onednn.h"
#include "exec/cpu/threads.h"
#include "exec/plan.h"
#include "graph/passes/block_channels.h"
#include "importer/onnx_io.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ops/conv_reference.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::check_same_outputs;
using onnxdp::test::out;
using onnxdp::test::random_feeds;
using onnxdp::convref::KeepThreads;

namespace {

ValueId conv(Graph& g, const std::string& name, ValueId x, ValueId w, int64_t k, int64_t stride = 1) {
  const int64_t p = k / 2;
  return out(g, g.add_node(Op::Conv, name, {x, w}, {name + "/y"},
                           {{"kernel_shape", Attr(std::vector<int64_t>{k, k})},
                            {"pads", Attr(std::vector<int64_t>{p, p, p, p})},
                            {"strides", Attr(std::vector<int64_t>{stride, stride})}}));
}

ValueId batch_norm(Graph& g, const std::string& name, ValueId x, int64_t channels, bool training) {
  std::vector<ValueId> in{x};
  for (const char* p : {"scale", "bias", "mean", "var"}) in.push_back(add_input(g, name + "/" + p, {channels}));
  std::vector<std::string> outs{name + "/y"};
  if (training) outs.insert(outs.end(), {name + "/rm", name + "/rv"});
  return out(g, g.add_node(Op::BatchNormalization, name, in, outs, {{"training_mode", Attr(int64_t(training))}}));
}

// x [2, 3, 6, 6] -> Conv 3->16 -> BatchNormalization (training) -> Relu -> Conv 16->16 ->
// BatchNormalization (inference) -> Add (the first Relu's output) -> Relu -> r, then from r:
// a 1x1 stride-2 Conv 16->32 whose y a GlobalAveragePool reads (plain), a Conv 16->16 whose y a Neg
// reads (plain), and a Conv 16->8 (8 channels: plain).
Graph sample() {
  Graph g;
  const ValueId x = add_input(g, "x", {2, 3, 6, 6}), w1 = add_input(g, "w1", {16, 3, 3, 3}),
                w2 = add_input(g, "w2", {16, 16, 3, 3}), w3 = add_input(g, "w3", {32, 16, 1, 1}),
                w4 = add_input(g, "w4", {16, 16, 3, 3}), w5 = add_input(g, "w5", {8, 16, 3, 3});
  const ValueId a = out(g, g.add_node(Op::Relu, "relu1", {batch_norm(g, "bn1", conv(g, "c1", x, w1, 3), 16, true)},
                                      {"relu1/y"}));
  const ValueId b = batch_norm(g, "bn2", conv(g, "c2", a, w2, 3), 16, false);
  const ValueId r = out(g, g.add_node(Op::Relu, "relu2", {out(g, g.add_node(Op::Add, "add", {b, a}, {"add/y"}))},
                                      {"relu2/y"}));
  g.outputs = {out(g, g.add_node(Op::GlobalAveragePool, "gap", {conv(g, "c3", r, w3, 1, 2)}, {"gap/y"})),
               out(g, g.add_node(Op::Neg, "neg", {conv(g, "c4", r, w4, 3)}, {"neg/y"})), conv(g, "c5", r, w5, 3)};
  for (const Node& n : g.nodes)
    if (n.op == Op::BatchNormalization && n.outputs.size() == 3) {
      g.outputs.push_back(n.outputs[1]);
      g.outputs.push_back(n.outputs[2]);
    }
  return g;
}

std::vector<int64_t> listed(const Node* n, const char* attr) {
  return n->has(attr) ? n->ints(attr) : std::vector<int64_t>{};
}

// The graph with every layout attribute removed: what the kernels compute in the plain layout.
Graph plain_copy(Graph g) {
  for (Node& n : g.nodes) {
    n.attrs.erase(kBlockedInputs);
    n.attrs.erase(kBlockedOutputs);
  }
  return g;
}

// random_feeds with the inference BatchNormalization's variance positive.
std::map<std::string, Tensor> sample_feeds() {
  std::map<std::string, Tensor> f = random_feeds(sample(), 7);
  Tensor& var = f.at("bn2/var");
  for (int64_t i = 0; i < var.numel(); ++i) var.as<float>()[i] = std::fabs(var.as<float>()[i]) + 0.5f;
  return f;
}

// How close a graph's outputs in the two layouts are: with oneDNN, a 1x1 window on plain tensors
// runs its gemm path and on a blocked one its blocked kernels (exec/cpu/onednn.cpp), which sum the
// channels in orders of their own on some CPUs (the same bits on the AVX-512 Intel VM of the
// records, not on an AVX2 AMD EPYC, Zen 3): float rounding apart there. The engine's own kernels
// (oneDNN off): bit for bit.
double exactness(bool dnnl) { return dnnl ? 1e-5 : 0; }

// A training graph's outputs with its layout and without (plain_copy), on 1 and 2 threads: random
// inputs, class labels 0..3.
void same_training_outputs(const Graph& g, unsigned seed, double rel) {
  KeepThreads keep;
  std::map<std::string, Tensor> feeds = random_feeds(g, seed);
  for (auto& [name, t] : feeds)
    if (t.dtype() == DType::i64)
      for (int64_t i = 0; i < t.numel(); ++i) t.as<int64_t>()[i] = i % 4;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    check_same_outputs(plain_copy(g), g, feeds, rel);
  }
}

}  // namespace

TEST_CASE("block_channels: the values between oneDNN's convolutions take the blocked layout, the rest stay plain") {
  Graph g = sample();
  // c1/y, bn1/y, relu1/y, c2/y, bn2/y, add/y, relu2/y.
  CHECK(block_channels(g) == 7);
  verify(g);
  const auto by = onnxdp::test::by_name(g);
  using V = std::vector<int64_t>;
  CHECK(listed(by.at("c1"), kBlockedInputs) == V{});  // x has 3 channels
  CHECK(listed(by.at("c1"), kBlockedOutputs) == V{0});
  for (const char* bn : {"bn1", "bn2"}) {
    CHECK_MESSAGE(listed(by.at(bn), kBlockedInputs) == V{0}, bn);
    CHECK_MESSAGE(listed(by.at(bn), kBlockedOutputs) == V{0}, bn);  // y only: the statistics are [16]
  }
  CHECK(listed(by.at("c2"), kBlockedInputs) == V{0});
  CHECK(listed(by.at("c2"), kBlockedOutputs) == V{0});
  for (const char* c : {"c3", "c4", "c5"}) {  // read r; their y: a pool's, a Neg's, 8 channels
    CHECK_MESSAGE(listed(by.at(c), kBlockedInputs) == V{0}, c);
    CHECK_MESSAGE(listed(by.at(c), kBlockedOutputs) == V{}, c);
  }
  CHECK(listed(by.at("add"), kBlockedInputs) == V{0, 1});  // Add lists its slots (it may read a channel operand plain)
  CHECK(listed(by.at("add"), kBlockedOutputs) == V{0});
  for (const char* n : {"relu1", "relu2", "gap", "neg"}) CHECK_MESSAGE(by.at(n)->attrs.count(kBlockedInputs) == 0, n);
}

TEST_CASE("block_channels: what rules a group out") {
  SUBCASE("a graph output") {
    Graph g = sample();
    // add/y is tied to bn2/y, relu1/y and relu2/y, and through them to c2/y, bn1/y and c1/y: one group.
    g.outputs.push_back(g.find("add/y"));
    CHECK(block_channels(g) == 0);
  }
  SUBCASE("a value kept for after the run") {
    Graph g = sample();
    CHECK(block_channels(g, {g.find("relu1/y")}) == 0);
  }
  SUBCASE("a grouped Conv reads it") {
    Graph g = sample();
    for (Node& n : g.nodes)
      if (n.name == "c4") {
        n.attrs["group"] = Attr(int64_t(4));
        g.value(n.inputs[1]).shape = {16, 4, 3, 3};
      }
    CHECK(block_channels(g) == 0);
  }
  SUBCASE("a depthwise Conv reads it, whose output stays plain (the blocked loops take both sides or neither)") {
    Graph g = sample();
    for (Node& n : g.nodes)
      if (n.name == "c4") {
        n.attrs["group"] = Attr(int64_t(16));
        g.value(n.inputs[1]).shape = {16, 1, 3, 3};
      }
    CHECK(block_channels(g) == 0);  // c4/y goes to a Neg whose y is a graph output
  }
}

namespace {

// x [2, 32, 9, 11] -> 1x1 Conv -> BatchNormalization (training) -> Relu -> r -> a depthwise 3x3
// Conv (32 groups) -> SiLU (Sigmoid, Mul) -> e -> the depthwise ConvTranspose (Conv's input
// gradient) -> Clip between two scalars (ReLU6's form) -> u; outputs: ConvGradFilter (r, u) (the
// depthwise filter gradient) and a 1x1 Conv of u.
Graph depthwise_block(int64_t stride) {
  Graph g;
  const ValueId x = add_input(g, "x", {2, 32, 9, 11}), w1 = add_input(g, "w1", {32, 32, 1, 1}),
                wd = add_input(g, "wd", {32, 1, 3, 3}), w2 = add_input(g, "w2", {16, 32, 1, 1});
  const std::map<std::string, Attr> window = {{"group", Attr(int64_t(32))},
                                              {"kernel_shape", Attr(std::vector<int64_t>{3, 3})},
                                              {"pads", Attr(std::vector<int64_t>{1, 1, 1, 1})},
                                              {"strides", Attr(std::vector<int64_t>{stride, stride})}};
  const ValueId r =
      out(g, g.add_node(Op::Relu, "relu1", {batch_norm(g, "bn1", conv(g, "c1", x, w1, 1), 32, true)}, {"relu1/y"}));
  const ValueId d = out(g, g.add_node(Op::Conv, "dw", {r, wd}, {"dw/y"}, window));
  const ValueId e = out(g, g.add_node(Op::Mul, "silu", {d, out(g, g.add_node(Op::Sigmoid, "sig", {d}, {"sig/y"}))},
                                      {"silu/y"}));
  std::map<std::string, Attr> transposed = window;
  if (stride > 1) transposed["output_padding"] = Attr(std::vector<int64_t>{0, 0});
  const ValueId t = out(g, g.add_node(Op::ConvTranspose, "dwt", {e, wd}, {"dwt/y"}, transposed));
  const ValueId u = out(g, g.add_node(Op::Clip, "clip", {t, add_input(g, "lo", {}), add_input(g, "hi", {})}, {"clip/y"}));
  g.outputs = {out(g, g.add_node(Op::ConvGradFilter, "dwf", {r, stride == 1 ? u : e}, {"dwf/y"}, window)),
               conv(g, "c2", u, w2, 1)};
  for (const Node& n : g.nodes)
    if (n.op == Op::BatchNormalization) g.outputs.insert(g.outputs.end(), {n.outputs[1], n.outputs[2]});
  return g;
}

}  // namespace

TEST_CASE("block_channels: depthwise windows the blocked loops take join the blocked layout, values as the plain layout's") {
  Graph g = depthwise_block(1);
  // c1/y, bn1/y, relu1/y, dw/y, sig/y, silu/y, dwt/y, clip/y.
  CHECK(block_channels(g) == 8);
  verify(g);
  const auto by = onnxdp::test::by_name(g);
  using V = std::vector<int64_t>;
  for (const char* n : {"dw", "dwt"}) {
    CHECK_MESSAGE(listed(by.at(n), kBlockedInputs) == V{0}, n);
    CHECK_MESSAGE(listed(by.at(n), kBlockedOutputs) == V{0}, n);
  }
  CHECK(listed(by.at("dwf"), kBlockedInputs) == V{0, 1});
  CHECK(listed(by.at("dwf"), kBlockedOutputs) == V{});
  // Other sums' order than the plain layout's kernels (channels in lanes): float32 values within
  // rounding, which the training BatchNormalization and two more layers enlarge (1.6e-5 seen on c2/y).
  KeepThreads keep;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    std::map<std::string, Tensor> feeds = random_feeds(g, 5);
    feeds.at("lo").as<float>()[0] = -0.5f, feeds.at("hi").as<float>()[0] = 0.5f;  // some of t clipped
    const std::map<std::string, Tensor> y = check_same_outputs(plain_copy(g), g, feeds, 1e-4);
    double sum = 0;
    for (double v : y.at("dwf/y").to_f64()) sum += v * v;
    CHECK(sum > 0);
  }
  // At stride 2 the blocked loops do not run the window: it and its neighbours stay plain.
  Graph strided = depthwise_block(2);
  CHECK(block_channels(strided) == 0);
}

namespace {

// A ConvNeXt-like block: x [2, 3, 6, 7] -> 3x3 Conv 3->32 (the stem) -> s -> a depthwise 7x7 Conv
// with bias -> d -> Transpose to channels last -> Neg (for the LayerNorm and MLP) -> Transpose back
// -> Mul by a layer scale [32, 1, 1] -> Add s -> r; outputs: ReduceMean of r over the image,
// ReduceSum of d over all but the channels (a bias gradient's form), ReduceSum over the image of
// r / Expand(e [2, 32, 1, 1]). The mean's axes and the scale's shape as given.
Graph convnext_block(const std::vector<int64_t>& gap_axes = {2, 3}, const Shape& gamma_shape = {32, 1, 1}) {
  Graph g;
  const ValueId x = add_input(g, "x", {2, 3, 6, 7}), w = add_input(g, "w", {32, 3, 3, 3}),
                wd = add_input(g, "wd", {32, 1, 7, 7}), bd = add_input(g, "bd", {32}),
                gamma = add_input(g, "gamma", gamma_shape), e = add_input(g, "e", {2, 32, 1, 1});
  const ValueId s = conv(g, "stem", x, w, 3);
  const ValueId d = out(g, g.add_node(Op::Conv, "dw", {s, wd, bd}, {"dw/y"},
                                      {{"group", Attr(int64_t(32))}, {"kernel_shape", Attr(std::vector<int64_t>{7, 7})},
                                       {"pads", Attr(std::vector<int64_t>{3, 3, 3, 3})}}));
  const ValueId t = out(g, g.add_node(Op::Transpose, "last", {d}, {"last/y"}, {{"perm", Attr(std::vector<int64_t>{0, 2, 3, 1})}}));
  const ValueId m = out(g, g.add_node(Op::Neg, "mlp", {t}, {"mlp/y"}));
  const ValueId u = out(g, g.add_node(Op::Transpose, "first", {m}, {"first/y"}, {{"perm", Attr(std::vector<int64_t>{0, 3, 1, 2})}}));
  const ValueId r = out(g, g.add_node(Op::Add, "res", {s, out(g, g.add_node(Op::Mul, "scale", {gamma, u}, {"scale/y"}))}, {"res/y"}));
  const ValueId ex = out(g, g.add_node(Op::Expand, "expand", {e, onnxdp::test::add_ints(g, "shape", {2, 32, 6, 7})}, {"expand/y"}));
  const ValueId z = out(g, g.add_node(Op::Div, "div", {r, ex}, {"div/y"}));
  const auto reduce = [&](Op op, const std::string& name, ValueId v, std::vector<int64_t> axes) {
    return out(g, g.add_node(op, name, {v, onnxdp::test::add_ints(g, name + "/axes", axes)}, {name + "/y"},
                             {{"keepdims", Attr(int64_t(0))}}));
  };
  g.outputs = {reduce(Op::ReduceMean, "gap", r, gap_axes), reduce(Op::ReduceSum, "bias_grad", d, {0, 2, 3}),
               reduce(Op::ReduceSum, "sum", z, {-1, -2})};
  return g;
}

}  // namespace

TEST_CASE("block_channels: a ConvNeXt block's Transposes, layer scale, Expand and reductions keep its stream blocked") {
  if (!dnnl_enabled()) return;  // the stem's Conv runs where oneDNN does
  Graph g = convnext_block();
  // stem/y, dw/y, first/y, scale/y, res/y, expand/y, div/y.
  CHECK(block_channels(g) == 7);
  verify(g);
  const auto by = onnxdp::test::by_name(g);
  using V = std::vector<int64_t>;
  CHECK(listed(by.at("last"), kBlockedInputs) == V{0});
  CHECK(listed(by.at("last"), kBlockedOutputs) == V{});  // [2, 6, 7, 32]
  CHECK(listed(by.at("first"), kBlockedInputs) == V{});
  CHECK(listed(by.at("first"), kBlockedOutputs) == V{0});
  CHECK(listed(by.at("scale"), kBlockedInputs) == V{1});  // gamma read plain
  CHECK(listed(by.at("expand"), kBlockedInputs) == V{});
  CHECK(listed(by.at("expand"), kBlockedOutputs) == V{0});
  CHECK(listed(by.at("div"), kBlockedInputs) == V{0, 1});
  for (const char* n : {"gap", "bias_grad", "sum"}) {
    CHECK_MESSAGE(listed(by.at(n), kBlockedInputs) == V{0}, n);
    CHECK_MESSAGE(listed(by.at(n), kBlockedOutputs) == V{}, n);
  }
  // The depthwise window's taps and the reductions sum in other orders: within float rounding.
  KeepThreads keep;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    const std::map<std::string, Tensor> y = check_same_outputs(plain_copy(g), g, random_feeds(g, 9), 1e-5);
    double sum = 0;
    for (double v : y.at("sum/y").to_f64()) sum += v * v;
    CHECK(sum > 0);
  }
  // A reduction that keeps a spatial dim, or a layer scale that varies over one, keeps the stream plain.
  Graph kept = convnext_block({0, 2});
  CHECK(block_channels(kept) == 0);
  Graph wide = convnext_block({2, 3}, {32, 6, 1});
  CHECK(block_channels(wide) == 0);
  // Where the blocked depthwise loops do not run (no AVX-512), the window keeps the stream plain.
  Graph no_loops = convnext_block();
  CHECK(block_channels(no_loops, {}, false) == 0);
}

TEST_CASE("block_channels: every output equals the plain layout's (bit for bit without oneDNN), on 1 and 2 threads") {
  KeepThreads keep;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    for (bool dnnl : {true, false}) {  // oneDNN's blocked convolutions, and the engine's plain copies
      CAPTURE(dnnl);
      set_dnnl_enabled(dnnl);
      Graph blocked = sample();
      REQUIRE(block_channels(blocked) == 7);
      const std::map<std::string, Tensor> y = check_same_outputs(sample(), std::move(blocked), sample_feeds(), exactness(dnnl));
      double sum = 0;
      for (double v : y.at("neg/y").to_f64()) sum += v * v;
      CHECK(sum > 0);
    }
  }
}

TEST_CASE("block_channels: 1-D and 3-D convolutions against the plain layout (bit for bit without oneDNN)") {
  KeepThreads keep;
  for (const Shape& xs : {Shape{2, 16, 9}, Shape{2, 16, 5, 4, 3}}) {
    CAPTURE(shape_str(xs));
    const size_t n = xs.size() - 2;
    const auto make = [&] {
      Graph g;
      Shape w1{16, 16}, w2{32, 16};
      for (size_t i = 0; i < n; ++i) w1.push_back(3), w2.push_back(1);
      const ValueId x = add_input(g, "x", xs), a = add_input(g, "w1", w1), b = add_input(g, "w2", w2);
      const std::vector<int64_t> ones(n, 1), k3(n, 3), k1(n, 1);
      std::vector<int64_t> pads(2 * n, 1);
      const ValueId c1 = out(g, g.add_node(Op::Conv, "c1", {x, a}, {"c1/y"},
                                           {{"kernel_shape", Attr(k3)}, {"pads", Attr(pads)}, {"strides", Attr(ones)}}));
      const ValueId r = out(g, g.add_node(Op::Relu, "relu", {batch_norm(g, "bn", c1, 16, true)}, {"relu/y"}));
      g.outputs = {out(g, g.add_node(Op::Conv, "c2", {r, b}, {"c2/y"}, {{"kernel_shape", Attr(k1)}}))};
      return g;
    };
    for (bool dnnl : {true, false}) {
      CAPTURE(dnnl);
      set_dnnl_enabled(dnnl);
      Graph blocked = make();
      REQUIRE(block_channels(blocked) == 3);  // c1/y, bn/y, relu/y
      check_same_outputs(make(), std::move(blocked), random_feeds(make(), 3), exactness(dnnl));
    }
  }
}

TEST_CASE("BatchNormalization and its gradient in the blocked layout: float64 values bit for bit, on 1 and 2 threads") {
  // Float64 shows the double sums' every bit (float32 outputs round most differences in the order
  // of the additions away). 32 channels (two blocks), 25 positions (not a multiple of 16).
  const Shape s{3, 32, 5, 5};
  const int64_t N = 3, C = 32, S = 25;
  const auto make = [&](bool blocked) {
    Graph g;
    const ValueId x = add_input(g, "x", s, DType::f64), dy = add_input(g, "dy", s, DType::f64),
                  relu_y = add_input(g, "relu_y", s, DType::f64);
    std::vector<ValueId> p;
    for (const char* n : {"scale", "bias", "mean", "var"}) p.push_back(add_input(g, n, {C}, DType::f64));
    std::map<std::string, Attr> bn_attrs{{"training_mode", Attr(int64_t(1))}, {"activation", Attr(std::string("Relu"))}},
        grad_attrs;
    if (blocked) {
      bn_attrs[kBlockedInputs] = bn_attrs[kBlockedOutputs] = Attr(std::vector<int64_t>{0});
      grad_attrs[kBlockedInputs] = Attr(std::vector<int64_t>{0, 1, 3});
      grad_attrs[kBlockedOutputs] = Attr(std::vector<int64_t>{0});
    }
    const int bn = g.add_node(Op::BatchNormalization, "bn", {x, p[0], p[1], p[2], p[3]}, {"y", "rm", "rv"}, bn_attrs);
    const int grad = g.add_node(Op::BatchNormalizationGrad, "bng", {dy, x, p[0], relu_y}, {"dx", "dscale", "dbias"}, grad_attrs);
    g.outputs = g.nodes[size_t(bn)].outputs;
    for (ValueId v : g.nodes[size_t(grad)].outputs) g.outputs.push_back(v);
    verify(g);
    return g;
  };
  std::map<std::string, Tensor> feeds = random_feeds(make(false), 5);
  for (int64_t i = 0; i < C; ++i) feeds.at("var").as<double>()[i] = std::fabs(feeds.at("var").as<double>()[i]);
  for (int64_t i = 0; i < feeds.at("x").numel(); ++i) feeds.at("x").as<double>()[i] += 3.0;  // a mean far from 0
  std::map<std::string, Tensor> blocked_feeds = feeds;
  for (const char* n : {"x", "dy", "relu_y"}) {
    blocked_feeds[n] = Tensor(DType::f64, s);
    plain_to_blocked(feeds.at(n).as<double>(), blocked_feeds[n].as<double>(), N, C, S);
  }
  KeepThreads keep;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    Plan plain(make(false)), blocked(make(true));
    const std::map<std::string, Tensor> a = plain.run(feeds);
    std::map<std::string, Tensor> b = blocked.run(blocked_feeds);
    for (const char* n : {"y", "dx"}) {
      Tensor t(DType::f64, s);
      blocked_to_plain(b.at(n).as<double>(), t.as<double>(), N, C, S);
      b[n] = std::move(t);
    }
    int zeros = 0;
    for (const auto& [name, t] : a) {
      CAPTURE(name);
      const std::vector<double> u = t.to_f64(), v = b.at(name).to_f64();
      REQUIRE(u.size() == v.size());
      int differ = 0;
      for (size_t i = 0; i < u.size(); ++i) differ += u[i] != v[i];
      CHECK(differ == 0);
      if (name == "y")
        for (double y : u) zeros += y == 0;
    }
    CHECK(zeros > 0);  // the Relu did something
  }
}

TEST_CASE("block_channels: the zoo's ResNet training graph computes the plain layout's loss, gradients and statistics") {
  if (!dnnl_enabled()) return;  // the pass runs where oneDNN does
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/zoo/resnet_training_legacy/model.onnx";
  o.batch_size = 8;
  TrainingGraph tg = training_graph(o, 1, 0);
  int convs = 0, blocked_convs = 0;
  for (const Node& n : tg.g.nodes)
    if (n.op == Op::Conv || n.op == Op::ConvTranspose || n.op == Op::ConvGradFilter) {
      ++convs;
      blocked_convs += n.has(kBlockedInputs) || n.has(kBlockedOutputs);
    }
  CHECK(convs == 17);  // 6 Convs, their 6 filter gradients, 5 input gradients (x needs none)
  CHECK(blocked_convs == 17);  // every one reads or writes a blocked activation
  verify(tg.g);
  same_training_outputs(tg.g, 11, exactness(true));
}

TEST_CASE("block_channels: the zoo's ConvNeXt training graph keeps its stream blocked where the depthwise loops run") {
  if (!dnnl_enabled()) return;
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/zoo/convnext_legacy/model.onnx";
  o.batch_size = 8;
  // The compiled graph's layout is this CPU's (no blocked depthwise windows without AVX-512): start
  // from the plain graph and mark it as on a CPU where the blocked loops run.
  Graph g = plain_copy(training_graph(o, 1, 0).g);
  CHECK(block_channels(g, {}, true) > 0);
  verify(g);
  int windows = 0, transposes = 0;
  for (const Node& n : g.nodes) {
    const bool blocked = n.has(kBlockedInputs) || n.has(kBlockedOutputs);
    if ((n.op == Op::Conv || n.op == Op::ConvTranspose || n.op == Op::ConvGradFilter) && n.i("group") > 1) {
      CHECK_MESSAGE(blocked, n.name);
      ++windows;
    }
    if (n.op == Op::Transpose && n.ints("perm").size() == 4) {  // the turns to channels last and back
      CHECK_MESSAGE(blocked, n.name);
      ++transposes;
    }
  }
  CHECK(windows == 3);  // the depthwise Conv, its input gradient and its filter gradient
  CHECK(transposes >= 4);
  same_training_outputs(g, 13, 1e-4);
}

TEST_CASE("the convolution engine runs blocked tensors through plain copies where oneDNN does not run them") {
  // 16 -> 32 channels, 3x3, stride 2, pad 1, 2 images of 7x7 (-> 4x4), ConvTranspose with a bias.
  ConvWindows g;
  g.iter = {4, 4};
  g.bound = {7, 7};
  g.kernel = {3, 3};
  g.strides = {2, 2};
  g.dilations = {1, 1};
  g.pad_begin = {1, 1};
  const int64_t N = 2, C = 16, M = 32, S = 49, P = 16;
  std::vector<float> x(static_cast<size_t>(N * C * S)), w(static_cast<size_t>(M * C * 9)),
      dy(static_cast<size_t>(N * M * P)), bias(static_cast<size_t>(C));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 37 % 101) - 50) / 32.f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 53 % 89) - 44) / 64.f;
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(int(i * 29 % 97) - 48) / 16.f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(i) / 8.f;
  std::vector<float> xb(x.size()), dyb(dy.size());
  plain_to_blocked(x.data(), xb.data(), N, C, S);
  plain_to_blocked(dy.data(), dyb.data(), N, M, P);
  std::vector<float> back(x.size());
  blocked_to_plain(xb.data(), back.data(), N, C, S);
  CHECK(back == x);
  CHECK(xb[size_t(blocked_offset(1, 5, 7, C, S))] == x[size_t((1 * C + 5) * S + 7)]);
  KeepThreads keep;
  for (bool dnnl : {true, false}) {
    CAPTURE(dnnl);
    set_dnnl_enabled(dnnl);
    const ConvChannels plain{N, 1, C, M}, blocked{N, 1, C, M, true, true};
    // Conv: x (16 ch) -> y (32 ch).
    std::vector<float> y(size_t(N * M * P)), yb(y.size()), y_of_b(y.size());
    conv_forward<float>(g, plain, x.data(), w.data(), nullptr, y.data());
    conv_forward<float>(g, blocked, xb.data(), w.data(), nullptr, yb.data());
    blocked_to_plain(yb.data(), y_of_b.data(), N, M, P);
    CHECK(y_of_b == y);
    // ConvTranspose (Conv's input gradient, with a bias): dy (32 ch) -> dx (16 ch).
    const ConvChannels tplain{N, 1, M, C}, tblocked{N, 1, M, C, true, true};
    std::vector<float> dx(x.size()), dxb(x.size()), dx_of_b(x.size());
    std::vector<float> wt(w.size());  // ConvTranspose's w [in = 32, out = 16, 3, 3] is Conv's
    wt = w;
    conv_transpose<float>(g, tplain, dy.data(), wt.data(), bias.data(), dx.data());
    conv_transpose<float>(g, tblocked, dyb.data(), wt.data(), bias.data(), dxb.data());
    blocked_to_plain(dxb.data(), dx_of_b.data(), N, C, S);
    CHECK(dx_of_b == dx);
    // ConvGradFilter: x, dy -> dw.
    std::vector<float> dw(w.size()), dwb(w.size());
    conv_filter_grad<float>(g, plain, x.data(), dy.data(), dw.data());
    conv_filter_grad<float>(g, blocked, xb.data(), dyb.data(), dwb.data());
    CHECK(dwb == dw);
  }
}

TEST_CASE("block_channels: a model naming the layout attributes is refused by name") {
  const std::string dir = std::string(ONNXDP_SOURCE_DIR) + "/models/cnn";
  for (const char* attr : {kBlockedInputs, kBlockedOutputs}) {
    onnx::ModelProto m = load_model_proto(dir + "/model.onnx");
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "Conv") {
        auto* a = n.add_attribute();
        a->set_name(attr);
        a->set_type(onnx::AttributeProto::INTS);
        a->add_ints(0);
        break;
      }
    const std::string want = std::string("attribute '") + attr + "' is onnxdp's own";
    CHECK_THROWS_WITH(load_graph(m, dir), doctest::Contains(want.c_str()));
  }
}
