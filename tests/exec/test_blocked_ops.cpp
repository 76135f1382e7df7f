// The CPU kernels of Transpose, ReduceSum / ReduceMean, Add / Sub / Mul / Div and Expand on
// channel-blocked tensors (exec/cpu/blocked.h; graph/passes/block_channels.h sets the layout):
// one node run with its blocked slots fed and read in the blocked layout (converted here by
// plain_to_blocked / blocked_to_plain), against the same node on plain tensors. The copies and the
// elementwise arithmetic are the same bits; the reductions against a float64 sum in the test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu/blocked.h"
#include "exec/cpu/threads.h"
#include "exec/plan.h"
#include "graph/passes/block_channels.h"
#include "tests/graph/graph_test_util.h"
#include "tests/ops/conv_reference.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::add_ints;
using onnxdp::convref::KeepThreads;

namespace {

int64_t spatial(const Shape& s) {
  int64_t n = 1;
  for (size_t d = 2; d < s.size(); ++d) n *= s[d];
  return n;
}

Tensor to_blocked(const Tensor& t) {
  Tensor b(DType::f32, t.shape());
  plain_to_blocked(t.as<float>(), b.as<float>(), t.shape()[0], t.shape()[1], spatial(t.shape()));
  return b;
}

Tensor to_plain(const Tensor& t) {
  Tensor p(DType::f32, t.shape());
  blocked_to_plain(t.as<float>(), p.as<float>(), t.shape()[0], t.shape()[1], spatial(t.shape()));
  return p;
}

struct OneNode {
  Graph g;
  std::map<std::string, Tensor> feeds;
};

// One node reading the float inputs `ins` (name, plain tensor) and, after them, `extra` (constant
// ids), its output "y"; the graph in the plain layout.
OneNode one_node(Op op, const std::vector<std::pair<std::string, Tensor>>& ins,
                 const std::function<std::vector<ValueId>(Graph&)>& extra, std::map<std::string, Attr> attrs) {
  OneNode o;
  std::vector<ValueId> in;
  for (const auto& [name, t] : ins) {
    in.push_back(add_input(o.g, name, t.shape()));
    o.feeds[name] = t;
  }
  if (extra)
    for (ValueId v : extra(o.g)) in.push_back(v);
  o.g.outputs = {onnxdp::test::out(o.g, o.g.add_node(op, "n", in, {"y"}, std::move(attrs)))};
  return o;
}

// The node's output with the slots listed blocked (inputs fed blocked, the output read back to
// plain) and without: both plain tensors.
std::pair<Tensor, Tensor> run_both(const OneNode& o, const std::vector<int64_t>& bin, bool bout) {
  Graph blocked = o.g;
  Node& n = blocked.nodes[0];
  if (!bin.empty()) n.attrs[kBlockedInputs] = Attr(bin);
  if (bout) n.attrs[kBlockedOutputs] = Attr(std::vector<int64_t>{0});
  std::map<std::string, Tensor> feeds = o.feeds;
  for (int64_t k : bin) {
    const std::string& name = o.g.value(o.g.nodes[0].inputs[size_t(k)]).name;
    feeds[name] = to_blocked(o.feeds.at(name));
  }
  Plan plain(o.g), with(std::move(blocked));
  Tensor a = plain.run(o.feeds).at("y"), b = with.run(feeds).at("y");
  return {a, bout ? to_plain(b) : b};
}

Tensor random(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Tensor t(DType::f32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = nd(rng);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("blocked Transpose: every permutation of a rank-4 tensor, blocked input, output or both, the plain copy's bits") {
  KeepThreads keep;
  const Tensor x = random({2, 32, 16, 3}, 1);  // dims 1 and 2 multiples of 16: either can be the output's channels
  std::vector<int64_t> perm{0, 1, 2, 3};
  int cases = 0;
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    do {
      CAPTURE(threads);
      const std::string p = shape_str(perm);
      CAPTURE(p);
      const OneNode o = one_node(Op::Transpose, {{"x", x}}, nullptr, {{"perm", Attr(perm)}});
      const bool out_channels = x.shape()[size_t(perm[1])] % kChannelBlock == 0;
      for (int layout : {1, 2, 3}) {  // input, output, both
        if ((layout & 2) && !out_channels) continue;
        CAPTURE(layout);
        const auto [a, b] = run_both(o, (layout & 1) ? std::vector<int64_t>{0} : std::vector<int64_t>{}, layout & 2);
        CHECK(same_bits(a, b));
        ++cases;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  CHECK(cases == 2 * (24 + 2 * 12));  // perm[1] is 1 or 2 in 12 of the 24
  // Rank 3 and 5, ConvNeXt's turns (channels last and back).
  for (const auto& [s, p] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{3, 48, 5}, {0, 2, 1}}, {{2, 16, 3, 4, 5}, {0, 2, 3, 4, 1}}, {{2, 16, 3, 4, 5}, {4, 1, 0, 3, 2}}}) {
    CAPTURE(shape_str(s));
    const auto [a, b] = run_both(one_node(Op::Transpose, {{"x", random(s, 2)}}, nullptr, {{"perm", Attr(p)}}), {0}, false);
    CHECK(same_bits(a, b));
  }
  Tensor nhwc = random({2, 5, 7, 32}, 3);  // to channels first, written blocked
  const auto [a, b] = run_both(one_node(Op::Transpose, {{"x", nhwc}}, nullptr, {{"perm", Attr(std::vector<int64_t>{0, 3, 1, 2})}}),
                               {}, true);
  CHECK(same_bits(a, b));
}

TEST_CASE("blocked ReduceSum / ReduceMean over every spatial dim: float64 sums of the same elements") {
  KeepThreads keep;
  const Shape s{3, 32, 5, 7};
  const Tensor x = random(s, 4);
  const std::vector<std::vector<int64_t>> axes_sets{{2, 3}, {0, 2, 3}, {-1, -2}, {}};
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    for (Op op : {Op::ReduceSum, Op::ReduceMean})
      for (const std::vector<int64_t>& axes : axes_sets)
        for (int64_t keepdims : {0, 1}) {
          CAPTURE(threads);
          CAPTURE(op_name(op));
          CAPTURE(axes.size());
          CAPTURE(keepdims);
          const OneNode o = one_node(op, {{"x", x}}, [&](Graph& g) {
            return axes.empty() ? std::vector<ValueId>{} : std::vector<ValueId>{add_ints(g, "axes", axes)};
          }, {{"keepdims", Attr(keepdims)}});
          const auto [a, b] = run_both(o, {0}, false);
          REQUIRE(a.shape() == b.shape());
          // The reference: each output's float64 sum in the test, from the plain x.
          const bool over_n = axes.empty() || axes[0] == 0, over_c = axes.empty();
          const int64_t N = s[0], C = s[1], S = s[2] * s[3];
          std::vector<double> ref(size_t((over_n ? 1 : N) * (over_c ? 1 : C)), 0.0);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c)
              for (int64_t p = 0; p < S; ++p)
                ref[size_t((over_n ? 0 : n) * (over_c ? 1 : C) + (over_c ? 0 : c))] += x.as<float>()[(n * C + c) * S + p];
          const double count = double(x.numel()) / double(ref.size());
          REQUIRE(int64_t(ref.size()) == b.numel());
          for (size_t i = 0; i < ref.size(); ++i) {
            const double want = op == Op::ReduceMean ? ref[i] / count : ref[i];
            CHECK(b.as<float>()[i] == doctest::Approx(want).epsilon(1e-6));
            CHECK(a.as<float>()[i] == doctest::Approx(want).epsilon(1e-6));
          }
        }
  }
}

TEST_CASE("blocked Add / Sub / Mul / Div and Expand with operands broadcast over the spatial dims: the plain kernels' bits") {
  KeepThreads keep;
  const Shape s{2, 32, 5, 3};
  const Tensor x = random(s, 5), y = random(s, 6);
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div})
      for (const Shape& cs : {Shape{32, 1, 1}, Shape{1, 32, 1, 1}, Shape{2, 32, 1, 1}, Shape{2, 1, 1, 1}, Shape{1}, Shape{}}) {
        CAPTURE(threads);
        CAPTURE(op_name(op));
        CAPTURE(shape_str(cs));
        const Tensor v = random(cs, 7);
        // The broadcast operand first and second; and two blocked operands of the output's shape.
        const auto [a, b] = run_both(one_node(op, {{"v", v}, {"x", x}}, nullptr, {}), {1}, true);
        CHECK(same_bits(a, b));
        const auto [c, d] = run_both(one_node(op, {{"x", x}, {"v", v}}, nullptr, {}), {0}, true);
        CHECK(same_bits(c, d));
      }
    for (Op op : {Op::Add, Op::Div}) {
      const auto [a, b] = run_both(one_node(op, {{"x", x}, {"y", y}}, nullptr, {}), {0, 1}, true);
      CHECK(same_bits(a, b));
    }
    for (const Shape& cs : {Shape{2, 32, 1, 1}, Shape{32, 1, 1}, Shape{1, 1}}) {
      CAPTURE(shape_str(cs));
      const OneNode o = one_node(Op::Expand, {{"v", random(cs, 8)}}, [&](Graph& g) { return std::vector<ValueId>{add_ints(g, "shape", s)}; },
                                 {});
      const auto [a, b] = run_both(o, {}, true);
      CHECK(same_bits(a, b));
    }
  }
}

TEST_CASE("blocked elementwise and reduction kernels refuse layouts the pass does not make") {
  const Shape s{2, 32, 5, 3};
  // A blocked output with an operand that varies over a spatial dim, read plain.
  OneNode o = one_node(Op::Mul, {{"x", random(s, 9)}, {"v", random({2, 32, 5, 1}, 10)}}, nullptr, {});
  o.g.nodes[0].attrs[kBlockedInputs] = Attr(std::vector<int64_t>{0});
  o.g.nodes[0].attrs[kBlockedOutputs] = Attr(std::vector<int64_t>{0});
  CHECK_THROWS_WITH(Plan(o.g).run(o.feeds), doctest::Contains("input 1 broadcasts over more than its channels"));
  // An operand of the output's shape read plain beside a blocked output.
  OneNode p = one_node(Op::Add, {{"x", random(s, 11)}, {"y", random(s, 12)}}, nullptr, {});
  p.g.nodes[0].attrs[kBlockedInputs] = Attr(std::vector<int64_t>{0});
  p.g.nodes[0].attrs[kBlockedOutputs] = Attr(std::vector<int64_t>{0});
  CHECK_THROWS_WITH(Plan(p.g).run(p.feeds), doctest::Contains("input 1 (the output's shape) is not"));
  // A reduction of blocked x that keeps a spatial dim.
  OneNode r = one_node(Op::ReduceSum, {{"x", random(s, 13)}}, [&](Graph& g) { return std::vector<ValueId>{add_ints(g, "axes", {0, 2})}; },
                       {});
  r.g.nodes[0].attrs[kBlockedInputs] = Attr(std::vector<int64_t>{0});
  CHECK_THROWS_WITH(Plan(r.g).run(r.feeds), doctest::Contains("dim 3 is kept"));
}
