// Large initializers stay in the model file. load_model_proto (importer/onnx_io.h) parses a model
// without the raw_data of its initializers of kInFileBytes bytes or more: each such TensorProto
// instead names where its bytes lie in the file (an external_data entry under a key private to
// this process, which no file can hold), and tensor_from_proto reads them from the file straight
// into the tensor. A 160 M-parameter model's weights are then copied once (file -> tensor), and a
// ModelProto kept for a whole run (the trainer's) holds its graph, not a second copy of them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <ostream>

#include "onnx/onnx_pb.h"

namespace onnxdp {

// raw_data this large or larger stays in the file; smaller tensors are parsed as they are.
inline constexpr size_t kInFileBytes = size_t(64) << 10;

// The identity of the model file at the time it was parsed: a tensor is read from it only while
// the file is still that file (not replaced, resized or rewritten since).
struct ModelFileId {
  std::string path;  // absolute
  uint64_t device = 0, inode = 0, size = 0;
  int64_t mtime_ns = 0;
};

// `file`, the bytes of the model file `id`, with every initializer's raw_data of kInFileBytes or
// more replaced by a reference to where it lies in the file (protobuf's rule kept: the last
// raw_data of a TensorProto is its value). nullopt when the file holds no such raw_data or its
// wire format is not the plain one walked here (groups, a malformed length): the caller parses the
// file whole then, which reports a malformed one as before.
std::optional<std::string> model_bytes_without_large_raw_data(std::string_view file, const ModelFileId& id);

// The bytes of t's raw_data left in the model file, or 0 with *in_file false when t has none.
struct InFileData {
  bool in_file = false;
  ModelFileId file;
  uint64_t offset = 0, length = 0;
};
InFileData in_file_data(const onnx::TensorProto& t);

// Reads `length` bytes of t's raw_data from its model file, in pieces of at most `piece` bytes,
// each passed to `take` (a pointer and its size). Error naming the tensor and the file when the
// file is no longer the one parsed or cannot be read.
void read_in_file_data(const std::string& tensor, const InFileData& d, size_t piece,
                       const std::function<void(const char*, size_t)>& take);
// The same into one buffer of d.length bytes.
void read_in_file_data(const std::string& tensor, const InFileData& d, void* out);

// Where the raw_data of an initializer being written comes from: bytes in memory (a trained
// tensor) or the model file it was left in.
struct RawDataSource {
  std::string name;  // the initializer's, for errors
  const void* data = nullptr;
  size_t size = 0;
  InFileData in_file;  // when in_file.in_file, instead of data and size
  size_t bytes() const { return in_file.in_file ? size_t(in_file.length) : size; }
};

// The bytes of m written to `out`, the raw_data of initializer k taken from sources[k] where it is
// set (m holds none for it) as it is written, and no reference into a model file kept: a model's
// weights are not copied into the message first. Error past protobuf's 2 GiB, or when a write fails.
void write_model(const onnx::ModelProto& m, const std::vector<std::optional<RawDataSource>>& sources,
                 std::ostream& out, const std::string& out_name);

}  // namespace onnxdp
