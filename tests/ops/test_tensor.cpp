// Tests of the tensor ops (Identity, Cast, Shape, Flatten, Reshape, Transpose, Squeeze, Unsqueeze,
// Concat, Split, Slice, Gather, GatherND, ScatterND, Expand, Tile, Pad, Trilu, Resize): shape rules
// and CPU kernels against values computed with numpy or PyTorch (pasted), the older opsets'
// attribute forms through the importer, and the ONNX backend node tests of the tensor, generator
// and reduction ops.
//
// This file also defines the helpers of tests/ops/op_test_util.h, which the other op tests use.
#include <doctest/doctest.h>

#include "tests/ops/op_test_util.h"
#include "tests/test_util.h"
#include "tests/backend/backend_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>

#include "exec/kernel.h"
#include "exec/plan.h"
#include "graph/shape_helpers.h"
#include "importer/onnx_io.h"
#include "compile/compile.h"

namespace onnxdp::optest {
using onnxdp::test::node_test_dir;

// ---- helpers (declared in tests/ops/op_test_util.h) ------------------------------------------

Tensor make(DType t, Shape s, const std::vector<double>& v) {
  Tensor x(t, s);
  REQUIRE(int64_t(v.size()) == x.numel());
  dispatch_elem(t, [&]<class E>() {
    for (size_t i = 0; i < v.size(); ++i) x.as<typename E::T>()[i] = E::from_f64(v[i]);
  });
  return x;
}

Tensor arange(DType t, Shape s, double start, double step) {
  std::vector<double> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + double(i) * step;
  return make(t, s, v);
}

Tensor ints(std::vector<int64_t> v) { return Tensor::from_i64(v); }

void check(const Tensor& t, DType d, const Shape& s, const std::vector<double>& expected, double rtol) {
  CHECK(dtype_name(t.dtype()) == std::string(dtype_name(d)));
  CHECK(shape_str(t.shape()) == shape_str(s));
  if (t.dtype() != d || t.shape() != s) return;
  std::vector<double> got = t.to_f64();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      CHECK_MESSAGE(std::isnan(got[i]), "element " << i);
    } else {
      CHECK_MESSAGE((got[i] == expected[i] || std::fabs(got[i] - expected[i]) <= 1e-12 + rtol * std::fabs(expected[i])),
                    "element " << i << ": got " << got[i] << ", expected " << expected[i]);
    }
  }
}

// One node of `op` through its shape rule and CPU kernel. Inputs before `first_const` are graph
// inputs, the others constants (shape rules need shape arguments known).
// Through the backend harness's one-node graph and a Plan on the CPU (tests/backend/backend_ops.h):
// inputs from first_const on are constants.
std::vector<Tensor> run_op(Op op, const std::vector<Tensor>& inputs, const std::map<std::string, Attr>& attrs,
                           int n_out, int first_const) {
  test::OpCase c{.op = op, .attrs = attrs, .outputs = n_out};
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string name = "in";
    name += std::to_string(k);
    c.inputs.push_back(int(k) >= first_const ? test::fixed(name, inputs[k])
                                             : test::fed(name, inputs[k].dtype(), inputs[k].shape(), inputs[k]));
  }
  std::map<std::string, Tensor> out = test::run_on_cpu(c, test::feed_of(c, 0));
  std::vector<Tensor> outs;
  for (int k = 0; k < n_out; ++k) outs.push_back(std::move(out.at(test::output_name(k))));
  return outs;
}

onnx::AttributeProto attr_i(const std::string& name, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}
onnx::AttributeProto attr_f(const std::string& name, float v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}
onnx::AttributeProto attr_s(const std::string& name, const std::string& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(v);
  return a;
}
onnx::AttributeProto attr_ints(const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a.add_ints(x);
  return a;
}
onnx::AttributeProto attr_floats(const std::string& name, const std::vector<float>& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOATS);
  for (float x : v) a.add_floats(x);
  return a;
}
onnx::AttributeProto attr_t(const std::string& name, const Tensor& t) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::TENSOR);
  tensor_to_proto(t, a.mutable_t());
  return a;
}

// A one-node ONNX model of default-domain `opset`: inputs x0, x1, ... (x_k for k >= first_const
// bound as constants; an empty tensor (no data) leaves the input absent), outputs y0, y1, ...
onnx::ModelProto one_node_model(int opset, const std::string& op_type, const std::vector<Tensor>& inputs,
                                const std::vector<onnx::AttributeProto>& attrs, int n_out) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("one_node");
  onnx::NodeProto* n = g->add_node();
  n->set_name("test_node");
  n->set_op_type(op_type);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].empty()) {
      n->add_input("");
      continue;
    }
    std::string name = fmt::format("x{}", k);
    n->add_input(name);
    onnx::ValueInfoProto* vi = g->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(dtype_to_onnx(inputs[k].dtype()));
    auto* sh = tt->mutable_shape();
    for (int64_t d : inputs[k].shape()) sh->add_dim()->set_dim_value(d);
  }
  for (const auto& a : attrs) *n->add_attribute() = a;
  for (int k = 0; k < n_out; ++k) {
    n->add_output(fmt::format("y{}", k));
    g->add_output()->set_name(fmt::format("y{}", k));
  }
  return m;
}

std::vector<Tensor> run_onnx(int opset, const std::string& op_type, const std::vector<Tensor>& inputs,
                             const std::vector<onnx::AttributeProto>& attrs, int n_out, int first_const) {
  onnx::ModelProto m = one_node_model(opset, op_type, inputs, attrs, n_out);
  ImportOptions opt;
  std::map<std::string, Tensor> feed;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].empty()) continue;
    std::string name = fmt::format("x{}", k);
    if (int(k) >= first_const) opt.constant_inputs[name] = inputs[k];
    else feed[name] = inputs[k];
  }
  Plan plan(load_graph(m, "", opt));
  auto out = plan.run(feed);
  std::vector<Tensor> r;
  for (int k = 0; k < n_out; ++k) r.push_back(out.at(fmt::format("y{}", k)));
  return r;
}

// The message of the Error f throws ("" if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- ONNX backend node tests -------------------------------------------------------------------

struct NodeTestResult {
  bool found = false;       // the node-test folder was found
  int passed = 0, failed = 0;
  int rejected = 0;         // cases using dtypes / non-tensor values onnxdp does not hold, refused cleanly
  std::vector<std::string> failures;
};

namespace fs = std::filesystem;

bool close_enough(const Tensor& got, const Tensor& want, std::string& why) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    why = fmt::format("got {} {}, expected {} {}", dtype_name(got.dtype()), shape_str(got.shape()),
                      dtype_name(want.dtype()), shape_str(want.shape()));
    return false;
  }
  std::vector<double> a = got.to_f64(), b = want.to_f64();
  const bool exact = !dtype_is_float(want.dtype());
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = exact ? a[i] == b[i]
                    : (std::isnan(b[i]) ? std::isnan(a[i])
                                        : (a[i] == b[i] || std::fabs(a[i] - b[i]) <= 1e-5 + 1e-3 * std::fabs(b[i])));
    if (!ok) {
      why = fmt::format("element {}: got {}, expected {}", i, a[i], b[i]);
      return false;
    }
  }
  return true;
}

// Whether the model touches an element type or value kind onnxdp does not hold (it must then be
// refused with an Error).
bool uses_unheld_types(const onnx::ModelProto& m) {
  DType t;
  auto bad = [&](const onnx::ValueInfoProto& vi) {
    return !vi.type().has_tensor_type() || !dtype_from_onnx(vi.type().tensor_type().elem_type(), &t);
  };
  for (const auto& vi : m.graph().input())
    if (bad(vi)) return true;
  for (const auto& vi : m.graph().output())
    if (bad(vi)) return true;
  for (const auto& n : m.graph().node())
    for (const auto& a : n.attribute())
      if (n.op_type() == "Cast" && a.name() == "to" && !dtype_from_onnx(int(a.i()), &t)) return true;
  return false;
}

// Runs every node test whose nodes all have an op in `ops`. Non-float inputs (shapes, axes,
// indices), every input of a Range and OneHot's depth (they set the output's shape) are bound as
// constants; outputs
// must match in dtype and shape exactly, floats within atol 1e-5 + rtol 1e-3.
NodeTestResult run_node_tests(const std::set<std::string>& ops) {
  NodeTestResult r;
  const std::string dir = node_test_dir();
  if (dir.empty() || !fs::is_directory(dir)) return r;
  r.found = true;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir)) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& c : cases) {
    if (!fs::exists(c / "model.onnx")) continue;
    onnx::ModelProto m;
    try {
      m = load_model_proto((c / "model.onnx").string());
    } catch (const Error&) {
      continue;
    }
    bool mine = m.graph().node_size() > 0;
    std::set<std::string> range_inputs;
    for (const auto& n : m.graph().node()) {
      mine = mine && ops.count(n.op_type()) && (n.domain().empty() || n.domain() == "ai.onnx");
      if (n.op_type() == "Range")
        for (const auto& in : n.input()) range_inputs.insert(in);
      if (n.op_type() == "OneHot" && n.input_size() > 1) range_inputs.insert(n.input(1));
    }
    if (!mine) continue;
    const std::string name = c.filename().string();
    if (uses_unheld_types(m)) {
      std::string msg = error_of([&] { load_graph(m, c.string(), {}); });
      if (msg.empty()) {
        ++r.failed;
        r.failures.push_back(name + ": uses a dtype onnxdp lacks but was not refused");
      } else {
        ++r.rejected;
      }
      continue;
    }
    std::string why;
    try {
      for (const auto& ds : fs::directory_iterator(c)) {
        if (!ds.is_directory() || ds.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
        ImportOptions opt;
        std::map<std::string, Tensor> feed;
        std::set<std::string> inits;
        for (const auto& i : m.graph().initializer()) inits.insert(i.name());
        int k = 0;
        for (const auto& vi : m.graph().input()) {
          if (inits.count(vi.name())) continue;
          Tensor t = load_tensor_pb((ds.path() / ("input_" + std::to_string(k++) + ".pb")).string());
          if (!dtype_is_float(t.dtype()) || range_inputs.count(vi.name())) opt.constant_inputs[vi.name()] = t;
          else feed[vi.name()] = t;
        }
        Plan plan(load_graph(m, c.string(), opt));
        auto out = plan.run(feed);
        k = 0;
        for (const auto& vo : m.graph().output()) {
          Tensor want = load_tensor_pb((ds.path() / ("output_" + std::to_string(k++) + ".pb")).string());
          if (!close_enough(out.at(vo.name()), want, why)) {
            why = "output '" + vo.name() + "': " + why;
            break;
          }
        }
        if (!why.empty()) break;
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty()) {
      ++r.passed;
    } else {
      ++r.failed;
      r.failures.push_back(name + ": " + why);
    }
  }
  return r;
}

void check_node_tests(const std::set<std::string>& ops, int min_passed, const std::set<std::string>& refused) {
  NodeTestResult r = run_node_tests(ops);
  if (!r.found) {
    MESSAGE("ONNX node tests not found (set ONNXDP_ONNX_NODE_TESTS or install the onnx Python package); skipped");
    return;
  }
  // Cases onnxdp refuses by design (tests/conformance/exclusions.txt): they must fail, and count as refused.
  for (const std::string& name : refused) {
    auto it = std::find_if(r.failures.begin(), r.failures.end(),
                           [&](const std::string& f) { return f.rfind(name + ":", 0) == 0; });
    CHECK_MESSAGE(it != r.failures.end(), name << " was expected to be refused");
    if (it == r.failures.end()) continue;
    MESSAGE("refused as expected: " << *it);
    r.failures.erase(it);
    --r.failed;
    ++r.rejected;
  }
  MESSAGE(r.passed << " passed, " << r.failed << " failed, " << r.rejected << " refused (dtypes onnxdp lacks)");
  for (const auto& f : r.failures) MESSAGE(f);
  CHECK(r.failed == 0);
  CHECK(r.passed >= min_passed);
}

}  // namespace onnxdp::optest

using namespace onnxdp;
using namespace onnxdp::optest;

namespace {
using I = std::vector<int64_t>;
}

// ---- Identity, Cast, Shape ---------------------------------------------------------------------

TEST_CASE("Identity copies its input") {
  auto out = run_op(Op::Identity, {arange(DType::i32, {2, 2}, 5)});
  check(out[0], DType::i32, {2, 2}, {5, 6, 7, 8});
}

TEST_CASE("Cast between dtypes follows numpy astype") {
  // np.array([1.7,-1.7,2.5,-0.0,-2.5], np.float32).astype(np.int32)
  auto a = run_op(Op::Cast, {make(DType::f32, {5}, {1.7, -1.7, 2.5, -0.0, -2.5})}, {{"to", int64_t(6)}});
  check(a[0], DType::i32, {5}, {1, -1, 2, 0, -2});
  // np.array([300,-1,255,256], np.int64).astype(np.uint8): wraps
  auto b = run_op(Op::Cast, {make(DType::i64, {4}, {300, -1, 255, 256})}, {{"to", int64_t(2)}});
  check(b[0], DType::u8, {4}, {44, 255, 255, 0});
  // np.array([0,-0.0,2,nan], np.float32).astype(bool)
  auto c = run_op(Op::Cast, {make(DType::f32, {4}, {0, -0.0, 2, NAN})}, {{"to", int64_t(9)}});
  check(c[0], DType::boolean, {4}, {0, 0, 1, 1});
  auto d = run_op(Op::Cast, {make(DType::boolean, {2}, {1, 0})}, {{"to", int64_t(11)}});
  check(d[0], DType::f64, {2}, {1, 0});
}

TEST_CASE("Cast to f16 and bf16 rounds to nearest even, once") {
  // np.array([1/3, 65504, 1e-8, -2.5, 70000], np.float32).astype(np.float16).view(np.uint16)
  auto h = run_op(Op::Cast, {make(DType::f32, {5}, {1.0 / 3, 65504, 1e-8, -2.5, 70000})}, {{"to", int64_t(10)}});
  REQUIRE(h[0].dtype() == DType::f16);
  const uint16_t want_h[] = {13653, 31743, 0, 49408, 31744};
  for (int i = 0; i < 5; ++i) CHECK(h[0].as<uint16_t>()[i] == want_h[i]);
  // f64 -> f16 directly (numpy): 1 + 2^-11 + 2^-40 rounds up to 15361; through f32 it would tie
  // and round to even (15360).
  auto h2 = run_op(Op::Cast, {make(DType::f64, {3}, {1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                                   1 + std::ldexp(1.0, -11), 1 + 3 * std::ldexp(1.0, -11)})},
                   {{"to", int64_t(10)}});
  const uint16_t want_h2[] = {15361, 15360, 15362};
  for (int i = 0; i < 3; ++i) CHECK(h2[0].as<uint16_t>()[i] == want_h2[i]);
  // ml_dtypes: np.array([3.0, 1.005859375, 1.00390625, -0.1], np.float32).astype(bfloat16)
  auto b = run_op(Op::Cast, {make(DType::f32, {4}, {3.0, 1.005859375, 1.00390625, -0.1})}, {{"to", int64_t(16)}});
  REQUIRE(b[0].dtype() == DType::bf16);
  const uint16_t want_b[] = {16448, 16257, 16256, 48589};
  for (int i = 0; i < 4; ++i) CHECK(b[0].as<uint16_t>()[i] == want_b[i]);
  // and back: f16 -> f32 is exact
  auto back = run_op(Op::Cast, {h[0]}, {{"to", int64_t(1)}});
  check(back[0], DType::f32, {5}, {0.333251953125, 65504, 0, -2.5, INFINITY});
}

TEST_CASE("CastLike converts to its second input's dtype, as Cast would") {
  auto a = run_op(Op::CastLike, {make(DType::f32, {5}, {1.7, -1.7, 2.5, -0.0, -2.5}), make(DType::i32, {1}, {0})});
  check(a[0], DType::i32, {5}, {1, -1, 2, 0, -2});
  // Through the importer, the target a graph input (fed at run time): only its dtype matters.
  auto out = run_onnx(19, "CastLike", {make(DType::i64, {3}, {1, -2, 3}), make(DType::f64, {2}, {9, 9})}, {}, 1, 2);
  check(out[0], DType::f64, {3}, {1, -2, 3});
}

TEST_CASE("Size is the element count, folded to a constant") {
  check(run_op(Op::Size, {arange(DType::f32, {2, 3, 4})})[0], DType::i64, {}, {24});
  check(run_op(Op::Size, {arange(DType::f32, {0, 3})})[0], DType::i64, {}, {0});
  auto out = run_onnx(13, "Size", {arange(DType::f32, {2, 5})}, {}, 1, 1);  // a fed input: no data at fold time
  check(out[0], DType::i64, {}, {10});
}

// Expected values: onnx.reference's Resize on x = np.arange(24).reshape(1, 2, 3, 4) * 0.5.
TEST_CASE("Resize, mode nearest: every coordinate mode and rounding, scales or sizes, up and down") {
  Tensor x(DType::f32, {1, 2, 3, 4});
  for (int64_t i = 0; i < 24; ++i) x.as<float>()[i] = float(i) * 0.5f;
  auto attrs = [](const char* ct, const char* nearest) {
    return std::vector<onnx::AttributeProto>{attr_s("mode", "nearest"), attr_s("coordinate_transformation_mode", ct),
                                             attr_s("nearest_mode", nearest)};
  };
  auto scales = [](std::vector<double> v) { return make(DType::f32, {int64_t(v.size())}, v); };
  auto sizes = [](std::vector<double> v) { return make(DType::i64, {int64_t(v.size())}, v); };
  // torch's nn.Upsample(scale_factor=2): asymmetric, floor; each element twice along H and W
  auto up = run_onnx(19, "Resize", {x, Tensor(), scales({1, 1, 2, 2})}, attrs("asymmetric", "floor"), 1, 1)[0];
  REQUIRE(up.shape() == Shape{1, 2, 6, 8});
  for (int64_t i = 0; i < up.numel(); ++i) {
    const int64_t w = i % 8, h = (i / 8) % 6, ch = i / 48;
    CHECK(up.as<float>()[i] == x.as<float>()[ch * 12 + (h / 2) * 4 + w / 2]);
  }
  check(run_onnx(19, "Resize", {x, Tensor(), scales({1, 1, 1.5, 0.5})}, attrs("half_pixel", "round_prefer_floor"), 1, 1)[0],
        DType::f32, {1, 2, 4, 2}, {0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9, 10, 11});
  check(run_onnx(19, "Resize", {x, Tensor(), Tensor(), sizes({1, 2, 5, 3})}, attrs("align_corners", "round_prefer_ceil"), 1, 1)[0],
        DType::f32, {1, 2, 5, 3},
        {0, 1, 1.5, 2, 3, 3.5, 2, 3, 3.5, 4, 5, 5.5, 4, 5, 5.5, 6, 7, 7.5, 8, 9, 9.5, 8, 9, 9.5, 10, 11, 11.5, 10, 11, 11.5});
  check(run_onnx(19, "Resize", {x, Tensor(), Tensor(), sizes({1, 2, 2, 7})}, attrs("pytorch_half_pixel", "floor"), 1, 1)[0],
        DType::f32, {1, 2, 2, 7},
        {0, 0, 0, 0.5, 1, 1, 1.5, 2, 2, 2, 2.5, 3, 3, 3.5, 6, 6, 6, 6.5, 7, 7, 7.5, 8, 8, 8, 8.5, 9, 9, 9.5});
  // Resize-10: (X, scales)
  CHECK(run_onnx(10, "Resize", {x, scales({1, 1, 2, 2})}, {attr_s("mode", "nearest")}, 1, 1)[0].shape() == Shape{1, 2, 6, 8});
  // The dynamo exporter stores the scales as a float initializer: a constant of the model.
  onnx::ModelProto m = one_node_model(19, "Resize", {x, Tensor(), scales({1, 1, 2, 2})}, attrs("asymmetric", "floor"), 1);
  tensor_to_proto(scales({1, 1, 2, 2}), m.mutable_graph()->add_initializer());
  m.mutable_graph()->mutable_initializer(0)->set_name("x2");
  m.mutable_graph()->mutable_input()->DeleteSubrange(1, 1);
  Graph g = load_graph(m, "", {});
  CHECK(g.value(g.find("x2")).kind == ValueKind::constant);
  CHECK(Plan(std::move(g)).run({{"x0", x}}).at("y0").shape() == Shape{1, 2, 6, 8});
  // An empty axis has nothing to copy from.
  CHECK(error_of([&] { run_onnx(19, "Resize", {Tensor(DType::f32, {1, 0}), Tensor(), Tensor(), sizes({1, 3})}, {}, 1, 1); })
            .find("axis 1 is empty") != std::string::npos);
  // Resize-10 is asymmetric, its nearest rounds down: row h reads floor(h / 2.5) = 0 0 0 1 1 2 2
  auto up10 = run_onnx(10, "Resize", {x, scales({1, 1, 2.5, 1})}, {attr_s("mode", "nearest")}, 1, 1)[0];
  REQUIRE(up10.shape() == Shape{1, 2, 7, 4});
  for (int64_t i = 0; i < up10.numel(); ++i) {
    const int64_t w = i % 4, h = (i / 4) % 7, ch = i / 28, rows[] = {0, 0, 0, 1, 1, 2, 2};
    CHECK(up10.as<float>()[i] == x.as<float>()[ch * 12 + rows[h] * 4 + w]);
  }
  CHECK(error_of([&] { run_onnx(19, "Resize", {x, Tensor(), scales({1, 1, 2, 2})}, attrs("asymmetric", "floor"), 1, 3); })
            .find("must be known") != std::string::npos);
}

TEST_CASE("GatherElements picks along an axis (np.take_along_axis), negative indices from the end") {
  Tensor d = make(DType::f32, {3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  check(run_op(Op::GatherElements, {d, make(DType::i64, {2, 4}, {2, 0, 1, -1, 0, 0, 2, 1})})[0], DType::f32, {2, 4},
        {8, 1, 6, 11, 0, 1, 10, 7});
  check(run_op(Op::GatherElements, {d, make(DType::i32, {3, 1}, {3, 0, 1})}, {{"axis", int64_t(1)}})[0], DType::f32,
        {3, 1}, {3, 4, 9});
  CHECK(error_of([&] { run_op(Op::GatherElements, {d, make(DType::i64, {1, 1}, {3})}); }).find("out of range") !=
        std::string::npos);
  CHECK(error_of([&] { run_op(Op::GatherElements, {d, make(DType::i64, {4}, {0, 0, 0, 0})}); }).find("rank") !=
        std::string::npos);
}

// ---- Resize linear / cubic -----------------------------------------------------------------------

namespace {
// x[i] = ((7 i) mod 11) / 4 - 1: uneven values, so interpolation errors show.
Tensor wavy(DType t, Shape s) {
  std::vector<double> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 7) % 11) * 0.25 - 1;
  return make(t, s, v);
}
Tensor f32s(std::vector<double> v) { return make(DType::f32, {int64_t(v.size())}, v); }
Tensor i64s(std::vector<double> v) { return make(DType::i64, {int64_t(v.size())}, v); }
std::vector<onnx::AttributeProto> interp(const char* mode, const char* ct, std::vector<onnx::AttributeProto> more = {}) {
  more.push_back(attr_s("mode", mode));
  more.push_back(attr_s("coordinate_transformation_mode", ct));
  return more;
}
}  // namespace

// Expected values: PyTorch's F.interpolate in float64 on x = wavy [1, 1, 3, 4] (the trilinear case
// on wavy [1, 1, 2, 2, 3]), printed to 12 digits:
//   F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False)
//   F.interpolate(x, size=(5, 7), mode='bilinear', align_corners=True)
//   F.interpolate(x, size=(2, 3), mode='bilinear', align_corners=False)
//   F.interpolate(x, size=(5, 3), mode='bicubic', align_corners=False)
//   F.interpolate(x, scale_factor=1.5, mode='bicubic', align_corners=True)
//   F.interpolate(x3, size=(3, 3, 4), mode='trilinear', align_corners=False)
// Both PyTorch exporters write these as Resize linear / cubic (cubic_coeff_a -0.75) with
// coordinate_transformation_mode half_pixel or align_corners, the scales or the sizes as given.
TEST_CASE("Resize linear and cubic match PyTorch's bilinear, bicubic and trilinear interpolate") {
  struct Want {
    const char* mode;
    const char* ct;
    Tensor scales, sizes;
    Shape out;
    std::vector<double> y;
  };
  const std::vector<Want> cases = {
      {"linear", "half_pixel", f32s({1, 1, 2, 2}), Tensor(), {1, 1, 6, 8},
       {-1, -0.5625, 0.3125, 0.5, 0, 0.1875, 1.0625, 1.5, -0.625, -0.359375, 0.171875, 0.359375, 0.203125, 0.390625,
        0.921875, 1.1875, 0.125, 0.046875, -0.109375, 0.078125, 0.609375, 0.796875, 0.640625, 0.5625, 0.1875, 0.109375,
        -0.046875, 0.140625, 0.671875, 0.6875, 0.1875, -0.0625, -0.4375, -0.171875, 0.359375, 0.546875, 0.390625,
        0.0625, -0.4375, -0.6875, -0.75, -0.3125, 0.5625, 0.75, 0.25, -0.25, -0.75, -1}},
      {"linear", "align_corners", Tensor(), i64s({1, 1, 5, 7}), {1, 1, 5, 7},
       {-1, -0.125, 0.75, 0.25, -0.25, 0.625, 1.5, -0.25, -0.0625, 0.125, 0.3125, 0.5, 0.6875, 0.875, 0.5, 0, -0.5, 0.375,
        1.25, 0.75, 0.25, -0.125, 0.0625, 0.25, 0.4375, 0.625, 0.125, -0.375, -0.75, 0.125, 1, 0.5, 0, -0.5, -1}},
      {"linear", "half_pixel", Tensor(), i64s({1, 1, 2, 3}), {1, 1, 2, 3},
       {-0.447916666667, 0.28125, 1.01041666667, -0.260416666667, 0.46875, -0.520833333333}},
      {"cubic", "half_pixel", Tensor(), i64s({1, 1, 5, 3}), {1, 1, 5, 3},
       {-0.833009259259, 0.238, 1.30900925926, -0.262994212963, 0.2709375, 1.0115775463, 0.326099537037, 0.375,
        0.423900462963, -0.091994212963, 0.61828125, -0.42846412037, -0.559009259259, 0.7945625, -0.998425925926}},
      // scale 1.5 on 3 rows gives 4: align_corners maps the ends onto each other ((3 - 1) / (4 - 1)), as PyTorch
      {"cubic", "align_corners", f32s({1, 1, 1.5, 1.5}), Tensor(), {1, 1, 4, 6},
       {-1, 0.179, 0.7, -0.2, 0.321, 1.5, 0.166666666667, -0.231, -0.102740740741, 0.709592592593, 0.993074074074,
        0.782407407407, 0.273148148148, -0.124518518519, 0.0318518518519, 0.928518518519, 0.645092592593,
        -0.282407407407, -0.75, 0.429, 1.016, 0.314, -0.496, -1}},
      {"linear", "half_pixel", Tensor(), i64s({1, 1, 3, 3, 4}), {1, 1, 3, 3, 4},
       {-1, 0.09375, 0.375, -0.25, 0.25, 0.484375, 0.25, -0.375, 1.5, 0.875, 0.125, -0.5, 0.125, 0.359375, 0.125, -0.5,
        0.6875, 0.4921875, 2.77555756156e-17, -0.625, 1.25, 0.625, -0.125, -0.75, 1.25, 0.625, -0.125, -0.75, 1.125, 0.5,
        -0.25, -0.875, 1, 0.375, -0.375, -1}},
  };
  for (const Want& w : cases) {
    CAPTURE(w.mode);
    CAPTURE(w.ct);
    const Shape in = w.out.size() == 5 ? Shape{1, 1, 2, 2, 3} : Shape{1, 1, 3, 4};
    for (DType t : {DType::f32, DType::f64}) {
      const std::vector<Tensor> ins = w.sizes.numel() ? std::vector<Tensor>{wavy(t, in), Tensor(), Tensor(), w.sizes}
                                                      : std::vector<Tensor>{wavy(t, in), Tensor(), w.scales};
      check(run_onnx(19, "Resize", ins, interp(w.mode, w.ct), 1, 1)[0], t, w.out, w.y, t == DType::f32 ? 1e-6 : 1e-10);
    }
  }
  // float16 rounds the double result once
  check(run_onnx(19, "Resize", {wavy(DType::f16, {1, 1, 3, 4}), Tensor(), Tensor(), i64s({1, 1, 2, 3})},
                 interp("linear", "half_pixel"), 1, 1)[0],
        DType::f16, {1, 1, 2, 3}, {-0.447916666667, 0.28125, 1.01041666667, -0.260416666667, 0.46875, -0.520833333333},
        1e-3);
}

// Expected values: onnx.reference's Resize (onnx 1.22.0) in float64 on x = wavy [1, 1, 3, 4] or
// x5 = wavy [1, 1, 5, 5], with the attributes named on each line.
TEST_CASE("Resize linear and cubic: antialias, exclude_outside, crops, axes, aspect ratio, Resize-10") {
  const Tensor x = wavy(DType::f32, {1, 1, 3, 4}), x5 = wavy(DType::f32, {1, 1, 5, 5});
  // Resize-10 (X, scales): coordinates asymmetric
  check(run_onnx(10, "Resize", {x, f32s({1, 1, 2, 2})}, {attr_s("mode", "linear")}, 1, 1)[0], DType::f32, {1, 1, 6, 8},
        {-1, -0.125, 0.75, 0.25, -0.25, 0.625, 1.5, 1.5, -0.25, -0.0625, 0.125, 0.3125, 0.5, 0.6875, 0.875, 0.875,
         0.5, 0, -0.5, 0.375, 1.25, 0.75, 0.25, 0.25, -0.125, 0.0625, 0.25, 0.4375, 0.625, 0.125, -0.375, -0.375,
         -0.75, 0.125, 1, 0.5, 0, -0.5, -1, -1, -0.75, 0.125, 1, 0.5, 0, -0.5, -1, -1});
  // cubic, antialias, exclude_outside, cubic_coeff_a -0.5, scales 0.6 and 0.5
  check(run_onnx(19, "Resize", {x5, Tensor(), f32s({1, 1, 0.6, 0.5})},
                 interp("cubic", "half_pixel", {attr_i("antialias", 1), attr_i("exclude_outside", 1), attr_f("cubic_coeff_a", -0.5f)}),
                 1, 1)[0],
        DType::f32, {1, 1, 3, 2},
        {0.0489700649652, 0.406116961188, -0.0920307548553, 0.258302568015, 0.241438663886, 0.110488262897});
  // linear, antialias, sizes [2, 4]
  check(run_onnx(19, "Resize", {x5, Tensor(), Tensor(), i64s({1, 1, 2, 4})},
                 interp("linear", "half_pixel", {attr_i("antialias", 1)}), 1, 1)[0],
        DType::f32, {1, 1, 2, 4},
        {-0.308461538462, 0.388333333333, 0.248333333333, 0.705384615385, 0.354615384615, -0.105, 0.268333333333,
         0.0484615384615});
  // linear, half_pixel_symmetric, scales 1.7 and 0.8 (float32, as given)
  check(run_onnx(19, "Resize", {x, Tensor(), f32s({1, 1, 1.7, 0.8})}, interp("linear", "half_pixel_symmetric"), 1, 1)[0],
        DType::f32, {1, 1, 5, 3},
        {-0.562499967404, 0.25, 1.0624999674, -0.22794115156, 0.301470590298, 0.830882332156, 0.249999981374, 0.375,
         0.500000018626, -0.0808823321556, 0.448529409702, -0.235294078396, -0.312499967404, 0.5, -0.749999981374});
  // cubic, tf_crop_and_resize, axes [3, 2], roi [0.8, 0.1, 0.2, 1.2] (axis 3 reversed), sizes [4, 3],
  // extrapolation_value 7: the last row lies outside the input
  check(run_onnx(19, "Resize", {x5, f32s({0.8, 0.1, 0.2, 1.2}), Tensor(), i64s({4, 3})},
                 interp("cubic", "tf_crop_and_resize", {attr_ints("axes", {3, 2}), attr_f("extrapolation_value", 7)}), 1,
                 1)[0],
        DType::f32, {1, 1, 3, 4}, {0.66836, 0.038796, 0.439316, 0.87816, -0.07472, 1.0694, 0.51776, -0.914672, 7, 7, 7, 7},
        1e-5);
  // linear, keep_aspect_ratio_policy not_larger, axes [2, 3], sizes [6, 6]: scale min(6/3, 6/4) = 1.5
  check(run_onnx(19, "Resize", {x, Tensor(), Tensor(), i64s({6, 6})},
                 interp("linear", "half_pixel", {attr_ints("axes", {2, 3}), attr_s("keep_aspect_ratio_policy", "not_larger")}),
                 1, 1)[0],
        DType::f32, {1, 1, 5, 6},
        {-1, -0.125, 0.583333333333, -0.0833333333333, 0.625, 1.5, -0.25, -0.0625, 0.1875, 0.4375, 0.6875, 0.875,
         0.291666666667, 0.0208333333333, -0.0347222222222, 0.826388888889, 0.541666666667, 0.0416666666667,
         -0.541666666667, 0.104166666667, 0.659722222222, 0.298611111111, -0.291666666667, -0.791666666667, -0.75,
         0.125, 0.833333333333, 0.166666666667, -0.5, -1});
  // What onnxdp does not resize is named.
  auto err = [&](std::vector<Tensor> ins, std::vector<onnx::AttributeProto> attrs) {
    return error_of([&] { run_onnx(19, "Resize", ins, attrs, 1, 1); });
  };
  CHECK(err({x, Tensor(), f32s({1, 1, 2, 2})}, {attr_s("mode", "area")}).find("mode 'area' is not one of") != std::string::npos);
  CHECK(err({make(DType::i32, {1, 2}, {1, 2}), Tensor(), f32s({1, 2})}, interp("linear", "half_pixel"))
            .find("interpolates float tensors") != std::string::npos);
  CHECK(err({x, f32s({0, 0, 0, 0, 1, 1, 1, 1}), Tensor(), i64s({1, 1, 2, 2})}, interp("nearest", "tf_crop_and_resize"))
            .find("tf_crop_and_resize is supported with modes linear and cubic") != std::string::npos);
  CHECK(err({x, f32s({0, 0, 0, 0, 1, 1, 1, 1}), f32s({1, 1, 2, 2})}, interp("linear", "tf_crop_and_resize"))
            .find("tf_crop_and_resize with scales") != std::string::npos);
  CHECK(err({x, Tensor(), Tensor(), i64s({1, 1, 2, 2})}, interp("linear", "tf_crop_and_resize")).find("needs roi") !=
        std::string::npos);
  CHECK(err({x, Tensor(), f32s({1, 1, 0.5, 0.5})}, {attr_i("antialias", 1)}).find("antialias applies to modes linear") !=
        std::string::npos);
  CHECK(err({x, Tensor(), Tensor(), i64s({2, 2})}, interp("linear", "half_pixel", {attr_ints("axes", {2, 3}),
                                                                                   attr_s("keep_aspect_ratio_policy", "fit")}))
            .find("keep_aspect_ratio_policy 'fit'") != std::string::npos);
}

// ---- GatherND, ScatterND -------------------------------------------------------------------------

// Expected values: onnx.reference's GatherND / ScatterND (numpy indexing) on the data shown.
TEST_CASE("GatherND picks slices or elements by index tuples, batch_dims, negative indices from the end") {
  const Tensor d = arange(DType::f32, {2, 3, 4});  // 0 .. 23
  // tuples of 2 on [2, 3, 4]: rows [1, 2], [0, 0], [0, 2]
  check(run_op(Op::GatherND, {d, make(DType::i64, {3, 2}, {1, -1, 0, 0, -2, 2})})[0], DType::f32, {3, 4},
        {20, 21, 22, 23, 0, 1, 2, 3, 8, 9, 10, 11});
  // full tuples: elements [1, 2, 3], [0, 2, 0]
  check(run_op(Op::GatherND, {d, make(DType::i64, {2, 3}, {1, 2, 3, 0, -1, 0})})[0], DType::f32, {2}, {23, 8});
  // batch_dims 1: per batch b, data[b][tuple]
  check(run_op(Op::GatherND, {d, make(DType::i32, {2, 2, 1}, {2, 0, 1, -1})}, {{"batch_dims", int64_t(1)}})[0],
        DType::f32, {2, 2, 4}, {8, 9, 10, 11, 0, 1, 2, 3, 16, 17, 18, 19, 20, 21, 22, 23});
  check(run_op(Op::GatherND, {d, make(DType::i64, {2, 1, 2}, {2, 3, 0, 1})}, {{"batch_dims", int64_t(1)}})[0],
        DType::f32, {2, 1}, {11, 13});
  // any dtype (an attention mask's bool), through the importer
  check(run_onnx(13, "GatherND", {make(DType::boolean, {2, 2}, {1, 0, 0, 1}), make(DType::i64, {2, 2}, {0, 1, 1, 1})},
                 {}, 1, 1)[0],
        DType::boolean, {2}, {0, 1});
  CHECK(error_of([&] { run_op(Op::GatherND, {d, make(DType::i64, {1, 2}, {0, 3})}); })
            .find("index 3 (element 1 of the indices) is out of range for axis 1 of size 3") != std::string::npos);
  CHECK(error_of([&] { run_op(Op::GatherND, {d, make(DType::i64, {1, 4}, {0, 0, 0, 0})}); }).find("expected 1 to 3") !=
        std::string::npos);
  CHECK(error_of([&] {
          run_op(Op::GatherND, {d, make(DType::i64, {3, 1}, {0, 0, 0})}, {{"batch_dims", int64_t(1)}});
        }).find("batch dim 0 differs") != std::string::npos);
  CHECK(error_of([&] { run_onnx(11, "GatherND", {d, make(DType::i64, {2, 1}, {0, 1})}, {attr_i("batch_dims", 1)}, 1, 1); })
            .find("batch_dims needs opset 12") != std::string::npos);
}

TEST_CASE("ScatterND writes slices in index order, every reduction, repeated tuples under none keep the last") {
  const Tensor d = arange(DType::f32, {4, 3});  // 0 .. 11
  const Tensor idx = make(DType::i64, {3, 1}, {1, 3, 1});  // row 1 twice
  const Tensor upd = make(DType::f32, {3, 3}, {10, -11, 4, -20, 21, 9, 30, 0, -32});
  auto scatter = [&](const char* reduction) {
    return run_op(Op::ScatterND, {d, idx, upd}, {{"reduction", Attr(std::string(reduction))}})[0];
  };
  check(scatter("none"), DType::f32, {4, 3}, {0, 1, 2, 30, 0, -32, 6, 7, 8, -20, 21, 9});
  check(scatter("add"), DType::f32, {4, 3}, {0, 1, 2, 43, -7, -23, 6, 7, 8, -11, 31, 20});
  check(scatter("mul"), DType::f32, {4, 3}, {0, 1, 2, 900, -0.0, -640, 6, 7, 8, -180, 210, 99});
  check(scatter("max"), DType::f32, {4, 3}, {0, 1, 2, 30, 4, 5, 6, 7, 8, 9, 21, 11});
  check(scatter("min"), DType::f32, {4, 3}, {0, 1, 2, 3, -11, -32, 6, 7, 8, -20, 10, 9});
  // int64 add, elements by full tuples (negative from the end), through the importer
  check(run_onnx(16, "ScatterND", {arange(DType::i64, {4, 3}), make(DType::i64, {2, 2}, {0, 1, 2, -1}),
                                    make(DType::i64, {2}, {100, 200})},
                 {attr_s("reduction", "add")}, 1, 1)[0],
        DType::i64, {4, 3}, {0, 101, 2, 3, 4, 5, 6, 7, 208, 9, 10, 11});
  CHECK(error_of([&] { run_op(Op::ScatterND, {d, make(DType::i64, {1, 1}, {4}), make(DType::f32, {1, 3}, {1, 2, 3})}); })
            .find("index 4 (element 0 of the indices) is out of range for axis 0 of size 4") != std::string::npos);
  CHECK(error_of([&] { run_op(Op::ScatterND, {d, idx, make(DType::f32, {3, 2}, {0, 0, 0, 0, 0, 0})}); })
            .find("need [3, 3]") != std::string::npos);
  CHECK(error_of([&] { run_onnx(16, "ScatterND", {d, idx, upd}, {attr_s("reduction", "max")}, 1, 1); })
            .find("reduction 'max' needs opset 18") != std::string::npos);
}

TEST_CASE("ONNX node tests of GatherND and ScatterND") { check_node_tests({"GatherND", "ScatterND"}, 8); }

TEST_CASE("Cast refuses element types onnxdp lacks, naming them") {
  std::string e = error_of([] { run_onnx(13, "Cast", {arange(DType::f32, {2})}, {attr_i("to", 8)}); });
  CHECK(e.find("STRING") != std::string::npos);
  CHECK(e.find("test_node") != std::string::npos);
  e = error_of([] { run_onnx(21, "Cast", {arange(DType::f32, {2})}, {attr_i("to", 17)}); });
  CHECK(e.find("not supported") != std::string::npos);
  // opset 9 form
  auto out = run_onnx(9, "Cast", {make(DType::f32, {2}, {2.9, -2.9})}, {attr_i("to", 7)});
  check(out[0], DType::i64, {2}, {2, -2});
}

TEST_CASE("Shape with start/end, and folded as a constant") {
  Tensor x = arange(DType::f32, {2, 3, 4});
  check(run_op(Op::Shape, {x})[0], DType::i64, {3}, {2, 3, 4});
  check(run_op(Op::Shape, {x}, {{"start", int64_t(1)}})[0], DType::i64, {2}, {3, 4});
  check(run_op(Op::Shape, {x}, {{"start", int64_t(-1)}})[0], DType::i64, {1}, {4});
  check(run_op(Op::Shape, {x}, {{"start", int64_t(-10)}, {"end", int64_t(-1)}})[0], DType::i64, {2}, {2, 3});
  check(run_op(Op::Shape, {x}, {{"start", int64_t(2)}, {"end", int64_t(1)}})[0], DType::i64, {0}, {});
  CHECK(shape_op_dims({5, 6}, Node{"n", Op::Shape, {}, {}, {{"end", int64_t(100)}}}) == I{5, 6});
  // Through the importer (opset 15 attributes): the graph folds to a constant.
  auto out = run_onnx(15, "Shape", {x}, {attr_i("start", 1), attr_i("end", 2)});
  check(out[0], DType::i64, {1}, {3});
}

// A model exporters emit: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) folds to a
// Reshape with a constant shape.
TEST_CASE("shape arithmetic folds to constants") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* vi = g->add_input();
  vi->set_name("x");
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  for (int64_t d : {2, 3, 4}) vi->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  auto add = [&](const char* op, std::vector<std::string> in, std::string out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (auto& s : in) n->add_input(s);
    n->add_output(out);
    return n;
  };
  auto* c0 = add("Constant", {}, "zero");
  *c0->add_attribute() = attr_t("value", Tensor::scalar_i64(0));
  auto* cm1 = add("Constant", {}, "minus_one");
  *cm1->add_attribute() = attr_ints("value_ints", {-1});
  auto* ax = add("Constant", {}, "axes0");
  *ax->add_attribute() = attr_ints("value_ints", {0});
  add("Shape", {"x"}, "shape");
  add("Gather", {"shape", "zero"}, "batch");
  add("Unsqueeze", {"batch", "axes0"}, "batch1");
  *add("Concat", {"batch1", "minus_one"}, "target")->add_attribute() = attr_i("axis", 0);
  add("Reshape", {"x", "target"}, "y");
  g->add_output()->set_name("y");
  Graph graph = load_graph(m, "", {});
  REQUIRE(graph.nodes.size() == 1);
  CHECK(graph.nodes[0].op == Op::Reshape);
  CHECK(graph.value(graph.nodes[0].inputs[1]).data.to_i64() == I{2, -1});
  CHECK(graph.value(graph.outputs[0]).shape == Shape{2, 12});
}

// ---- Flatten, Reshape, Transpose, Squeeze, Unsqueeze --------------------------------------------

TEST_CASE("Flatten") {
  Tensor x = arange(DType::f32, {2, 3, 4});
  CHECK(run_op(Op::Flatten, {x}, {{"axis", int64_t(2)}})[0].shape() == Shape{6, 4});
  CHECK(run_op(Op::Flatten, {x}, {{"axis", int64_t(0)}})[0].shape() == Shape{1, 24});
  CHECK(run_op(Op::Flatten, {x}, {{"axis", int64_t(-1)}})[0].shape() == Shape{6, 4});
  check(run_op(Op::Flatten, {x}, {{"axis", int64_t(3)}})[0], DType::f32, {24, 1}, x.to_f64());
  CHECK(error_of([&] { run_op(Op::Flatten, {x}, {{"axis", int64_t(4)}}); }).find("out of range") != std::string::npos);
}

TEST_CASE("Reshape: 0 copies a dim, -1 is inferred, allowzero keeps 0") {
  Tensor x = arange(DType::f32, {2, 3, 4});
  check(run_op(Op::Reshape, {x, ints({0, -1})})[0], DType::f32, {2, 12}, x.to_f64());
  CHECK(run_op(Op::Reshape, {x, ints({4, 0, -1})})[0].shape() == Shape{4, 3, 2});
  Tensor empty(DType::f32, {0, 3});
  CHECK(run_op(Op::Reshape, {empty, ints({3, 0})}, {{"allowzero", int64_t(1)}})[0].shape() == Shape{3, 0});
  std::string e = error_of([&] { run_op(Op::Reshape, {x, ints({5, -1})}); });
  CHECK(e.find("test_node") != std::string::npos);
  CHECK(e.find("cannot reshape") != std::string::npos);
  CHECK(error_of([&] { run_op(Op::Reshape, {x, ints({-1, -1})}); }).find("more than one -1") != std::string::npos);
  // The target shape must be known when loading.
  e = error_of([&] { run_op(Op::Reshape, {x, ints({2, 12})}, {}, 1, 2); });
  CHECK(e.find("must be known") != std::string::npos);
  // opset 14 allowzero through the importer
  auto out = run_onnx(14, "Reshape", {x, ints({4, 6})}, {attr_i("allowzero", 1)});
  CHECK(out[0].shape() == Shape{4, 6});
}

TEST_CASE("Transpose (numpy transpose)") {
  // np.arange(24).reshape(2,3,4).transpose(2,0,1)
  auto out = run_op(Op::Transpose, {arange(DType::i64, {2, 3, 4})}, {{"perm", I{2, 0, 1}}});
  check(out[0], DType::i64, {4, 2, 3},
        {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23});
  auto rev = run_op(Op::Transpose, {arange(DType::f32, {2, 3})});
  check(rev[0], DType::f32, {3, 2}, {0, 3, 1, 4, 2, 5});
  CHECK(error_of([] { run_op(Op::Transpose, {arange(DType::f32, {2, 3})}, {{"perm", I{0, 0}}}); })
            .find("not a permutation") != std::string::npos);
  // Large enough for the parallel path: transposing twice gives the input back.
  Tensor big = arange(DType::f32, {64, 33, 70});
  auto t1 = run_op(Op::Transpose, {big}, {{"perm", I{2, 0, 1}}});
  auto t2 = run_op(Op::Transpose, {t1[0]}, {{"perm", I{1, 2, 0}}});
  CHECK(t2[0].to_f64() == big.to_f64());
}

TEST_CASE("Squeeze and Unsqueeze, axes as input and (opset < 13) as attribute") {
  Tensor x = arange(DType::f32, {1, 3, 1, 2});
  CHECK(run_op(Op::Squeeze, {x, ints({-2})})[0].shape() == Shape{1, 3, 2});
  CHECK(run_op(Op::Squeeze, {x})[0].shape() == Shape{3, 2});
  check(run_op(Op::Squeeze, {x, ints({0, 2})})[0], DType::f32, {3, 2}, x.to_f64());
  CHECK(error_of([&] { run_op(Op::Squeeze, {x, ints({1})}); }).find("cannot squeeze axis 1") != std::string::npos);
  Tensor y = arange(DType::f32, {3, 2});
  CHECK(run_op(Op::Unsqueeze, {y, ints({0, -1})})[0].shape() == Shape{1, 3, 2, 1});
  CHECK(run_op(Op::Unsqueeze, {y, ints({3, 1})})[0].shape() == Shape{3, 1, 2, 1});
  CHECK(error_of([&] { run_op(Op::Unsqueeze, {y, ints({1, 1})}); }).find("more than once") != std::string::npos);
  CHECK(run_onnx(11, "Squeeze", {x}, {attr_ints("axes", {0})})[0].shape() == Shape{3, 1, 2});
  CHECK(run_onnx(11, "Unsqueeze", {y}, {attr_ints("axes", {1})})[0].shape() == Shape{3, 1, 2});
  CHECK(run_onnx(13, "Squeeze", {x, ints({2})})[0].shape() == Shape{1, 3, 2});
}

// ---- Concat, Split, Slice, Gather ---------------------------------------------------------------

TEST_CASE("Concat (numpy concatenate)") {
  // np.concatenate([np.arange(4).reshape(2,2), np.arange(10,16).reshape(2,3)], axis=1)
  auto out = run_op(Op::Concat, {arange(DType::f32, {2, 2}), arange(DType::f32, {2, 3}, 10)}, {{"axis", int64_t(-1)}});
  check(out[0], DType::f32, {2, 5}, {0, 1, 10, 11, 12, 2, 3, 13, 14, 15});
  auto rows = run_op(Op::Concat, {arange(DType::i32, {1, 2}), Tensor(DType::i32, {0, 2}), arange(DType::i32, {2, 2}, 5)},
                     {{"axis", int64_t(0)}});
  check(rows[0], DType::i32, {3, 2}, {0, 1, 5, 6, 7, 8});
  CHECK(error_of([] { run_op(Op::Concat, {arange(DType::f32, {2, 2}), arange(DType::f32, {3, 3})}, {{"axis", int64_t(0)}}); })
            .find("differ in dim 1") != std::string::npos);
}

TEST_CASE("Split by sizes, equally, and by num_outputs") {
  Tensor x = arange(DType::f32, {2, 5});
  auto a = run_op(Op::Split, {x, ints({2, 3})}, {{"axis", int64_t(1)}}, 2);
  check(a[0], DType::f32, {2, 2}, {0, 1, 5, 6});
  check(a[1], DType::f32, {2, 3}, {2, 3, 4, 7, 8, 9});
  auto b = run_op(Op::Split, {arange(DType::f32, {6})}, {}, 3);
  check(b[2], DType::f32, {2}, {4, 5});
  // opset 18: ceil(7 / 3) = 3 per part, the last smaller
  auto c = run_op(Op::Split, {arange(DType::f32, {7})}, {{"num_outputs", int64_t(3)}}, 3);
  check(c[0], DType::f32, {3}, {0, 1, 2});
  check(c[2], DType::f32, {1}, {6});
  CHECK(error_of([] { run_op(Op::Split, {arange(DType::f32, {7})}, {}, 3); }).find("equal parts") != std::string::npos);
  CHECK(error_of([&] { run_op(Op::Split, {x, ints({2, 2})}, {{"axis", int64_t(1)}}, 2); }).find("add up to 4") !=
        std::string::npos);
  // opset 11: sizes as attribute
  auto d = run_onnx(11, "Split", {x}, {attr_i("axis", 1), attr_ints("split", {4, 1})}, 2);
  check(d[1], DType::f32, {2, 1}, {4, 9});
  auto e = run_onnx(18, "Split", {arange(DType::f32, {7})}, {attr_i("num_outputs", 2)}, 2);
  check(e[1], DType::f32, {3}, {4, 5, 6});
}

TEST_CASE("Slice with negative steps, clamping and attribute form") {
  Tensor x = arange(DType::f32, {4, 5});
  // x[0:3:2, 4:0:-2]
  auto a = run_op(Op::Slice, {x, ints({0, 4}), ints({3, 0}), ints({0, 1}), ints({2, -2})});
  check(a[0], DType::f32, {2, 2}, {4, 2, 14, 12});
  // x[::-1, 1:3] with INT64 extremes as ends
  auto b = run_op(Op::Slice, {x, ints({-1, 1}), ints({INT64_MIN, 3}), ints({0, -1}), ints({-1, 1})});
  check(b[0], DType::f32, {4, 2}, {16, 17, 11, 12, 6, 7, 1, 2});
  auto c = run_op(Op::Slice, {x, ints({10}), ints({20})});
  CHECK(c[0].shape() == Shape{0, 5});
  CHECK(error_of([&] { run_op(Op::Slice, {x, ints({0}), ints({1}), ints({0}), ints({0})}); }).find("steps must not be 0") !=
        std::string::npos);
  // opset 9: starts, ends, axes as attributes
  auto d = run_onnx(9, "Slice", {x}, {attr_ints("starts", {1}), attr_ints("ends", {1000}), attr_ints("axes", {1})});
  check(d[0], DType::f32, {4, 4}, {1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14, 16, 17, 18, 19});
}

TEST_CASE("Gather: any axis, negative indices, out-of-range index named") {
  Tensor g = arange(DType::f32, {3, 4});
  // np.take(np.arange(12).reshape(3,4), [[0,-1],[2,1]], axis=1)
  auto a = run_op(Op::Gather, {g, ints({0, -1, 2, 1}).reshaped({2, 2})}, {{"axis", int64_t(1)}});
  check(a[0], DType::f32, {3, 2, 2}, {0, 3, 2, 1, 4, 7, 6, 5, 8, 11, 10, 9});
  auto b = run_op(Op::Gather, {g, make(DType::i32, {2}, {2, 0})});
  check(b[0], DType::f32, {2, 4}, {8, 9, 10, 11, 0, 1, 2, 3});
  auto s = run_op(Op::Gather, {g, Tensor::scalar_i64(-1)});
  check(s[0], DType::f32, {4}, {8, 9, 10, 11});
  // run time indices: the kernel reports the bad one
  std::string e = error_of([&] { run_op(Op::Gather, {g, ints({1, 3})}, {}, 1, 2); });
  CHECK(e.find("test_node") != std::string::npos);
  CHECK(e.find("index 3") != std::string::npos);
  // constant indices: the shape rule reports it when loading
  e = error_of([&] { run_op(Op::Gather, {g, ints({-5})}, {{"axis", int64_t(0)}}); });
  CHECK(e.find("index -5") != std::string::npos);
}

// ---- Expand, Tile, Pad, Trilu -------------------------------------------------------------------

TEST_CASE("Expand broadcasts like numpy") {
  // np.broadcast_to(np.array([1,2,3]).reshape(3,1), (2,3,4))
  auto a = run_op(Op::Expand, {make(DType::f32, {3, 1}, {1, 2, 3}), ints({2, 1, 4})});
  check(a[0], DType::f32, {2, 3, 4}, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  // a smaller target keeps the input's dims (bidirectional broadcast)
  CHECK(run_op(Op::Expand, {arange(DType::i64, {2, 3}), ints({3})})[0].shape() == Shape{2, 3});
  CHECK(error_of([] { run_op(Op::Expand, {arange(DType::f32, {2, 3}), ints({4, 3, 2})}); }).find("cannot be expanded") !=
        std::string::npos);
}

TEST_CASE("Tile (numpy tile)") {
  auto a = run_op(Op::Tile, {arange(DType::i32, {2, 3}), ints({2, 2})});
  check(a[0], DType::i32, {4, 6}, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  CHECK(run_op(Op::Tile, {arange(DType::f32, {2, 3}), ints({0, 1})})[0].shape() == Shape{0, 3});
}

TEST_CASE("Pad modes constant, reflect, edge, wrap (numpy pad)") {
  Tensor p = make(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  // np.pad(p, ((0,1),(1,0)), constant_values=9.5); ONNX pads are [begins..., ends...]
  auto a = run_op(Op::Pad, {p, ints({0, 1, 1, 0}), Tensor::scalar_f32(9.5f)});
  check(a[0], DType::f32, {3, 4}, {9.5, 1, 2, 3, 9.5, 4, 5, 6, 9.5, 9.5, 9.5, 9.5});
  // np.pad(p, ((1,1),(2,4)), mode=m)
  auto r = run_op(Op::Pad, {p, ints({1, 2, 1, 4})}, {{"mode", std::string("reflect")}});
  check(r[0], DType::f32, {4, 9}, {6, 5, 4, 5, 6, 5, 4, 5, 6, 3, 2, 1, 2, 3, 2, 1, 2, 3,
                                   6, 5, 4, 5, 6, 5, 4, 5, 6, 3, 2, 1, 2, 3, 2, 1, 2, 3});
  auto e = run_op(Op::Pad, {p, ints({1, 2, 1, 4})}, {{"mode", std::string("edge")}});
  check(e[0], DType::f32, {4, 9}, {1, 1, 1, 2, 3, 3, 3, 3, 3, 1, 1, 1, 2, 3, 3, 3, 3, 3,
                                   4, 4, 4, 5, 6, 6, 6, 6, 6, 4, 4, 4, 5, 6, 6, 6, 6, 6});
  auto w = run_op(Op::Pad, {p, ints({1, 2, 1, 4})}, {{"mode", std::string("wrap")}});
  check(w[0], DType::f32, {4, 9}, {5, 6, 4, 5, 6, 4, 5, 6, 4, 2, 3, 1, 2, 3, 1, 2, 3, 1,
                                   5, 6, 4, 5, 6, 4, 5, 6, 4, 2, 3, 1, 2, 3, 1, 2, 3, 1});
  // negative pads crop: np.pad(p, ((0,0),(0,1)))[:, 1:]
  auto c = run_op(Op::Pad, {p, ints({0, -1, 0, 1})});
  check(c[0], DType::f32, {2, 3}, {2, 3, 0, 5, 6, 0});
  // opset 18 axes: pad only the last dim
  auto ax = run_op(Op::Pad, {p, ints({1, 0}), Tensor::scalar_f32(-1), ints({-1})});
  check(ax[0], DType::f32, {2, 4}, {-1, 1, 2, 3, -1, 4, 5, 6});
  CHECK(error_of([&] { run_op(Op::Pad, {p, ints({0, -4, 0, 0})}); }).find("remove more") != std::string::npos);
}

TEST_CASE("Pad opset < 11: pads and value attributes, value converted to the data's dtype") {
  Tensor p = make(DType::i32, {1, 2}, {7, 8});
  auto a = run_onnx(10, "Pad", {p}, {attr_ints("pads", {0, 1, 1, 0}), attr_f("value", 3)});
  check(a[0], DType::i32, {2, 3}, {3, 7, 8, 3, 3, 3});
  auto b = run_onnx(7, "Pad", {make(DType::f32, {3}, {1, 2, 3})}, {attr_ints("pads", {2, 1}), attr_s("mode", "reflect")});
  check(b[0], DType::f32, {6}, {3, 2, 1, 2, 3, 2});
  CHECK(error_of([] { run_onnx(19, "Pad", {arange(DType::f32, {2}), ints({1, 1})}, {attr_s("mode", "mirror")}); })
            .find("mode 'mirror'") != std::string::npos);
}

TEST_CASE("Trilu (numpy triu / tril)") {
  Tensor t = arange(DType::i64, {3, 4}, 1);
  check(run_op(Op::Trilu, {t, Tensor::scalar_i64(1)})[0], DType::i64, {3, 4}, {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  check(run_op(Op::Trilu, {t, Tensor::scalar_i64(-1)}, {{"upper", int64_t(0)}})[0], DType::i64, {3, 4},
        {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  // batched, k absent: np.triu(np.arange(1,19).reshape(2,3,3))
  check(run_op(Op::Trilu, {arange(DType::f32, {2, 3, 3}, 1)})[0], DType::f32, {2, 3, 3},
        {1, 2, 3, 0, 5, 6, 0, 0, 9, 10, 11, 12, 0, 14, 15, 0, 0, 18});
  CHECK(error_of([] { run_op(Op::Trilu, {arange(DType::f32, {3})}); }).find("rank >= 2") != std::string::npos);
}

// ---- OneHot, DepthToSpace, SpaceToDepth ---------------------------------------------------------

TEST_CASE("OneHot: negative indices from the end, out-of-range ones all off, any axis, cast indices and depth") {
  // by hand (ONNX's definition): indices [[1, -1, 4], [0, -4, 2]], depth 4, values [off -2, on 5]
  Tensor idx = make(DType::i64, {2, 3}, {1, -1, 4, 0, -4, 2});
  Tensor depth = Tensor::scalar_i64(4), values = make(DType::f32, {2}, {-2, 5});
  check(run_op(Op::OneHot, {idx, depth, values})[0], DType::f32, {2, 3, 4},
        {-2, 5, -2, -2, -2, -2, -2, 5, -2, -2, -2, -2, 5, -2, -2, -2, 5, -2, -2, -2, -2, -2, 5, -2});
  check(run_op(Op::OneHot, {idx, depth, values}, {{"axis", int64_t(0)}})[0], DType::f32, {4, 2, 3},
        {-2, -2, -2, 5, 5, -2, 5, -2, -2, -2, -2, -2, -2, -2, -2, -2, -2, 5, -2, 5, -2, -2, -2, -2});
  check(run_op(Op::OneHot, {idx, depth, values}, {{"axis", int64_t(-2)}})[0], DType::f32, {2, 4, 3},
        {-2, -2, -2, 5, -2, -2, -2, -2, -2, -2, 5, -2, 5, 5, -2, -2, -2, -2, -2, -2, 5, -2, -2, -2});
  // float indices and depth are cast to int64 (truncated): [1.7, -0.5] -> [1, 0]; int64 values
  check(run_onnx(11, "OneHot", {make(DType::f32, {2}, {1.7, -0.5}), make(DType::f32, {1}, {3}), ints({0, 1})})[0],
        DType::i64, {2, 3}, {0, 1, 0, 1, 0, 0});
  CHECK(error_of([&] { run_op(Op::OneHot, {idx, depth, make(DType::f32, {3}, {0, 1, 2})}); }).find("shape [2]") !=
        std::string::npos);
  CHECK(error_of([&] { run_op(Op::OneHot, {idx, Tensor::scalar_i64(0), values}); }).find("at least 1") != std::string::npos);
  CHECK(error_of([&] { run_onnx(11, "OneHot", {idx, depth, values}, {}, 1, 3); }).find("must be known") != std::string::npos);
}

namespace {
// DepthToSpace / SpaceToDepth written per element from their ONNX definitions (x [N, C, H, W],
// block b), independent of the Reshape / Transpose lowering under test:
//   DCR: y[n, c, h b + i, w b + j] = x[n, (i b + j) C' + c, h, w]   (C' = C / b²)
//   CRD: y[n, c, h b + i, w b + j] = x[n, c b² + i b + j, h, w]
//   SpaceToDepth: y[n, (i b + j) C + c, h, w] = x[n, c, h b + i, w b + j]
std::vector<double> depth_to_space_ref(const Tensor& x, int64_t b, bool dcr) {
  const Shape& s = x.shape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3], Co = C / (b * b);
  std::vector<double> xs = x.to_f64(), y(size_t(x.numel()));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < Co; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < b; ++i)
          for (int64_t w = 0; w < W; ++w)
            for (int64_t j = 0; j < b; ++j) {
              const int64_t src_c = dcr ? (i * b + j) * Co + c : c * b * b + i * b + j;
              y[size_t(((n * Co + c) * H * b + h * b + i) * W * b + w * b + j)] = xs[size_t(((n * C + src_c) * H + h) * W + w)];
            }
  return y;
}
std::vector<double> space_to_depth_ref(const Tensor& x, int64_t b) {
  const Shape& s = x.shape();
  const int64_t N = s[0], C = s[1], Ho = s[2] / b, Wo = s[3] / b;
  std::vector<double> xs = x.to_f64(), y(size_t(x.numel()));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < b; ++j)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t h = 0; h < Ho; ++h)
            for (int64_t w = 0; w < Wo; ++w)
              y[size_t(((n * C * b * b + (i * b + j) * C + c) * Ho + h) * Wo + w)] =
                  xs[size_t(((n * C + c) * s[2] + h * b + i) * s[3] + w * b + j)];
  return y;
}
}  // namespace

TEST_CASE("DepthToSpace (DCR, CRD) and SpaceToDepth import as Reshape -> Transpose -> Reshape") {
  Tensor x = arange(DType::f32, {2, 8, 2, 3});
  check(run_onnx(13, "DepthToSpace", {x}, {attr_i("blocksize", 2)}, 1, 1)[0], DType::f32, {2, 2, 4, 6},
        depth_to_space_ref(x, 2, true));
  check(run_onnx(13, "DepthToSpace", {x}, {attr_i("blocksize", 2), attr_s("mode", "CRD")}, 1, 1)[0], DType::f32,
        {2, 2, 4, 6}, depth_to_space_ref(x, 2, false));
  check(run_onnx(7, "DepthToSpace", {x}, {attr_i("blocksize", 2)})[0], DType::f32, {2, 2, 4, 6},  // opset 1: DCR
        depth_to_space_ref(x, 2, true));
  Tensor z = arange(DType::f64, {1, 9, 1, 2});
  check(run_onnx(11, "DepthToSpace", {z}, {attr_i("blocksize", 3), attr_s("mode", "DCR")})[0], DType::f64, {1, 1, 3, 6},
        depth_to_space_ref(z, 3, true));
  Tensor s = arange(DType::f32, {2, 3, 4, 6});
  check(run_onnx(13, "SpaceToDepth", {s}, {attr_i("blocksize", 2)})[0], DType::f32, {2, 12, 2, 3},
        space_to_depth_ref(s, 2));
  // and back: DepthToSpace DCR undoes SpaceToDepth
  Tensor y = run_onnx(13, "SpaceToDepth", {s}, {attr_i("blocksize", 2)})[0];
  check(run_onnx(13, "DepthToSpace", {y}, {attr_i("blocksize", 2)})[0], DType::f32, {2, 3, 4, 6}, s.to_f64());

  // H = 8 and W = 3 would fit a [.., 4, 2, -1, 2] view (24 elements): refused, W is not a multiple of 2
  std::string e = error_of([] { run_onnx(13, "SpaceToDepth", {arange(DType::f32, {1, 1, 8, 3})}, {attr_i("blocksize", 2)}); });
  CHECK(e.find("test_node") != std::string::npos);
  CHECK(error_of([] { run_onnx(13, "DepthToSpace", {arange(DType::f32, {1, 6, 1, 1})}, {attr_i("blocksize", 2)}); })
            .find("test_node") != std::string::npos);
  CHECK(error_of([&] { run_onnx(13, "DepthToSpace", {x}, {attr_i("blocksize", 2), attr_s("mode", "XYZ")}); })
            .find("mode") != std::string::npos);
  CHECK(error_of([&] { run_onnx(13, "SpaceToDepth", {x}, {}); }).find("blocksize") != std::string::npos);
  // after load only the three data movements are left (the shape arithmetic folded)
  for (const char* op : {"DepthToSpace", "SpaceToDepth"}) {
    Graph g = load_graph(one_node_model(13, op, {Tensor(DType::f32, {2, 8, 4, 4})}, {attr_i("blocksize", 2)}, 1), "", {});
    REQUIRE(g.nodes.size() == 3);
    CHECK(g.nodes[0].op == Op::Reshape);
    CHECK(g.nodes[1].op == Op::Transpose);
    CHECK(g.nodes[2].op == Op::Reshape);
  }
}

TEST_CASE("ONNX node tests of OneHot, DepthToSpace and SpaceToDepth") {
  check_node_tests({"OneHot", "DepthToSpace", "SpaceToDepth"}, 8);
}

// ---- the ONNX backend node tests ----------------------------------------------------------------

TEST_CASE("ONNX node tests of the tensor ops") {
  check_node_tests({"Identity", "Cast", "Shape", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat",
                    "Split", "Slice", "Gather", "Expand", "Tile", "Pad", "Trilu"},
                   130);
}
