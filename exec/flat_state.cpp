#include "exec/flat_state.h"

#include <algorithm>
#include <cstring>

#include "exec/device_backend.h"

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
  grads_ = Tensor(DType::f32, {int64_t(total)});
  if (device_) {
    dev_params_ = device_alloc(params_.nbytes());
    dev_grads_ = device_alloc(grads_.nbytes());
    device_->zero(dev_grads_.get(), grads_.nbytes());  // the gaps between tensors stay zero
  }
}

FlatState::DeviceMemory FlatState::device_alloc(size_t bytes) {
  return DeviceMemory(device_->alloc(std::max<size_t>(bytes, 4)), [d = device_](void* p) {
    d->activate();
    d->release(p);
  });
}

size_t FlatState::moment_bytes() const { return ((m_ ? m_->size() : 0) + (v_ ? v_->size() : 0)) * sizeof(float); }

size_t FlatState::bytes() const { return params_.nbytes() + grads_.nbytes() + moment_bytes(); }

void FlatState::set_moments(std::vector<float>* m, std::vector<float>* v) {
  m_ = m;
  v_ = v;
  if (!device_) return;
  dev_m_ = device_alloc(m_->size() * sizeof(float));
  dev_v_ = device_alloc(v_->size() * sizeof(float));
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
    if (update)
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
  if (device_) device_->zero(dev_grads_.get(), grads_.nbytes());
  else std::memset(grads_.data(), 0, grads_.nbytes());
}

void FlatState::begin_step(const OptimizerUpdate& u) {
  update_ = u;
  if (device_) device_->to_device(dev_update_.get(), &u, sizeof u);
}

double FlatState::end_step() {
  double squared = 0;
  if (device_) device_->to_host(&squared, dev_norm_.get(), sizeof squared);  // the last run updated the parameters there
  else squared = host_optimizer_step(update_, params_.as<float>(), grads_.as<float>(), m_->data(), v_->data(), params_.numel());
  return squared;
}

void FlatState::push() {
  if (!device_) return;
  device_->to_device(dev_params_.get(), params_.data(), params_.nbytes());
  if (!m_->empty()) device_->to_device(dev_m_.get(), m_->data(), m_->size() * sizeof(float));
  if (!v_->empty()) device_->to_device(dev_v_.get(), v_->data(), v_->size() * sizeof(float));
}

void FlatState::pull() {
  if (!device_) return;
  device_->to_host(params_.data(), dev_params_.get(), params_.nbytes());
  if (!m_->empty()) device_->to_host(m_->data(), dev_m_.get(), m_->size() * sizeof(float));
  if (!v_->empty()) device_->to_host(v_->data(), dev_v_.get(), v_->size() * sizeof(float));
}

}  // namespace onnxdp
