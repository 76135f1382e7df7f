// The autocast pass (graph/passes/autocast.h): every float32 MatMul / Gemm / Conv computes on
// bfloat16 or float16 copies and hands float32 to its readers; the parameters and their gradients
// stay float32.
#include <doctest/doctest.h>

#include <string>

#include "graph/autodiff.h"
#include "graph/passes/autocast.h"
#include "compile/compile.h"

using namespace onnxdp;

namespace {
bool is_product(Op op) { return op == Op::MatMul || op == Op::Gemm || op == Op::Conv || op == Op::ConvTranspose; }
}  // namespace

TEST_CASE("autocast: MatMul, Gemm and Conv on 16-bit copies, float32 around them and in the gradients") {
  for (const auto& [name, mode] : {std::pair<std::string, std::string>{"mlp", "bf16"}, {"tiny_lm", "bf16"}, {"cnn", "bf16"},
                                   {"mlp", "fp16"}, {"cnn", "fp16"}}) {
    CAPTURE(name);
    CAPTURE(mode);
    const DType low = mode == "fp16" ? DType::f16 : DType::bf16;
    Graph g = load_graph(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/model.onnx");
    int products = 0, casts_before = 0;
    int convs = 0;
    for (const Node& n : g.nodes) {
      products += is_product(n.op);
      convs += n.op == Op::Conv;
      casts_before += n.op == Op::Cast;
    }
    REQUIRE(products > 0);
    if (name == "cnn") CHECK(convs == 2);
    const ValueId out = g.outputs.at(0);
    CHECK(autocast(g, mode) == products);
    verify(g);
    int casts = 0;
    for (const Node& n : g.nodes) {
      if (n.op == Op::Cast) ++casts;
      if (!is_product(n.op)) continue;
      CAPTURE(n.name);
      for (ValueId v : n.inputs) {
        if (v == kNoValue) continue;
        CHECK(g.value(v).dtype == low);
        CHECK(g.nodes[size_t(g.value(v).producer)].op == Op::Cast);  // a copy made for this product
      }
      CHECK(g.value(n.outputs[0]).dtype == low);
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
    // The products' own gradients run on the 16-bit values: Conv's through ConvTranspose (input)
    // and ConvGradFilter (weight).
    int low_grads = 0;
    for (const Node& n : g.nodes)
      if ((n.op == Op::ConvTranspose || n.op == Op::ConvGradFilter || n.op == Op::MatMul || n.op == Op::Gemm) &&
          n.name.rfind("grad", 0) == 0) {
        CAPTURE(n.name);
        CHECK(g.value(n.outputs[0]).dtype == low);
        ++low_grads;
      }
    CHECK(low_grads >= (name == "cnn" ? 3 : 1));
  }
  Graph g;
  CHECK_THROWS_WITH(autocast(g, DType::f32), doctest::Contains("not a 16-bit float type"));
  CHECK(autocast(g, "no") == 0);
  CHECK_THROWS_WITH(autocast(g, "fp8"), doctest::Contains("--mixed-precision 'fp8'"));
}
