// Optimizers with torch.optim's semantics and defaults, applied as one fused loop over the flat
// parameter buffer (all trainable parameters, contiguous) and its flat gradient buffer.
#pragma once
#include <string>
#include <vector>

#include "exec/optimizer_update.h"
#include "graph/tensor.h"

namespace onnxdp {

enum class OptimizerKind { sgd, momentum, adam, adamw };
OptimizerKind optimizer_kind_from_name(const std::string& s);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = -1;            // < 0: the optimizer's default (sgd/momentum 0.01, adam/adamw 0.001)
  float momentum = 0.9f;    // momentum: torch.optim.SGD(momentum=...)
  bool nesterov = false;
  float weight_decay = -1;  // < 0: default (adamw 0.01, others 0)
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float max_grad_norm = 0;  // 0: no clipping
};
// The options with defaults filled in.
OptimizerOptions resolve_defaults(OptimizerOptions o);

enum class ScheduleKind { constant, linear, cosine };
ScheduleKind schedule_kind_from_name(const std::string& s);
// Learning rate for 1-based step of total_steps: linear warmup from 0 over warmup steps, then
// constant, linear decay to 0, or cosine decay to 0 at total_steps (as transformers' schedules).
float scheduled_lr(ScheduleKind k, float base_lr, int64_t step, int64_t warmup, int64_t total_steps);

class Optimizer {
 public:
  Optimizer(OptimizerOptions o, int64_t n_params);
  // One update of params (f32, n) from grads (f32, n) at learning rate lr; returns the gradient's
  // global norm before clipping.
  float step(float* params, float* grads, float lr);
  // The scalars of the next update at learning rate lr (it counts the step): step() on the host,
  // or the device's update over its own flat buffers (DeviceBackend::optimizer_step).
  OptimizerUpdate begin_step(float lr);
  // The host's update with u (from begin_step, its loss-scale fields set); returns the squared
  // norm of g as it came in. A step that skips_step() changes nothing.
  double apply(const OptimizerUpdate& u, float* p, float* g);
  // A skipped step (--mixed-precision fp16, gradients not finite) is not counted: the next
  // begin_step takes its place, as torch.optim's step count when GradScaler skips optimizer.step().
  void undo_step();
  int64_t steps_done() const { return t_; }
  // State for checkpoints: m (or momentum buffer), v (f32 tensors of n elements; empty where the
  // optimizer keeps none), and the step count. Tensors, so a checkpoint writes views of them.
  Tensor& m() { return m_; }
  Tensor& v() { return v_; }
  void set_steps_done(int64_t t) { t_ = t; }
  const OptimizerOptions& options() const { return o_; }
  // Which moments the kind keeps (whatever the element count, which is 0 for a replica's empty
  // part under --zero-stage 1): m for momentum and Adam, v for Adam.
  bool keeps_m() const { return o_.kind != OptimizerKind::sgd; }
  bool keeps_v() const { return o_.kind == OptimizerKind::adam || o_.kind == OptimizerKind::adamw; }

 private:
  OptimizerOptions o_;
  int64_t n_;
  int64_t t_ = 0;
  Tensor m_, v_;
};

}  // namespace onnxdp
