#include "importer/trainability.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <set>

#include "graph/dtype.h"
#include "graph/error.h"
#include "importer/export_metadata.h"
#include "importer/model_file.h"

namespace onnxdp {

const InitializerRole* Trainability::find(const std::string& name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &initializers[it->second];
}

namespace {

using Use = std::pair<int, int>;  // (node, input)

bool is_float_type(int onnx_type) {
  DType d;
  return dtype_from_onnx(onnx_type, &d) && dtype_is_float(d);
}

bool default_domain(const onnx::NodeProto& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

// Ops whose outputs are integer or bool: no gradient flows back through them.
const std::set<std::string>& int_output_ops() {
  static const std::set<std::string> ops = {
      "Shape", "Size", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
      "IsNaN", "IsInf", "ArgMax", "ArgMin", "NonZero", "NonMaxSuppression"};
  return ops;
}

// op -> its inputs that take no gradient (shapes, indices, axes, conditions, running stats).
bool no_grad_input(const std::string& op, int k) {
  static const std::map<std::string, std::set<int>> inputs = {
      {"Reshape", {1}}, {"Expand", {1}}, {"Tile", {1}}, {"Squeeze", {1}}, {"Unsqueeze", {1}}, {"Split", {1}},
      {"Slice", {1, 2, 3, 4}}, {"Gather", {1}}, {"GatherElements", {1}}, {"GatherND", {1}},
      {"ScatterElements", {1}}, {"ScatterND", {1}}, {"Pad", {1, 2, 3}}, {"Resize", {1, 2, 3}}, {"Upsample", {1}},
      {"ReduceSum", {1}}, {"ReduceMean", {1}}, {"ReduceMax", {1}}, {"ReduceMin", {1}}, {"ReduceProd", {1}},
      {"ReduceL1", {1}}, {"ReduceL2", {1}}, {"ReduceLogSumExp", {1}}, {"ReduceSumSquare", {1}}, {"Clip", {1, 2}},
      {"Dropout", {1, 2}}, {"BatchNormalization", {3, 4}}, {"Where", {0}}, {"Range", {0, 1, 2}},
      {"ConstantOfShape", {0}}, {"TopK", {1}}, {"OneHot", {0, 1}}, {"CumSum", {1}}, {"Trilu", {1}},
      {"Compress", {1}}, {"SoftmaxCrossEntropyLoss", {1}}, {"NegativeLogLikelihoodLoss", {1}}};
  auto it = inputs.find(op);
  return it != inputs.end() && it->second.count(k);
}

// Ops that pass their input 0 on unchanged in value (moved, sliced, broadcast, cast): a constant
// stays the same constant through them.
bool passes_value(const std::string& op) {
  static const std::set<std::string> ops = {"Identity", "Cast", "CastLike", "Reshape", "Unsqueeze", "Squeeze",
                                            "Expand", "Slice", "Transpose", "Flatten", "Gather", "Tile"};
  return ops.count(op) > 0;
}

// The graph as ONNX has it: who reads each value, who writes it, which values are floats.
struct ProtoGraph {
  const onnx::GraphProto& gp;
  std::map<std::string, std::vector<Use>> readers;
  std::map<std::string, int> writer;
  std::map<std::string, bool> is_float;
  std::set<std::string> outputs;

  explicit ProtoGraph(const onnx::GraphProto& g) : gp(g) {
    for (const auto& t : gp.initializer()) is_float[t.name()] = is_float_type(t.data_type());
    auto declared = [&](const onnx::ValueInfoProto& vi) {
      if (vi.type().has_tensor_type() && vi.type().tensor_type().elem_type() != 0)
        is_float[vi.name()] = is_float_type(vi.type().tensor_type().elem_type());
    };
    for (const auto& vi : gp.input()) declared(vi);
    for (int i = 0; i < gp.node_size(); ++i) {
      const auto& n = gp.node(i);
      for (int k = 0; k < n.input_size(); ++k)
        if (!n.input(k).empty()) readers[n.input(k)].emplace_back(i, k);
      bool cast_to_int = false;
      if (n.op_type() == "Cast")
        for (const auto& a : n.attribute())
          if (a.name() == "to") cast_to_int = !is_float_type(int(a.i()));
      for (int k = 0; k < n.output_size(); ++k) {
        bool index_out = (k == 1 && (n.op_type() == "MaxPool" || n.op_type() == "TopK" || n.op_type() == "Dropout")) ||
                         (k >= 1 && n.op_type() == "Unique");
        is_float[n.output(k)] = !(int_output_ops().count(n.op_type()) || cast_to_int || index_out);
        writer[n.output(k)] = i;
      }
    }
    for (const auto& vi : gp.value_info()) declared(vi);
    for (const auto& vi : gp.output()) {
      declared(vi);
      outputs.insert(vi.name());
    }
  }
  const onnx::NodeProto& node(int i) const { return gp.node(i); }
  bool floating(const std::string& v) const {
    auto it = is_float.find(v);
    return it != is_float.end() && it->second;
  }
  // Whether a gradient can flow from node i's outputs back into its input k.
  bool carries_gradient(int i, int k) const {
    const auto& n = node(i);
    if (no_grad_input(n.op_type(), k)) return false;
    for (const auto& o : n.output())
      if (floating(o)) return true;
    return false;
  }
  const std::vector<Use>& uses(const std::string& v) const {
    static const std::vector<Use> none;
    auto it = readers.find(v);
    return it == readers.end() ? none : it->second;
  }

  // Which values carry a gradient back from the graph outputs. A value carries one when it is
  // floating point and a consumer that carries one takes it at a differentiable input. Ops whose
  // outputs are integer or bool (Shape, Equal, ArgMax, Cast to int ...) and index/shape inputs
  // (Reshape's shape, Gather's indices, Where's condition ...) stop the path, as in autodiff.
  std::set<std::string> gradient_values() const {
    std::set<std::string> needed;
    for (const auto& o : outputs)
      if (floating(o)) needed.insert(o);
    for (int i = gp.node_size() - 1; i >= 0; --i) {
      const auto& n = node(i);
      bool carries = false;
      for (const auto& o : n.output()) carries |= needed.count(o) && floating(o);
      if (!carries) continue;
      for (int k = 0; k < n.input_size(); ++k)
        if (!n.input(k).empty() && !no_grad_input(n.op_type(), k) && floating(n.input(k))) needed.insert(n.input(k));
    }
    return needed;
  }

  // Values computed from a float graph input (the batch's data; positions given as integers are not).
  std::set<std::string> data_values() const {
    std::set<std::string> data;
    std::set<std::string> inits;
    for (const auto& t : gp.initializer()) inits.insert(t.name());
    for (const auto& vi : gp.input())
      if (!inits.count(vi.name()) && floating(vi.name())) data.insert(vi.name());
    for (const auto& n : gp.node()) {
      bool from_data = false;
      for (const auto& in : n.input()) from_data |= data.count(in) > 0;
      if (from_data)
        for (const auto& o : n.output())
          if (floating(o)) data.insert(o);
    }
    return data;
  }

  // Values whose every path to a graph output goes through a Sin or Cos of values computed from no
  // float graph input (a rotary frequency table's). Nodes are in topological order: walking them
  // backwards, every reader's outputs are known before the value it reads.
  std::set<std::string> only_through_trig() const {
    const std::set<std::string> data = data_values();
    std::map<std::string, bool> ok;
    auto eval = [&](const std::string& v) {
      if (outputs.count(v)) return false;
      for (auto [i, k] : uses(v)) {
        if (!carries_gradient(i, k)) continue;
        const auto& n = node(i);
        if (default_domain(n) && (n.op_type() == "Sin" || n.op_type() == "Cos")) {
          if (data.count(n.input(0))) return false;
          continue;
        }
        for (const auto& o : n.output())
          if (floating(o) && !ok[o]) return false;
      }
      return true;
    };
    for (int i = gp.node_size() - 1; i >= 0; --i)
      for (const auto& o : node(i).output()) ok[o] = eval(o);
    std::set<std::string> result;
    for (const auto& t : gp.initializer())
      if (eval(t.name())) result.insert(t.name());
    return result;
  }
};

// What constant_reason needs to know of an initializer's float32 values stored in the file (not
// external data), in one pass over its bytes without a copy (a 160 M-parameter model's weights
// were copied whole here): the first non-finite value, and whether every value is a mask's (0, or
// -1e4 and below) with at least one negative. Raw bytes are scanned a piece at a time with no
// branch per value (a vectorised loop: the scan of a 160 M-parameter model took 0.5 s value by
// value); the first non-finite value is looked up only in a piece that has one.
struct F32Facts {
  bool any = false, finite = true, mask_values = true, any_negative = false;
  float first_bad = 0.f;

  void see(float x) {
    any = true;
    if (finite && !std::isfinite(x)) finite = false, first_bad = x;
    mask_values &= x == 0.f || x <= -1e4f;
    any_negative |= x <= -1e4f;
  }
  // n bytes of little-endian float32 values (a multiple of 4), with no alignment.
  void see_bytes(const char* p, size_t n) {
    uint32_t exponent_all_ones = 0, not_mask = 0, negative = 0;
    constexpr size_t kBlock = 1024;  // values per float block on the stack: aligned, vectorised
    float block[kBlock];
    for (size_t done = 0; done < n / 4;) {
      const size_t k = std::min(kBlock, n / 4 - done);
      std::memcpy(block, p + 4 * done, 4 * k);
      for (size_t i = 0; i < k; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &block[i], 4);
        exponent_all_ones |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
        not_mask |= uint32_t(!(block[i] == 0.f || block[i] <= -1e4f));
        negative |= uint32_t(block[i] <= -1e4f);
      }
      if (exponent_all_ones && finite)
        for (size_t i = 0; i < k && finite; ++i) see(block[i]);
      done += k;
    }
    if (n >= 4) any = true;
    mask_values &= !not_mask;
    any_negative |= negative != 0;
  }
};
F32Facts inline_f32_facts(const onnx::TensorProto& t) {
  F32Facts f;
  if (t.data_type() != onnx::TensorProto::FLOAT || t.data_location() == onnx::TensorProto::EXTERNAL) return f;
  if (const InFileData d = in_file_data(t); d.in_file) {  // raw_data left in the model file (model_file.h)
    read_in_file_data(t.name(), d, size_t(4) << 20, [&](const char* p, size_t n) { f.see_bytes(p, n); });
  } else if (t.has_raw_data()) {
    f.see_bytes(t.raw_data().data(), t.raw_data().size());
  } else {
    for (float x : t.float_data()) f.see(x);
  }
  return f;
}

// A name as the legacy torch exporter writes a module's parameter or buffer: its state_dict name,
// identifiers joined by '.' (`logit_scale`, `blocks.0.gate`). Exporters' generated names are not:
// `onnx::Mul_12`, `/blocks.0/Constant_output_0` (':' or '/'), tf2onnx's `dense/add/y:0` and
// `const_fold_opt__3`, jax2onnx's `const_7`, the dynamo exporter's `val_9`: one identifier ending
// in _<digits>.
bool state_dict_name(const std::string& name) {
  static const std::regex path(R"([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*)");
  static const std::regex generated(R"([A-Za-z_]+_[0-9]+)");
  return std::regex_match(name, path) && !std::regex_match(name, generated);
}

// Where one use of a constant's value puts it: a position that is a constant in practice (with
// the phrase saying which), a trainable one, or none (no gradient flows back).
struct Position {
  enum Kind { none, constant, trainable } kind = none;
  std::string why;
  bool mask = false;   // a constant only if its values are a mask's
  bool prelu = false;  // a PRelu's slope: a parameter whatever its size
};

class Rules {
 public:
  explicit Rules(const onnx::GraphProto& gp) : g_(gp), trig_(g_.only_through_trig()) {}

  const ProtoGraph& graph() const { return g_; }

  // The reason an unmarked float initializer is a constant of the export, or "".
  std::string constant_reason(const onnx::TensorProto& t) const {
    const F32Facts values = inline_f32_facts(t);
    if (!values.finite) return fmt::format("holds non-finite values ({}): a mask or fill value", values.first_bad);
    std::vector<Position> positions;
    follow(t.name(), positions, 0);
    // A mask added to scores: 0 where attention goes, very negative where it does not.
    const bool mask_values = values.any && values.mask_values, any_negative = values.any_negative;
    bool trainable_use = false, prelu_slope = false;
    std::string constant_use;
    for (const Position& p : positions) {
      bool constant = p.kind == Position::constant && (!p.mask || (mask_values && any_negative));
      trainable_use |= p.kind == Position::trainable || (p.kind == Position::constant && !constant);
      if (constant && constant_use.empty()) constant_use = p.why;
      prelu_slope |= p.prelu;
    }
    if (!trainable_use && !constant_use.empty()) return constant_use;
    if (trig_.count(t.name())) return "a frequency table: it reaches the outputs only through Sin / Cos of positions";
    bool one_element = true;
    for (int64_t d : t.dims()) one_element &= d == 1;
    if (one_element && !prelu_slope && !(state_dict_name(t.name()) && trainable_use))
      return "a one-element constant (an epsilon, a scale, a divisor)";
    return "";
  }

 private:
  ProtoGraph g_;
  std::set<std::string> trig_;

  // Every use of value v, through ops that pass a value on unchanged.
  void follow(const std::string& v, std::vector<Position>& out, int depth) const {
    if (g_.outputs.count(v)) out.push_back({Position::trainable, ""});
    for (auto [i, k] : g_.uses(v)) {
      const auto& n = g_.node(i);
      if (!g_.carries_gradient(i, k)) continue;
      const std::string& op = n.op_type();
      if (!default_domain(n)) {
        out.push_back({Position::trainable, ""});
      } else if (passes_value(op) && k == 0 && depth < 16) {
        for (const auto& o : n.output()) follow(o, out, depth + 1);
      } else {
        out.push_back(position(i, k));
      }
    }
  }

  // Whether node i's output 0 is read, and only by `ops` (or as the base of a Pow): not a graph output.
  bool output_read_only_by(int i, const std::set<std::string>& ops, bool base_of_pow = false) const {
    const auto& n = g_.node(i);
    if (n.output_size() == 0 || g_.outputs.count(n.output(0))) return false;
    const auto& readers = g_.uses(n.output(0));
    if (readers.empty()) return false;
    for (auto [r, k] : readers) {
      const std::string& op = g_.node(r).op_type();
      if (!(ops.count(op) || (base_of_pow && op == "Pow" && k == 0))) return false;
    }
    return true;
  }

  Position position(int i, int k) const {
    const auto& n = g_.node(i);
    const std::string& op = n.op_type();
    const std::string name = n.name().empty() ? "<unnamed>" : n.name();
    if (op == "PRelu" && k == 1) return {Position::trainable, "", false, true};
    if (op == "Pow" && k == 1) return {Position::constant, fmt::format("the exponent of Pow node '{}'", name)};
    if (op == "Add" && output_read_only_by(i, {"Sqrt"}, true))
      return {Position::constant, fmt::format("an epsilon added under a square root (node '{}')", name)};
    if (op == "Div" && k == 1 && n.input_size() > 0) {
      auto w = g_.writer.find(n.input(0));
      if (w != g_.writer.end() && g_.node(w->second).op_type() == "ReduceSum")
        return {Position::constant, fmt::format("the divisor of a mean (node '{}')", name)};
    }
    if (op == "Add" && output_read_only_by(i, {"Softmax", "LogSoftmax"}))
      return {Position::constant, fmt::format("a mask added to scores before a Softmax (node '{}')", name), true};
    return {Position::trainable, ""};
  }
};

std::vector<std::regex> compile(const std::vector<std::string>& patterns, const char* option) {
  std::vector<std::regex> res;
  for (const auto& p : patterns) {
    try {
      res.emplace_back(p);
    } catch (const std::regex_error& e) {
      fail("{} '{}' is not a valid regular expression: {}", option, p, e.what());
    }
  }
  return res;
}

// The first pattern that matches name, or nullptr.
const std::string* matching(const std::vector<std::regex>& res, const std::vector<std::string>& patterns,
                            const std::string& name) {
  for (size_t i = 0; i < res.size(); ++i)
    if (std::regex_search(name, res[i])) return &patterns[i];
  return nullptr;
}

}  // namespace

Trainability decide_trainability(const onnx::ModelProto& m, const TrainabilityOptions& options) {
  const onnx::GraphProto& gp = m.graph();
  const std::vector<std::regex> freeze = compile(options.freeze, "--freeze");
  const std::vector<std::regex> train = compile(options.trainable, "--trainable");
  Trainability result;

  // What the model's training_info updates: those train, no other (rule 3).
  std::set<std::string> updated;
  for (const auto& ti : m.training_info())
    for (const auto& b : ti.update_binding()) updated.insert(b.key());
  if (!updated.empty())
    result.notes.push_back(fmt::format("the model's training_info updates {} initializers: they train, and only they "
                                       "(--freeze and --trainable still apply)",
                                       updated.size()));

  std::map<std::string, std::string> running_stat;
  for (const auto& n : gp.node())
    if (default_domain(n) && n.op_type() == "BatchNormalization")
      for (int k = 3; k < 5 && k < n.input_size(); ++k)
        running_stat[n.input(k)] = k == 3 ? "BatchNormalization running mean" : "BatchNormalization running variance";
  const Rules rules(gp);
  const ProtoGraph& pg = rules.graph();
  const std::set<std::string> grad = pg.gradient_values();
  const std::map<std::string, std::string> constants = export_constants(m);
  const std::set<std::string> parameters = export_parameters(m);

  using Why = InitializerRole::Why;
  for (const auto& t : gp.initializer()) {
    InitializerRole r;
    r.name = t.name();
    auto set = [&](Why why, std::string reason) {
      r.why = why;
      r.reason = std::move(reason);
    };
    DType d;
    const bool known = dtype_from_onnx(t.data_type(), &d);
    std::string type = known ? dtype_name(d) : onnx_type_name(t.data_type());
    if (!known) for (char& c : type) c = char(std::tolower(static_cast<unsigned char>(c)));
    const std::string* frozen_by = matching(freeze, options.freeze, r.name);
    std::string rule;
    if (!is_float_type(t.data_type())) {
      set(Why::cannot_train, type + " (not floating point)");
    } else if (running_stat.count(r.name)) {
      set(Why::cannot_train, running_stat[r.name]);
    } else if (pg.uses(r.name).empty() && !pg.outputs.count(r.name)) {
      set(Why::unreached, "unused");
    } else if (t.data_type() != onnx::TensorProto::FLOAT) {
      set(Why::cannot_train, type + " (onnxdp trains f32 parameters)");
    } else if (frozen_by) {
      set(Why::user, fmt::format("--freeze '{}'", *frozen_by));
    } else if (!updated.empty()) {
      if (!updated.count(r.name)) set(Why::constant, "the model's training_info does not update it");
    } else if (auto c = constants.find(r.name); c != constants.end()) {
      set(Why::constant, c->second);
    } else if (grad.count(r.name) && !parameters.count(r.name) && !(rule = rules.constant_reason(t)).empty()) {
      set(Why::constant, rule);
    }
    if (r.why == Why::trains && !grad.count(r.name)) set(Why::unreached, "no gradient path to an output");

    if (const std::string* trained_by = matching(train, options.trainable, r.name)) {
      if (frozen_by) fail("initializer '{}' is matched by both --freeze '{}' and --trainable '{}'", r.name, *frozen_by, *trained_by);
      if (r.why == Why::cannot_train)
        fail("--trainable '{}' matches initializer '{}', which cannot train: {}", *trained_by, r.name, r.reason);
      if (r.why == Why::constant) {
        if (grad.count(r.name)) set(Why::trains, "");
        else set(Why::unreached, "no gradient path to an output");
      }
    }
    result.index.emplace(r.name, result.initializers.size());
    result.initializers.push_back(std::move(r));
  }
  return result;
}

}  // namespace onnxdp
