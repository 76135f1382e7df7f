// --zero-stage 1 (ZeRO-1: the optimizer state sharded over the replicas) trains as the unsharded
// run of the same world: per-step losses and final parameters to 1e-6 relative, on 2 and 4 CPU
// replicas, with AdamW and gradient clipping (the norm is summed over the replicas' parts), SGD
// with momentum, BatchNorm, --grad-accum; each replica holds 1/N of the optimizer state; the
// checkpoints hold the whole state, so a run resumes with another world size; the training graph's
// buckets are ReduceScatter nodes. (mpirun -np 2: tests/scripts/mpi_train.py.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "graph/error.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

std::string model_path(const std::string& name) { return std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/model.onnx"; }

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("onnxdp_test_zero_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TrainOptions options(const std::string& model, const std::string& devices, const std::string& optimizer) {
  TrainOptions o;
  o.model = model_path(model);
  o.devices = devices;
  o.batch_size = model == "tiny_lm" ? 30 : 97;  // mlp / cnn: 1500 samples, a partial batch of 45 rows at step 16
  o.steps = 18;
  o.seed = 3;
  o.quiet = true;
  o.optimizer.kind = optimizer_kind_from_name(optimizer);
  o.optimizer.lr = optimizer == "momentum" ? 0.05f : 3e-3f;
  o.optimizer.max_grad_norm = optimizer == "adamw" ? 0.5f : 0.0f;  // clipped steps need the whole norm
  return o;
}

// Losses within rtol; parameters within rtol and atol (near-zero elements differ absolutely
// where the compared runs sum in other orders: another device's GEMMs).
void check_same(const TrainResult& sharded, const TrainResult& plain, double rtol, double atol = 1e-9) {
  REQUIRE(sharded.losses.size() == plain.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(double(sharded.losses[i]) - double(plain.losses[i])) <= rtol * std::abs(double(plain.losses[i])));
  }
  REQUIRE(sharded.parameters.size() == plain.parameters.size());
  for (const auto& [name, t] : plain.parameters) {
    CAPTURE(name);
    const std::vector<double> a = sharded.parameters.at(name).to_f64(), b = t.to_f64();
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]) - rtol * std::abs(b[k]));
    CHECK(worst <= atol);
  }
}

}  // namespace

TEST_CASE("zero: --zero-stage 1 trains as the unsharded run on 2 and 4 CPU replicas, with 1/N of the optimizer state") {
  struct Case {
    const char* model;
    const char* optimizer;
    int64_t grad_accum;
  };
  for (const Case c : {Case{"mlp", "adamw", 1}, Case{"mlp", "momentum", 2}, Case{"cnn", "adamw", 1},
                       Case{"tiny_lm", "adamw", 1}}) {
    for (const char* devices : {"cpu:2", "cpu:4"}) {
      CAPTURE(std::string(c.model));
      CAPTURE(std::string(c.optimizer));
      CAPTURE(c.grad_accum);
      CAPTURE(std::string(devices));
      TrainOptions o = options(c.model, devices, c.optimizer);
      o.grad_accum = c.grad_accum;
      if (c.grad_accum > 1) o.batch_size = 48;
      const TrainResult plain = train(o);
      o.zero_stage = 1;
      const TrainResult sharded = train(o);
      check_same(sharded, plain, 1e-6);
      // Replica 0's part is ceil(floats / N) rounded up to the tensor alignment (16 floats).
      const int n = devices == std::string("cpu:2") ? 2 : 4;
      const size_t whole = plain.optimizer_state_bytes;
      REQUIRE(whole > 0);
      CHECK(sharded.optimizer_state_bytes >= whole / size_t(n));
      CHECK(sharded.optimizer_state_bytes <= whole / size_t(n) + 2 * 16 * sizeof(float) * 2);
    }
  }
}

TEST_CASE("zero: the training graph's gradient buckets are ReduceScatter nodes") {
  TrainOptions o = options("mlp", "cpu:2", "adamw");
  o.zero_stage = 1;
  const TrainingGraph g = training_graph(o, 2, 1);
  int scatters = 0, bucket_all_reduces = 0;
  for (const Node& n : g.g.nodes) {
    if (n.name.rfind("dp/grad_bucket", 0) != 0) continue;
    scatters += n.op == Op::ReduceScatter;
    bucket_all_reduces += n.op == Op::AllReduce;
  }
  CHECK(scatters >= 1);
  CHECK(bucket_all_reduces == 0);
  o.zero_stage = 0;
  int plain = 0;
  for (const Node& n : training_graph(o, 2, 1).g.nodes) plain += n.op == Op::ReduceScatter;
  CHECK(plain == 0);
}

TEST_CASE("zero: checkpoints hold the whole optimizer state, a run resumes on another world size") {
  fs::path d = scratch("resume");
  auto base = [&](const std::string& devices, int zero, const std::string& dir) {
    TrainOptions o = options("mlp", devices, "adamw");
    o.steps = 16;
    o.zero_stage = zero;
    o.checkpoint_dir = (d / dir).string();
    o.checkpoint_every = 8;
    return o;
  };
  // The unsharded run's checkpoint at step 16 and the sharded one's hold the same tensors.
  const TrainResult plain = train(base("cpu:2", 0, "plain"));
  const TrainResult sharded = train(base("cpu:2", 1, "sharded"));
  check_same(sharded, plain, 1e-6);
  auto sp = read_safetensors((d / "plain" / "checkpoint-16" / "optimizer.safetensors").string());
  auto ss = read_safetensors((d / "sharded" / "checkpoint-16" / "optimizer.safetensors").string());
  REQUIRE(sp.size() == 2 * plain.trainable.size());
  REQUIRE(ss.size() == sp.size());
  for (const auto& [key, t] : sp) {
    CAPTURE(key);
    REQUIRE(ss.count(key));
    const std::vector<double> a = ss.at(key).to_f64(), b = t.to_f64();
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); ++k) CHECK(a[k] == doctest::Approx(b[k]).epsilon(1e-5).scale(1e-12));
  }
  // Resumed from step 8 of the 2-replica sharded run: on 4 sharded replicas, and unsharded on one
  // device, the last 8 steps equal the uninterrupted run's (the sums' order differs with the world).
  for (const auto& [devices, zero] : {std::pair<std::string, int>{"cpu:4", 1}, {"cpu", 0}, {"cpu:2", 1}}) {
    CAPTURE(devices);
    CAPTURE(zero);
    const std::string dir = "resume_" + devices.substr(devices.find(':') + 1) + std::to_string(zero);
    fs::create_directories(d / dir);
    fs::copy(d / "sharded" / "checkpoint-8", d / dir / "checkpoint-8", fs::copy_options::recursive);
    TrainOptions o = base(devices, zero, dir);
    o.resume = true;
    const TrainResult r = train(o);
    CHECK(r.first_step == 9);
    REQUIRE(r.losses.size() == 8);
    for (size_t i = 0; i < 8; ++i) {
      CAPTURE(i);
      CHECK(r.losses[i] == doctest::Approx(sharded.losses[8 + i]).epsilon(1e-5));
    }
  }
}

// On a device the reduce-scatter, the update of the part and the parameter gather run there
// (NCCL; the emulated device through the host communicator), recorded into the step's CUDA graph
// with the rest: as the unsharded run on the same device, and as the CPU's sharded run.
#if defined(ONNXDP_HAVE_CUDA)
TEST_CASE("zero: --zero-stage 1 on the emulated CUDA device trains as unsharded, with and without CUDA graphs") {
  for (const char* devices : {"cuda-emulated:2", "cuda-emulated:4"}) {
    for (const bool graphs : {true, false}) {
      CAPTURE(std::string(devices));
      CAPTURE(graphs);
      TrainOptions o = options("mlp", devices, "adamw");
      o.steps = 8;
      o.cuda_graph = graphs;
      const TrainResult plain = train(o);
      o.zero_stage = 1;
      const TrainResult sharded = train(o);
      check_same(sharded, plain, 1e-6);
      // The gradient norm (metrics, clipping, fp16's overflow test on the host) is the whole
      // gradient's, all-reduced on the device: it was 0 before end_step read it from there.
      REQUIRE(sharded.grad_norms.size() == plain.grad_norms.size());
      for (size_t s = 0; s < plain.grad_norms.size(); ++s) {
        CAPTURE(s);
        CHECK(plain.grad_norms[s] > 0);
        CHECK(std::abs(sharded.grad_norms[s] - plain.grad_norms[s]) <= 1e-5f * plain.grad_norms[s]);
      }
      CHECK(sharded.optimizer_state_bytes * 2 <= plain.optimizer_state_bytes + 256);
      if (graphs) CHECK(sharded.replayed_plans >= 1);
      const std::string d = devices;
      o.devices = "cpu:" + d.substr(d.find(':') + 1);
      check_same(sharded, train(o), 1e-5, 1e-6);
    }
  }
}

TEST_CASE("zero: --zero-stage 1 with fp16 on the emulated device skips the overflowed steps as unsharded") {
  TrainOptions o = options("mlp", "cuda-emulated:2", "adamw");
  o.steps = 8;
  o.mixed_precision = "fp16";
  o.loss_scale.init = float(1 << 24);  // float16 overflows at first: the scale backs off, steps are skipped
  o.loss_scale.growth_interval = 3;
  const TrainResult plain = train(o);
  o.zero_stage = 1;
  const TrainResult sharded = train(o);
  CHECK(plain.skipped_steps >= 1);
  CHECK(sharded.skipped_steps == plain.skipped_steps);
  CHECK(sharded.loss_scales == plain.loss_scales);
  check_same(sharded, plain, 1e-5);
}

#endif  // ONNXDP_HAVE_CUDA

TEST_CASE("zero: bad --zero-stage values are refused by name, a world of one trains as without") {
  TrainOptions o = options("mlp", "cpu:2", "adamw");
  o.zero_stage = 2;
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("--zero-stage 2"), Error);
  o.zero_stage = 1;
  // A world of one has nothing to shard: it trains as without the option.
  o.devices = "cpu";
  o.steps = 3;
  const TrainResult one = train(o);
  o.zero_stage = 0;
  const TrainResult plain = train(o);
  check_same(one, plain, 0);
}

// --grad-dtype bf16 (DDP's bf16 compression hook): the float gradients cross the all-reduce as
// bfloat16. Its rounding shows in the losses (not equal to the fp32 run's) but stays small
// (1e-3), the buckets carry bf16 values, and the emulated device sums as the CPU does.
TEST_CASE("grad dtype: --grad-dtype bf16 all-reduces bfloat16 gradients on CPU replicas and the emulated device") {
  TrainOptions o = options("mlp", "cpu:2", "adamw");
  o.steps = 10;
  const TrainResult fp32 = train(o);
  o.grad_dtype = "bf16";
  const TrainResult bf16 = train(o);
  REQUIRE(bf16.losses.size() == fp32.losses.size());
  bool differs = false;
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(bf16.losses[i] == doctest::Approx(fp32.losses[i]).epsilon(1e-3));
    differs |= bf16.losses[i] != fp32.losses[i];
  }
  CHECK(differs);
  int bf16_buckets = 0;
  const TrainingGraph g = training_graph(o, 2, 0);
  for (const Node& n : g.g.nodes)
    if (n.name.rfind("dp/grad_bucket", 0) == 0) {
      for (ValueId v : n.inputs) CHECK(g.g.value(v).dtype == DType::bf16);
      ++bf16_buckets;
    }
  CHECK(bf16_buckets >= 1);
  o.zero_stage = 1;  // the buckets are not in the flat buffer: all-reduced, each owner's part too
  check_same(train(o), bf16, 1e-6);
  o.zero_stage = 0;
#if defined(ONNXDP_HAVE_CUDA)
  // Another device's GEMMs round the local gradients differently; bfloat16's rounding of the sums
  // can then differ by one step of its 8 bits, which AdamW carries into the parameters.
  o.devices = "cuda-emulated:2";
  check_same(train(o), bf16, 1e-4, 1e-4);
#endif
  o.grad_dtype = "fp16";
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("--grad-dtype fp16"), Error);
}

// Evaluation is split over the replicas like training (each its share of the held-out batches,
// the sums all-reduced): the same loss and accuracy as one device evaluating everything, on 3
// replicas (eval.npz's 297 samples: batches of 256 and 41, so replica 2 evaluates none).
TEST_CASE("eval: replicas share the held-out batches and report one device's loss and accuracy") {
  TrainOptions o = options("mlp", "cpu", "momentum");
  o.eval_data = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/eval.npz";
  o.eval_every = 4;
  o.steps = 8;
  const TrainResult one = train(o);
  REQUIRE(one.evaluated);
  for (const char* devices : {"cpu:2", "cpu:3"}) {
    CAPTURE(std::string(devices));
    o.devices = devices;
    const TrainResult many = train(o);
    REQUIRE(many.evaluated);
    CHECK(many.eval_loss == doctest::Approx(one.eval_loss).epsilon(1e-6));
    CHECK(many.eval_accuracy == one.eval_accuracy);
  }
}

// Issue 23's balance: every replica reports its memory (plans of training and evaluation, the
// flat state) and no replica holds more than the others (within 2 %), on CPU replicas and on the
// emulated device, with an uneven batch (97 rows: 25, 24, 24, 24) and evaluation.
TEST_CASE("memory: the replicas' reported memory is equal within 2 percent, evaluation included") {
  std::vector<std::string> kinds = {"cpu:4"};
#if defined(ONNXDP_HAVE_CUDA)
  kinds.push_back("cuda-emulated:4");
#endif
  for (const std::string& devices : kinds) {
    CAPTURE(devices);
    TrainOptions o = options("mlp", devices, "adamw");
    o.eval_data = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/eval.npz";
    o.steps = 4;
    const TrainResult r = train(o);
    REQUIRE(r.replica_bytes.size() == 4);
    const auto [lo, hi] = std::minmax_element(r.replica_bytes.begin(), r.replica_bytes.end());
    INFO("replica bytes " << *lo << " to " << *hi);
    CHECK(*lo > 0);
    CHECK(double(*hi) <= 1.02 * double(*lo));
    CHECK(r.replica_bytes[0] == r.peak_bytes);
  }
}
