// Fuzz target: bytes as an .onnx file, through what `onnxdp inspect` does with a model short of
// running kernels: load_model_proto (protobuf, size checks, the exporters' fix-ups), export
// warnings, the model's facts, which initializers train, then load_graph's sequence (import, shape
// inference, dead-node removal, verification). Constant folding's kernels are left out: they are
// exec/, whose build under clang and the sanitizers takes longer than CI can give; a node that
// would be folded ends the input with an onnxdp::Error here, and every shape rule before it runs.
#include <cstddef>
#include <cstdint>

#include "graph/passes/dead_nodes.h"
#include "graph/passes/fold.h"
#include "importer/export_metadata.h"
#include "importer/importer.h"
#include "importer/onnx_io.h"
#include "importer/trainability.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void infer_without_folding(onnxdp::Graph& g) {
  onnxdp::infer_and_fold(g, [](const onnxdp::Graph&, const onnxdp::Node& n, const std::vector<const onnxdp::Tensor*>&)
                                -> std::vector<onnxdp::Tensor> {
    onnxdp::fail("fuzz_model: node '{}' would be folded (no kernels in this target)", n.name);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnxdp;
  const std::string path = fuzz::write_input("model.onnx", data, size);
  fuzz::expect_clean([&] {
    std::vector<std::string> notes;
    onnx::ModelProto m = load_model_proto(path, &notes);
    export_warnings(m);
    model_info(m, path);
    decide_trainability(m);
    ImportOptions options;
    options.batch_size = 2;
    options.infer_shapes = infer_without_folding;
    Graph g = import_graph(m, fuzz::scratch().string(), options);
    infer_without_folding(g);
    remove_dead_nodes(g);
    verify(g);
  });
  return 0;
}
