// One element of the fused optimizer update over the flat parameter buffer, with torch.optim's
// formulas, written once for the host loop (train/optimizer.cpp) and the CUDA kernel
// (exec/cuda/optimizer.cu). Optimizer::begin_step fills the per-step scalars.
#pragma once
#include <math.h>

#include <cstdint>

#include "exec/functors.h"  // ONNXDP_HD

namespace onnxdp {

// The scalars of one step. On a device they are written to device memory before the step runs
// and read there, so a recorded step (CUDA graph) takes each step's values.
struct OptimizerUpdate {
  enum class Kind : uint8_t { sgd, momentum, adam };  // adam with `decoupled` is AdamW
  Kind kind = Kind::sgd;
  bool nesterov = false, first = false, decoupled = false;
  float max_norm = 0;  // --max-grad-norm; 0: no clipping
  float lr = 0, wd = 0, mom = 0, b1 = 0, b2 = 0, eps = 0;
  float step_size = 0, sqrt_bc2 = 1;  // Adam: lr / (1 - b1^t), sqrt(1 - b2^t)
  // --mixed-precision fp16 (train/loss_scaler.h): the gradients arrive multiplied by the loss scale;
  // the update takes them times inv_scale, and a step whose gradients hold an inf or NaN is skipped.
  float inv_scale = 1;
  bool skip_nonfinite = false;
};

// The gradient's global norm before clipping, from the squared norm of the (scaled) gradients.
ONNXDP_HD inline double gradient_norm(const OptimizerUpdate& u, double squared_norm) {
  return sqrt(squared_norm) * double(u.inv_scale);
}

// Whether the step changes nothing: as GradScaler.step, which does not call optimizer.step() when
// the unscaled gradients hold an inf or NaN (their squared norm is then not finite).
ONNXDP_HD inline bool skips_step(const OptimizerUpdate& u, double squared_norm) {
  return u.skip_nonfinite && !isfinite(squared_norm);
}

// torch.nn.utils.clip_grad_norm_: the factor the gradient is scaled by when its global norm
// gradient_norm() exceeds u.max_norm; 1 (no scaling) otherwise or without clipping.
ONNXDP_HD inline float clip_factor(const OptimizerUpdate& u, double squared_norm) {
  if (!(u.max_norm > 0)) return 1.0f;
  const float coef = u.max_norm / (float(gradient_norm(u, squared_norm)) + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

// p, g: parameters and gradients; m: momentum buffer or Adam's first moment; v: second moment;
// clip: clip_factor() of the step's gradient. Not called for a step that skips_step().
ONNXDP_HD inline void optimizer_update(const OptimizerUpdate& u, float clip, float* p, float* g, float* m, float* v,
                                       int64_t i) {
  if (u.inv_scale != 1.0f) g[i] *= u.inv_scale;  // GradScaler.unscale_, before clipping
  if (clip < 1.0f) g[i] *= clip;
  switch (u.kind) {
    case OptimizerUpdate::Kind::sgd:
      p[i] -= u.lr * (g[i] + u.wd * p[i]);
      return;
    case OptimizerUpdate::Kind::momentum: {
      const float d = g[i] + u.wd * p[i];
      m[i] = u.first ? d : u.mom * m[i] + d;  // torch: the buffer starts as the first gradient
      p[i] -= u.lr * (u.nesterov ? d + u.mom * m[i] : m[i]);
      return;
    }
    case OptimizerUpdate::Kind::adam: {
      float d = g[i];
      if (u.decoupled) p[i] *= 1.0f - u.lr * u.wd;
      else d += u.wd * p[i];
      m[i] = u.b1 * m[i] + (1.0f - u.b1) * d;
      v[i] = u.b2 * v[i] + (1.0f - u.b2) * d * d;
      p[i] -= u.step_size * m[i] / (sqrtf(v[i]) / u.sqrt_bc2 + u.eps);
      return;
    }
  }
}

}  // namespace onnxdp
