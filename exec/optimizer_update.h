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
// clip: clip_factor() of the step's gradient. Not called for a step that skips_step(). One
// element of the update of kind K (u.kind): a loop over the elements with K fixed has no branch
// on the kind, so the host's loop vectorizes.
template <OptimizerUpdate::Kind K>
ONNXDP_HD inline void optimizer_update_of(const OptimizerUpdate& u, float clip, float* p, float* g, float* m, float* v,
                                          int64_t i) {
  // Selects on the step's flags and unconditional stores (multiplying by 1 changes nothing), so
  // the loop has no branches to vectorize around.
  float gi = g[i] * u.inv_scale;  // GradScaler.unscale_ (1 without fp16), before clipping
  gi = gi * clip;                 // 1 without clipping
  g[i] = gi;
  if constexpr (K == OptimizerUpdate::Kind::sgd) {
    p[i] -= u.lr * (gi + u.wd * p[i]);
  } else if constexpr (K == OptimizerUpdate::Kind::momentum) {
    const float d = gi + u.wd * p[i];
    const float mi = u.first ? d : u.mom * m[i] + d;  // torch: the buffer starts as the first gradient
    m[i] = mi;
    p[i] -= u.lr * (u.nesterov ? d + u.mom * mi : mi);
  } else {
    const float pi = u.decoupled ? p[i] * (1.0f - u.lr * u.wd) : p[i];
    const float d = u.decoupled ? gi : gi + u.wd * pi;
    const float mi = u.b1 * m[i] + (1.0f - u.b1) * d;
    const float vi = u.b2 * v[i] + (1.0f - u.b2) * d * d;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - u.step_size * mi / (sqrtf(vi) / u.sqrt_bc2 + u.eps);
  }
}

ONNXDP_HD inline void optimizer_update(const OptimizerUpdate& u, float clip, float* p, float* g, float* m, float* v,
                                       int64_t i) {
  switch (u.kind) {
    case OptimizerUpdate::Kind::sgd: return optimizer_update_of<OptimizerUpdate::Kind::sgd>(u, clip, p, g, m, v, i);
    case OptimizerUpdate::Kind::momentum:
      return optimizer_update_of<OptimizerUpdate::Kind::momentum>(u, clip, p, g, m, v, i);
    case OptimizerUpdate::Kind::adam: return optimizer_update_of<OptimizerUpdate::Kind::adam>(u, clip, p, g, m, v, i);
  }
}

// The whole update on the host over flat buffers of n floats (exec/cpu/optimizer.cpp): returns the
// squared norm of g as it came in; a step that skips_step() changes nothing.
double host_optimizer_step(const OptimizerUpdate& u, float* p, float* g, float* m, float* v, int64_t n);
// Its two halves, for a replica that updates a part of the buffers (--zero-stage 1): the squared
// norm of g[0..n) (summed over the replicas' parts by the caller), and the update of n elements
// given the whole gradient's squared norm (nothing when the step skips_step()).
double host_squared_norm(const float* g, int64_t n);
void host_optimizer_apply(const OptimizerUpdate& u, double squared_norm, float* p, float* g, float* m, float* v, int64_t n);

}  // namespace onnxdp
