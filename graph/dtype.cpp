#include "graph/dtype.h"

namespace onnxdp {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
bool dtype_is_integer(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i8 || t == DType::u8;
}

// Codes from onnx.proto's TensorProto.DataType.
int dtype_to_onnx(DType t) {
  switch (t) {
    case DType::f32: return 1;
    case DType::u8: return 2;
    case DType::i8: return 3;
    case DType::i32: return 6;
    case DType::i64: return 7;
    case DType::boolean: return 9;
    case DType::f16: return 10;
    case DType::f64: return 11;
    case DType::bf16: return 16;
  }
  return 0;
}

bool dtype_from_onnx(int onnx_type, DType* out) {
  switch (onnx_type) {
    case 1: *out = DType::f32; return true;
    case 2: *out = DType::u8; return true;
    case 3: *out = DType::i8; return true;
    case 6: *out = DType::i32; return true;
    case 7: *out = DType::i64; return true;
    case 9: *out = DType::boolean; return true;
    case 10: *out = DType::f16; return true;
    case 11: *out = DType::f64; return true;
    case 16: *out = DType::bf16; return true;
    default: return false;
  }
}

std::string onnx_type_name(int onnx_type) {
  static const char* names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32",
                                "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64",
                                "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (onnx_type >= 0 && onnx_type < 17) return names[onnx_type];
  return "type " + std::to_string(onnx_type);
}

}  // namespace onnxdp
