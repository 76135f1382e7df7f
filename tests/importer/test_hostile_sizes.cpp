// Hostile sizes: every ONNX backend node test, with huge numbers put where a model declares sizes
// (a graph input's dims, an integer input's values, a node's integer attributes), loads through
// load_graph (import, shape rules, constant folding) to a clear onnxdp::Error or to shapes a tensor
// can have. Never undefined behaviour (scripts/asan-check runs this case under UBSan, which reports
// any signed overflow in a shape rule or a folded kernel), another exception type, or a huge
// allocation (folding leaves outputs over 256 MiB to the plan; no tensor may exceed the machine's
// memory).
#include <doctest/doctest.h>

#include <climits>
#include <filesystem>
#include <string>
#include <vector>

#include "compile/compile.h"
#include "importer/onnx_io.h"
#include "tests/test_util.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

// Sizes past int32, past sqrt(2^63), at 2^62 and at the int64 limits: products and sums of two of
// them overflow.
const int64_t kHugeValues[] = {int64_t(1) << 62, INT64_MAX, INT64_MIN, -(int64_t(1) << 62), 3037000500};
const int64_t kHugeDims[] = {(int64_t(1) << 31) + 1, (int64_t(1) << 40) + 1, (int64_t(1) << 61) + 1};
constexpr int kMaxPositions = 6;  // values of one input / attribute tried, from its start

struct Sweep {
  int variants = 0, loaded = 0, refused = 0;
  std::vector<std::string> problems;
};

// One variant: loads, and checks what loaded.
void load_variant(const onnx::ModelProto& m, const std::string& dir, const ImportOptions& opt, const std::string& what,
                  Sweep& sw) {
  ++sw.variants;
  try {
    Graph g = load_graph(m, dir, opt);
    for (const Value& v : g.values) {
      for (int64_t d : v.shape)
        if (d < 0) sw.problems.push_back(fmt::format("{}: value '{}' has shape {}", what, v.name, shape_str(v.shape)));
      shape_numel(v.shape);  // throws past 2^62 elements: a promise no tensor can keep
    }
    ++sw.loaded;
  } catch (const Error&) {
    ++sw.refused;
  } catch (const std::exception& e) {
    sw.problems.push_back(fmt::format("{}: {} instead of an onnxdp error", what, e.what()));
  }
}

void sweep_case(const fs::path& dir, Sweep& sw) {
  onnx::ModelProto m;
  ImportOptions base;
  try {
    m = load_model_proto((dir / "model.onnx").string());
    int k = 0;
    for (const auto& vi : m.graph().input()) {
      Tensor t = load_tensor_pb((dir / "test_data_set_0" / ("input_" + std::to_string(k++) + ".pb")).string());
      if (dtype_is_integer(t.dtype())) base.constant_inputs[vi.name()] = std::move(t);
      else base.input_shapes[vi.name()] = t.shape();
    }
  } catch (const std::exception&) {
    return;  // sequences, strings, optional inputs: not a case onnxdp loads at all
  }
  const std::string name = dir.filename().string();

  // A graph input's dim.
  for (const auto& [input, shape] : base.input_shapes)
    for (size_t d = 0; d < shape.size(); ++d)
      for (int64_t h : kHugeDims) {
        ImportOptions opt = base;
        opt.input_shapes[input][d] = h;
        load_variant(m, dir.string(), opt, fmt::format("{}: input '{}' dim {} = {}", name, input, d, h), sw);
      }
  // An integer input's value (shape arguments, indices, axes, repeats, pads ...).
  for (const auto& [input, t] : base.constant_inputs)
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), kMaxPositions); ++i)
      for (int64_t h : kHugeValues) {
        ImportOptions opt = base;
        std::vector<int64_t> v = t.to_i64();
        v[size_t(i)] = t.dtype() == DType::i64 ? h : int64_t(int32_t(h >> 32));  // int32: its own extremes
        Tensor mutated(t.dtype(), t.shape());
        for (size_t j = 0; j < v.size(); ++j) {
          if (t.dtype() == DType::i64) mutated.as<int64_t>()[j] = v[j];
          else if (t.dtype() == DType::i32) mutated.as<int32_t>()[j] = int32_t(v[j]);
          else mutated = t;  // 8-bit and bool inputs hold no sizes
        }
        opt.constant_inputs[input] = std::move(mutated);
        load_variant(m, dir.string(), opt, fmt::format("{}: input '{}' value {} = {}", name, input, i, h), sw);
      }
  // A node's integer attribute.
  for (int n = 0; n < m.graph().node_size(); ++n)
    for (int a = 0; a < m.graph().node(n).attribute_size(); ++a) {
      const onnx::AttributeProto& attr = m.graph().node(n).attribute(a);
      const int positions = attr.type() == onnx::AttributeProto::INT    ? 1
                            : attr.type() == onnx::AttributeProto::INTS ? std::min(attr.ints_size(), kMaxPositions)
                                                                        : 0;
      for (int i = 0; i < positions; ++i)
        for (int64_t h : kHugeValues) {
          onnx::ModelProto mm = m;
          onnx::AttributeProto* x = mm.mutable_graph()->mutable_node(n)->mutable_attribute(a);
          if (attr.type() == onnx::AttributeProto::INT) x->set_i(h);
          else x->set_ints(i, h);
          load_variant(mm, dir.string(), base,
                       fmt::format("{}: node {} attribute '{}'[{}] = {}", name, n, attr.name(), i, h), sw);
        }
    }
}

}  // namespace

TEST_CASE("hostile sizes: node tests with huge dims, integer inputs and attributes load or fail cleanly") {
  const std::string root = test::node_test_dir();
  if (root.empty()) {
    MESSAGE("skipped: the onnx node tests were not found (scripts/conformance-data)");
    return;
  }
  Sweep sw;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& c : cases) sweep_case(c, sw);
  MESSAGE(fmt::format("{} cases, {} variants: {} loaded, {} refused with an onnxdp error", cases.size(), sw.variants,
                      sw.loaded, sw.refused));
  for (const std::string& p : sw.problems) FAIL_CHECK(p);
  // The sweep reached the shape rules: most variants of most cases load or fail in them.
  CHECK(cases.size() > 1000);
  CHECK(sw.variants > 10000);
  CHECK(sw.loaded > 1000);
}
