// Which tensors of an exported file are one parameter of the source model, and which are several:
// PyTorch's exporters store some parameters in ways that, read literally, train a different model.
//  - torch.onnx.export(dynamo=False) deduplicates initializers: every tensor equal to an earlier one
//    becomes an Identity node of it (distinct parameters would train as one tied tensor);
//  - both exporters constant-fold a Transpose of a weight into a second initializer, so a tied
//    weight used once as stored and once transposed (GPT-2's lm_head and token embedding) is stored
//    twice (one parameter would train as two copies);
//  - torch.export's graph signature names every parameter of the source module, also those whose
//    every use the exporter folded into a computed tensor (exported_program_inputs).
// load_model_proto runs the two rewrites after untie_merged_parameters (export_metadata.h), so
// every command (inspect, train, run, the trained model's export) sees the same graph.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace onnxdp {

// torch.onnx.export(dynamo=False) (without keep_initializers_as_inputs) runs its initializer
// deduplication after constant folding: every initializer equal in dtype, shape and value to an
// earlier one (in a TRAINING-mode export: sharing its storage) is dropped, and an Identity node of
// the earlier one, named `Identity_N` and writing the dropped tensor's own name, takes its place.
// A freshly initialised transformer has many such tensors: zero biases, all-ones LayerNorm
// weights, and every weight of nn.TransformerEncoder's deep-copied layers. PyTorch trains them
// apart, so this gives each Identity output its own copy of the initializer under that name and
// removes the Identity. A parameter the module really shares (one nn.Parameter used twice) never
// looks like this: the exporter emits each Parameter object once (torch.jit._unique_state_dict)
// and its uses read that one initializer directly, which is left as it is.
// The exporter deduplicates the tensors its constant folding computed (named `onnx::...`) as well:
// a Linear weight transposed for a MatMul is folded once per call, so a module called twice
// (weights shared across steps, as ALBERT's layer) leaves an Identity between two folds of ONE
// parameter, while deep-copied layers leave one between folds of two. Such an Identity is undone
// only when no module reads both tensors (node names give the module: "/layers.0/linear1/MatMul"
// and "/layers.1/linear1/MatMul" are two modules, "/a/MatMul" and "/a_1/MatMul" two calls of one).
// Applies to files whose producer is "pytorch" and that carry no torch.export metadata (the dynamo
// exporter merges without Identity nodes: untie_merged_parameters), to Identity nodes of a float
// initializer whose output is not a graph output (the exporter returns a parameter through an
// Identity). Limits: two distinct nn.Parameter objects over the same storage, exported with
// training=TRAINING, are one tensor in PyTorch's training but are untied here; two modules that
// share one Parameter and read it through folded transposes are untied; modules named `x` and
// `x_1` are taken for two calls of one.
// Returns one line per initializer split.
std::vector<std::string> untie_deduplicated_initializers(onnx::ModelProto& m);

// A float initializer B that holds another one, A, transposed (B == A with its last two axes
// swapped, exactly), and that the file shows the exporter computed from A, is A used a second time:
// it is replaced by a Transpose node of A writing B, so both uses train A (their gradients add up)
// and the trained model holds A once (with the node, which ONNX Runtime runs as any other).
// "The exporter computed it from A" is read from:
//  - torch.export files: B's `pkg.onnxscript.optimizer.folded_from` is exactly [A];
//  - legacy PyTorch files (producer "pytorch", no torch.export metadata): B is named `onnx::...`
//    (the name the exporter gives a tensor its constant folding computed, such as the transposed
//    weight of a MatMul) and A is not; A's values are not all equal and, when square, A is not
//    symmetric: then B = A^T cannot be the transpose of some other parameter that merely starts
//    from the same fill (zeros, an identity matrix). Limit: a parameter initialised as an exact
//    copy of A and used only transposed is tied to A here.
// Other files are left as they are: two tensors that start transposed-equal may be meant to train
// apart. `model_dir` resolves external data. Returns one line per copy replaced.
std::vector<std::string> tie_transposed_copies(onnx::ModelProto& m, const std::string& model_dir);

// The exported program's inputs as torch.export lists them in the graph's metadata_props
// (`pkg.torch.export.ExportedProgram.graph_signature`, lines `p_wpe_weight: PARAMETER
// target='wpe.weight'`): target name -> kind (PARAMETER, BUFFER, CONSTANT_TENSOR, USER_INPUT, ...).
// It names parameters the file no longer holds, such as a position embedding the exporter gathered
// at constant positions into a folded initializer. Empty for files without it.
std::map<std::string, std::string> exported_program_inputs(const onnx::ModelProto& m);

}  // namespace onnxdp
