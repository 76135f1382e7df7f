// The load sequence every command shares: parse, import, infer shapes with constant folding,
// drop dead nodes, verify.
#pragma once
#include <string>

#include "importer/importer.h"

namespace onnxdp {

Graph load_graph(const std::string& model_path, const ImportOptions& options = {});
// The same from a parsed model (model_dir resolves external data).
Graph load_graph(const onnx::ModelProto& m, const std::string& model_dir, const ImportOptions& options = {});

}  // namespace onnxdp
