#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/error.h"

namespace onnxdp {

OptimizerKind optimizer_kind_from_name(const std::string& s) {
  if (s == "sgd") return OptimizerKind::sgd;
  if (s == "momentum") return OptimizerKind::momentum;
  if (s == "adam") return OptimizerKind::adam;
  if (s == "adamw") return OptimizerKind::adamw;
  fail("unknown optimizer '{}': use sgd, momentum, adam or adamw", s);
}

ScheduleKind schedule_kind_from_name(const std::string& s) {
  if (s == "constant") return ScheduleKind::constant;
  if (s == "linear") return ScheduleKind::linear;
  if (s == "cosine") return ScheduleKind::cosine;
  fail("unknown learning-rate schedule '{}': use constant, linear or cosine", s);
}

OptimizerOptions resolve_defaults(OptimizerOptions o) {
  bool adam_like = o.kind == OptimizerKind::adam || o.kind == OptimizerKind::adamw;
  if (o.lr < 0) o.lr = adam_like ? 1e-3f : 1e-2f;
  if (o.weight_decay < 0) o.weight_decay = o.kind == OptimizerKind::adamw ? 0.01f : 0.0f;
  return o;
}

float scheduled_lr(ScheduleKind k, float base, int64_t step, int64_t warmup, int64_t total) {
  if (warmup > 0 && step <= warmup) return base * float(step) / float(warmup);
  if (k == ScheduleKind::constant || total <= warmup) return base;
  double progress = double(step - warmup) / double(total - warmup);
  if (progress > 1) progress = 1;
  if (k == ScheduleKind::linear) return float(base * (1.0 - progress));
  return float(base * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

Optimizer::Optimizer(OptimizerOptions o, int64_t n) : o_(resolve_defaults(o)), n_(n) {
  if (keeps_m()) m_ = Tensor(DType::f32, {n});
  if (keeps_v()) v_ = Tensor(DType::f32, {n});
}

OptimizerUpdate Optimizer::begin_step(float lr) {
  ++t_;
  OptimizerUpdate u;
  u.max_norm = o_.max_grad_norm;
  u.lr = lr;
  u.wd = o_.weight_decay;
  u.mom = o_.momentum;
  u.b1 = o_.beta1;
  u.b2 = o_.beta2;
  u.eps = o_.eps;
  u.nesterov = o_.nesterov;
  u.first = t_ == 1;
  switch (o_.kind) {
    case OptimizerKind::sgd: u.kind = OptimizerUpdate::Kind::sgd; break;
    case OptimizerKind::momentum: u.kind = OptimizerUpdate::Kind::momentum; break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw: {
      u.kind = OptimizerUpdate::Kind::adam;
      u.decoupled = o_.kind == OptimizerKind::adamw;
      const float bc1 = 1.0f - std::pow(o_.beta1, float(t_)), bc2 = 1.0f - std::pow(o_.beta2, float(t_));
      u.step_size = lr / bc1;
      u.sqrt_bc2 = std::sqrt(bc2);
      break;
    }
  }
  return u;
}

float Optimizer::step(float* p, float* g, float lr) {
  const OptimizerUpdate u = begin_step(lr);
  return float(gradient_norm(u, apply(u, p, g)));
}

double Optimizer::apply(const OptimizerUpdate& u, float* p, float* g) {
  return host_optimizer_step(u, p, g, m_.numel() ? m_.as<float>() : nullptr, v_.numel() ? v_.as<float>() : nullptr, n_);
}

void Optimizer::undo_step() {
  if (t_ == 0) fail("internal: Optimizer::undo_step before any step");
  --t_;
}

}  // namespace onnxdp
