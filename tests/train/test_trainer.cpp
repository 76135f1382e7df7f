// End-to-end training through train(): per-step losses against PyTorch (models/*/train_reference.npz,
// made by models/make_train_refs.py), resume equality, the default model's accuracy, bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>

#include "train/checkpoint.h"
#include "train/npz.h"
#include "train/trainer.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

std::string model_path(const std::string& name) { return std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/model.onnx"; }

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("onnxdp_test_trainer_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void check_against_torch(const std::string& name) {
  auto ref = read_npz(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/train_reference.npz");
  for (const char* opt : {"sgd", "adamw"}) {
    CAPTURE(name);
    CAPTURE(opt);
    TrainOptions o;
    o.model = model_path(name);
    o.shuffle = false;
    o.quiet = true;
    o.batch_size = ref.at("batch_size").to_i64()[0];
    o.steps = ref.at("steps").to_i64()[0];
    o.optimizer.kind = optimizer_kind_from_name(opt);
    o.optimizer.lr = float(ref.at(std::string(opt) + "_lr").to_f64()[0]);
    TrainResult r = train(o);
    std::vector<double> want = ref.at(std::string(opt) + "_losses").to_f64();
    REQUIRE(r.losses.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(r.losses[i] == doctest::Approx(want[i]).epsilon(1e-3));
    }
  }
}

}  // namespace

TEST_CASE("train: mlp per-step losses equal PyTorch's (SGD, AdamW)") { check_against_torch("mlp"); }
TEST_CASE("train: mlp_dynamo (opset 20) per-step losses equal PyTorch's") { check_against_torch("mlp_dynamo"); }

TEST_CASE("train: the default model reaches 90 % held-out accuracy") {
  TrainOptions o;
  o.model = model_path("mlp");
  o.eval_data = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/eval.npz";
  o.epochs = 15;
  o.batch_size = 32;
  o.quiet = true;
  TrainResult r = train(o);
  REQUIRE(r.evaluated);
  CHECK(r.eval_accuracy >= 0.90);
  CHECK(r.losses.back() < r.losses.front());
}

TEST_CASE("train: 20 steps straight equal 10 steps, stop, resume, 10 steps") {
  fs::path d = scratch("resume");
  auto base = [&](const std::string& ckpt) {
    TrainOptions o;
    o.model = model_path("mlp");
    o.batch_size = 128;  // 1500 samples: 12 batches an epoch, the last partial; 20 steps cross an epoch
    o.steps = 20;
    o.seed = 7;
    o.quiet = true;
    o.checkpoint_dir = ckpt;
    return o;
  };
  TrainOptions straight = base((d / "a").string());
  straight.save = (d / "a.onnx").string();
  TrainResult a = train(straight);

  TrainOptions first = base((d / "b").string());
  first.steps = 10;
  train(first);
  TrainOptions second = base((d / "b").string());
  second.resume = true;
  second.save = (d / "b.onnx").string();
  TrainResult b2 = train(second);
  CHECK(b2.first_step == 11);
  REQUIRE(b2.losses.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(b2.losses[i] == a.losses[10 + i]);
  auto pa = read_safetensors((d / "a" / "checkpoint-20" / "model.safetensors").string());
  auto pb = read_safetensors((d / "b" / "checkpoint-20" / "model.safetensors").string());
  REQUIRE(pa.size() == pb.size());
  for (const auto& [name, t] : pa) {
    CAPTURE(name);
    REQUIRE(pb.count(name));
    CHECK(std::memcmp(t.data(), pb.at(name).data(), t.nbytes()) == 0);
  }
  // AdamW's state is kept per parameter under torch.optim's names, shaped like the parameter.
  auto sa = read_safetensors((d / "a" / "checkpoint-20" / "optimizer.safetensors").string());
  auto sb = read_safetensors((d / "b" / "checkpoint-20" / "optimizer.safetensors").string());
  CHECK(sa.size() == 2 * a.trainable.size());
  for (const std::string& p : a.trainable)
    for (const std::string key : {"exp_avg/" + p, "exp_avg_sq/" + p}) {
      CAPTURE(key);
      REQUIRE(sa.count(key));
      REQUIRE(sb.count(key));
      CHECK(sa.at(key).shape() == a.parameters.at(p).shape());
      CHECK(std::memcmp(sa.at(key).data(), sb.at(key).data(), sa.at(key).nbytes()) == 0);
    }
  // A checkpoint whose optimizer state lacks a tensor is refused by name.
  sb.erase("exp_avg/" + a.trainable[0]);
  write_safetensors((d / "b" / "checkpoint-20" / "optimizer.safetensors").string(), sb);
  TrainOptions third = base((d / "b").string());
  third.resume = true;
  third.steps = 25;
  const std::string why = "optimizer state 'exp_avg/" + a.trainable[0] + "' is missing";
  CHECK_THROWS_WITH_AS(train(third), doctest::Contains(why.c_str()), Error);
}

TEST_CASE("train: bad input gives a clear error before step 1") {
  fs::path d = scratch("bad");
  TrainOptions o;
  o.model = model_path("mlp");
  o.quiet = true;
  o.steps = 1;
  SUBCASE("missing label array") {
    o.label = "target";
    CHECK_THROWS_WITH_AS(train(o), doctest::Contains("no label array 'target'"), Error);
  }
  SUBCASE("missing data file") {
    o.data = (d / "nope.npz").string();
    CHECK_THROWS_AS(train(o), Error);
  }
  SUBCASE("wrong input dtype") {
    std::map<std::string, Tensor> arrays;
    arrays["x"] = Tensor(DType::f64, {4, 64});
    arrays["label"] = Tensor(DType::i64, {4});
    write_npz((d / "f64.npz").string(), arrays);
    o.data = (d / "f64.npz").string();
    CHECK_THROWS_WITH_AS(train(o), doctest::Contains("array 'x' is f64"), Error);
  }
  SUBCASE("wrong feature shape") {
    std::map<std::string, Tensor> arrays;
    arrays["x"] = Tensor(DType::f32, {4, 63});
    arrays["label"] = Tensor(DType::i64, {4});
    write_npz((d / "shape.npz").string(), arrays);
    o.data = (d / "shape.npz").string();
    CHECK_THROWS_WITH_AS(train(o), doctest::Contains("dim 1 = 64"), Error);
  }
  SUBCASE("sample counts differ") {
    std::map<std::string, Tensor> arrays;
    arrays["x"] = Tensor(DType::f32, {4, 64});
    arrays["label"] = Tensor(DType::i64, {5});
    write_npz((d / "count.npz").string(), arrays);
    o.data = (d / "count.npz").string();
    CHECK_THROWS_WITH_AS(train(o), doctest::Contains("samples"), Error);
  }
  SUBCASE("a NaN loss stops the run naming the step and the last checkpoint") {
    o.optimizer.kind = OptimizerKind::sgd;
    o.optimizer.lr = 1e30f;
    o.steps = 20;
    o.checkpoint_dir = (d / "ckpt").string();
    o.checkpoint_every = 1;
    CHECK_THROWS_WITH_AS(train(o), doctest::Contains("checkpoint-"), Error);
  }
}

TEST_CASE("train: tiny_lm (embeddings, causal attention, LayerNorm, erf-GELU) per-step losses equal PyTorch's") {
  check_against_torch("tiny_lm");
}

TEST_CASE("train: cnn (training-mode BatchNorm, pools, Dropout) per-step losses equal PyTorch's") {
  // The reference applies onnxdp's Dropout masks (models/make_train_refs.py re-implements them).
  check_against_torch("cnn");
}
