// Sizes a model declares (docs/DESIGN.md convention 11): checked arithmetic, shape rules that
// refuse what does not fit instead of wrapping, folding that does not allocate a declared giant,
// and integer kernels that wrap as numpy. Each shape case below gave a wrapped (wrong) shape or
// another message before graph/checked.h; the "hostile sizes" cases also run under UBSan
// (scripts/asan-check).
#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <vector>

#include "exec/functors.h"
#include "exec/plan.h"
#include "graph/checked.h"
#include "graph/passes/fold.h"
#include "tests/graph/graph_test_util.h"
#include "tests/test_util.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::add_ints;
using onnxdp::test::contains;
using onnxdp::test::error_of;

namespace {

constexpr int64_t k2to62 = int64_t(1) << 62;

// The error adding one node of `op` gives ("" when it is accepted).
std::string node_error(Op op, const std::vector<Shape>& inputs, std::vector<std::vector<int64_t>> constants,
                       std::map<std::string, Attr> attrs) {
  Graph g;
  std::vector<ValueId> ins;
  for (size_t k = 0; k < inputs.size(); ++k) ins.push_back(add_input(g, fmt::format("x{}", k), inputs[k]));
  for (size_t k = 0; k < constants.size(); ++k) ins.push_back(add_ints(g, fmt::format("c{}", k), constants[k]));
  return error_of([&] { g.add_node(op, "n", ins, {"y"}, std::move(attrs)); });
}

}  // namespace

TEST_CASE("hostile sizes: checked arithmetic names the quantity") {
  CHECK(checked_mul(3, 4, "x") == 12);
  CHECK(checked_add(INT64_MAX - 1, 1, "x") == INT64_MAX);
  CHECK(checked_sub(INT64_MIN + 1, 1, "x") == INT64_MIN);
  CHECK(contains(error_of([] { checked_mul(k2to62, 2, "the tile"); }), "the tile does not fit in 64 bits"));
  CHECK(contains(error_of([] { checked_add(INT64_MAX, 1, "a pad"); }), "a pad does not fit in 64 bits"));
  CHECK(contains(error_of([] { checked_sub(INT64_MIN, 1, "a room"); }), "a room does not fit in 64 bits"));
  CHECK(ceil_div(INT64_MAX, 2) == (int64_t(1) << 62));
  CHECK(ceil_div(7, 7) == 1);
  CHECK(ceil_div(0, 3) == 0);
}

TEST_CASE("hostile sizes: shape rules refuse what does not fit instead of wrapping") {
  // Conv: (3 - 1) * 2^62 + 1 wrapped to 1, and [1, 1, 10] "gave" [1, 1, 10].
  std::string e = node_error(Op::Conv, {{1, 1, 10}, {1, 1, 3}}, {}, {{"dilations", Attr(std::vector<int64_t>{k2to62})}});
  CHECK(contains(e, "node n (Conv)"));
  CHECK(contains(e, "dilated kernel extent does not fit in 64 bits"));
  // Pooling: pads that overflow the padded size.
  e = node_error(Op::MaxPool, {{1, 1, 10}}, {},
                 {{"kernel_shape", Attr(std::vector<int64_t>{2})}, {"pads", Attr(std::vector<int64_t>{INT64_MAX, 1})}});
  CHECK(contains(e, "padded input size does not fit in 64 bits"));
  // ConvTranspose: stride * (D - 1) past int64.
  e = node_error(Op::ConvTranspose, {{1, 1, 5}, {1, 1, 3}}, {}, {{"strides", Attr(std::vector<int64_t>{k2to62})}});
  CHECK(contains(e, "does not fit in 64 bits"));
  // Tile: 2^40 * 2^40 wrapped to 0, a silently empty tensor.
  e = node_error(Op::Tile, {{int64_t(1) << 40}}, {{int64_t(1) << 40}}, {});
  CHECK(contains(e, "tiled dim (dim * repeats) does not fit in 64 bits"));
  // Pad: 4 + INT64_MAX wrapped negative.
  e = node_error(Op::Pad, {{4}}, {{INT64_MAX, 1}}, {});
  CHECK(contains(e, "a padded dim does not fit in 64 bits"));
  // Reshape: the target's dims multiply past int64.
  e = node_error(Op::Reshape, {{2, 3}}, {{3037000500, 3037000500, 2, -1}}, {});
  CHECK(contains(e, "the product of the target shape's dims does not fit in 64 bits"));
  // Concat: 2^62 + 2^62 rows.
  e = node_error(Op::Concat, {{k2to62}, {k2to62}}, {}, {{"axis", Attr(int64_t(0))}});
  CHECK(contains(e, "concatenated dim does not fit in 64 bits"));
  // A shape a tensor cannot have ([2^40, 2^40]), promised by Expand: refused naming the node.
  e = node_error(Op::Expand, {{1, 1}}, {{int64_t(1) << 40, int64_t(1) << 40}}, {});
  CHECK(contains(e, "node n (Expand)"));
  CHECK(contains(e, "more than 2^62 elements"));
  // Range: limit - start past int64 wrapped to a negative span, a silently empty range; now the 2
  // elements -2^62, 0.
  {
    Graph r;
    int n = r.add_node(Op::Range, "r", {add_ints(r, "s", {-k2to62}), add_ints(r, "l", {k2to62}), add_ints(r, "d", {k2to62})}, {"y"});
    CHECK(r.value(r.nodes[size_t(n)].outputs[0]).shape == Shape{2});
  }
  e = node_error(Op::Range, {}, {{0}, {INT64_MAX}, {1}}, {});
  CHECK(contains(e, "more than 2^62 elements"));
  // Slice with step INT64_MIN (whose negation does not exist): one element.
  Graph g;
  ValueId x = add_input(g, "x", {5});
  int n = g.add_node(Op::Slice, "s", {x, add_ints(g, "st", {4}), add_ints(g, "en", {-6}), add_ints(g, "ax", {0}), add_ints(g, "sp", {INT64_MIN})},
                     {"y"});
  CHECK(g.value(g.nodes[size_t(n)].outputs[0]).shape == Shape{1});
}

TEST_CASE("hostile sizes: folding leaves a declared giant to the plan, which refuses it by its size") {
  // ConstantOfShape([2^18, 2^18]) is 256 GiB of float32: folding it would allocate it now.
  Graph g;
  ValueId shape = add_ints(g, "shape", {int64_t(1) << 18, int64_t(1) << 18});
  ValueId big = test::out(g, g.add_node(Op::ConstantOfShape, "zeros", {shape}, {"big"}));
  g.outputs = {big};
  int folded_runs = 0;
  infer_and_fold(g, [&](const Graph&, const Node&, const std::vector<const Tensor*>&) {
    ++folded_runs;
    return std::vector<Tensor>{};
  });
  CHECK(folded_runs == 0);
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.value(big).kind == ValueKind::activation);
  // No tensor larger than the machine's memory.
  CHECK(contains(error_of([] { Tensor t(DType::f32, {int64_t(1) << 45}); }), "more than this machine's memory"));
  CHECK(contains(error_of([&] { Plan p(g); }), "more than this machine's"));
}

TEST_CASE("hostile sizes: signed integer kernels wrap as numpy, without undefined overflow") {
  CHECK(fn::Add{}(INT64_MAX, int64_t(1)) == INT64_MIN);
  CHECK(fn::Sub{}(INT64_MIN, int64_t(1)) == INT64_MAX);
  CHECK(fn::Mul{}(int64_t(1) << 62, int64_t(4)) == 0);
  CHECK(fn::Add{}(INT32_MAX, int32_t(1)) == INT32_MIN);
  CHECK(fn::Mul{}(int32_t(65536), int32_t(65536)) == 0);
  CHECK(fn::Neg{}(INT64_MIN) == INT64_MIN);
  CHECK(fn::Abs{}(INT32_MIN) == INT32_MIN);
  CHECK(fn::Div{}(INT64_MIN, int64_t(-1)) == INT64_MIN);
  CHECK(fn::Pow{}(int64_t(3), int64_t(41)) == -420491770248316829);  // numpy: np.int64(3) ** 41
  // Floats unchanged: -0.0 stays a negative zero.
  CHECK(std::signbit(fn::Neg{}(0.0f)));
}
