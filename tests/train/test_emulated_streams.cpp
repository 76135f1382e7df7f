// Training on cuda-emulated:2 and :4, whose streams are asynchronous host queues (the compute
// stream, the communication stream where the gradient buckets are all-reduced while backward goes
// on, events between them: exec/cuda/host_stream.h), against the same number of CPU replicas
// (losses within 1e-5 relative, parameters close): a missing event wait, or a buffer reused before
// a queued all-reduce read it, shows as a difference here. Tiny models, few steps.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "exec/device_backend.h"
#include "exec/plan.h"
#include "parallel/communicator.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/test_util.h"
#include "tests/train_util.h"
#include "train/trainer.h"

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

// o on cpu:N and cuda-emulated:N for N = 2 and 4, compared; `also` checks more of the pair.
void against_cpu(TrainOptions o, float param_rtol = 1e-5f,
                 const std::function<void(const TrainResult& cpu, const TrainResult& dev)>& also = {}) {
  for (int world : {2, 4}) {
    CAPTURE(world);
    o.devices = "cpu:" + std::to_string(world);
    const TrainResult cpu = train(o);
    o.devices = "cuda-emulated:" + std::to_string(world);
    const TrainResult dev = train(o);
    CHECK(dev.world_size == world);
    CHECK(dev.device_bytes > 0);
    check_same_training(cpu, dev, 1e-5, param_rtol);
    if (also) also(cpu, dev);
  }
}

}  // namespace

TEST_CASE("emulated streams: cnn's BatchNorm, statistics all-reduced on the device, as on cpu:2 and cpu:4") {
  against_cpu(momentum_run("cnn", 48, 4, 5));
}

TEST_CASE("emulated streams: --bucket-mb 0.01, many buckets in flight on the communication stream") {
  TrainOptions o = momentum_run("mlp", 64, 6, 5);
  o.bucket_mb = 0.01;
  o.devices = "cuda-emulated:2";
  CHECK(train(o).bucket_bytes.size() >= 3);
  against_cpu(o);
}

TEST_CASE("emulated streams: --grad-accum 2, the buckets all-reduced on the last micro-batch only") {
  TrainOptions o = momentum_run("mlp", 32, 5, 5);
  o.grad_accum = 2;
  o.bucket_mb = 0.01;
  against_cpu(o);
}

TEST_CASE("emulated streams: --mixed-precision fp16, overflowed steps skipped alike") {
  TrainOptions o = momentum_run("mlp", 64, 8, 5);
  o.mixed_precision = "fp16";
  o.loss_scale.init = float(1 << 24);  // float16 overflows at first: the scale backs off, steps are skipped
  o.loss_scale.growth_interval = 3;
  against_cpu(o, 1e-5f, [](const TrainResult& cpu, const TrainResult& dev) {
    CHECK(cpu.skipped_steps >= 1);
    CHECK(dev.skipped_steps == cpu.skipped_steps);
    CHECK(dev.loss_scales == cpu.loss_scales);
  });
}

TEST_CASE("emulated streams: --grad-dtype bf16, bfloat16 buckets cast back after their all-reduce") {
  TrainOptions o = momentum_run("mlp", 64, 6, 5);
  o.grad_dtype = "bf16";
  o.bucket_mb = 0.01;
  // The emulated GEMMs sum in another order than the CPU's BLAS; bfloat16's rounding of a sum can
  // then differ by one step of its 8 bits (tests/train/test_zero.cpp's bf16 case): the losses stay
  // within 1e-5, a parameter element within 1e-4.
  against_cpu(o, 1e-4f);
}

TEST_CASE("emulated streams: uneven batches train as the CPU's, an epoch end that cannot be split is refused alike") {
  against_cpu(momentum_run("mlp", 97, 6, 5));  // shards 49 + 48, and 25 + 24 + 24 + 24
  // 1500 samples in batches of 107: the epoch ends with 2 rows, which 4 replicas cannot share.
  TrainOptions o = momentum_run("mlp", 107, 0, 5);
  for (const char* devices : {"cpu:4", "cuda-emulated:4"}) {
    CAPTURE(devices);
    o.devices = devices;
    const std::string e = error_of([&] { train(o); });
    CHECK(contains(e, "the last step of each epoch has 2 rows"));
    CHECK(contains(e, "cannot be split over 4 replicas"));
  }
}

TEST_CASE("emulated streams: a replayed recording equals the run launched node by node, bit for bit") {
  for (const char* devices : {"cuda-emulated:2", "cuda-emulated:4"}) {
    for (const char* model : {"mlp", "cnn"}) {
      CAPTURE(devices);
      CAPTURE(model);
      TrainOptions o = momentum_run(model, 48, 5, 5);
      o.bucket_mb = 0.01;
      o.devices = devices;
      CHECK(check_recorded_equals_launched(o) >= 1);
    }
  }
}

// Replica 1 fails mid-run after its step's work was queued (an all-reduce on the communication
// stream among it); the others, waiting for it in the next all-reduce, end within seconds (not
// the 60 s --comm-timeout) with an error that names replica 1.
TEST_CASE("emulated streams: a replica that throws mid-run ends the others promptly with an error naming it") {
  Graph g;
  Value x;
  x.name = "x";
  x.shape = {4096};
  x.kind = ValueKind::input;
  ValueId xv = g.add_value(std::move(x));
  g.inputs = {xv};
  const int sq = g.add_node(Op::Mul, "square", {xv, xv}, {"x2"});
  const int n = g.add_node(Op::AllReduce, "sum", {g.nodes[size_t(sq)].outputs[0]}, {"y"}, {{"async", Attr(int64_t(1))}});
  g.outputs = {g.nodes[size_t(n)].outputs[0]};
  verify(g);
  for (int world : {2, 4}) {
    CAPTURE(world);
    CommWorld comms = make_in_process_world(world, CommOptions{.timeout_s = 60});
    std::vector<std::string> errors(static_cast<size_t>(world));
    std::vector<int> steps(size_t(world), 0), wrong(size_t(world), 0);
    const auto start = std::chrono::steady_clock::now();
    const std::string first = error_of([&] {
      run_replicas(comms, [&](Communicator& c) {
        const size_t r = size_t(c.rank());
        try {
          auto dev = make_device_backend(DeviceKind::cuda_emulated, c.rank());
          dev->connect(&c);
          PlanOptions po{.device = dev, .device_graph = false};  // after_run is called on every run
          po.after_run = [&](Plan&) {
            if (r == 1 && steps[r] == 3) throw Error("replica 1's step 3 failed on purpose");
          };
          Plan p(g, po);
          Tensor in(DType::f32, {4096});
          for (int64_t k = 0; k < 4096; ++k) in.as<float>()[k] = float(k % 7) + float(r);
          RunState rs;
          rs.comm = &c;
          for (; steps[r] < 40; ++steps[r]) {
            Tensor y = p.run({{"x", in}}, rs).at("y");
            float want = 0;  // sum over replicas q of (k % 7 + q)^2 at k = 5
            for (int q = 0; q < world; ++q) want += float((5 + q) * (5 + q));
            wrong[r] += y.as<float>()[5] != want;
          }
        } catch (const std::exception& e) {
          errors[r] = e.what();
          throw;
        }
      });
    });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(took < 10);
    CHECK(contains(first, "failed on purpose"));  // the root cause is what run_replicas rethrows
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CAPTURE(errors[size_t(r)]);
      CHECK(wrong[size_t(r)] == 0);
      if (r == 1) continue;
      CHECK(contains(errors[size_t(r)], "replica 1 failed"));
      CHECK(steps[size_t(r)] >= 2);  // its wait in run 2 may see the abort before its own end
      CHECK(steps[size_t(r)] < 40);
    }
  }
}
#endif
