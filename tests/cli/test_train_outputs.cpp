// `onnxdp train` as a user sees it: the output folder (metrics, TensorBoard events, checkpoints,
// trained model), evaluation during training, the end-of-run summary, the Hugging Face-style
// option names and --config files.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "tests/test_util.h"

using namespace onnxdp::test;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(ONNXDP_SOURCE_DIR) + "/models";

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> l;
  for (const auto& j : read_jsonl(metrics)) l.push_back(j.at("loss").get<double>());
  return l;
}

}  // namespace

TEST_CASE("cli: train --output-dir holds metrics, TensorBoard events, checkpoint and model, never overwritten") {
  TempDir tmp;
  const std::string out = tmp.file("run");
  const std::string base = "train " + q(kModels + "/mlp/model.onnx") + " --batch-size 64 --eval-data " +
                           q(kModels + "/mlp/eval.npz") + " --eval-every 5 --devices cpu:2 --output-dir " + q(out);
  CliResult r = onnxdp_cli(tmp, base + " --steps 12");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(fs::exists(out + "/model.onnx"));
  CHECK(fs::exists(out + "/checkpoint-12/model.safetensors"));
  CHECK(fs::exists(out + "/metrics.jsonl"));
  REQUIRE(fs::exists(out + "/tensorboard"));
  // The summary names where everything went, the memory and the time spent waiting on the others.
  for (const std::string& s : std::vector<std::string>{"done: 12 steps", "eval on ", "accuracy", "memory per replica", "waiting on communication",
                               "trained model: " + out + "/model.onnx", "last checkpoint: " + out + "/checkpoint-12",
                               "tensorboard --logdir " + out + "/tensorboard"}) {
    CAPTURE(s);
    CHECK(contains(r.out, s));
  }
  // The memory the plans and the flat state do not hold: host copies, data (a checkpoint writes
  // views of the optimizer state: no copy to name without --zero-stage 1).
  CHECK(std::regex_search(r.out, std::regex("host memory besides: frozen parameters and running statistics 0\\.0 MB, "
                                            "data held [0-9.]+ MB \\(one copy per process\\)\n")));
  // The time reads in ms below a second, never as "0.0 s".
  CHECK(std::regex_search(r.out, std::regex("done: 12 steps in ([0-9]+ ms|[0-9]+\\.[0-9] s), final loss")));
  CHECK_FALSE(contains(r.out, "in 0.0 s"));
  // Evaluation at steps 5, 10 and the last one, in the metrics and in the output.
  auto lines = read_jsonl(out + "/metrics.jsonl");
  REQUIRE(lines.size() == 12);
  double previous_time = 0;
  for (const auto& j : lines) {
    const int64_t step = j.at("step").get<int64_t>();
    CAPTURE(step);
    const bool evaluated = step % 5 == 0 || step == 12;
    CHECK(j.contains("eval_loss") == evaluated);
    CHECK(j.contains("eval_accuracy") == evaluated);
    if (evaluated) CHECK(j.at("eval_accuracy").get<double>() > 0.1);
    CHECK(j.at("memory_mib").get<double>() > 0);  // the replica's memory, also in the start line
    // Seconds since the loop started, growing step by step.
    const double time_s = j.at("time_s").get<double>();
    CHECK(time_s > previous_time);
    previous_time = time_s;
  }
  CHECK(contains(r.out, "onnxdp train: the CPU holds "));
  CHECK(contains(r.out, "eval at step 5:"));
  CHECK(contains(r.out, "eval at step 10:"));
  // The TensorBoard file reads back with the tensorboard package: every training tag, 12 points.
  const std::string tb = "python3 " + q(std::string(ONNXDP_SOURCE_DIR) + "/tests/scripts/tensorboard_readback.py") +
                         " " + q(out + "/tensorboard") + " > " + q(tmp.file("tb.txt")) + " 2>&1";
  REQUIRE(std::system(tb.c_str()) == 0);
  const std::string facts = read_text(tmp.file("tb.txt"));
  INFO(facts);
  for (const char* tag : {"train/loss", "train/learning_rate", "train/grad_norm", "perf/samples_per_s", "perf/comm_wait_ms",
                          "perf/memory_mib"}) {
    CAPTURE(tag);
    CHECK(contains(facts, std::string("scalar ") + tag + " 12 "));
  }
  CHECK(contains(facts, "scalar eval/accuracy 10 "));

  // A second run into the same folder stops before step 1 and leaves the checkpoint alone.
  const std::string before = read_text(out + "/checkpoint-12/model.safetensors");
  r = onnxdp_cli(tmp, base + " --steps 12");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "already holds checkpoints"));
  CHECK(contains(r.err, "--resume"));
  CHECK(read_text(out + "/checkpoint-12/model.safetensors") == before);
  // --resume continues it: steps 13..20 appended to the same metrics.
  r = onnxdp_cli(tmp, base + " --steps 20 --resume");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(fs::exists(out + "/checkpoint-20/model.safetensors"));
  CHECK(read_jsonl(out + "/metrics.jsonl").size() == 20);
}

TEST_CASE("cli: without --output-dir runs go to runs/<model>, then runs/<model>-2") {
  TempDir tmp;
  const std::string args = "train " + q(kModels + "/tiny_lm/model.onnx") + " --steps 2 --batch-size 8 --quiet";
  REQUIRE(onnxdp_cli(tmp, args, tmp.path.string()).rc == 0);
  CHECK(fs::exists(tmp.file("runs/tiny_lm/model.onnx")));
  CHECK(fs::exists(tmp.file("runs/tiny_lm/checkpoint-2")));
  REQUIRE(onnxdp_cli(tmp, args, tmp.path.string()).rc == 0);
  CHECK(fs::exists(tmp.file("runs/tiny_lm-2/model.onnx")));
  CHECK(fs::exists(tmp.file("runs/tiny_lm/checkpoint-2")));
}

TEST_CASE("cli: Hugging Face-style names and a --config file train exactly as the long names") {
  TempDir tmp;
  const std::string model = q(kModels + "/mlp/model.onnx");
  auto run = [&](const std::string& name, const std::string& extra) {
    CliResult r = onnxdp_cli(tmp, "train " + model + " --quiet --seed 4 --output-dir " + q(tmp.file(name)) + " " + extra);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    return losses(tmp.file(name + "/metrics.jsonl"));
  };
  // 6 steps of 2 micro-batches of 32 rows, lr 3e-3.
  std::vector<double> a = run("long", "--lr 3e-3 --steps 6 --batch-size 32 --grad-accum 2");
  // 16 rows per replica on 2 replicas = the same global micro-batch of 32.
  std::vector<double> b = run("hf", "--learning-rate 3e-3 --max-steps 6 --per-device-train-batch-size 16 "
                                    "--gradient-accumulation-steps 2 --devices cpu:2");
  {
    std::ofstream f(tmp.file("c.toml"));
    f << "# as a Hugging Face user would write it\nlearning_rate = 3e-3\nmax_steps = 6\n"
         "[train]\nper_device_train_batch_size = 16\ngradient-accumulation-steps = 2\ndevices = \"cpu:2\"\n";
  }
  std::vector<double> c = run("config", "--config " + q(tmp.file("c.toml")));
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  REQUIRE(c.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-5));
    CHECK(c[i] == doctest::Approx(b[i]).epsilon(1e-6));
  }
  // The command line wins over the file.
  std::vector<double> d = run("override", "--config " + q(tmp.file("c.toml")) + " --max-steps 3");
  CHECK(d.size() == 3);
  // --num-train-epochs is --epochs: 1500 samples in batches of 500 = 3 steps.
  CHECK(run("epochs", "--num-train-epochs 1 --batch-size 500").size() == 3);
}

TEST_CASE("cli: train option errors name the option") {
  TempDir tmp;
  const std::string base = "train " + q(kModels + "/mlp/model.onnx") + " --steps 1 --output-dir " + q(tmp.file("o"));
  CliResult r = onnxdp_cli(tmp, base + " --eval-every 5");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "--eval-every needs --eval-data"));
  r = onnxdp_cli(tmp, base + " --report-to wandb");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "'wandb' is not one of jsonl, tensorboard, none"));
  r = onnxdp_cli(tmp, base + " --grad-accum 0");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "--grad-accum must be at least 1"));
  {
    std::ofstream f(tmp.file("bad.toml"));
    f << "learning_rat = 0.1\n";
  }
  r = onnxdp_cli(tmp, base + " --config " + q(tmp.file("bad.toml")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "unknown key 'learning_rat'"));
}

// --mixed-precision fp16 as a user sees it: both --loss-scale-* options reach the scaler, every
// metrics line holds the step's loss scale and whether the step was skipped, TensorBoard has
// train/loss_scale, and the summary counts the skipped steps.
TEST_CASE("cli: train --mixed-precision fp16 reports the loss scale and skipped steps") {
  TempDir tmp;
  const std::string base = "train " + q(kModels + "/mlp/model.onnx") + " --mixed-precision fp16 --no-shuffle --steps 4 ";
  // 2^24 overflows float16 on mlp's first steps: each is skipped and halves the scale.
  CliResult r = onnxdp_cli(tmp, base + "--loss-scale-init 16777216 --output-dir " + q(tmp.file("big")));
  INFO(r.err);
  REQUIRE(r.rc == 0);
  auto lines = read_jsonl(tmp.file("big") + "/metrics.jsonl");
  REQUIRE(lines.size() == 4);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(lines[i].at("loss_scale").get<double>() == std::ldexp(1.0, 24 - int(i)));
    CHECK(lines[i].at("skipped").get<bool>());
    CHECK(lines[i].at("grad_norm").is_null());  // not finite
  }
  CHECK(contains(r.out, "dynamic loss scale from 16777216"));
  CHECK(contains(r.out, "float16 loss scaling: 4 of 4 steps skipped"));
  // From 1 with a growth interval of 1: no overflow, the scale doubles after every step.
  r = onnxdp_cli(tmp, base + "--loss-scale-init 1 --loss-scale-growth-interval 1 --output-dir " + q(tmp.file("grow")));
  INFO(r.err);
  REQUIRE(r.rc == 0);
  lines = read_jsonl(tmp.file("grow") + "/metrics.jsonl");
  REQUIRE(lines.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(lines[i].at("loss_scale").get<double>() == std::ldexp(1.0, int(i)));
    CHECK(!lines[i].at("skipped").get<bool>());
    CHECK(lines[i].at("grad_norm").get<double>() > 0);
  }
  CHECK(contains(r.out, "float16 loss scaling: 0 of 4 steps skipped (gradients not finite), loss scale now 16"));
  const std::string tb = "python3 " + q(std::string(ONNXDP_SOURCE_DIR) + "/tests/scripts/tensorboard_readback.py") +
                         " " + q(tmp.file("grow") + "/tensorboard") + " > " + q(tmp.file("tb.txt")) + " 2>&1";
  REQUIRE(std::system(tb.c_str()) == 0);
  CHECK(contains(read_text(tmp.file("tb.txt")), "scalar train/loss_scale 4 "));
  // Without fp16 the metrics have no scaler fields.
  r = onnxdp_cli(tmp, "train " + q(kModels + "/mlp/model.onnx") + " --steps 1 --output-dir " + q(tmp.file("f32")));
  REQUIRE(r.rc == 0);
  CHECK(!read_jsonl(tmp.file("f32") + "/metrics.jsonl").at(0).contains("loss_scale"));
  CHECK(!contains(r.out, "loss scaling"));
}
