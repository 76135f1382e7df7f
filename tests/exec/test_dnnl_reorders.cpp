// A Conv's filter gradient reads dy from the blocked buffer its input gradient filled, and x from
// the one its forward filled (exec/cpu/onednn.h, ValueTag): only when that buffer holds the same
// images of the same value of the same plan run, and then with the values the filter gradient
// computes alone, bit for bit. Cases, each a plan of a training graph's nodes in its order,
// against every node run in a plan of its own (no sharing across plans): ConvTranspose(dy) then
// ConvGradFilter(x, dy) (shared); two same-shaped Convs' gradients interleaved, CT(dy1) CT(dy2)
// CGF(x1, dy1) CGF(x2, dy2) (the second CT overwrote the buffer: only CGF2 shares); CT(dy1) then
// CGF(x, dy2) of another value of the same shape (no sharing); the same three for x after
// Conv(x); and two Convs' forwards and backwards in a training graph's order. On 1 and 2 threads
// (a share of images per thread).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "exec/cpu/onednn.h"
#include "exec/cpu/threads.h"
#include "exec/plan.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ops/conv_reference.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::out;

namespace {

// 32 channels: a 16 -> 16 Conv at unit strides runs as the backward-data pass of the reversed
// window (exec/cpu/onednn.cpp), whose buffer the filter gradient does not read x from.
const Shape kAct{4, 32, 8, 8}, kWeight{32, 32, 3, 3};

std::map<std::string, Attr> window() {
  using Ints = std::vector<int64_t>;
  return {{"kernel_shape", Attr(Ints{3, 3})}, {"pads", Attr(Ints{1, 1, 1, 1})}, {"strides", Attr(Ints{1, 1})}};
}

struct Step {
  Op op;
  std::string a, b;  // inputs by name; outputs are named after the node
};

// Step k's node and output name: conv<k>, ct<k> or cgf<k>.
std::string step_name(const Step& s, size_t k) {
  return (s.op == Op::Conv ? "conv" : s.op == Op::ConvTranspose ? "ct" : "cgf") + std::to_string(k);
}

// The nodes of `steps` over inputs dy1, dy2, x1, x2 (kAct) and w (kWeight).
Graph graph_of(const std::vector<Step>& steps) {
  Graph g;
  std::map<std::string, ValueId> v;
  for (const char* n : {"dy1", "dy2", "x1", "x2"}) v[n] = add_input(g, n, kAct);
  v["w"] = add_input(g, "w", kWeight);
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step& s = steps[k];
    const std::string name = step_name(s, k);
    g.outputs.push_back(out(g, g.add_node(s.op, name, {v.at(s.a), v.at(s.b)}, {name}, window())));
  }
  return g;
}

std::map<std::string, Tensor> feeds() {
  std::mt19937 rng(3);
  std::normal_distribution<double> nd;
  std::map<std::string, Tensor> f;
  for (const char* n : {"dy1", "dy2", "x1", "x2", "w"}) {
    Tensor t(DType::f32, std::string(n) == "w" ? kWeight : kAct);
    for (int64_t j = 0; j < t.numel(); ++j) t.as<float>()[j] = float(nd(rng));
    f[n] = std::move(t);
  }
  return f;
}

// Step s's output by the definition (tests/ops/conv_reference.h), in double: a copy shared by
// mistake would read another value (the alone run below shares the thread's buffers too).
std::vector<double> definition(const Step& s, const std::map<std::string, Tensor>& in) {
  const convref::Windows g{{8, 8}, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}};
  const Tensor &a = in.at(s.a), &b = in.at(s.b);
  if (s.op == Op::Conv) return convref::conv(a, b, nullptr, g, 1);
  if (s.op == Op::ConvTranspose) return convref::conv_transpose(a, b, nullptr, g, 1);
  return convref::filter_grad(a, b, g, 1);
}

// Runs the steps in one plan; checks every output against the step run alone (bit for bit) and
// against its definition; returns how many reorders the run shared.
int64_t run_and_check(const std::vector<Step>& steps) {
  const std::map<std::string, Tensor> in = feeds();
  Plan together(graph_of(steps));
  const int64_t before = dnnl_shared_reorders();
  const std::map<std::string, Tensor> y = together.run(in);
  const int64_t shared = dnnl_shared_reorders() - before;
  for (size_t k = 0; k < steps.size(); ++k) {
    const std::string want = step_name(steps[k], k);
    Plan alone(graph_of({steps[k]}));
    const Tensor ref = alone.run(in).begin()->second;
    const Tensor& got = y.at(want);
    INFO(want);
    REQUIRE(ref.numel() == got.numel());
    const std::vector<double> exact = definition(steps[k], in);
    REQUIRE(int64_t(exact.size()) == got.numel());
    int differ = 0, off = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      differ += ref.as<float>()[i] != got.as<float>()[i];
      off += std::abs(got.as<float>()[i] - exact[size_t(i)]) > 1e-4 * (1 + std::abs(exact[size_t(i)]));
    }
    CHECK(differ == 0);
    CHECK(off == 0);
  }
  return shared;
}

}  // namespace

TEST_CASE("oneDNN: a Conv's filter gradient reads x and dy from its forward's and input gradient's buffers only when they hold them") {
  convref::KeepThreads keep;
  set_dnnl_enabled(true);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    const int64_t adjacent = run_and_check({{Op::ConvTranspose, "dy1", "w"}, {Op::ConvGradFilter, "x1", "dy1"}});
    const int64_t interleaved = run_and_check({{Op::ConvTranspose, "dy1", "w"},
                                               {Op::ConvTranspose, "dy2", "w"},
                                               {Op::ConvGradFilter, "x1", "dy1"},
                                               {Op::ConvGradFilter, "x2", "dy2"}});
    const int64_t other = run_and_check({{Op::ConvTranspose, "dy1", "w"}, {Op::ConvGradFilter, "x1", "dy2"}});
    const int64_t x_adjacent = run_and_check({{Op::Conv, "x1", "w"}, {Op::ConvGradFilter, "x1", "dy1"}});
    const int64_t x_interleaved = run_and_check({{Op::Conv, "x1", "w"},
                                                 {Op::Conv, "x2", "w"},
                                                 {Op::ConvGradFilter, "x1", "dy1"},
                                                 {Op::ConvGradFilter, "x2", "dy2"}});
    const int64_t x_other = run_and_check({{Op::Conv, "x1", "w"}, {Op::ConvGradFilter, "x2", "dy1"}});
    // Two layers' forwards, then their gradients last layer first: layer 2's filter gradient
    // shares x and dy; layer 1's shares dy only (layer 2's forward overwrote x1's copy).
    const int64_t training = run_and_check({{Op::Conv, "x1", "w"},
                                            {Op::Conv, "x2", "w"},
                                            {Op::ConvTranspose, "dy2", "w"},
                                            {Op::ConvGradFilter, "x2", "dy2"},
                                            {Op::ConvTranspose, "dy1", "w"},
                                            {Op::ConvGradFilter, "x1", "dy1"}});
    if (!dnnl_built()) continue;
    CHECK(adjacent == threads);     // one share of images per thread, each shared once
    CHECK(interleaved == threads);  // CGF(x2, dy2) only: CT(dy2) overwrote dy1's copy
    CHECK(other == 0);
    CHECK(x_adjacent == threads);
    CHECK(x_interleaved == threads);  // CGF(x2, dy2) only: Conv(x2) overwrote x1's copy
    CHECK(x_other == 0);
    CHECK(training == 3 * threads);
  }
}
