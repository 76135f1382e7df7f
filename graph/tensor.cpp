#include "graph/tensor.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "graph/error.h"

namespace onnxdp {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) fail("shape {} has a negative dimension", shape_str(s));
    if (d != 0 && n > (int64_t(1) << 62) / d) fail("shape {} has more than 2^62 elements", shape_str(s));
    n *= d;
  }
  return n;
}

int64_t tensor_bytes(const Shape& s, DType t) {
  const int64_t n = shape_numel(s), e = int64_t(dtype_size(t));
  if (n > (int64_t(1) << 62) / e) fail("a {} tensor of shape {} has more than 2^62 bytes", dtype_name(t), shape_str(s));
  return n * e;
}

int64_t physical_memory_bytes() {
  static const int64_t bytes = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : int64_t(1) << 62;
  }();
  return bytes;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = shape_numel(shape_);
  const int64_t want = tensor_bytes(shape_, dtype_);
  if (want > physical_memory_bytes())
    fail("a {} tensor of shape {} needs {} bytes, more than this machine's memory ({} bytes)", dtype_name(dtype_),
         shape_str(shape_), want, physical_memory_bytes());
  // Zeros from calloc, 64 bytes over for the alignment: a large block comes straight from the
  // kernel already zero, so its pages are written first by whoever fills the tensor (a model's
  // weights read from the file, an arena) and not by a memset of the whole tensor before that.
  // As before, the tensor's bytes rounded up to 64 are its own and zero.
  const size_t alloc = (std::max<size_t>(nbytes(), 1) + 63) / 64 * 64;
  void* raw = std::calloc(alloc + 63, 1);
  if (!raw) fail("out of memory allocating a {} tensor of shape {}", dtype_name(dtype_), shape_str(shape_));
  uint8_t* p = static_cast<uint8_t*>(raw) + (64 - reinterpret_cast<uintptr_t>(raw) % 64) % 64;
  data_ = std::shared_ptr<uint8_t>(p, [raw](uint8_t*) { std::free(raw); });
}

Tensor Tensor::view(const Tensor& base, size_t byte_offset, DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  if (byte_offset + t.nbytes() > base.nbytes())
    fail("view of {} bytes at offset {} exceeds its base of {} bytes", t.nbytes(), byte_offset, base.nbytes());
  t.data_ = std::shared_ptr<uint8_t>(base.data_, base.data_.get() + byte_offset);
  return t;
}

Tensor Tensor::reshaped(Shape s) const {
  if (shape_numel(s) != numel_) fail("cannot reshape {} to {}", shape_str(shape_), shape_str(s));
  Tensor t = *this;
  t.shape_ = std::move(s);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data(), data(), nbytes());
  return t;
}

std::vector<int64_t> Tensor::to_i64() const {
  std::vector<int64_t> r(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) {
    switch (dtype_) {
      case DType::i64: r[i] = as<int64_t>()[i]; break;
      case DType::i32: r[i] = as<int32_t>()[i]; break;
      case DType::i8: r[i] = as<int8_t>()[i]; break;
      case DType::u8: r[i] = as<uint8_t>()[i]; break;
      case DType::boolean: r[i] = as<bool>()[i]; break;
      case DType::f32: r[i] = int64_t(as<float>()[i]); break;
      case DType::f64: r[i] = int64_t(as<double>()[i]); break;
      case DType::f16: r[i] = int64_t(f16_to_f32(as<uint16_t>()[i])); break;
      case DType::bf16: r[i] = int64_t(bf16_to_f32(as<uint16_t>()[i])); break;
    }
  }
  return r;
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> r(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) {
    switch (dtype_) {
      case DType::i64: r[i] = double(as<int64_t>()[i]); break;
      case DType::i32: r[i] = as<int32_t>()[i]; break;
      case DType::i8: r[i] = as<int8_t>()[i]; break;
      case DType::u8: r[i] = as<uint8_t>()[i]; break;
      case DType::boolean: r[i] = as<bool>()[i]; break;
      case DType::f32: r[i] = as<float>()[i]; break;
      case DType::f64: r[i] = as<double>()[i]; break;
      case DType::f16: r[i] = f16_to_f32(as<uint16_t>()[i]); break;
      case DType::bf16: r[i] = bf16_to_f32(as<uint16_t>()[i]); break;
    }
  }
  return r;
}

Tensor Tensor::scalar_f32(float v) {
  Tensor t(DType::f32, {});
  t.as<float>()[0] = v;
  return t;
}

Tensor Tensor::scalar_i64(int64_t v) {
  Tensor t(DType::i64, {});
  t.as<int64_t>()[0] = v;
  return t;
}

Tensor Tensor::from_i64(const std::vector<int64_t>& v, Shape s) {
  if (s.empty()) s = {int64_t(v.size())};
  Tensor t(DType::i64, s);
  if (t.numel() != int64_t(v.size())) fail("from_i64: {} values for shape {}", v.size(), shape_str(s));
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * 8);
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& v, Shape s) {
  if (s.empty()) s = {int64_t(v.size())};
  Tensor t(DType::f32, s);
  if (t.numel() != int64_t(v.size())) fail("from_f32: {} values for shape {}", v.size(), shape_str(s));
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t mant = x & 0x7fffff;
  int32_t exp = int32_t((x >> 23) & 0xff);
  if (exp == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));  // inf / nan
  exp = exp - 127 + 15;
  if (exp >= 0x1f) return uint16_t(sign | 0x7c00);  // overflow to inf
  if (exp <= 0) {                                   // subnormal or zero
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exponent: correct
  return uint16_t(half);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      x = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000 | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // nan stays nan
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

float bf16_to_f32(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace onnxdp
