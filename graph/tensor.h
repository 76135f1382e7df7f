// Shape and Tensor: dense, row-major, owned, 64-byte aligned.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/dtype.h"

namespace onnxdp {

using Shape = std::vector<int64_t>;

// Product of dims; throws Error on a negative dim or on overflow past 2^62 elements.
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"
// Bytes of a tensor of shape s and dtype t; throws Error past 2^62 bytes (so that sums of a few
// tensors' bytes, as the planner adds them, stay in range too).
int64_t tensor_bytes(const Shape& s, DType t);
// This machine's physical memory in bytes: no single host tensor may be larger (a model or file
// declaring more is refused before anything is allocated).
int64_t physical_memory_bytes();

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-filled

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }
  int rank() const { return int(shape_.size()); }
  bool empty() const { return !data_; }

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  template <class T> T* as() { return static_cast<T*>(data()); }
  template <class T> const T* as() const { return static_cast<const T*>(data()); }

  // A tensor sharing `base`'s bytes from byte_offset on (keeps base alive).
  static Tensor view(const Tensor& base, size_t byte_offset, DType dtype, Shape shape);
  // Same bytes, another shape of equal numel.
  Tensor reshaped(Shape s) const;
  Tensor clone() const;

  // Values as int64 / double whatever the dtype (for shape arguments and tests).
  std::vector<int64_t> to_i64() const;
  std::vector<double> to_f64() const;

  static Tensor scalar_f32(float v);
  static Tensor scalar_i64(int64_t v);
  static Tensor from_i64(const std::vector<int64_t>& v, Shape s = {});  // empty s means [v.size()]
  static Tensor from_f32(const std::vector<float>& v, Shape s = {});

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<uint8_t> data_;
};

// float <-> half / bfloat16 conversions (round to nearest even).
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
// The same for the 16-bit float type t (f16 or bf16).
inline float half_to_f32(DType t, uint16_t h) { return t == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h); }
inline uint16_t f32_to_half(DType t, float f) { return t == DType::f16 ? f32_to_f16(f) : f32_to_bf16(f); }

}  // namespace onnxdp
