#include "train/pipeline.h"

#include <filesystem>

#include "exec/fold.h"
#include "importer/onnx_io.h"

namespace onnxdp {

Graph load_graph(const onnx::ModelProto& m, const std::string& model_dir, const ImportOptions& options) {
  ImportOptions opt = options;
  if (!opt.infer_shapes) opt.infer_shapes = infer_and_fold;  // the recurrent composites unroll over static shapes
  Graph g = import_graph(m, model_dir, opt);
  infer_and_fold(g);
  remove_dead_nodes(g);
  verify(g);
  return g;
}

Graph load_graph(const std::string& model_path, const ImportOptions& options) {
  onnx::ModelProto m = load_model_proto(model_path);
  return load_graph(m, std::filesystem::path(model_path).parent_path().string(), options);
}

}  // namespace onnxdp
