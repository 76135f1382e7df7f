#include "exec/flat_state.h"

#include <algorithm>
#include <cstring>

#include "exec/device_backend.h"
#include "graph/error.h"
#include "parallel/communicator.h"

namespace onnxdp {

FlatState::FlatState(const std::vector<int64_t>& sizes, const std::vector<size_t>& layout,
                     std::shared_ptr<DeviceBackend> device)
    : device_(std::move(device)), offset_(sizes.size(), 0), sizes_(sizes) {
  constexpr size_t kFloatsAligned = kPlanAlign / sizeof(float);
  size_t total = 0;
  for (size_t i : layout) {
    offset_[i] = total;
    total += (size_t(sizes[i]) + kFloatsAligned - 1) / kFloatsAligned * kFloatsAligned;
    numel_ += sizes[i];
  }
  params_ = Tensor(DType::f32, {int64_t(total)});
  if (device_) {  // the gradients live on the device only: nothing on the host reads them
    dev_params_ = device_alloc(params_.nbytes());
    dev_grads_ = device_alloc(params_.nbytes());
    device_->zero(dev_grads_.get(), params_.nbytes());  // the gaps between tensors stay zero
  } else {
    grads_ = Tensor(DType::f32, {int64_t(total)});
  }
}

FlatState::DeviceMemory FlatState::device_alloc(size_t bytes) {
  return DeviceMemory(device_->alloc(std::max<size_t>(bytes, 4)), [d = device_](void* p) {
    d->activate();
    d->release(p);
  });
}

size_t FlatState::moment_bytes() const { return (m_ ? m_->nbytes() : 0) + (v_ ? v_->nbytes() : 0); }

size_t FlatState::bytes() const { return 2 * params_.nbytes() + moment_bytes(); }  // parameters, gradients, moments

void FlatState::shard(Communicator* comm) {
  if (m_) fail("internal: FlatState::shard after set_moments");
  comm_ = comm;
  rank_ = comm->rank();
  const int n = comm->size();
  constexpr int64_t kFloatsAligned = int64_t(kPlanAlign / sizeof(float));
  const int64_t total = floats();
  const int64_t per = (total + n - 1) / n;
  const int64_t part = (per + kFloatsAligned - 1) / kFloatsAligned * kFloatsAligned;
  shards_.base = device_ ? static_cast<const float*>(dev_grads_.get()) : grads_.as<float>();
  shards_.bounds.assign(size_t(n) + 1, 0);
  for (int r = 0; r <= n; ++r) shards_.bounds[size_t(r)] = std::min(total, int64_t(r) * part);
}

float* FlatState::moment(Tensor* t) { return t && t->numel() ? t->as<float>() : nullptr; }

std::vector<int64_t> FlatState::part_counts() const {
  std::vector<int64_t> counts;
  for (size_t r = 0; r + 1 < shards_.bounds.size(); ++r) counts.push_back(shards_.bounds[r + 1] - shards_.bounds[r]);
  return counts;
}

void FlatState::gather_moments(bool has_m, bool has_v, Tensor& m_full, Tensor& v_full) {
  if (!sharded()) fail("internal: FlatState::gather_moments on a state that is not sharded");
  pull();  // on a device, this replica's part is there
  const std::vector<int64_t> counts = part_counts();
  std::vector<float> scratch;  // where a replica other than 0 receives the parts it does not keep
  auto gather = [&](Tensor& mine, Tensor& full) {
    if (rank_ == 0) full = Tensor(DType::f32, {floats()});
    for (int r = 0; r < int(counts.size()); ++r) {
      const size_t n = size_t(counts[size_t(r)]);
      float* where = nullptr;
      if (r == rank_) where = mine.as<float>();
      else if (rank_ == 0) where = full.as<float>() + shards_.bounds[size_t(r)];
      else where = (scratch.resize(n), scratch.data());
      comm_->broadcast(where, n * sizeof(float), r);
    }
    if (rank_ == 0 && counts[0]) std::memcpy(full.data(), mine.data(), size_t(counts[0]) * sizeof(float));
  };
  m_full = Tensor();
  v_full = Tensor();
  if (has_m) gather(*m_, m_full);
  if (has_v) gather(*v_, v_full);
}

void FlatState::set_moments(Tensor* m, Tensor* v) {
  m_ = m;
  v_ = v;
  if (!device_) return;
  dev_m_ = device_alloc(m_->nbytes());
  dev_v_ = device_alloc(v_->nbytes());
  dev_update_ = device_alloc(sizeof(OptimizerUpdate));
  dev_norm_ = device_alloc(sizeof(double));
}

void FlatState::bind(PlanOptions& po, const std::vector<std::string>& names,
                     const std::map<std::string, size_t>& grad_slices, const std::vector<ValueId>& grads,
                     const std::vector<char>& in_flat, bool update) {
  if (device_)
    for (size_t i = 0; i < names.size(); ++i) po.bound[names[i]] = static_cast<float*>(dev_params_.get()) + offset_[i];
  float* grads_base = device_ ? static_cast<float*>(dev_grads_.get()) : grads_.as<float>();
  for (const auto& [name, i] : grad_slices) po.bound[name] = grads_base + offset_[i];
  if (!device_) return;
  po.after_run = [this, grads, in_flat, update](Plan& p) {
    for (size_t i = 0; i < grads.size(); ++i)
      if (!in_flat[i])
        device_->copy_on_device(static_cast<float*>(dev_grads_.get()) + offset_[i], p.device_data(grads[i]),
                                size_t(sizes_[i]) * sizeof(float));
    if (update && sharded())
      device_->sharded_optimizer_step(static_cast<const OptimizerUpdate*>(dev_update_.get()),
                                      static_cast<double*>(dev_norm_.get()), static_cast<float*>(dev_params_.get()),
                                      static_cast<float*>(dev_grads_.get()), static_cast<float*>(dev_m_.get()),
                                      static_cast<float*>(dev_v_.get()), shards_.bounds, rank_);
    else if (update)
      device_->optimizer_step(static_cast<const OptimizerUpdate*>(dev_update_.get()), static_cast<double*>(dev_norm_.get()),
                              static_cast<float*>(dev_params_.get()), static_cast<float*>(dev_grads_.get()),
                              static_cast<float*>(dev_m_.get()), static_cast<float*>(dev_v_.get()), params_.numel());
  };
}

void FlatState::collect_gradients(Plan& p, const std::vector<ValueId>& grads, const std::vector<char>& in_flat) {
  if (device_) return;
  for (size_t i = 0; i < grads.size(); ++i)
    if (!in_flat[i]) std::memcpy(grads_.as<float>() + offset_[i], p.ref(grads[i]).data, size_t(sizes_[i]) * sizeof(float));
}

void FlatState::zero_grads() {
  if (device_) device_->zero(dev_grads_.get(), params_.nbytes());
  else std::memset(grads_.data(), 0, grads_.nbytes());
}

void FlatState::begin_step(const OptimizerUpdate& u) {
  update_ = u;
  if (device_) device_->to_device(dev_update_.get(), &u, sizeof u);
}

double FlatState::end_step() {
  double squared = 0;
  if (device_) {  // the last run updated the parameters there (sharded: the norm all-reduced there too)
    device_->to_host(&squared, dev_norm_.get(), sizeof squared);
    return squared;
  }
  if (sharded()) {  // this replica's part, with the whole gradient's norm; then the others' parameters
    const int64_t lo = shard_begin(), n = shard_end() - lo;
    float* g = grads_.as<float>() + lo;
    squared = host_squared_norm(g, n);
    comm_->all_reduce_sum(&squared, 1, DType::f64);
    host_optimizer_apply(update_, squared, params_.as<float>() + lo, g, moment(m_), moment(v_), n);
    comm_->all_gather_parts(params_.data(), part_counts(), DType::f32);
    return squared;
  }
  return host_optimizer_step(update_, params_.as<float>(), grads_.as<float>(), moment(m_), moment(v_), params_.numel());
}

void FlatState::push() {
  if (!device_) return;
  device_->to_device(dev_params_.get(), params_.data(), params_.nbytes());
  if (m_->nbytes()) device_->to_device(dev_m_.get(), m_->data(), m_->nbytes());
  if (v_->nbytes()) device_->to_device(dev_v_.get(), v_->data(), v_->nbytes());
}

void FlatState::pull() {
  if (!device_) return;
  device_->to_host(params_.data(), dev_params_.get(), params_.nbytes());
  if (m_->nbytes()) device_->to_host(m_->data(), dev_m_.get(), m_->nbytes());
  if (v_->nbytes()) device_->to_host(v_->data(), dev_v_.get(), v_->nbytes());
}

}  // namespace onnxdp
