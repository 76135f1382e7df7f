// Element types of onnxdp tensors and their ONNX TensorProto codes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace onnxdp {

enum class DType : uint8_t { f32, f64, f16, bf16, i64, i32, i8, u8, boolean };

// Bytes per element.
size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool dtype_is_float(DType t);
bool dtype_is_integer(DType t);

// ONNX TensorProto.DataType <-> DType; dtype_from_onnx returns false for types onnxdp does not hold.
int dtype_to_onnx(DType t);
bool dtype_from_onnx(int onnx_type, DType* out);
std::string onnx_type_name(int onnx_type);

// Calls f.template operator()<T>() with the C++ type of t (f16/bf16 as uint16_t storage).
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::i64: return f.template operator()<int64_t>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i8: return f.template operator()<int8_t>();
    case DType::u8: return f.template operator()<uint8_t>();
    case DType::boolean: return f.template operator()<bool>();
    case DType::f16:
    case DType::bf16: return f.template operator()<uint16_t>();
  }
  return f.template operator()<float>();
}

}  // namespace onnxdp
