// Tests of the generator ops (Constant, ConstantOfShape, Range) against numpy values (pasted),
// the Constant attribute forms through the importer, and their ONNX node tests.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <set>

#include "exec/kernel.h"
#include "exec/plan.h"
#include "importer/importer.h"
#include "importer/onnx_io.h"
#include "compile/compile.h"

#include "tests/ops/op_test_util.h"

using namespace onnxdp;
using namespace onnxdp::optest;

TEST_CASE("Constant copies its value attribute") {
  Tensor v = make(DType::f32, {2, 2}, {1.5, -2, 3, 4});
  check(run_op(Op::Constant, {}, {{"value", v}})[0], DType::f32, {2, 2}, {1.5, -2, 3, 4});
}

TEST_CASE("Constant's value_* attributes (opset 12+) become the value tensor") {
  check(run_onnx(13, "Constant", {}, {attr_f("value_float", 2.5f)})[0], DType::f32, {}, {2.5});
  check(run_onnx(13, "Constant", {}, {attr_floats("value_floats", {1, 2.25f})})[0], DType::f32, {2}, {1, 2.25});
  check(run_onnx(13, "Constant", {}, {attr_i("value_int", -7)})[0], DType::i64, {}, {-7});
  check(run_onnx(13, "Constant", {}, {attr_ints("value_ints", {4, 5, 6})})[0], DType::i64, {3}, {4, 5, 6});
  check(run_onnx(9, "Constant", {}, {attr_t("value", make(DType::i32, {1, 2}, {8, 9}))})[0], DType::i32, {1, 2}, {8, 9});
  std::string e = error_of([] { run_onnx(13, "Constant", {}, {attr_s("value_string", "hello")}); });
  CHECK(e.find("string constants are not supported") != std::string::npos);
  CHECK(e.find("test_node") != std::string::npos);
  e = error_of([] { run_onnx(13, "Constant", {}, {attr_i("value_int", 1), attr_f("value_float", 1)}); });
  CHECK(e.find("exactly one") != std::string::npos);
}

TEST_CASE("ConstantOfShape: default 0 f32, value's dtype, empty shapes") {
  check(run_op(Op::ConstantOfShape, {ints({2, 3})}, {}, 1, 0)[0], DType::f32, {2, 3}, {0, 0, 0, 0, 0, 0});
  // np.full((2,3), 5, np.int64)
  check(run_op(Op::ConstantOfShape, {ints({2, 3})}, {{"value", Tensor::from_i64({5})}}, 1, 0)[0], DType::i64, {2, 3},
        {5, 5, 5, 5, 5, 5});
  check(run_op(Op::ConstantOfShape, {ints({4})}, {{"value", make(DType::f16, {1}, {1.5})}}, 1, 0)[0], DType::f16, {4},
        {1.5, 1.5, 1.5, 1.5});
  CHECK(run_op(Op::ConstantOfShape, {ints({0})}, {}, 1, 0)[0].shape() == Shape{0});
  check(run_op(Op::ConstantOfShape, {Tensor(DType::i64, {0})}, {}, 1, 0)[0], DType::f32, {}, {0});
  CHECK(error_of([] { run_op(Op::ConstantOfShape, {ints({2, -1})}, {}, 1, 0); }).find("negative") != std::string::npos);
  // the shape must be known when loading
  CHECK(error_of([] { run_op(Op::ConstantOfShape, {ints({2})}, {}, 1, 1); }).find("must be known") != std::string::npos);
}

TEST_CASE("Range (numpy arange)") {
  // np.arange(10, 4, -3), np.arange(-5, 5, 4), np.arange(5, 5, 1)
  check(run_op(Op::Range, {make(DType::i32, {}, {10}), make(DType::i32, {}, {4}), make(DType::i32, {}, {-3})}, {}, 1, 0)[0],
        DType::i32, {2}, {10, 7});
  check(run_op(Op::Range, {Tensor::scalar_i64(-5), Tensor::scalar_i64(5), Tensor::scalar_i64(4)}, {}, 1, 0)[0], DType::i64,
        {3}, {-5, -1, 3});
  CHECK(run_op(Op::Range, {Tensor::scalar_i64(5), Tensor::scalar_i64(5), Tensor::scalar_i64(1)}, {}, 1, 0)[0].shape() ==
        Shape{0});
  // np.arange(np.float32(0), np.float32(1), np.float32(0.3), dtype=np.float32)
  check(run_op(Op::Range, {Tensor::scalar_f32(0), Tensor::scalar_f32(1), Tensor::scalar_f32(0.3f)}, {}, 1, 0)[0],
        DType::f32, {4}, {0.0, 0.30000001192092896, 0.6000000238418579, 0.9000000357627869});
  // np.arange(1, 2.2, 0.25).astype(np.float16)
  check(run_op(Op::Range, {make(DType::f16, {}, {1}), make(DType::f16, {}, {2.2}), make(DType::f16, {}, {0.25})}, {}, 1, 0)[0],
        DType::f16, {5}, {1, 1.25, 1.5, 1.75, 2}, 0);
  CHECK(error_of([] { run_op(Op::Range, {Tensor::scalar_i64(0), Tensor::scalar_i64(5), Tensor::scalar_i64(0)}, {}, 1, 0); })
            .find("delta must not be 0") != std::string::npos);
  CHECK(error_of([] { run_op(Op::Range, {Tensor::scalar_i64(0), Tensor::scalar_i64(5), Tensor::scalar_f32(1)}, {}, 1, 0); })
            .find("input 2") != std::string::npos);
  // its length depends on the values: they must be known when loading
  CHECK(error_of([] { run_op(Op::Range, {Tensor::scalar_f32(0), Tensor::scalar_f32(5), Tensor::scalar_f32(1)}, {}, 1, 1); })
            .find("must be known") != std::string::npos);
}

TEST_CASE("Range folds at load: float bounds stored as initializers, and bounds from Shape / Gather of an input") {
  // torch.arange(0.5, 3.0, 0.5) with its bounds stored as float initializers (which are otherwise
  // parameters): the Range folds to np.arange(0.5, 3.0, 0.5) and nothing trains.
  {
    onnx::ModelProto m = one_node_model(11, "Range", {Tensor::scalar_f32(0.5f), Tensor::scalar_f32(3), Tensor::scalar_f32(0.5f)}, {}, 1);
    onnx::GraphProto* g = m.mutable_graph();
    const float v[3] = {0.5f, 3.0f, 0.5f};
    for (int k = 0; k < 3; ++k) {
      tensor_to_proto(Tensor::scalar_f32(v[k]), g->add_initializer());
      g->mutable_initializer(k)->set_name(fmt::format("x{}", k));
    }
    g->clear_input();
    Graph loaded = load_graph(m, "", {});
    CHECK(loaded.nodes.empty());
    for (const Value& val : loaded.values) CHECK(val.kind != ValueKind::parameter);
    const Value& y = loaded.value(loaded.outputs[0]);
    REQUIRE(y.kind == ValueKind::constant);
    check(y.data, DType::f32, {5}, {0.5, 1, 1.5, 2, 2.5});
  }
  // torch.arange(x.size(1)) on x [B, 5]: Shape -> Gather(1) -> Range(0, n, 1), static once the
  // input shapes are known; added to x's row: y = x + arange(5)
  {
    onnx::ModelProto m = one_node_model(13, "Add", {Tensor(DType::f32, {2, 5}), Tensor(DType::f32, {5})}, {}, 1);
    onnx::GraphProto* g = m.mutable_graph();
    g->mutable_input()->RemoveLast();  // x1 comes from the Range below
    auto add = [&](const char* op, std::vector<std::string> in, const char* out) {
      onnx::NodeProto* n = g->add_node();
      n->set_op_type(op);
      n->set_name(out);
      for (const auto& i : in) n->add_input(i);
      n->add_output(out);
    };
    const std::pair<const char*, Tensor> inits[] = {{"one", Tensor::scalar_i64(1)}, {"zero", Tensor::scalar_i64(0)}};
    for (const auto& [name, t] : inits) {
      tensor_to_proto(t, g->add_initializer());
      g->mutable_initializer(g->initializer_size() - 1)->set_name(name);
    }
    add("Shape", {"x0"}, "shape");
    add("Gather", {"shape", "one"}, "n");
    add("Range", {"zero", "n", "one"}, "r");
    add("Cast", {"r"}, "x1");
    auto* to = g->mutable_node(g->node_size() - 1)->add_attribute();
    *to = attr_i("to", 1);
    for (int k = 0; k + 1 < g->node_size(); ++k) g->mutable_node()->SwapElements(k, k + 1);  // the Add goes last
    Graph loaded = load_graph(m, "", {});
    REQUIRE(loaded.nodes.size() == 1);  // only the Add is left
    CHECK(loaded.nodes[0].op == Op::Add);
    Plan plan(loaded);
    auto out = plan.run({{"x0", make(DType::f32, {2, 5}, {1, 1, 1, 1, 1, 2, 2, 2, 2, 2})}});
    check(out.at("y0"), DType::f32, {2, 5}, {1, 2, 3, 4, 5, 2, 3, 4, 5, 6});
  }
}

TEST_CASE("ONNX node tests of the generator ops") {
  check_node_tests({"Constant", "ConstantOfShape", "Range"}, 8);
}
