#include "train/optimizer.h"

#include <cmath>

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
  if (o_.kind != OptimizerKind::sgd) m_.assign(size_t(n), 0.0f);
  if (o_.kind == OptimizerKind::adam || o_.kind == OptimizerKind::adamw) v_.assign(size_t(n), 0.0f);
}

float Optimizer::step(float* p, float* g, float lr) {
  ++t_;
  double sq = 0;
#pragma omp parallel for reduction(+ : sq) schedule(static)
  for (int64_t i = 0; i < n_; ++i) sq += double(g[i]) * double(g[i]);
  float norm = float(std::sqrt(sq));
  if (o_.max_grad_norm > 0) {  // torch.nn.utils.clip_grad_norm_
    float coef = o_.max_grad_norm / (norm + 1e-6f);
    if (coef < 1.0f) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n_; ++i) g[i] *= coef;
    }
  }
  const float wd = o_.weight_decay, mom = o_.momentum, b1 = o_.beta1, b2 = o_.beta2, eps = o_.eps;
  float* m = m_.data();
  float* v = v_.data();
  switch (o_.kind) {
    case OptimizerKind::sgd:
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n_; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      break;
    case OptimizerKind::momentum: {
      const bool first = t_ == 1, nesterov = o_.nesterov;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n_; ++i) {
        float d = g[i] + wd * p[i];
        m[i] = first ? d : mom * m[i] + d;  // torch: buffer starts as the first gradient
        p[i] -= lr * (nesterov ? d + mom * m[i] : m[i]);
      }
      break;
    }
    case OptimizerKind::adam:
    case OptimizerKind::adamw: {
      const bool decoupled = o_.kind == OptimizerKind::adamw;
      const float bc1 = 1.0f - std::pow(b1, float(t_)), bc2 = 1.0f - std::pow(b2, float(t_));
      const float step_size = lr / bc1, sqrt_bc2 = std::sqrt(bc2);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n_; ++i) {
        float d = g[i];
        if (decoupled) p[i] *= 1.0f - lr * wd;
        else d += wd * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * d;
        v[i] = b2 * v[i] + (1.0f - b2) * d * d;
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
      }
      break;
    }
  }
  return norm;
}

}  // namespace onnxdp
