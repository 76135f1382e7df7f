// A replica's training state in flat float buffers, shared by all its plans: the trainable
// parameters (tensor i at offset(i), a multiple of the plan alignment, in the order backward
// produces the gradients so that each gradient bucket is one range; the gaps stay zero), their
// gradients, and the optimizer's moments (m: momentum buffer or Adam's first moment; v: Adam's
// second). The host copies are what checkpoints, evaluation and the trained model read. With a
// device, the twins there are what the plans bind and the fused optimizer updates, and push() /
// pull() move the state between host and device; without one the host copies are the only ones
// and the optimizer runs on the host. Either way the caller's step reads the same:
//
//   state.begin_step(u);                       // the step's OptimizerUpdate scalars
//   for each micro-batch: plan.execute(...); state.collect_gradients(plan, grads, in_flat);
//   double squared_norm = state.end_step();    // the update has run (host or device)
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/optimizer_update.h"
#include "exec/plan.h"

namespace onnxdp {

class Communicator;
class DeviceBackend;

class FlatState {
 public:
  // sizes[i]: the elements of trainable tensor i; layout: the tensor indices in buffer order
  // (every index once). device: nullptr for the host CPU.
  FlatState(const std::vector<int64_t>& sizes, const std::vector<size_t>& layout, std::shared_ptr<DeviceBackend> device);
  FlatState(const FlatState&) = delete;
  FlatState& operator=(const FlatState&) = delete;

  int64_t floats() const { return params_.numel(); }  // buffer length, alignment gaps included
  int64_t numel() const { return numel_; }             // the trainable elements
  size_t offset(size_t i) const { return offset_[i]; }
  Tensor& params() { return params_; }  // host copies
  Tensor& grads() { return grads_; }  // host gradients: empty with a device (they live there only)
  // The optimizer's host moments, each empty or of floats() elements (Optimizer::m(), v()); set
  // once, before the first push().
  void set_moments(Tensor* m, Tensor* v);
  // Bytes of parameters, gradients and moments (where the state lives), and of the moments alone.
  size_t bytes() const;
  size_t moment_bytes() const;

  // --zero-stage 1 (ZeRO-1): this replica updates only its part [shard_begin, shard_end) of the
  // flat buffers (the world's near-equal parts in replica order, at tensor alignment), its moments
  // are of that part only (Optimizer of shard_end - shard_begin elements), and after each update it
  // gathers the other parts of the parameters from their owners over comm. The gradient buckets
  // are ReduceScatter nodes that read shards() (RunState::shards). Before set_moments. On a device
  // the update and the gather run there (DeviceBackend::sharded_optimizer_step).
  void shard(Communicator* comm);
  bool sharded() const { return comm_ != nullptr; }
  int64_t shard_begin() const { return sharded() ? shards_.bounds[size_t(rank_)] : 0; }
  int64_t shard_end() const { return sharded() ? shards_.bounds[size_t(rank_) + 1] : floats(); }
  const FlatShards* shards() const { return sharded() ? &shards_ : nullptr; }
  // Every replica calls it (a checkpoint of a sharded state): replica 0's m_full and v_full get the
  // whole moments (floats() each) the optimizer keeps (has_m, has_v); the others' stay empty.
  void gather_moments(bool has_m, bool has_v, Tensor& m_full, Tensor& v_full);

  // Binds a step's plan to the state (before the Plan is made from po): on a device parameter i
  // (named names[i]) is its slice of the device buffer; each value of grad_slices (value name ->
  // tensor index) is written straight into its tensor's slice of the gradient buffer. On a device,
  // after the plan's nodes and recorded with them: the gradients the plan could not write in place
  // (in_flat[i] false: value grads[i]) are copied in, and when `update`, the fused optimizer runs.
  void bind(PlanOptions& po, const std::vector<std::string>& names, const std::map<std::string, size_t>& grad_slices,
            const std::vector<ValueId>& grads, const std::vector<char>& in_flat, bool update);
  // After a run on the host: copies the gradients the plan could not write in place (nothing to do
  // on a device, where bind's after-run work did it).
  void collect_gradients(Plan& p, const std::vector<ValueId>& grads, const std::vector<char>& in_flat);
  void zero_grads();
  // The step's update scalars (on a device, uploaded for the optimizer at the end of the last
  // micro-batch); end_step returns the squared norm of the (scaled) gradients once the update ran.
  void begin_step(const OptimizerUpdate& u);
  double end_step();
  // Host -> device (parameters and moments; after the broadcast from replica 0 and a resume) and
  // device -> host (before evaluation, checkpoints and the end). Nothing on the host CPU.
  void push();
  void pull();

 private:
  using DeviceMemory = std::shared_ptr<void>;  // released through the device
  DeviceMemory device_alloc(size_t bytes);
  std::vector<int64_t> part_counts() const;  // floats of each replica's part
  static float* moment(Tensor* t);           // its floats, or null where the optimizer keeps none

  std::shared_ptr<DeviceBackend> device_;
  std::vector<size_t> offset_;
  std::vector<int64_t> sizes_;
  int64_t numel_ = 0;
  Tensor params_, grads_;
  Tensor *m_ = nullptr, *v_ = nullptr;
  OptimizerUpdate update_;  // the host's step
  Communicator* comm_ = nullptr;  // sharded (--zero-stage 1): the world the parts are gathered over
  int rank_ = 0;
  FlatShards shards_;
  DeviceMemory dev_params_, dev_grads_, dev_m_, dev_v_, dev_update_, dev_norm_;
};

}  // namespace onnxdp
