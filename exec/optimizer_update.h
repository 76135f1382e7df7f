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
};

// torch.nn.utils.clip_grad_norm_: the factor the gradient is scaled by when its global norm
// sqrt(squared_norm) exceeds u.max_norm; 1 (no scaling) otherwise or without clipping.
ONNXDP_HD inline float clip_factor(const OptimizerUpdate& u, double squared_norm) {
  if (!(u.max_norm > 0)) return 1.0f;
  const float coef = u.max_norm / (float(sqrt(squared_norm)) + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

// p, g: parameters and gradients; m: momentum buffer or Adam's first moment; v: second moment;
// clip: clip_factor() of the step's gradient.
ONNXDP_HD inline void optimizer_update(const OptimizerUpdate& u, float clip, float* p, float* g, float* m, float* v,
                                       int64_t i) {
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
