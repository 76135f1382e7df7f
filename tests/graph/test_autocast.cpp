// The autocast pass (graph/passes/autocast.h): every float32 MatMul / Gemm computes on bfloat16
// copies and hands float32 to its readers; the parameters and their gradients stay float32.
#include <doctest/doctest.h>

#include <string>

#include "graph/autodiff.h"
#include "graph/passes/autocast.h"
#include "train/pipeline.h"

using namespace onnxdp;

TEST_CASE("autocast: MatMul and Gemm on bfloat16 copies, float32 around them and in the gradients") {
  for (const std::string name : {"mlp", "tiny_lm"}) {
    CAPTURE(name);
    Graph g = load_graph(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/model.onnx");
    int products = 0, casts_before = 0;
    for (const Node& n : g.nodes) {
      products += n.op == Op::MatMul || n.op == Op::Gemm;
      casts_before += n.op == Op::Cast;
    }
    REQUIRE(products > 0);
    const ValueId out = g.outputs.at(0);
    CHECK(autocast(g, DType::bf16) == products);
    verify(g);
    int casts = 0;
    for (const Node& n : g.nodes) {
      if (n.op == Op::Cast) ++casts;
      if (n.op != Op::MatMul && n.op != Op::Gemm) continue;
      CAPTURE(n.name);
      for (ValueId v : n.inputs) {
        if (v == kNoValue) continue;
        CHECK(g.value(v).dtype == DType::bf16);
        CHECK(g.nodes[size_t(g.value(v).producer)].op == Op::Cast);  // a copy made for this product
      }
      CHECK(g.value(n.outputs[0]).dtype == DType::bf16);
    }
    // One Cast per float input (two or three) and one back per product.
    CHECK(casts - casts_before >= 3 * products);
    CHECK(casts - casts_before <= 4 * products);
    CHECK(g.value(out).dtype == DType::f32);  // the model's output is float32 again
    // Parameters stay float32, and so do their gradients (through Cast's gradient).
    std::vector<ValueId> params;
    for (ValueId p : g.parameters())
      if (g.value(p).dtype == DType::f32) params.push_back(p);
    REQUIRE(!params.empty());
    ValueId loss = g.add_node(Op::ReduceSum, "loss", {out}, {"loss"}, {{"keepdims", Attr(int64_t(0))}});
    loss = g.nodes[size_t(loss)].outputs[0];
    std::vector<ValueId> grads = autodiff(g, loss, params);
    verify(g);
    for (size_t i = 0; i < params.size(); ++i)
      if (grads[i] != kNoValue) CHECK(g.value(grads[i]).dtype == DType::f32);
  }
  Graph g;
  CHECK_THROWS_WITH(autocast(g, DType::f32), doctest::Contains("not a 16-bit float type"));
}
