// What an exported file's metadata says about the model: which float initializers are constants
// rather than parameters, which parameters the exporter merged, and what the export lost.
// torch.onnx.export(dynamo=True) writes metadata_props on value_info and nodes:
// `pkg.torch.export.graph_signature.InputSpec.kind` (PARAMETER, BUFFER, ...), its optimizer's
// `pkg.onnxscript.optimizer.folded_from` (the sources of a tensor it computed) and
// `pkg.onnxscript.rewriter.rule_name`, and per node the exported program's op
// (`pkg.torch.onnx.fx_node`, which names parameters as placeholders %p_<name>) and module path
// (`pkg.torch.onnx.name_scopes`). Files without it (the legacy exporter, tf2onnx) get only the
// rules that need none.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace onnxdp {

// The dynamo exporter's optimizer merges initializers of equal value, so the weights of every
// LayerNorm or RMSNorm, and every zero-initialised bias of one shape, of an untrained model become
// one initializer, which would train as one tied parameter. Where the exported program's node
// metadata names the parameter each use stands for, this gives every such parameter its own copy
// of the initializer (named after it: blocks.1.norm.weight) and points its uses at it, as the
// module had them. Returns one line per initializer split; changes nothing in other models.
// load_model_proto runs it, so every command sees the same initializers.
std::vector<std::string> untie_merged_parameters(onnx::ModelProto& m);

// torch.onnx.export(dynamo=True)'s optimizer drops all-zero bias inputs (a fresh Conv's or
// Linear's zero bias: Conv / ConvTranspose / Gemm / LayerNormalization lose input 2, a Linear on
// a 3-D input its Add), though the exported program's node metadata still names the parameter
// (%p_<module>_bias beside %p_<module>_weight). This puts each back as a zero float tensor named
// like its weight (`head.weight` -> `head.bias`), shaped by the weight, as the node's input 2 or
// as an Add after the MatMul, so that it trains as in PyTorch and the trained model holds it.
// Returns one line per parameter restored, and a "warning: " line per one named by the metadata
// that is not in the file and cannot be restored. load_model_proto runs it after the untying.
std::vector<std::string> restore_dropped_parameters(onnx::ModelProto& m);

// An ONNX file does not say which initializers are weights. onnxdp trains every f32 initializer
// with a gradient path to the loss, except the ones this returns: initializer name -> why it is a
// constant of the export (a phrase for "frozen: ..."):
//  - the exponent of a Pow node (x.pow(2) in an exported RMSNorm): its gradient x^y ln x is NaN
//    for a negative x, and no framework trains it;
//  - in a torch.export file: a tensor marked BUFFER or CONSTANT_TENSOR; a tensor the optimizer
//    computed from constants only (RoPE's cos / sin tables, attention's scale, a mask's fill
//    value; one computed from a parameter, a Linear weight stored transposed, trains); an
//    unmarked one-element tensor the export wrote (a Python scalar such as an epsilon) that no
//    node's op names as a parameter. Larger unmarked tensors train: the optimizer's rewrites (a
//    BatchNorm fused into a Conv) leave weights unmarked.
std::map<std::string, std::string> export_constants(const onnx::ModelProto& m);

// The float initializers torch.export's metadata calls parameters of the source module (marked
// PARAMETER, named by a node's %p_ placeholder, or folded from one): the rules for files without
// metadata (importer/trainability.h) never freeze them. Empty for other files.
std::set<std::string> export_parameters(const onnx::ModelProto& m);

// What the export lost that training needs, one line per node: a BatchNorm that was in training
// mode in the exported program but is fused into a Conv or in inference form in the file (the
// dynamo exporter keeps no training-mode BatchNorm). Printed by `train` and `inspect`.
std::vector<std::string> export_warnings(const onnx::ModelProto& m);

// The metadata_props of a value_info (field 4) or node (field 9) as key -> value, read through
// reflection, or from the unknown fields when the compiled ONNX proto predates the field.
std::map<std::string, std::string> metadata_props(const google::protobuf::Message& msg, int field_number);

// The names of a metadata list value (folded_from, name_scopes): "['a', 'b.c']" -> {a, b.c}.
std::vector<std::string> name_list(const std::string& s);

}  // namespace onnxdp
