// Which initializers train: the one decision that `train`, `inspect` (text, --json, --train) and
// `graph --train` all take, from the ModelProto alone (so `inspect` can say it for a model onnxdp
// cannot import yet). An ONNX file does not say which initializers are parameters; onnxdp trains a
// float32 initializer that reaches an output through a differentiable input, unless one of these
// says it is not one (first match wins, the reason is the phrase after "frozen: "):
//  1. it cannot train: not floating point; a BatchNormalization running statistic (updated by the
//     forward pass); unused; a float type other than f32;
//  2. --freeze REGEX;
//  3. the model's training_info (TrainingInfoProto) names what its update_binding writes: exactly
//     those train;
//  4. the exporter's own marks (importer/export_metadata.h: torch.export's InputSpec, folds, Pow
//     exponents);
//  5. constants recognised in files without such marks (the legacy torch exporter, tf2onnx,
//     jax2onnx, hand-made), for a tensor with a gradient path that the marks do not call a
//     parameter:
//     - it holds NaN or +-inf (a causal mask of -inf);
//     - it reaches the outputs only through positions that are constants in practice: an epsilon
//       added under a Sqrt (Add -> Sqrt, or -> Pow), the divisor of a mean (Div after ReduceSum),
//       a mask added to scores before a Softmax (values 0 or <= -1e4), through Reshape / Slice /
//       Expand / ... on the way; a frequency table whose every path to an output goes through a
//       Sin / Cos of values that come from no float graph input (rotary inv_freq);
//     - it has one element (an epsilon, an attention scale, a mean's divisor), except the slope of
//       a PRelu, and except a tensor named as the legacy exporter names a module's parameter
//       (its state_dict name: `logit_scale`, `blocks.0.gate`; not `onnx::Mul_12`,
//       `/x/Constant_output_0`, tf2onnx's `dense/add/y:0`, `const_fold_opt__3`, jax2onnx's
//       `const_7`) with a use in a trainable position;
//  6. no gradient path to an output (Where's condition, shape and index inputs, comparisons).
// --trainable REGEX makes a tensor frozen by 3-5 train; a name matched by both --freeze and
// --trainable, or --trainable on a tensor of rule 1, is an error naming it.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace onnxdp {

struct TrainabilityOptions {
  std::vector<std::string> freeze;     // --freeze regexes over initializer names
  std::vector<std::string> trainable;  // --trainable regexes
};

struct InitializerRole {
  enum class Why {
    trains,       // trainable
    cannot_train, // rule 1 (unused counts as 1 too, for the error of --trainable: nothing to train)
    user,         // --freeze
    constant,     // rules 3-5: the model means a constant; --trainable overrides
    unreached,    // rule 6: no gradient path to an output (the trainer checks it against the loss)
  };
  std::string name;
  Why why = Why::trains;
  std::string reason;  // empty when it trains; else the phrase after "frozen: "
  bool trainable() const { return why == Why::trains; }
};

struct Trainability {
  std::vector<InitializerRole> initializers;  // in file order
  std::vector<std::string> notes;             // lines for `inspect` and the start of `train`
  // nullptr for a name that is not an initializer.
  const InitializerRole* find(const std::string& name) const;
  std::map<std::string, size_t> index;  // name -> position in initializers
};

// Throws Error for a bad regex, a name matched by both --freeze and --trainable, or --trainable on
// a tensor that cannot train, naming it.
Trainability decide_trainability(const onnx::ModelProto& m, const TrainabilityOptions& options = {});

}  // namespace onnxdp
