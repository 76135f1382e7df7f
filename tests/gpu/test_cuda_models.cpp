// The sample models trained on a GPU (--devices cuda) against the CPU: per-step losses within 1e-4
// relative (fp32; cuBLAS and the CPU's BLAS sum in different orders), and the trained parameters
// close. Suite "gpu": without a GPU each case prints "no GPU: <reason> -- CUDA kernel test SKIPPED"
// and gpu.cuda_kernels reports Skipped. tests/exec/test_device_plan.cpp runs the same comparison on
// the emulated device here; this is the one that runs the device code.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/gpu/cuda_test_util.h"

#include <cmath>
#include <cstring>

#include "exec/cuda/elementwise.h"
#include "tests/train_util.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::have_gpu;
using onnxdp::test::momentum_run;

namespace {

// Steps whose loss differs by more than 1e-4 relative; parameters off by more than 1e-3 relative.
void check_close_training(const TrainResult& cpu, const TrainResult& gpu, const std::string& what) {
  REQUIRE(cpu.losses.size() == gpu.losses.size());
  int bad_steps = 0;
  for (size_t s = 0; s < cpu.losses.size(); ++s)
    bad_steps += !(std::abs(cpu.losses[s] - gpu.losses[s]) <= 1e-4f * std::abs(cpu.losses[s]) + 1e-6f);
  CHECK_MESSAGE(bad_steps == 0, what << ": first loss cpu " << cpu.losses[0] << " gpu " << gpu.losses[0]
                                     << ", last cpu " << cpu.losses.back() << " gpu " << gpu.losses.back());
  for (const auto& [name, t] : cpu.parameters) {
    const Tensor& u = gpu.parameters.at(name);
    int bad = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float x = t.as<float>()[i], y = u.as<float>()[i];
      bad += !(std::abs(x - y) <= 1e-3f * std::abs(x) + 1e-5f);
    }
    CHECK_MESSAGE(bad == 0, what << ": parameter " << name);
  }
  MESSAGE("cuda model on GPU: " << what << ": " << cpu.losses.size() << " steps match the CPU");
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("cuda models: mlp, tiny_lm, cnn and mlp_dynamo train on cuda:0 as on the CPU") {
    if (!have_gpu()) return;
    struct Case {
      const char* model;
      int64_t batch;
    };
    for (Case c : {Case{"mlp", 97}, Case{"tiny_lm", 30}, Case{"cnn", 50}, Case{"mlp_dynamo", 97}}) {
      TrainOptions o = momentum_run(c.model, c.batch, 20, 7);
      TrainResult cpu = train(o);
      o.devices = "cuda:0";
      TrainResult gpu = train(o);
      CHECK(gpu.device_bytes > 0);
      check_close_training(cpu, gpu, c.model);
    }
  }

  // bfloat16 products round to 8 bits: the GPU's and the CPU's float sums in different orders can
  // round a product differently now and then, so 1e-2 on the losses and every op on the device.
  TEST_CASE("cuda models: --mixed-precision bf16 trains on cuda:0 as on the CPU") {
    if (!have_gpu()) return;
    for (const char* model : {"mlp", "tiny_lm", "cnn"}) {
      const std::string model_name = model;
      CAPTURE(model_name);
      TrainOptions o = momentum_run(model, 32, 20, 7);
      o.mixed_precision = "bf16";
      TrainResult cpu = train(o);
      o.devices = "cuda:0";
      TrainResult gpu = train(o);
      REQUIRE(cpu.losses.size() == gpu.losses.size());
      for (size_t s = 0; s < cpu.losses.size(); ++s)
        CHECK(gpu.losses[s] == doctest::Approx(cpu.losses[s]).epsilon(1e-2));
      MESSAGE("cuda model on GPU: " << model_name << " bf16: " << cpu.losses.size() << " steps match the CPU");
    }
  }

  // float16 with dynamic loss scaling from 2^24: the first steps overflow on both; the GPU's float
  // sums in another order can round a float16 product differently, so 1e-2 on the losses, and the
  // skipped steps may differ by one at a borderline overflow.
  TEST_CASE("cuda models: --mixed-precision fp16 trains on cuda:0 as on the CPU, skipping overflowed steps") {
    if (!have_gpu()) return;
    for (const char* model : {"mlp", "tiny_lm", "cnn"}) {
      const std::string model_name = model;
      CAPTURE(model_name);
      TrainOptions o = momentum_run(model, 32, 20, 7);
      o.mixed_precision = "fp16";
      o.loss_scale.init = 16777216.0f;
      o.loss_scale.growth_interval = 4;
      TrainResult cpu = train(o);
      o.devices = "cuda:0";
      TrainResult gpu = train(o);
      REQUIRE(cpu.losses.size() == gpu.losses.size());
      CHECK(gpu.skipped_steps >= 4);
      CHECK(std::abs(gpu.skipped_steps - cpu.skipped_steps) <= 1);
      for (size_t s = 0; s < cpu.losses.size(); ++s)
        CHECK(gpu.losses[s] == doctest::Approx(cpu.losses[s]).epsilon(1e-2));
      MESSAGE("cuda model on GPU: " << model_name << " fp16: " << gpu.skipped_steps << " skipped steps (CPU "
                                    << cpu.skipped_steps << "), losses match the CPU");
    }
  }

  TEST_CASE("cuda models: a replayed CUDA graph step equals the step launched kernel by kernel") {
    if (!have_gpu()) return;
    for (const char* model : {"mlp", "tiny_lm", "cnn"}) {
      const std::string model_name = model;
      CAPTURE(model_name);
      TrainOptions o = momentum_run(model, 50, 8, 7);
      o.devices = "cuda:0";
      CHECK(onnxdp::test::check_recorded_equals_launched(o) >= 1);
      MESSAGE("cuda model on GPU: " << model_name << ": recorded steps equal launched ones bit for bit");
    }
  }

  TEST_CASE("cuda models: --tf32 trains within 1e-3 of the CPU") {
    if (!have_gpu()) return;
    TrainOptions o = momentum_run("tiny_lm", 30, 10, 7);
    TrainResult cpu = train(o);
    o.devices = "cuda:0";
    o.tf32 = true;
    TrainResult gpu = train(o);
    REQUIRE(gpu.losses.size() == cpu.losses.size());
    for (size_t s = 0; s < cpu.losses.size(); ++s) CHECK(std::abs(gpu.losses[s] - cpu.losses[s]) <= 1e-3f * cpu.losses[s]);
  }

  TEST_CASE("cuda models: every GPU as a replica (cuda) trains as the same number of CPU replicas") {
    if (!have_gpu()) return;
    const int n = cuda::device_count().count;
    TrainOptions o = momentum_run("mlp", 97, 10, 7);
    o.devices = "cpu:" + std::to_string(n);
    TrainResult cpu = train(o);
    o.devices = "cuda";
    TrainResult gpu = train(o);
    CHECK(gpu.world_size == n);
    check_close_training(cpu, gpu, "mlp on " + std::to_string(n) + " GPU(s)");
  }
}
#endif
