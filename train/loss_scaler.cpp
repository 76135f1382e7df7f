#include "train/loss_scaler.h"

#include <cmath>

#include "graph/error.h"

namespace onnxdp {

namespace {
void check_scale(float s, const char* what) {
  if (!(s >= 1) || !std::isfinite(s)) fail("{} must be a finite number of at least 1 (got {})", what, s);
}
}  // namespace

LossScaler::LossScaler(LossScalerOptions o) : o_(o), scale_(o.init) {
  check_scale(o.init, "--loss-scale-init");
  if (o.growth_interval < 1) fail("--loss-scale-growth-interval must be at least 1 (got {})", o.growth_interval);
}

void LossScaler::update(bool finite) {
  if (!finite) {
    scale_ *= o_.backoff;
    tracker_ = 0;
    return;
  }
  if (++tracker_ < o_.growth_interval) return;
  tracker_ = 0;
  const float grown = scale_ * o_.growth;
  if (std::isfinite(grown)) scale_ = grown;  // GradScaler keeps the scale when growing would overflow float32
}

void LossScaler::restore(float scale, int64_t growth_tracker) {
  check_scale(scale, "the checkpoint's loss_scale");
  if (growth_tracker < 0) fail("the checkpoint's loss_scale_growth_tracker is negative ({})", growth_tracker);
  scale_ = scale;
  tracker_ = growth_tracker;
}

}  // namespace onnxdp
