// NumPy .npz archives (np.savez / np.savez_compressed): a zip of one .npy file per array.
//
// Read: .npy versions 1.0, 2.0 and 3.0; little-endian (or byte-order-free) dtypes
// <f4 <f8 <f2 <i8 <i4 |i1 |u1 |b1; C order; any rank including 0-d; stored or deflated members.
// Anything else (Fortran order, big-endian, structured or object dtypes, a header that does not
// match the member's byte count, a truncated or corrupt member) is an Error naming the file and
// the array.
//
// Write: one `<name>.npy` member per array (version 1.0, or 2.0 for headers past 64 KiB), deflated
// or stored; written to a temporary file beside `path` and renamed over it, so a reader never sees
// a half-written archive. bf16 has no NumPy dtype and is refused.
#pragma once
#include <map>
#include <string>

#include "graph/tensor.h"

namespace onnxdp {

std::map<std::string, Tensor> read_npz(const std::string& path);
void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays, bool compressed = true);

// The .npy descr of a dtype ("<f4", "|b1" ...); throws Error for bf16.
std::string npy_descr(DType t);

// A .npy file's layout, from its first `avail` bytes (the whole file or member): dtype, shape and
// where the data starts, with read_npz's checks (version, header, dtype, C order, and the data
// filling exactly the rest of the `avail` bytes). For arrays read in place (train/data_files.h).
struct NpyLayout {
  DType dtype = DType::f32;
  Shape shape;
  size_t data_offset = 0;
};
NpyLayout parse_npy_layout(const uint8_t* bytes, size_t avail, const std::string& where);

}  // namespace onnxdp
