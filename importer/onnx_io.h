// Reading and writing ONNX protobuf files safely: size limits, external data confined to the
// model's folder, every tensor's byte count checked against dims x dtype.
#pragma once
#include <map>
#include <string>

#include "graph/tensor.h"
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace onnxdp {

// Parses a ModelProto from a file; throws Error naming the file on any failure. Parameters the
// exporters merged are untied, and a parameter stored a second time transposed becomes a Transpose
// node of it (importer/export_metadata.h, importer/export_ties.h); `notes` gets a line for each.
onnx::ModelProto load_model_proto(const std::string& path, std::vector<std::string>* notes = nullptr);

// A TensorProto's value. `model_dir` is where external data locations are resolved; a location
// that is absolute, contains "..", is a symlink or hard link, or whose offset/length falls outside
// its file is rejected.
Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& model_dir);
// Writes t into p as raw_data (dims and data_type set, name kept).
void tensor_to_proto(const Tensor& t, onnx::TensorProto* p);

// Reads a TensorProto file (the ONNX backend tests' input_0.pb ...).
Tensor load_tensor_pb(const std::string& path, std::string* name = nullptr);

// The trained model out: the model at `in_path` with the initializers named in `values` replaced,
// everything else kept. Initializers stored as external data stay external: their bytes go to
// `<out file name>.data` beside the output.
void export_model(const std::string& in_path, const std::string& out_path,
                  const std::map<std::string, Tensor>& values);

}  // namespace onnxdp
