// ONNX -> Graph. One import function per ONNX op (importer/ops_<category>.cpp, named
// import_<Op>), dispatched through the op table.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <unordered_set>

#include "graph/graph.h"
#include "onnx/onnx_pb.h"

namespace onnxdp {

// Default-domain opsets onnxdp imports; each import function handles the differences between
// versions of its op within this range.
inline constexpr int kMinOpset = 7;
inline constexpr int kMaxOpset = 27;

struct ImportOptions {
  int64_t batch_size = 1;                      // for the leading symbolic dim of graph inputs
  std::map<std::string, Shape> input_shapes;   // exact shapes for inputs, overriding the model's
  std::map<std::string, Tensor> constant_inputs;  // graph inputs bound to known values
  // Shape inference with constant folding over the graph imported so far, for composites that need
  // a static shape (ImportCtx::static_shape). load_graph (compile/compile.h) sets it to
  // infer_and_fold (graph/passes/fold.h) with the CPU kernels, which the importer does not link.
  std::function<void(Graph&)> infer_shapes;
};

// The model file's facts, for `onnxdp inspect`.
struct ModelInfo {
  std::string path;
  int64_t ir_version = 0;
  std::string producer;
  std::map<std::string, int64_t> opsets;  // domain ("" is ai.onnx) -> version
};

ModelInfo model_info(const onnx::ModelProto& m, const std::string& path);

// Imports a parsed model; `model_dir` resolves external data. Graph inputs get static shapes
// (symbolic leading dims become options.batch_size). Node outputs are not yet typed: shapes are
// inferred together with constant folding (graph/passes/fold.h); onnxdp::load_graph
// (compile/compile.h) runs the whole sequence.
Graph import_graph(const onnx::ModelProto& m, const std::string& model_dir, const ImportOptions& options);

// Everything an import function sees. The generic part (inputs, outputs, attributes converted by
// type) is done before it is called; the function checks and normalises.
struct ImportCtx {
  Graph& graph;
  const onnx::NodeProto& proto;
  int opset;      // the model's default-domain opset
  Node& node;     // name, op, inputs and attributes already filled
  const ImportOptions* options = nullptr;
  // Outputs of the ONNX node bound to helper values (bind_output); kNoValue: the node's own.
  std::vector<ValueId> bound_outputs;
  std::vector<ValueId> helper_values;  // the values add_node made for this node
  // The names of the graph's values, kept by import_graph so that new names are checked in O(1)
  // (the recurrent composites add thousands); null: Graph::find.
  std::unordered_set<std::string>* value_names = nullptr;
  bool shapes_current = false;  // static_shape's inference covers every node so far

  // base, or base_1, base_2 ... : a name no value has yet, now taken.
  std::string unique_value_name(const std::string& base);

  // A new constant value (kind constant) holding t; returns its id.
  ValueId add_constant(Tensor t, const std::string& hint);
  // Appends a helper node ahead of the node being imported (which the importer appends next, so
  // the order stays topological), named <node>/<suffix>, and returns its one output.
  ValueId add_node(Op op, const std::string& suffix, std::vector<ValueId> inputs,
                   std::map<std::string, Attr> attrs = {});
  // The same for an op with several outputs (Split): returns its n outputs.
  std::vector<ValueId> add_node_n(Op op, const std::string& suffix, std::vector<ValueId> inputs, int n,
                                  std::map<std::string, Attr> attrs = {});
  // Composites with several outputs: ONNX output k is v, a value add_node made for this node; v
  // takes the output's name and the node itself does not make output k.
  void bind_output(size_t k, ValueId v);
  // The static shape of v. For a node's output, shapes are inferred (with constant folding) over
  // the graph imported so far, through options->infer_shapes.
  const Shape& static_shape(ValueId v, const char* what);
  // Moves an ints attribute of older opsets into input `index` as an i64 constant (Squeeze's
  // axes, ReduceSum's axes, Split's split ...). No-op when the attribute is absent.
  void attr_to_input(const std::string& attr, size_t index);
  // Drops attributes onnxdp ignores by design (documented at the call).
  void ignore_attr(const std::string& attr) { node.attrs.erase(attr); }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(fmt::format("node {} ({}, opset {}): ", proto.name().empty() ? "<unnamed>" : proto.name(),
                            proto.op_type(), opset) +
                fmt::format(f, std::forward<Args>(args)...));
  }
};

// The rows of graph/op_table.h with an import of their own, import_<Op> in importer/ops_<C>.cpp:
// an ONNX form that changed across opsets (normalised to one), attributes to check or refuse, or
// onnxdp's own ops a model must not name. Every other row takes the default import: the node as
// read (inputs, and attributes converted by their type and checked against the row's schema);
// rows of onnxdp's own categories (grad, collective) are refused there. Composites
// (ONNXDP_COMPOSITES) always have their own. The importer is compiled with
// -Werror=missing-declarations, so an import_<Op> left out of this list does not build.
#define ONNXDP_IMPORTS(X)                                                                          \
  X(Clip) X(Softmax) X(LogSoftmax) X(FusedGemm) X(FusedMatMul) X(MaskedSoftmax) X(FusedAttention)  \
  X(BatchNormalization) X(Dropout)                                                                 \
  X(ReduceMean) X(ReduceSum) X(ReduceMax) X(ReduceMin) X(ReduceProd) X(TopK)                       \
  X(Cast) X(CastLike) X(Squeeze) X(Unsqueeze) X(Concat) X(Split) X(Slice) X(Pad) X(GatherND)       \
  X(ScatterND) X(Resize) X(OneHot)                                                                 \
  X(Constant) X(ConstantOfShape) X(Range)

using ImportFn = void (*)(ImportCtx&);
#define ONNXDP_X(op, ...) void import_##op(ImportCtx&);
ONNXDP_IMPORTS(ONNXDP_X)
ONNXDP_COMPOSITES(ONNXDP_X)
#undef ONNXDP_X

// The import of op: its own (ONNXDP_IMPORTS) or the default.
ImportFn import_fn(Op op);
// A composite op's import (graph/op_table.h's ONNXDP_COMPOSITES); nullptr for other names.
ImportFn composite_import_fn(const std::string& name);

}  // namespace onnxdp
