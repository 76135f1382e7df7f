// End-to-end training through train(): per-step losses and BatchNorm running statistics against
// PyTorch (models/*/train_reference.npz, made by models/make_train_refs.py), running_var's unbiased
// update checked by hand on every device kind, resume equality, the default model's accuracy, bad
// input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <tuple>

#include "importer/onnx_io.h"
#include "train/checkpoint.h"
#include "train/npz.h"
#include "train/trainer.h"
#include "tests/train/tiny_model.h"

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

// Per-step losses, and for models with BatchNorm the running statistics in the saved model after
// the last step (the reference's <opt>_final.<buffer>) within 1e-5 relative (they agree to ~1e-6):
// PyTorch updates running_var with the unbiased batch variance, ONNX's op with the biased one,
// which would be off by 4e-4 (cnn bn1: n = 32 * 64) and 2e-3 (bn2: n = 32 * 16) relative.
// running_mean is compared after SGD only: it holds the bias of the Conv before the BN, whose
// gradient is rounding noise (exactly 0 but for rounding: BN removes it), which Adam's normalised
// step turns into lr-sized steps of either sign, differently in PyTorch and onnxdp (running_var
// does not depend on that bias). Returns how many statistics were compared.
int check_against_torch(const std::string& name, double loss_tolerance = 1e-3) {
  auto ref = read_npz(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/train_reference.npz");
  fs::path d = scratch("torch_" + name);
  int compared = 0;
  for (const std::string opt : {"sgd", "adamw"}) {
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
    o.save = (d / (std::string(opt) + ".onnx")).string();
    TrainResult r = train(o);
    std::vector<double> want = ref.at(std::string(opt) + "_losses").to_f64();
    REQUIRE(r.losses.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(r.losses[i] == doctest::Approx(want[i]).epsilon(loss_tolerance));
    }
    const onnx::ModelProto saved = load_model_proto(o.save);
    const std::string prefix = std::string(opt) + "_final.";
    for (const auto& [key, stat] : ref) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string buffer = key.substr(prefix.size());
      if (opt == "adamw" && buffer.find("running_mean") != std::string::npos) continue;
      CAPTURE(buffer);
      const onnx::TensorProto* init = nullptr;
      for (const auto& t : saved.graph().initializer())
        if (t.name() == buffer) init = &t;
      REQUIRE(init != nullptr);
      const std::vector<double> got = tensor_from_proto(*init, d.string()).to_f64(), exp = stat.to_f64();
      REQUIRE(got.size() == exp.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - exp[i]) / std::abs(exp[i]));
      INFO("largest relative difference " << worst);
      CHECK(worst <= 1e-5);
      ++compared;
    }
  }
  return compared;
}

}  // namespace

TEST_CASE("train: mlp per-step losses equal PyTorch's (SGD, AdamW)") { check_against_torch("mlp"); }
TEST_CASE("train: mlp_dynamo (opset 20) per-step losses equal PyTorch's") { check_against_torch("mlp_dynamo"); }

// --mixed-precision bf16 against PyTorch's autocast (bf16_sgd_losses: SGD, forward and loss under
// torch.autocast("cpu", torch.bfloat16)). mlp (Linear, ReLU): the Linear outputs are the same
// bfloat16 values, so the losses agree to ~1e-7, while float32 training is ~1e-4 away from them;
// tiny_lm: PyTorch keeps some elementwise results (the scaled attention scores, GELU) in bfloat16
// where onnxdp keeps float32, so only the general 1e-3; cnn (bfloat16 Conv and Gemm): PyTorch
// also keeps the BatchNorm, Relu and pooling after a Conv in bfloat16, so 1e-3 (measured 1.6e-4).
std::vector<float> bf16_losses(const std::string& name, const std::string& devices = "cpu") {
  auto ref = read_npz(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/train_reference.npz");
  TrainOptions o;
  o.model = model_path(name);
  o.shuffle = false;
  o.quiet = true;
  o.devices = devices;
  o.batch_size = ref.at("batch_size").to_i64()[0];
  o.steps = ref.at("steps").to_i64()[0];
  o.optimizer.kind = optimizer_kind_from_name("sgd");
  o.optimizer.lr = float(ref.at("sgd_lr").to_f64()[0]);
  o.mixed_precision = "bf16";
  return train(o).losses;
}

TEST_CASE("train: --mixed-precision bf16 trains as PyTorch's autocast (mlp to 1e-6, tiny_lm and cnn to 1e-3)") {
  for (const std::string name : {"mlp", "tiny_lm", "cnn"}) {
    CAPTURE(name);
    auto ref = read_npz(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/train_reference.npz");
    const std::vector<double> want = ref.at("bf16_sgd_losses").to_f64(), fp32 = ref.at("sgd_losses").to_f64();
    const std::vector<float> got = bf16_losses(name);
    REQUIRE(got.size() == want.size());
    const double tol = name == "mlp" ? 1e-6 : 1e-3;
    double worst = 0, fp32_gap = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(got[i] - want[i]) / want[i]);
      fp32_gap = std::max(fp32_gap, std::abs(fp32[i] - want[i]) / want[i]);
    }
    INFO("largest relative difference to autocast " << worst << ", float32 training's " << fp32_gap);
    CHECK(worst <= tol);
    if (name == "mlp") CHECK(fp32_gap > 20 * tol);  // the bound tells bfloat16 products from float32 ones
  }
}

// cnn: the device adds a Conv's bias to the rounded bfloat16 convolution and rounds again
// (cudnnAddTensor), the CPU rounds the sum once, so bfloat16 roundings apart.
TEST_CASE("train: --mixed-precision bf16 on the emulated CUDA device trains as on the CPU") {
  for (const auto& [name, eps] : {std::pair<std::string, double>{"mlp", 1e-5}, {"cnn", 1e-3}}) {
    CAPTURE(name);
    const std::vector<float> cpu = bf16_losses(name), dev = bf16_losses(name, "cuda-emulated");
    REQUIRE(cpu.size() == dev.size());
    for (size_t i = 0; i < cpu.size(); ++i) CHECK(dev[i] == doctest::Approx(cpu[i]).epsilon(eps));
  }
}

// --mixed-precision fp16 against PyTorch's autocast with GradScaler (fp16_adamw_losses and
// fp16_adamw_scales: AdamW, forward and loss under torch.autocast("cpu", torch.float16),
// GradScaler("cpu", init_scale=2**24, growth_interval=4)). The first four steps overflow float16
// (skipped: no update, Adam's step count unchanged), the scale grows and backs off again later.
TrainOptions fp16_options(const std::string& name) {
  auto ref = read_npz(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/train_reference.npz");
  TrainOptions o;
  o.model = model_path(name);
  o.shuffle = false;
  o.quiet = true;
  o.batch_size = ref.at("batch_size").to_i64()[0];
  o.steps = ref.at("steps").to_i64()[0];
  o.optimizer.kind = optimizer_kind_from_name("adamw");
  o.optimizer.lr = float(ref.at("adamw_lr").to_f64()[0]);
  o.mixed_precision = "fp16";
  o.loss_scale.init = float(ref.at("fp16_init_scale").to_f64()[0]);
  o.loss_scale.growth_interval = ref.at("fp16_growth_interval").to_i64()[0];
  return o;
}

TEST_CASE("train: --mixed-precision fp16 trains as PyTorch's autocast + GradScaler: losses, skipped steps, scales") {
  for (const std::string name : {"mlp", "tiny_lm", "cnn"}) {
    CAPTURE(name);
    auto ref = read_npz(std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/train_reference.npz");
    const std::vector<double> want = ref.at("fp16_adamw_losses").to_f64(), scales = ref.at("fp16_adamw_scales").to_f64(),
                              fp32 = ref.at("adamw_losses").to_f64();
    const TrainResult r = train(fp16_options(name));
    REQUIRE(r.losses.size() == want.size());
    REQUIRE(r.loss_scales.size() == scales.size());
    int64_t backoffs = 0;
    for (size_t i = 0; i < scales.size(); ++i) {
      CAPTURE(i);
      CHECK(double(r.loss_scales[i]) == scales[i]);  // the same steps overflow, the same steps grow
      backoffs += scales[i] < (i == 0 ? double(r.loss_scales[0]) * 2 : scales[i - 1]) ? 1 : 0;
    }
    CHECK(r.skipped_steps == backoffs);
    CHECK(r.skipped_steps >= 4);
    // Measured 1.3e-6, 7.2e-6 and 3.0e-5: PyTorch keeps cnn's BatchNorm and pooling after a
    // float16 Conv in float16, onnxdp in float32.
    const double tol = name == "mlp" ? 3e-6 : name == "tiny_lm" ? 3e-5 : 1e-4;
    double worst = 0, fp32_gap = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(r.losses[i] - want[i]) / want[i]);
      fp32_gap = std::max(fp32_gap, std::abs(fp32[i] - want[i]) / want[i]);
    }
    INFO("largest relative difference to autocast + GradScaler " << worst << ", float32 AdamW's " << fp32_gap);
    CHECK(worst <= tol);
    CHECK(fp32_gap > 20 * tol);  // skipped steps and float16 products: far from float32 training
  }
}

// On the emulated CUDA device the optimizer kernel takes the skip decision: the same steps as the
// CPU's. Over two replicas each replica's backward computes its share of the step's mean (half the
// values of one device's), so float16 overflows at twice the scale and the skipped steps may differ
// from one device's; the replicas still decide alike (the all-reduced gradients are the same on
// each), which the emulated pair and the CPU pair agreeing shows.
TEST_CASE("train: --mixed-precision fp16 on the emulated CUDA device and over two replicas") {
  TrainOptions o = fp16_options("mlp");
  const TrainResult cpu = train(o);
  o.devices = "cpu:2";
  const TrainResult cpu2 = train(o);
  REQUIRE(cpu2.losses.size() == cpu.losses.size());
  CHECK(cpu2.skipped_steps >= 4);
  for (size_t i = 0; i < cpu.losses.size(); ++i) CHECK(cpu2.losses[i] == doctest::Approx(cpu.losses[i]).epsilon(1e-2));
#if defined(ONNXDP_HAVE_CUDA)
  for (const auto& [devices, want] : {std::pair<std::string, const TrainResult*>{"cuda-emulated", &cpu},
                                      std::pair<std::string, const TrainResult*>{"cuda-emulated:2", &cpu2}}) {
    CAPTURE(devices);
    o.devices = devices;
    const TrainResult r = train(o);
    CHECK(r.loss_scales == want->loss_scales);
    CHECK(r.skipped_steps == want->skipped_steps);
    REQUIRE(r.losses.size() == want->losses.size());
    for (size_t i = 0; i < r.losses.size(); ++i) CHECK(r.losses[i] == doctest::Approx(want->losses[i]).epsilon(1e-5));
  }
#endif
}

// Each replica's kernels split their loops over a thread team of the replica's own thread: with
// OMP_NUM_THREADS=4, two replicas get two threads each. They train as replicas of one thread do
// (the thread count may change only the rounding of per-thread partial sums).
TEST_CASE("train: two replicas of two threads each train as two of one thread") {
  for (const char* name : {"mlp", "tiny_lm"}) {
    CAPTURE(name);
    TrainOptions o = fp16_options(name);
    o.mixed_precision = "no";
    o.devices = "cpu:2";
    const char* env = std::getenv("OMP_NUM_THREADS");
    const std::string saved = env ? env : "";
    setenv("OMP_NUM_THREADS", "2", 1);
    const TrainResult one = train(o);
    setenv("OMP_NUM_THREADS", "4", 1);
    const TrainResult two = train(o);
    if (env) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
    else unsetenv("OMP_NUM_THREADS");
    REQUIRE(one.losses.size() == two.losses.size());
    REQUIRE(one.losses.size() >= 10);
    for (size_t i = 0; i < one.losses.size(); ++i) CHECK(two.losses[i] == doctest::Approx(one.losses[i]).epsilon(1e-5));
  }
}

TEST_CASE("train: --mixed-precision fp16 resumes with its loss scale and growth count") {
  fs::path d = scratch("fp16_resume");
  TrainOptions straight = fp16_options("mlp");
  const TrainResult a = train(straight);
  TrainOptions first = fp16_options("mlp");
  first.checkpoint_dir = (d / "b").string();
  first.steps = 11;  // the scale grew at step 9 and has had two good steps since
  const TrainResult b1 = train(first);
  TrainOptions second = fp16_options("mlp");
  second.checkpoint_dir = first.checkpoint_dir;
  second.resume = true;
  const TrainResult b2 = train(second);
  REQUIRE(b2.first_step == 12);
  std::vector<float> losses = b1.losses, scales = b1.loss_scales;
  losses.insert(losses.end(), b2.losses.begin(), b2.losses.end());
  scales.insert(scales.end(), b2.loss_scales.begin(), b2.loss_scales.end());
  CHECK(losses == a.losses);
  CHECK(scales == a.loss_scales);
  CHECK(b1.skipped_steps + b2.skipped_steps == a.skipped_steps);
}

namespace {
// y = Sqrt(x W) with W [2, 2]: rows of x that are 0 give y = 0 and a NaN gradient for W (x's 0
// times Sqrt's infinite slope at 0) whatever the loss scale, with a finite loss.
void write_sqrt_model(const std::string& path) {
  onnxdp::test::write_tiny_model(path, 2, {0.5f, -0.25f, 0.75f, 1.0f}, "Sqrt");
}
}  // namespace

TEST_CASE("train: --mixed-precision fp16 stops with a clear error when gradients stay non-finite, bad scaler options") {
  fs::path d = scratch("fp16_nan");
  TrainOptions o;
  o.model = (d / "m.onnx").string();
  write_sqrt_model(o.model);
  Tensor x(DType::f32, {4, 2}), label(DType::f32, {4, 2});
  for (int64_t i = 0; i < 8; ++i) label.as<float>()[i] = 1.0f;  // x: all rows 0
  o.data = (d / "m.npz").string();
  write_npz(o.data, {{"x", x}, {"label", label}});
  o.loss = LossKind::mse;
  o.batch_size = 4;
  o.steps = 50;
  o.quiet = true;
  o.mixed_precision = "fp16";
  o.loss_scale.init = 8;  // 8, 4, 2, 1: four skipped steps, then the scale would fall below 1
  o.output_dir = (d / "run").string();
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("gradients were not finite at step 4 even with the loss scale down to 1"),
                       Error);
  CHECK(fs::exists(o.output_dir));
  o.mixed_precision = "no";  // float32: the NaN gradient reaches the parameters, the next loss stops the run
  o.output_dir = (d / "run32").string();
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("the loss is NaN at step 2"), Error);
  o.mixed_precision = "fp16";
  o.output_dir = (d / "bad").string();
  o.loss_scale.init = 0;
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("--loss-scale-init must be"), Error);
  o.loss_scale.init = 65536;
  o.loss_scale.growth_interval = 0;
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("--loss-scale-growth-interval must be"), Error);
  o.loss_scale.growth_interval = 2000;
  o.mixed_precision = "fp8";
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("expected no, bf16 or fp16"), Error);
  CHECK(!fs::exists(o.output_dir));  // refused before anything is written
}

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
    for (const std::string& key : {"exp_avg/" + p, "exp_avg_sq/" + p}) {
      CAPTURE(key);
      REQUIRE(sa.count(key));
      REQUIRE(sb.count(key));
      CHECK(sa.at(key).shape() == a.parameters.at(p).shape());
      CHECK(std::memcmp(sa.at(key).data(), sb.at(key).data(), sa.at(key).nbytes()) == 0);
    }
  // A checkpoint whose optimizer state lacks a tensor is refused by name (its state without the
  // recorded checksums, as an older onnxdp wrote it: else the changed file fails verification first).
  sb.erase("exp_avg/" + a.trainable[0]);
  write_safetensors((d / "b" / "checkpoint-20" / "optimizer.safetensors").string(), sb);
  for (const char* ckpt : {"checkpoint-10", "checkpoint-20"}) {
    const fs::path state = d / "b" / ckpt / "trainer_state.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(state));
    j.erase("files");
    std::ofstream(state, std::ios::trunc) << j.dump(2);
  }
  TrainOptions third = base((d / "b").string());
  third.resume = true;
  third.steps = 25;
  const std::string why = "optimizer state 'exp_avg/" + a.trainable[0] + "' is missing";
  CHECK_THROWS_WITH_AS(train(third), doctest::Contains(why.c_str()), Error);
}

// Checkpoints verify themselves (train/checkpoint.h): flipped bytes in a tensor file, an empty
// trainer_state.json (a disk that filled) or a negative data cursor make --resume fall back to the
// newest checkpoint that verifies, naming the rejected one and why, and the run then ends exactly
// as an uninterrupted one; with none left that verifies, an error.
TEST_CASE("train: --resume falls back past a checkpoint that does not verify, and ends as an uninterrupted run") {
  fs::path d = scratch("verify");
  auto base = [&](const std::string& ckpt, int64_t steps) {
    TrainOptions o;
    o.model = model_path("mlp");
    o.batch_size = 128;
    o.steps = steps;
    o.seed = 5;
    o.quiet = true;
    o.checkpoint_dir = ckpt;
    o.checkpoint_every = 2;
    return o;
  };
  const TrainResult straight = train(base((d / "straight").string(), 8));
  struct Damage {
    std::string name, why;
    std::function<void(const fs::path&)> apply;
  };
  const std::vector<Damage> damages = {
      {"flipped byte", "not the file that was written",
       [](const fs::path& c) {
         std::fstream f(c / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(-5, std::ios::end);
         char b = 0;
         f.read(&b, 1);
         b = char(b ^ 0x40);
         f.seekp(-5, std::ios::end);
         f.write(&b, 1);
       }},
      {"empty state", "bad trainer_state.json", [](const fs::path& c) { std::ofstream(c / "trainer_state.json", std::ios::trunc); }},
      {"negative cursor", "'cursor'", [](const fs::path& c) {
         nlohmann::json j = nlohmann::json::parse(std::ifstream(c / "trainer_state.json"));
         j["cursor"] = -5;
         std::ofstream(c / "trainer_state.json", std::ios::trunc) << j.dump(2);
       }}};
  for (const Damage& damage : damages) {
    CAPTURE(damage.name);
    const fs::path dir = d / ("run_" + std::to_string(&damage - damages.data()));
    train(base(dir.string(), 6));  // checkpoints 2, 4, 6
    damage.apply(dir / "checkpoint-6");
    // The damaged checkpoint is rejected with its reason (the resume below writes a new checkpoint-6).
    CHECK_THROWS_WITH_AS(load_checkpoint((dir / "checkpoint-6").string()), doctest::Contains(damage.why.c_str()), Error);
    TrainOptions resumed = base(dir.string(), 8);
    resumed.resume = true;
    const TrainResult r = train(resumed);
    CHECK(r.first_step == 5);  // from checkpoint-4
    REQUIRE(r.losses.size() == 4);
    for (size_t i = 0; i < 4; ++i) CHECK(r.losses[i] == straight.losses[4 + i]);
    for (const auto& [name, t] : straight.parameters)
      CHECK(std::memcmp(t.data(), r.parameters.at(name).data(), t.nbytes()) == 0);
  }
  // None verifies: an error naming each.
  const fs::path none = d / "none";
  train(base(none.string(), 2));
  std::ofstream(none / "checkpoint-2" / "trainer_state.json", std::ios::trunc);
  TrainOptions resumed = base(none.string(), 4);
  resumed.resume = true;
  CHECK_THROWS_WITH_AS(train(resumed), doctest::Contains("no checkpoint in"), Error);
}

// A run killed after a step's metrics line but before its checkpoint was complete, and one whose
// newest checkpoint does not verify, re-run steps on --resume: the metrics file then lists each
// step once, in order, as an uninterrupted run's, without a partial line left by a full disk.
TEST_CASE("train: --resume lists each step once in the metrics, after a kill or a fallback") {
  fs::path d = scratch("resume_metrics");
  auto base = [&](const std::string& name, int64_t steps) {
    TrainOptions o;
    o.model = model_path("mlp");
    o.batch_size = 128;
    o.steps = steps;
    o.seed = 3;
    o.quiet = true;
    o.checkpoint_dir = (d / name).string();
    o.checkpoint_every = 2;
    o.metrics = (d / name / "metrics.jsonl").string();
    fs::create_directories(d / name);
    return o;
  };
  auto steps_and_losses = [](const fs::path& metrics) {
    std::vector<std::pair<int64_t, double>> out;
    std::ifstream f(metrics);
    for (std::string line; std::getline(f, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);  // a partial line fails the test here
      out.emplace_back(j.at("step").get<int64_t>(), j.at("loss").get<double>());
    }
    return out;
  };
  train(base("straight", 8));
  const auto want = steps_and_losses(d / "straight" / "metrics.jsonl");
  REQUIRE(want.size() == 8);
  for (const std::string how : {"killed", "fallback"}) {
    CAPTURE(how);
    train(base(how, 6));  // checkpoints 2, 4, 6; metrics of steps 1..6
    const fs::path run = d / how;
    if (how == "killed") {
      // Killed while checkpoint-6 was written (its temporary folder is all there is of it); and a
      // partial metrics line after step 6's, as a disk that filled leaves.
      fs::rename(run / "checkpoint-6", run / ".checkpoint-6.tmp");
      std::ofstream(run / "metrics.jsonl", std::ios::app) << "{\"comm_wait_ms\":0.0,\"epo";
    } else {
      std::ofstream(run / "checkpoint-6" / "trainer_state.json", std::ios::trunc);  // does not verify
    }
    TrainOptions resumed = base(how, 8);
    resumed.resume = true;
    CHECK(train(resumed).first_step == 5);
    CHECK(steps_and_losses(run / "metrics.jsonl") == want);
  }
}

// A metrics line that cannot be written (a full disk: /dev/full) stops the run naming the file.
TEST_CASE("train: a metrics file on a full disk is an error naming it") {
  TrainOptions o;
  o.model = model_path("mlp");
  o.steps = 2;
  o.quiet = true;
  o.metrics = "/dev/full";
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("metrics file '/dev/full'"), Error);
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
  SUBCASE("an epoch's last batch too small for the replicas is found before step 1") {
    o.devices = "cpu:4";
    o.batch_size = 1498;  // 1500 samples: the epoch's second step has 2 rows, for 4 replicas
    CHECK_THROWS_WITH_AS(train(o), doctest::Contains("the last step of each epoch has 2 rows"), Error);
    o.grad_accum = 2;  // micro-batches of 749 then 749, the epoch's last step 1500 % 1498 = 2 rows
    o.batch_size = 749;
    CHECK_THROWS_WITH_AS(train(o), doctest::Contains("micro-batch of 2 rows cannot be split over 4 replicas"), Error);
    o.drop_last = true;  // the short step is dropped: nothing to refuse
    CHECK(train(o).losses.size() == 1);
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

// rope_lm is torch.onnx.export(dynamo=True)'s output for a LLaMA-style model. Its file holds
// constants as initializers (the Pow exponent of RMSNorm, RoPE's cos / sin tables, attention's
// scale), and one initializer for all five RMSNorm weights, which the exporter merged because they
// start equal. PyTorch trains neither the constants (training the exponent gives NaN at step 2) nor
// the five weights as one; importer/export_metadata.h tells them apart. The losses agree to ~1e-7.
TEST_CASE("train: rope_lm (dynamo export: RMSNorm, rotary, SDPA, SwiGLU) per-step losses equal PyTorch's") {
  check_against_torch("rope_lm", 1e-5);
  // The trained model has the five RMSNorm weights apart, each used by one node, all moved apart.
  const onnx::ModelProto saved = load_model_proto((fs::temp_directory_path() / "onnxdp_test_trainer_torch_rope_lm" /
                                                   "adamw.onnx").string());
  std::vector<std::vector<double>> norms;
  for (const char* name : {"blocks.0.attn_norm.weight", "blocks.0.mlp_norm.weight", "blocks.1.attn_norm.weight",
                           "blocks.1.mlp_norm.weight", "norm.weight"}) {
    CAPTURE(name);
    int uses = 0;
    for (const auto& n : saved.graph().node())
      for (const auto& in : n.input()) uses += in == name;
    CHECK(uses == 1);
    for (const auto& t : saved.graph().initializer())
      if (t.name() == name) norms.push_back(tensor_from_proto(t, "").to_f64());
  }
  REQUIRE(norms.size() == 5);
  for (size_t i = 1; i < norms.size(); ++i) CHECK(norms[i] != norms[0]);
}

TEST_CASE("train: cnn (training-mode BatchNorm, pools, Dropout) per-step losses and BN statistics equal PyTorch's") {
  // The reference applies onnxdp's Dropout masks (models/make_train_refs.py re-implements them).
  // bn1 and bn2's running_mean and running_var after SGD, their running_var after AdamW.
  CHECK(check_against_torch("cnn") == 6);
}

namespace {

// One training-mode BatchNormalization (momentum 0.7) on x [batch, C, ...]: y = BN(x), trained by
// mse towards a label; initializers s, b (trained), rm = 0.5 + c / 4 and rv = 2 + c / 4 (running).
void write_bn_model(const std::string& path, const Shape& sample) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(15);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("bn");
  auto io = [&](onnx::ValueInfoProto* vi, const char* name) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    for (int64_t d : sample) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  auto init = [&](const char* name, float v) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(sample[0]);
    for (int64_t c = 0; c < sample[0]; ++c) t->add_float_data(v + 0.25f * float(c));
  };
  init("s", 1);
  init("b", 0);
  init("rm", 0.5f);
  init("rv", 2);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("BatchNormalization");
  n->set_name("bn");
  for (const char* i : {"x", "s", "b", "rm", "rv"}) n->add_input(i);
  for (const char* o : {"y", "rm_out", "rv_out"}) n->add_output(o);
  auto* a = n->add_attribute();
  a->set_name("momentum");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(0.7f);
  a = n->add_attribute();
  a->set_name("training_mode");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(1);
  std::ofstream f(path, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&f));
}

}  // namespace

// PyTorch's BatchNorm (and SyncBatchNorm) updates running_var with the unbiased batch variance
// (times n / (n - 1), n = N * spatial elements per channel of the whole batch), ONNX's op with the
// biased one; onnxdp trains as PyTorch. The expected running statistics are computed here from the
// rows of each batch: on one device (the node's kernel), over two replicas (global BN from ordinary
// ops and all-reduces; --local-bn: each replica's own rows, the replicas' statistics averaged) and
// on the emulated CUDA device (the CUDA kernel's body), with batches whose n is 1 (no unbiased
// variance: the biased 0 is used, where PyTorch gives NaN or refuses the batch) and with
// --grad-accum (each micro-batch updates the statistics with its own, as in PyTorch).
TEST_CASE("train: BatchNorm running_var takes the unbiased batch variance, as PyTorch, on every device kind") {
  fs::path d = scratch("bn_unbiased");
  struct Case {
    const char* what;
    Shape sample;  // [C, spatial..]
    int64_t samples, batch, grad_accum, steps;
    std::vector<std::pair<int64_t, int64_t>> batches;  // (first row, rows) of each BN batch, in order
    bool one_replica;  // a batch of 1 row cannot be split over 2 replicas
  };
  const std::vector<Case> cases = {
      {"spatial, uneven batches (n = 9, 9, 6)", {2, 3}, 8, 3, 1, 3, {{0, 3}, {3, 3}, {6, 2}}, false},
      {"[N, C] (n = 2, 2, 2)", {2}, 6, 2, 1, 3, {{0, 2}, {2, 2}, {4, 2}}, false},
      {"[N, C], a last batch of one row (n = 3, 1)", {2}, 4, 3, 1, 2, {{0, 3}, {3, 1}}, true},
      {"--grad-accum 2 (n = 4 per micro-batch)", {2, 2}, 8, 2, 2, 2, {{0, 2}, {2, 2}, {4, 2}, {6, 2}}, false},
  };
  struct Run {
    std::string devices;
    bool local_bn;
  };
  std::vector<Run> runs = {{"cpu", false}, {"cpu:2", false}, {"cpu:2", true}};
#if defined(ONNXDP_HAVE_CUDA)
  runs.push_back({"cuda-emulated", false});
  runs.push_back({"cuda-emulated:2", false});
#endif
  for (const Case& c : cases) {
    CAPTURE(std::string(c.what));
    const std::string model = (d / "bn.onnx").string(), data = (d / "bn.npz").string();
    write_bn_model(model, c.sample);
    Shape xs = c.sample;
    xs.insert(xs.begin(), c.samples);
    Tensor x(DType::f32, xs), label(DType::f32, xs);
    for (int64_t i = 0; i < x.numel(); ++i) {
      x.as<float>()[i] = float(std::sin(0.9 * double(i)) * 3 + 0.1 * double(i));
      label.as<float>()[i] = 0.5f;
    }
    write_npz(data, {{"x", x}, {"label", label}});
    const int64_t C = c.sample[0], S = shape_numel(c.sample) / C;
    // Channel ch's batch mean and variance (unbiased; 0 for a single element) over `rows` rows.
    auto stats = [&](int64_t first, int64_t rows, int64_t ch) {
      auto at = [&](int64_t r, int64_t i) { return double(x.as<float>()[((first + r) * C + ch) * S + i]); };
      const int64_t n = rows * S;
      double sum = 0, ss = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < S; ++i) sum += at(r, i);
      const double mean = sum / double(n);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < S; ++i) ss += (at(r, i) - mean) * (at(r, i) - mean);
      return std::pair<double, double>(mean, n > 1 ? ss / double(n - 1) : 0.0);
    };
    for (const Run& run : runs) {
      if (c.one_replica && run.devices.back() == '2') continue;
      CAPTURE(run.devices);
      CAPTURE(run.local_bn);
      // The expected running statistics, in double: each batch's statistics over its rows, or with
      // --local-bn the average of the statistics over each replica's rows.
      const int world = run.devices.back() == '2' ? 2 : 1;
      std::vector<double> rm(static_cast<size_t>(C)), rv(static_cast<size_t>(C));
      for (int64_t ch = 0; ch < C; ++ch) {
        rm[size_t(ch)] = 0.5 + 0.25 * double(ch);
        rv[size_t(ch)] = 2 + 0.25 * double(ch);
      }
      const double mom = double(0.7f);
      for (auto [first, rows] : c.batches)
        for (int64_t ch = 0; ch < C; ++ch) {
          double mean = 0, var = 0;
          if (run.local_bn) {
            for (int r = 0; r < world; ++r) {
              auto [m, v] = stats(first + shard_offset(rows, world, r), shard_rows(rows, world)[size_t(r)], ch);
              mean += m / world;
              var += v / world;
            }
          } else {
            std::tie(mean, var) = stats(first, rows, ch);
          }
          rm[size_t(ch)] = rm[size_t(ch)] * mom + mean * (1 - mom);
          rv[size_t(ch)] = rv[size_t(ch)] * mom + var * (1 - mom);
        }
      TrainOptions o;
      o.model = model;
      o.data = data;
      o.loss = LossKind::mse;
      o.batch_size = c.batch;
      o.grad_accum = c.grad_accum;
      o.steps = c.steps;
      o.shuffle = false;
      o.quiet = true;
      o.devices = run.devices;
      o.local_bn = run.local_bn;
      o.optimizer.kind = OptimizerKind::sgd;
      o.optimizer.lr = 0.1f;
      TrainResult r = train(o);
      REQUIRE(r.losses.size() == size_t(c.steps));
      const Tensor &got_rm = r.parameters.at("rm"), &got_rv = r.parameters.at("rv");
      for (int64_t ch = 0; ch < C; ++ch) {
        CAPTURE(ch);
        CHECK(got_rm.as<float>()[ch] == doctest::Approx(rm[size_t(ch)]).epsilon(1e-6));
        CHECK(got_rv.as<float>()[ch] == doctest::Approx(rv[size_t(ch)]).epsilon(1e-6));
      }
    }
  }
}
