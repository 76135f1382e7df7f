// export_model: the trained model out is the input model with initializers replaced and nothing
// else changed; external initializers go to `<out>.data` beside the output, never into the input's
// folder. Models: tests/bad_models/good_inline.onnx and good_external/ (y = x @ W + b, W [3, 2],
// b [2]); expected values are worked by hand.
#include <doctest/doctest.h>
#include <google/protobuf/util/message_differencer.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "exec/plan.h"
#include "importer/onnx_io.h"
#include "compile/compile.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace onnxdp;
using google::protobuf::util::MessageDifferencer;

namespace {

using onnxdp::test::TempDir;

const fs::path kCorpus = fs::path(ONNXDP_SOURCE_DIR) / "tests" / "bad_models";

const std::vector<float> kW = {0.5f, -1.0f, 2.0f, 0.25f, -1.5f, 3.0f};
const std::vector<float> kB = {0.125f, -0.75f};
// The new W, and y = x @ W_new + b for x = [[1, 2, 3], [-1, 0.5, 4]]:
//   row 0: [1 + 3, 2 + 3] + b = [4.125, 4.25];  row 1: [-1 + 4, 0.5 + 4] + b = [3.125, 3.75].
const std::vector<float> kWNew = {1, 0, 0, 1, 1, 1};
const std::vector<float> kYNew = {4.125f, 4.25f, 3.125f, 3.75f};

std::vector<float> values(const Tensor& t) {
  REQUIRE(t.dtype() == DType::f32);
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
}

const onnx::TensorProto& initializer(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer())
    if (t.name() == name) return t;
  FAIL("no initializer " << name);
  throw 0;
}

std::string external_key(const onnx::TensorProto& t, const std::string& key) {
  for (const auto& e : t.external_data())
    if (e.key() == key) return e.value();
  return "";
}

// Everything but the initializers' data: graph (nodes, inputs, outputs, names), opsets, producer,
// metadata, and the initializers' names, types and dims in order.
void check_same_but_initializer_data(const onnx::ModelProto& a, const onnx::ModelProto& b) {
  onnx::ModelProto x = a, y = b;
  x.mutable_graph()->clear_initializer();
  y.mutable_graph()->clear_initializer();
  CHECK(MessageDifferencer::Equals(x, y));
  REQUIRE(a.graph().initializer_size() == b.graph().initializer_size());
  for (int k = 0; k < a.graph().initializer_size(); ++k) {
    const auto& p = a.graph().initializer(k);
    const auto& q = b.graph().initializer(k);
    CHECK(p.name() == q.name());
    CHECK(p.data_type() == q.data_type());
    CHECK(std::vector<int64_t>(p.dims().begin(), p.dims().end()) == std::vector<int64_t>(q.dims().begin(), q.dims().end()));
  }
}

void check_runs_with_new_w(const fs::path& model) {
  Plan plan(load_graph(model.string()));
  Tensor x = load_tensor_pb((kCorpus / "good_inline_input_0.pb").string());
  auto out = plan.run({{"x", x}});
  std::vector<float> y = values(out.at("y"));
  REQUIRE(y.size() == kYNew.size());
  for (size_t i = 0; i < y.size(); ++i) CHECK(std::fabs(y[i] - kYNew[i]) <= 1e-5f);
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    files[fs::relative(e.path(), dir).string()] =
        std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  return files;
}

}  // namespace

TEST_CASE("export: an inline initializer replaced, everything else unchanged") {
  TempDir tmp;
  fs::path in = kCorpus / "good_inline.onnx", out = tmp.path / "trained.onnx";
  export_model(in.string(), out.string(), {{"W", Tensor::from_f32(kWNew, {3, 2})}});

  onnx::ModelProto a = load_model_proto(in.string()), b = load_model_proto(out.string());
  check_same_but_initializer_data(a, b);
  CHECK(values(tensor_from_proto(initializer(b, "W"), tmp.path.string())) == kWNew);
  // b was not replaced: its proto is byte for byte the input's.
  CHECK(MessageDifferencer::Equals(initializer(a, "b"), initializer(b, "b")));
  CHECK(!fs::exists(tmp.path / "trained.onnx.data"));  // nothing external: no data file
  CHECK(!fs::exists(tmp.path / "trained.onnx.tmp"));

  Graph g = load_graph(out.string());
  CHECK(values(g.value(g.find("W")).data) == kWNew);
  CHECK(values(g.value(g.find("b")).data) == kB);
  check_runs_with_new_w(out);
}

TEST_CASE("export: external initializers go beside the output, the input folder is untouched") {
  TempDir tmp;
  fs::copy(kCorpus / "good_external", tmp.path / "in", fs::copy_options::recursive);
  fs::create_directory(tmp.path / "out");
  const auto before = snapshot(tmp.path / "in");
  fs::path in = tmp.path / "in" / "model.onnx", out = tmp.path / "out" / "trained.onnx";

  export_model(in.string(), out.string(), {{"W", Tensor::from_f32(kWNew, {3, 2})}});

  CHECK(snapshot(tmp.path / "in") == before);
  CHECK(fs::exists(tmp.path / "out" / "trained.onnx.data"));
  onnx::ModelProto a = load_model_proto(in.string()), b = load_model_proto(out.string());
  check_same_but_initializer_data(a, b);
  for (const char* name : {"W", "b"}) {
    CAPTURE(name);
    const auto& t = initializer(b, name);
    CHECK(t.data_location() == onnx::TensorProto::EXTERNAL);
    CHECK(external_key(t, "location") == "trained.onnx.data");
    CHECK(!t.has_raw_data());
  }

  // The output stands alone: with the input folder gone it still loads, new W and old b.
  fs::remove_all(tmp.path / "in");
  Graph g = load_graph(out.string());
  CHECK(values(g.value(g.find("W")).data) == kWNew);
  CHECK(values(g.value(g.find("b")).data) == kB);
  check_runs_with_new_w(out);
}

TEST_CASE("export: in place, over a model whose data file is the output's data file") {
  // First export makes m.onnx + m.onnx.data; exporting m.onnx onto itself must read all of
  // m.onnx.data before rewriting it.
  TempDir tmp;
  fs::path m = tmp.path / "m.onnx";
  export_model((kCorpus / "good_external" / "model.onnx").string(), m.string(), {});
  export_model(m.string(), m.string(), {{"W", Tensor::from_f32(kWNew, {3, 2})}});
  Graph g = load_graph(m.string());
  CHECK(values(g.value(g.find("W")).data) == kWNew);
  CHECK(values(g.value(g.find("b")).data) == kB);
  // And back to the original W, in place again.
  export_model(m.string(), m.string(), {{"W", Tensor::from_f32(kW, {3, 2})}});
  Graph g2 = load_graph(m.string());
  CHECK(values(g2.value(g2.find("W")).data) == kW);
  CHECK(values(g2.value(g2.find("b")).data) == kB);
}

TEST_CASE("export: refuses an unknown initializer or a value of another shape or dtype") {
  TempDir tmp;
  fs::path in = kCorpus / "good_inline.onnx", out = tmp.path / "trained.onnx";
  auto error_of = [&](const std::map<std::string, Tensor>& values) -> std::string {
    try {
      export_model(in.string(), out.string(), values);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string msg = error_of({{"W_typo", Tensor::from_f32(kWNew, {3, 2})}});
  CHECK(msg.find("'W_typo'") != std::string::npos);
  msg = error_of({{"W", Tensor::from_f32(kWNew, {2, 3})}});
  CHECK(msg.find("'W'") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  msg = error_of({{"W", Tensor::from_i64({1, 0, 0, 1, 1, 1}, {3, 2})}});
  CHECK(msg.find("'W'") != std::string::npos);
  CHECK(msg.find("i64") != std::string::npos);
  CHECK(!fs::exists(out));  // a refused export writes nothing
}
