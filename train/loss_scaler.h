// Dynamic loss scaling for --mixed-precision fp16, with torch.amp.GradScaler's semantics and
// defaults: the loss is multiplied by `scale` before backward (the training graph's input
// amp/loss_scale seeds autodiff), so small gradients survive float16's range; the optimizer takes
// the gradients times 1/scale; a step whose gradients overflowed (an inf or NaN anywhere: the
// all-reduce spreads one to every replica, so all replicas decide alike) is skipped and the
// scale halves; after growth_interval good steps in a row the scale doubles.
#pragma once
#include <cstdint>

namespace onnxdp {

struct LossScalerOptions {
  float init = 65536.0f;            // GradScaler(init_scale=2**16); at least 1
  int64_t growth_interval = 2000;   // GradScaler(growth_interval=2000)
  float growth = 2.0f, backoff = 0.5f;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions o = {});
  float scale() const { return scale_; }
  // 1 / scale as GradScaler computes it (the reciprocal in double, rounded to float).
  float inv_scale() const { return float(1.0 / double(scale_)); }
  // After a step: GradScaler.update() with found_inf = !finite.
  void update(bool finite);
  // The scale has fallen below 1 (init 2**16 halved 17 times in a row): the gradients are not
  // finite even unscaled, so scaling cannot help; the trainer stops with an error.
  bool exhausted() const { return scale_ < 1.0f; }
  // Checkpointed state: the scale and the good steps since it last changed.
  int64_t growth_tracker() const { return tracker_; }
  void restore(float scale, int64_t growth_tracker);

 private:
  LossScalerOptions o_;
  float scale_;
  int64_t tracker_ = 0;
};

}  // namespace onnxdp
