// Optimizer updates against torch.optim: three steps with fixed gradients from p = [0.5, -1, 2];
// expected parameters printed by torch 2.15 (SGD, Adam, AdamW, clip_grad_norm_).
#include <doctest/doctest.h>

#include <cmath>

#include "train/optimizer.h"

using namespace onnxdp;

namespace {
std::vector<float> three_steps(OptimizerOptions o) {
  std::vector<float> p = {0.5f, -1.0f, 2.0f};
  const float grads[3][3] = {{0.1f, -0.2f, 0.3f}, {0.4f, 0.5f, -0.6f}, {-0.7f, 0.8f, 0.9f}};
  Optimizer opt(o, 3);
  for (const auto& g0 : grads) {
    std::vector<float> g(g0, g0 + 3);
    opt.step(p.data(), g.data(), resolve_defaults(o).lr);
  }
  return p;
}
void check(const std::vector<float>& got, std::vector<double> want) {
  for (size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
}
OptimizerOptions make(OptimizerKind k, float lr, float wd = 0, float mom = 0, bool nesterov = false) {
  OptimizerOptions o;
  o.kind = k;
  o.lr = lr;
  o.weight_decay = wd;
  o.momentum = mom;
  o.nesterov = nesterov;
  return o;
}
}  // namespace

TEST_CASE("optimizer: sgd matches torch.optim.SGD") {
  check(three_steps(make(OptimizerKind::sgd, 0.1f)), {0.520000041, -1.11000001, 1.93999994});
  check(three_steps(make(OptimizerKind::sgd, 0.1f, 0.01f)), {0.518561482, -1.10699296, 1.93400598});
}

TEST_CASE("optimizer: momentum and nesterov match torch.optim.SGD") {
  check(three_steps(make(OptimizerKind::momentum, 0.1f, 0, 0.9f)), {0.466900021, -1.12080002, 1.94270003});
  check(three_steps(make(OptimizerKind::momentum, 0.1f, 0.01f, 0.9f, true)), {0.486439764, -1.21071029, 1.87245202});
}

TEST_CASE("optimizer: adam and adamw match torch.optim") {
  check(three_steps(make(OptimizerKind::adam, 0.01f)), {0.483193129, -1.00163054, 1.99022865});
  check(three_steps(make(OptimizerKind::adam, 0.01f, 0.1f)), {0.481821299, -0.998020113, 1.98369014});
  check(three_steps(make(OptimizerKind::adamw, 0.01f, 0.01f)), {0.483046025, -1.00133204, 1.98963034});  // torch default wd
  check(three_steps(make(OptimizerKind::adamw, 0.01f, 0.1f)), {0.481723458, -0.99864918, 1.98425114});
}

TEST_CASE("optimizer: defaults follow torch (adamw weight decay 0.01)") {
  OptimizerOptions o;
  o.kind = OptimizerKind::adamw;
  OptimizerOptions r = resolve_defaults(o);
  CHECK(r.lr == doctest::Approx(1e-3));
  CHECK(r.weight_decay == doctest::Approx(0.01));
  o.kind = OptimizerKind::adam;
  CHECK(resolve_defaults(o).weight_decay == 0.0f);
}

TEST_CASE("optimizer: max grad norm clips like clip_grad_norm_") {
  OptimizerOptions o = make(OptimizerKind::sgd, 0.1f);
  o.max_grad_norm = 1.0f;
  Optimizer opt(o, 3);
  std::vector<float> p = {0.5f, -1.0f, 2.0f}, g = {3.0f, 4.0f, 0.0f};
  float norm = opt.step(p.data(), g.data(), 0.1f);
  CHECK(norm == doctest::Approx(5.0));
  check(p, {0.439999998, -1.08000004, 2});
}

TEST_CASE("schedules: warmup, linear and cosine decay") {
  CHECK(scheduled_lr(ScheduleKind::constant, 1.0f, 5, 0, 10) == 1.0f);
  CHECK(scheduled_lr(ScheduleKind::linear, 1.0f, 1, 2, 10) == doctest::Approx(0.5));
  CHECK(scheduled_lr(ScheduleKind::linear, 1.0f, 2, 2, 10) == doctest::Approx(1.0));
  CHECK(scheduled_lr(ScheduleKind::linear, 1.0f, 6, 2, 10) == doctest::Approx(0.5));
  CHECK(scheduled_lr(ScheduleKind::linear, 1.0f, 10, 2, 10) == doctest::Approx(0.0));
  CHECK(scheduled_lr(ScheduleKind::cosine, 1.0f, 6, 2, 10) == doctest::Approx(0.5));
  CHECK(scheduled_lr(ScheduleKind::cosine, 1.0f, 10, 2, 10) == doctest::Approx(0.0).epsilon(1e-6));
}
