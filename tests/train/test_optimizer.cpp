// Optimizer updates against torch.optim: three steps with fixed gradients from p = [0.5, -1, 2];
// expected parameters printed by torch 2.15 (SGD, Adam, AdamW, clip_grad_norm_).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "exec/cpu/clones.h"
#include "train/loss_scaler.h"
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

// --mixed-precision fp16's update: gradients that arrive times the loss scale give torch.optim's
// parameters (the adamw row above), and a step with an inf gradient, undone, changes nothing:
// neither the parameters, nor the moments, nor Adam's step count (its bias correction).
TEST_CASE("optimizer: scaled gradients unscale to torch's update, a non-finite step is skipped and not counted") {
  const OptimizerOptions o = make(OptimizerKind::adamw, 0.01f, 0.01f);
  Optimizer opt(o, 3);
  std::vector<float> p = {0.5f, -1.0f, 2.0f};
  const float grads[3][3] = {{0.1f, -0.2f, 0.3f}, {0.4f, 0.5f, -0.6f}, {-0.7f, 0.8f, 0.9f}};
  const float scale = 1024.0f;
  for (int k = 0; k < 3; ++k) {
    if (k == 1) {  // an overflowed step between the first and second
      OptimizerUpdate u = opt.begin_step(0.01f);
      u.inv_scale = 1.0f / scale;
      u.skip_nonfinite = true;
      std::vector<float> g = {1.0f, INFINITY, 2.0f}, before = p;
      const double sq = opt.apply(u, p.data(), g.data());
      CHECK(skips_step(u, sq));
      CHECK(p == before);
      opt.undo_step();
    }
    OptimizerUpdate u = opt.begin_step(0.01f);
    u.inv_scale = 1.0f / scale;
    u.skip_nonfinite = true;
    std::vector<float> g(grads[k], grads[k] + 3);
    for (float& x : g) x *= scale;
    const double sq = opt.apply(u, p.data(), g.data());
    CHECK(!skips_step(u, sq));
    CHECK(gradient_norm(u, sq) == doctest::Approx(std::sqrt(double(grads[k][0]) * grads[k][0] +
                                                            double(grads[k][1]) * grads[k][1] +
                                                            double(grads[k][2]) * grads[k][2])));
  }
  CHECK(opt.steps_done() == 3);
  check(p, {0.483046025, -1.00133204, 1.98963034});
  // Clipping sees the unscaled norm (GradScaler.unscale_ before clip_grad_norm_): the clip row above.
  OptimizerOptions c = make(OptimizerKind::sgd, 0.1f);
  c.max_grad_norm = 1.0f;
  Optimizer clipped(c, 3);
  OptimizerUpdate u = clipped.begin_step(0.1f);
  u.inv_scale = 0.125f;
  std::vector<float> q = {0.5f, -1.0f, 2.0f}, g = {24.0f, 32.0f, 0.0f};
  CHECK(gradient_norm(u, clipped.apply(u, q.data(), g.data())) == doctest::Approx(5.0));
  check(q, {0.439999998, -1.08000004, 2});
  // Without loss scaling a non-finite gradient is not skipped (the loss check stops training).
  OptimizerUpdate plain = clipped.begin_step(0.1f);
  std::vector<float> inf = {INFINITY, 0.0f, 0.0f};
  clipped.apply(plain, q.data(), inf.data());
  CHECK(!std::isfinite(q[0]));
}

// GradScaler.update(): halve and restart the count on overflow, double after growth_interval good
// steps in a row, never grow past float32's range.
TEST_CASE("loss scaler: GradScaler's backoff, growth interval and limits") {
  LossScaler s({.init = 1024.0f, .growth_interval = 3});
  CHECK(s.scale() == 1024.0f);
  CHECK(s.inv_scale() == 1.0f / 1024.0f);
  s.update(true);
  s.update(true);
  CHECK(s.scale() == 1024.0f);
  CHECK(s.growth_tracker() == 2);
  s.update(false);  // an overflow restarts the count
  CHECK(s.scale() == 512.0f);
  CHECK(s.growth_tracker() == 0);
  for (int k = 0; k < 2; ++k) s.update(true);
  CHECK(s.scale() == 512.0f);
  s.update(true);
  CHECK(s.scale() == 1024.0f);
  CHECK(s.growth_tracker() == 0);
  LossScaler top({.init = 3e38f, .growth_interval = 1});
  top.update(true);
  CHECK(top.scale() == 3e38f);  // 6e38 is not a float
  LossScaler low({.init = 4.0f});
  low.update(false);
  low.update(false);
  CHECK(!low.exhausted());
  low.update(false);
  CHECK(low.exhausted());
  low.restore(8.0f, 5);
  CHECK(low.scale() == 8.0f);
  CHECK(low.growth_tracker() == 5);
  CHECK_THROWS_WITH(LossScaler({.init = 0.5f}), doctest::Contains("--loss-scale-init"));
  CHECK_THROWS_WITH(LossScaler({.init = INFINITY}), doctest::Contains("--loss-scale-init"));
  CHECK_THROWS_WITH(LossScaler({.growth_interval = 0}), doctest::Contains("--loss-scale-growth-interval"));
  CHECK_THROWS_WITH(low.restore(0.0f, 0), doctest::Contains("loss_scale"));
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

TEST_CASE("optimizer: the gradient's squared norm and the update are the same on 1, 2 and 3 threads") {
  // Large enough that the squared norm and the update are split among the threads.
  const int64_t n = 5 * (int64_t(1) << 15) + 123;
  REQUIRE(n > parallel_min_elements());
  std::vector<float> g0(static_cast<size_t>(n)), p0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    g0[size_t(i)] = float(std::sin(0.37 * double(i))) * 1e-3f * float(1 + i % 7);
    p0[size_t(i)] = float(std::cos(0.11 * double(i)));
  }
  const int before = cpu_threads();
  std::vector<double> sqs;
  std::vector<float> first_p;
  for (int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    OptimizerOptions o;
    o.max_grad_norm = 0.5f;
    Optimizer opt(o, n);
    std::vector<float> p = p0, g = g0;
    sqs.push_back(opt.apply(opt.begin_step(1e-3f), p.data(), g.data()));
    if (first_p.empty()) first_p = p;
    CAPTURE(threads);
    CHECK(sqs.back() == sqs.front());  // bit for bit: fixed chunks, added in order
    CHECK(p == first_p);
  }
  set_cpu_threads(before);
  double sq = 0;  // and it is the squared norm
  for (float v : g0) sq += double(v) * double(v);
  CHECK(sqs.front() == doctest::Approx(sq).epsilon(1e-12));
}
