// External data, the happy path: tests/bad_models/good_external/model.onnx keeps W [3, 2] and
// b [2] in data/weights.bin (a subfolder; b at offset 64). It loads wherever the model folder is and
// from whatever working directory, and computes what onnxruntime computed (output_0.pb).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "exec/plan.h"
#include "importer/onnx_io.h"
#include "compile/compile.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace onnxdp;

namespace {

using onnxdp::test::TempDir;

const fs::path kGood = fs::path(ONNXDP_SOURCE_DIR) / "tests" / "bad_models" / "good_external";

// The values make_bad_models.py wrote (W, b) and y = x @ W + b worked by hand for its x.
const std::vector<float> kW = {0.5f, -1.0f, 2.0f, 0.25f, -1.5f, 3.0f};
const std::vector<float> kB = {0.125f, -0.75f};
const std::vector<float> kY = {0.125f, 7.75f, -5.375f, 12.375f};

std::vector<float> values(const Tensor& t) {
  REQUIRE(t.dtype() == DType::f32);
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got[i] - want[i]) <= 1e-5f + 1e-4f * std::fabs(want[i]));
  }
}

void check_model_dir(const std::string& model_path) {
  Graph g = load_graph(model_path);
  ValueId w = g.find("W"), b = g.find("b");
  REQUIRE(w != kNoValue);
  REQUIRE(b != kNoValue);
  CHECK(g.value(w).shape == Shape{3, 2});
  CHECK(values(g.value(w).data) == kW);  // exact: the bytes are copied, not computed
  CHECK(values(g.value(b).data) == kB);
}

}  // namespace

TEST_CASE("external data: weights in a subfolder load with their exact values") {
  check_model_dir((kGood / "model.onnx").string());
}

TEST_CASE("external data: the model runs and matches onnxruntime") {
  Graph g = load_graph((kGood / "model.onnx").string());
  Plan plan(std::move(g));
  Tensor x = load_tensor_pb((kGood / "input_0.pb").string());
  Tensor want = load_tensor_pb((kGood / "output_0.pb").string());
  auto out = plan.run({{"x", x}});
  REQUIRE(out.count("y"));
  CHECK(out["y"].shape() == Shape{2, 2});
  check_close(values(out["y"]), values(want));
  check_close(values(out["y"]), kY);
}

TEST_CASE("external data: a copied model folder loads, and a relative path from its folder") {
  TempDir tmp;
  fs::copy(kGood, tmp.path / "m", fs::copy_options::recursive);
  check_model_dir((tmp.path / "m" / "model.onnx").string());

  // A bare file name: the model folder is the working directory.
  fs::path old = fs::current_path();
  fs::current_path(tmp.path / "m");
  try {
    check_model_dir("model.onnx");
  } catch (...) {
    fs::current_path(old);
    throw;
  }
  fs::current_path(old);
}

TEST_CASE("external data: the data file must stay where the model says") {
  TempDir tmp;
  fs::copy(kGood, tmp.path / "m", fs::copy_options::recursive);
  // Moving the data file away gives an error naming the tensor and the path, not garbage.
  fs::rename(tmp.path / "m" / "data" / "weights.bin", tmp.path / "weights.bin");
  try {
    load_graph((tmp.path / "m" / "model.onnx").string());
    FAIL("loaded without its data file");
  } catch (const Error& e) {
    std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.find("'W'") != std::string::npos);
    CHECK(msg.find("weights.bin") != std::string::npos);
  }
}
