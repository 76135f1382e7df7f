// Shared by the CUDA tests (tests/gpu/, tests/exec/test_device_plan.cpp): whether a GPU is there
// to run the suite "gpu" cases, and the recorded-step-equals-launched-step check.
#pragma once
#include <doctest/doctest.h>

#include <cstring>

#include "exec/cuda/elementwise.h"  // cuda::device_count
#include "train/trainer.h"

namespace onnxdp::test {

// True when a GPU is there; otherwise prints "no GPU: <reason> -- CUDA kernel test SKIPPED"
// (CTest's gpu.cuda_kernels reports Skipped on that line) for the caller to return.
inline bool have_gpu() {
  cuda::DeviceCount d = cuda::device_count();
  if (d.count > 0) return true;
  MESSAGE("no GPU: " << d.reason << " -- CUDA kernel test SKIPPED");
  return false;
}

// Trains o (on o.devices) with its steps recorded as CUDA graphs and again launched kernel by
// kernel: equal bit for bit. Every per-step scalar changes (AdamW's bias corrections, warmup then
// linear decay, clipping, Dropout's step): a recording that kept the values it was made with
// would drift. Returns the recorded run's replayed plans.
inline int check_recorded_equals_launched(TrainOptions o) {
  o.optimizer.kind = OptimizerKind::adamw;
  o.optimizer.lr = 0.01f;
  o.optimizer.max_grad_norm = 0.3f;
  o.schedule = ScheduleKind::linear;
  o.warmup_steps = 2;
  o.cuda_graph = true;
  TrainResult graphs = train(o);
  o.cuda_graph = false;
  TrainResult eager = train(o);
  CHECK(eager.replayed_plans == 0);
  REQUIRE(graphs.losses.size() == eager.losses.size());
  for (size_t s = 0; s < graphs.losses.size(); ++s) CHECK(graphs.losses[s] == eager.losses[s]);
  for (const auto& [name, t] : graphs.parameters)
    CHECK_MESSAGE(std::memcmp(t.data(), eager.parameters.at(name).data(), t.nbytes()) == 0, name);
  return graphs.replayed_plans;
}

}  // namespace onnxdp::test
