#include <doctest/doctest.h>

#include <string>

#include "graph/graph.h"
#include "tests/graph/graph_test_util.h"

using namespace onnxdp;

TEST_CASE("op table: names round-trip and schemas parse") {
  for (int k = 0; k < kOpCount; ++k) {
    Op op = Op(k);
    auto back = op_from_name(op_name(op));
    REQUIRE(back.has_value());
    CHECK(*back == op);
  }
  const OpInfo& gemm = op_info(Op::Gemm);
  REQUIRE(gemm.find_attr("alpha"));
  CHECK(std::get<float>(*gemm.find_attr("alpha")->default_value) == 1.0f);
  CHECK(!op_from_name("NoSuchOp"));
}

TEST_CASE("shape_numel rejects overflow") {
  CHECK(shape_numel({2, 3, 4}) == 24);
  CHECK_THROWS_AS(shape_numel({int64_t(1) << 40, int64_t(1) << 40}), Error);
  CHECK_THROWS_AS(shape_numel({-1, 2}), Error);
}

TEST_CASE("broadcast_shapes follows numpy") {
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4});
  CHECK(broadcast_shapes({}, {5}) == Shape{5});
  CHECK_THROWS_AS(broadcast_shapes({2, 3}, {4}), Error);
}

TEST_CASE("half and bfloat16 conversions round to nearest even") {
  CHECK(f16_to_f32(f32_to_f16(1.0f)) == 1.0f);
  CHECK(f16_to_f32(f32_to_f16(65504.0f)) == 65504.0f);
  CHECK(f32_to_f16(1e6f) == 0x7c00);  // overflow to +inf
  CHECK(f16_to_f32(0x0001) == doctest::Approx(5.9604645e-8));
  CHECK(bf16_to_f32(f32_to_bf16(3.0f)) == 3.0f);
  CHECK(f32_to_bf16(1.00390625f) == 0x3f80);  // halfway, rounds to even
}

TEST_CASE("verify: an output whose type is not its shape rule's is named with both types") {
  Graph g;
  ValueId x = onnxdp::test::add_input(g, "x", {2, 3});
  const ValueId y = onnxdp::test::out(g, g.add_node(Op::Neg, "neg", {x}, {"y"}));
  g.outputs = {y};
  verify(g);
  g.value(y).shape = {3, 2};
  std::string err;
  try {
    verify(g);
  } catch (const Error& e) {
    err = e.what();
  }
  CAPTURE(err);
  CHECK(err.find("output 'y' is f32 [3, 2], its shape rule gives f32 [2, 3]") != std::string::npos);
  CHECK(g.value(y).shape == Shape{3, 2});  // verify leaves the graph as it found it
}
