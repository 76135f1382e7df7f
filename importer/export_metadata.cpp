#include "importer/export_metadata.h"

#include <fmt/format.h>

#include <cctype>
#include <set>

#include "google/protobuf/unknown_field_set.h"
#include "importer/export_ties.h"

namespace onnxdp {

std::map<std::string, std::string> metadata_props(const google::protobuf::Message& msg, int field_number) {
  std::map<std::string, std::string> props;
  const google::protobuf::Reflection* r = msg.GetReflection();
  if (const auto* f = msg.GetDescriptor()->FindFieldByNumber(field_number)) {
    if (f->is_repeated() && f->message_type() == onnx::StringStringEntryProto::descriptor())
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        const auto& e = static_cast<const onnx::StringStringEntryProto&>(r->GetRepeatedMessage(msg, f, i));
        props[e.key()] = e.value();
      }
    return props;
  }
  const google::protobuf::UnknownFieldSet& unknown = r->GetUnknownFields(msg);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& u = unknown.field(i);
    if (u.number() != field_number || u.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    onnx::StringStringEntryProto e;
    if (e.ParseFromString(u.length_delimited())) props[e.key()] = e.value();
  }
  return props;
}

namespace {

constexpr int kValueInfoMetadata = 4, kNodeMetadata = 9;
const char* const kKind = "pkg.torch.export.graph_signature.InputSpec.kind";
const char* const kFoldedFrom = "pkg.onnxscript.optimizer.folded_from";
const char* const kFxNode = "pkg.torch.onnx.fx_node";

// torch.export's placeholder for parameter `name`: p_ + the name lower-cased, dots as '_'.
std::string placeholder(const std::string& name) {
  std::string p = "p_";
  for (char c : name) p += c == '.' ? '_' : char(std::tolower(static_cast<unsigned char>(c)));
  return p;
}

// The %p_... placeholders (parameters) one node's fx_node text names.
std::set<std::string> node_placeholders(const onnx::NodeProto& n) {
  std::set<std::string> found;
  auto props = metadata_props(n, kNodeMetadata);
  auto fx = props.find(kFxNode);
  if (fx == props.end()) return found;
  const std::string& s = fx->second;
  for (size_t i = 0; (i = s.find("%p_", i)) != std::string::npos;) {
    size_t end = i + 1;
    while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_')) ++end;
    found.insert(s.substr(i + 1, end - i - 1));
    i = end;
  }
  return found;
}

// Every %p_... placeholder the exported program's nodes name.
std::set<std::string> parameter_placeholders(const onnx::GraphProto& gp) {
  std::set<std::string> found;
  for (const auto& n : gp.node()) found.merge(node_placeholders(n));
  return found;
}

std::string joined(const std::vector<std::string>& names, size_t most) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > most) s += fmt::format(", … ({} in all)", names.size());
  return s;
}

}  // namespace

namespace {

// What torch.export's marks say about the float initializers of a file.
struct ExportMarks {
  std::set<std::string> floats, scalars;                        // float initializers; those of one element
  std::map<std::string, std::string> kind;                      // InputSpec.kind
  std::map<std::string, std::vector<std::string>> folded_from;  // the optimizer's sources
  std::set<std::string> placeholders;                           // %p_... the nodes name
  // The exported program's inputs by name -> kind: a folded tensor's source may be a parameter the
  // file no longer holds (a position embedding gathered at constant positions is folded whole).
  std::map<std::string, std::string> program_inputs;
  bool torch_export = false;

  explicit ExportMarks(const onnx::ModelProto& m) : program_inputs(exported_program_inputs(m)) {
    const onnx::GraphProto& gp = m.graph();
    for (const auto& t : gp.initializer())
      if (t.data_type() == onnx::TensorProto::FLOAT || t.data_type() == onnx::TensorProto::DOUBLE ||
          t.data_type() == onnx::TensorProto::FLOAT16 || t.data_type() == onnx::TensorProto::BFLOAT16) {
        floats.insert(t.name());
        bool scalar = true;
        for (int64_t d : t.dims()) scalar &= d == 1;
        if (scalar) scalars.insert(t.name());
      }
    // torch.export's marks, on value_info (and, in some versions, on graph inputs).
    auto read = [&](const onnx::ValueInfoProto& vi) {
      if (!floats.count(vi.name())) return;
      auto props = metadata_props(vi, kValueInfoMetadata);
      if (auto k = props.find(kKind); k != props.end()) kind[vi.name()] = k->second;
      if (auto f = props.find(kFoldedFrom); f != props.end()) folded_from[vi.name()] = name_list(f->second);
    };
    for (const auto& vi : gp.value_info()) read(vi);
    for (const auto& vi : gp.input()) read(vi);
    torch_export = !kind.empty() || !folded_from.empty();
    if (torch_export) placeholders = parameter_placeholders(gp);
  }
  bool is_parameter(const std::string& name) const {
    auto k = kind.find(name);
    return (k != kind.end() && k->second == "PARAMETER") || placeholders.count(placeholder(name));
  }
  bool from_parameter(const std::string& name) const {
    auto f = folded_from.find(name);
    if (f == folded_from.end()) return false;
    for (const std::string& source : f->second) {
      auto p = program_inputs.find(source);
      if (is_parameter(source) || (p != program_inputs.end() && p->second == "PARAMETER")) return true;
    }
    return false;
  }
};

}  // namespace

std::set<std::string> export_parameters(const onnx::ModelProto& m) {
  const ExportMarks marks(m);
  std::set<std::string> params;
  for (const std::string& name : marks.floats)
    if (marks.is_parameter(name) || marks.from_parameter(name)) params.insert(name);
  return params;
}

std::map<std::string, std::string> export_constants(const onnx::ModelProto& m) {
  const onnx::GraphProto& gp = m.graph();
  const ExportMarks marks(m);

  std::map<std::string, std::string> constants;
  for (const auto& n : gp.node()) {
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (default_domain && n.op_type() == "Pow" && n.input_size() > 1 && marks.floats.count(n.input(1)) &&
        !marks.is_parameter(n.input(1)) && !constants.count(n.input(1)))
      constants[n.input(1)] = fmt::format("the exponent of Pow node '{}'", n.name());
  }
  if (!marks.torch_export) return constants;
  for (const std::string& name : marks.floats) {
    if (constants.count(name)) continue;
    if (auto k = marks.kind.find(name); k != marks.kind.end()) {
      if (k->second != "PARAMETER")
        constants[name] = fmt::format("torch.export marks it {}, not a parameter", k->second);
    } else if (auto f = marks.folded_from.find(name); f != marks.folded_from.end()) {
      if (!marks.from_parameter(name))
        constants[name] = fmt::format("the exporter computed it from constants ({})", joined(f->second, 4));
    } else if (marks.scalars.count(name) && !marks.placeholders.empty() && !marks.is_parameter(name)) {
      constants[name] = "a scalar constant of the export (the exported program has no parameter of that name)";
    }
  }
  return constants;
}

namespace {

// The parameter name behind placeholder `token` used by node n: the module path of one of the
// node's `pkg.torch.onnx.name_scopes` plus the attribute the token ends with, when that spells the
// token back; else the token without "p_".
std::string parameter_name(const std::string& token, const onnx::NodeProto& n) {
  auto props = metadata_props(n, kNodeMetadata);
  if (auto sc = props.find("pkg.torch.onnx.name_scopes"); sc != props.end()) {
    std::vector<std::string> scopes;
    for (const std::string& part : name_list(sc->second))
      if (!part.empty()) scopes.push_back(part);
    // Each scope is a module's full path ("blocks.0", "blocks.0.norm"), the last one the op's own
    // name; the longest path that prefixes the token wins.
    for (size_t k = scopes.empty() ? 0 : scopes.size() - 1; k-- > 0;) {
      const std::string path = scopes[k] + ".";
      const std::string prefix = placeholder(path);  // "p_blocks_0_norm_"
      if (token.size() > prefix.size() && token.compare(0, prefix.size(), prefix) == 0)
        return path + token.substr(prefix.size());
    }
  }
  return token.substr(2);
}

}  // namespace

std::vector<std::string> untie_merged_parameters(onnx::ModelProto& m) {
  onnx::GraphProto& gp = *m.mutable_graph();
  std::map<std::string, const onnx::ValueInfoProto*> info;
  std::map<std::string, std::string> kind, original;
  std::set<std::string> accounted;  // placeholders of parameters the file holds, or folded into a tensor
  for (const auto& vi : gp.value_info()) {
    auto props = metadata_props(vi, kValueInfoMetadata);
    info[vi.name()] = &vi;
    if (auto k = props.find(kKind); k != props.end()) kind[vi.name()] = k->second;
    if (auto o = props.find("pkg.torch.onnx.original_node_name"); o != props.end()) original[vi.name()] = o->second;
    if (auto f = props.find(kFoldedFrom); f != props.end())
      for (const std::string& source : name_list(f->second)) accounted.insert(placeholder(source));
  }
  if (kind.empty()) return {};
  std::set<std::string> names;
  for (const auto& t : gp.initializer()) {
    names.insert(t.name());
    accounted.insert(original.count(t.name()) ? original[t.name()] : placeholder(t.name()));
  }
  for (const auto& n : gp.node())
    for (const auto& o : n.output()) names.insert(o);
  for (const auto& vi : gp.input()) names.insert(vi.name());

  std::vector<std::string> notes;
  std::map<std::string, std::vector<std::pair<int, int>>> slots_of;  // value -> (node, input) reading it
  for (int i = 0; i < gp.node_size(); ++i)
    for (int k = 0; k < gp.node(i).input_size(); ++k) {
      const std::string& in = gp.node(i).input(k);
      if (kind.count(in) && kind[in] == "PARAMETER") slots_of[in].emplace_back(i, k);
    }
  const int initializers = gp.initializer_size();
  for (int t = 0; t < initializers; ++t) {
    const std::string name = gp.initializer(t).name();
    if (slots_of[name].size() < 2) continue;
    const std::string own = original.count(name) ? original[name] : placeholder(name);
    const std::string attr = name.substr(name.rfind('.') + 1);
    // Each use of the initializer, by the parameter its exported op names: its own, or the one
    // missing parameter the op takes (of the same attribute name when it takes several).
    std::map<std::string, std::vector<std::pair<int, int>>> uses;  // placeholder -> (node, input)
    std::map<std::string, int> first_node;
    for (auto [i, k] : slots_of[name]) {
      std::set<std::string> tokens = node_placeholders(gp.node(i));
      std::string owner = own;
      if (!tokens.empty() && !tokens.count(own)) {
        std::vector<std::string> missing, same_attr;
        for (const std::string& tok : tokens)
          if (!accounted.count(tok)) {
            missing.push_back(tok);
            if (tok.size() > attr.size() + 1 && tok.compare(tok.size() - attr.size() - 1, std::string::npos, "_" + attr) == 0)
              same_attr.push_back(tok);
          }
        if (missing.size() == 1) owner = missing[0];
        else if (same_attr.size() == 1) owner = same_attr[0];
      }
      uses[owner].emplace_back(i, k);
      first_node.emplace(owner, i);
    }
    if (uses.size() < 2) continue;
    std::vector<std::string> copies;
    for (const auto& [owner, slots] : uses) {
      if (owner == own) continue;
      std::string copy = parameter_name(owner, gp.node(first_node[owner]));
      for (int suffix = 2; names.count(copy); ++suffix) copy = parameter_name(owner, gp.node(first_node[owner])) + "_" + std::to_string(suffix);
      names.insert(copy);
      onnx::TensorProto* dup = gp.add_initializer();
      *dup = gp.initializer(t);
      dup->set_name(copy);
      if (info.count(name)) {
        onnx::ValueInfoProto* vi = gp.add_value_info();
        *vi = *info[name];
        vi->set_name(copy);
      }
      for (auto [node, input] : slots) gp.mutable_node(node)->set_input(input, copy);
      copies.push_back(copy);
    }
    notes.push_back(fmt::format("initializer '{}' stood for {} parameters of the exported module (the exporter merged "
                                "them: equal initial values); onnxdp trains them apart: {}, {}",
                                name, copies.size() + 1, name, joined(copies, 8)));
  }
  return notes;
}

namespace {

// The dims of value v where the file says them: an initializer's, or a value_info's when fully known.
bool known_dims(const onnx::GraphProto& gp, const std::string& v, std::vector<int64_t>* dims) {
  for (const auto& t : gp.initializer())
    if (t.name() == v) {
      dims->assign(t.dims().begin(), t.dims().end());
      return true;
    }
  for (const auto& vi : gp.value_info())
    if (vi.name() == v && vi.type().has_tensor_type() && vi.type().tensor_type().has_shape()) {
      dims->clear();
      for (const auto& d : vi.type().tensor_type().shape().dim()) {
        if (!d.has_dim_value()) return false;
        dims->push_back(d.dim_value());
      }
      return true;
    }
  return false;
}

int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.i();
  return fallback;
}

}  // namespace

std::vector<std::string> restore_dropped_parameters(onnx::ModelProto& m) {
  onnx::GraphProto& gp = *m.mutable_graph();
  // Every parameter the file accounts for, by placeholder: an initializer (under the placeholder the
  // exporter recorded for it), or a source of a tensor the optimizer folded.
  std::map<std::string, std::string> known;  // placeholder -> parameter name
  std::map<std::string, std::string> original;
  bool marked = false;
  for (const auto& vi : gp.value_info()) {
    auto props = metadata_props(vi, kValueInfoMetadata);
    marked |= props.count(kKind) > 0;
    if (auto o = props.find("pkg.torch.onnx.original_node_name"); o != props.end()) original[vi.name()] = o->second;
    if (auto f = props.find(kFoldedFrom); f != props.end())
      for (const std::string& source : name_list(f->second)) known.emplace(placeholder(source), source);
  }
  if (!marked) return {};
  std::set<std::string> names;
  for (const auto& t : gp.initializer()) {
    names.insert(t.name());
    known[placeholder(t.name())] = t.name();  // a copy untie_merged_parameters made keeps the original's mark
    if (original.count(t.name())) known.emplace(original[t.name()], t.name());
  }
  for (const auto& n : gp.node())
    for (const auto& o : n.output()) names.insert(o);

  std::vector<std::string> notes;
  std::set<std::string> warned;
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& n = gp.node(i);
    std::set<std::string> tokens = node_placeholders(n);
    for (const std::string& tok : tokens) {
      if (known.count(tok)) continue;
      const std::string& op = n.op_type();
      bool add_after = false;  // a MatMul (Linear on a 3-D input): an Add after it, where there was none
      if (op == "MatMul") {
        // The exporter keeps the Add of a bias it did not drop: a node of the same fx op.
        const std::string fx = metadata_props(n, kNodeMetadata)[kFxNode];
        bool has_add = false;
        for (const auto& other : gp.node())
          has_add |= other.op_type() == "Add" && metadata_props(other, kNodeMetadata)[kFxNode] == fx;
        if (has_add) continue;
        add_after = true;
      } else if (n.input_size() > 2 && !n.input(2).empty()) {
        continue;  // the node has its input 2: the parameter is in the file under another tensor
      }
      // A bias whose weight the file holds: its name is the weight's with "bias" for "weight".
      const std::string suffix = "_bias";
      std::string bias, why;
      std::vector<int64_t> wdims;
      const bool takes_bias = op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul" ||
                              op == "LayerNormalization";
      if (!takes_bias) {
        why = fmt::format("a {} takes no bias", op);
      } else if (tok.size() <= suffix.size() || tok.compare(tok.size() - suffix.size(), suffix.size(), suffix) != 0) {
        why = "it is not a bias";
      } else if (auto w = known.find(tok.substr(0, tok.size() - 4) + "weight");
                 w == known.end() || w->second.size() < 6 || w->second.compare(w->second.size() - 6, 6, "weight") != 0) {
        why = "the file has no weight of the same module to name and shape it by";
      } else {
        bias = w->second.substr(0, w->second.size() - 6) + "bias";
        if (n.input_size() < 2 || !known_dims(gp, n.input(1), &wdims) ||
            wdims.size() < (op == "LayerNormalization" ? 1u : 2u))
          why = "the shape of the node's weight is not known";
      }
      if (!why.empty()) {
        if (warned.insert(tok).second)
          notes.push_back(fmt::format("warning: parameter '{}' of the exported module (node '{}', {}) is not in the "
                                      "file and onnxdp cannot restore it ({}): it does not train",
                                      bias.empty() ? tok.substr(2) : bias, n.name(), op, why));
        continue;
      }
      // Its length: the node's output channels / features. The weight's dims are the file's claim,
      // not yet checked against its data, and the zeros are allocated here: a bias past 2^26
      // elements (256 MiB), or of dims that are not positive, is no layer's and is not restored.
      constexpr int64_t kMaxRestored = int64_t(1) << 26;
      const int64_t group = op == "ConvTranspose" ? int_attr(n, "group", 1) : 1;
      bool real = group >= 1 && group <= kMaxRestored;
      for (int64_t d : wdims) real = real && d >= 1 && d <= kMaxRestored;
      int64_t len = 0;
      if (!real) len = 0;
      else if (op == "Conv") len = wdims[0];
      else if (op == "ConvTranspose") len = wdims[1] * group;
      else if (op == "Gemm") len = int_attr(n, "transB", 0) ? wdims[0] : wdims[1];
      else len = wdims.back();  // MatMul's [in, out]; LayerNormalization takes the scale's shape
      std::vector<int64_t> dims = op == "LayerNormalization" ? wdims : std::vector<int64_t>{len};
      int64_t count = 1;
      for (int64_t d : dims) {
        real = real && d <= kMaxRestored / count;
        if (real) count *= d;
      }
      if (!real) {
        notes.push_back(fmt::format("warning: parameter '{}' of the exported module (node '{}', {}) is not in the "
                                    "file and onnxdp does not restore it: its weight's dims are not a layer's "
                                    "(more than 2^26 elements, or not positive)", bias, n.name(), op));
        continue;
      }
      std::string name = bias;
      for (int k = 2; names.count(name); ++k) name = bias + "_" + std::to_string(k);
      names.insert(name);
      onnx::TensorProto* t = gp.add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : dims) t->add_dims(d);
      t->set_raw_data(std::string(size_t(count) * 4, '\0'));
      onnx::NodeProto* node = gp.mutable_node(i);
      if (add_after) {
        const std::string out = node->output(0), product = out + "/without_bias";
        node->set_output(0, product);
        onnx::NodeProto* add = gp.add_node();
        add->set_op_type("Add");
        add->set_name(node->name() + "/restored_bias");
        add->add_input(product);
        add->add_input(name);
        add->add_output(out);
        for (int j = gp.node_size() - 1; j > i + 1; --j) gp.mutable_node()->SwapElements(j, j - 1);
      } else {
        while (node->input_size() < 2) node->add_input("");
        if (node->input_size() == 2) node->add_input(name);
        else node->set_input(2, name);
      }
      known[tok] = name;
      std::string shape;
      for (int64_t d : dims) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      notes.push_back(fmt::format("restored parameter '{}' [{}] of node '{}' ({}): the exporter dropped it (all zeros); "
                                  "onnxdp trains it from zero{}",
                                  name, shape, gp.node(i).name(), op, add_after ? ", added after the MatMul" : ""));
    }
  }
  return notes;
}

std::vector<std::string> export_warnings(const onnx::ModelProto& m) {
  std::vector<std::string> lines;
  std::set<std::string> seen;  // one line per BatchNorm of the exported program
  const char* const advice =
      "torch.onnx.export(dynamo=True) keeps no training-mode BatchNorm: export with dynamo=False and "
      "training=torch.onnx.TrainingMode.TRAINING (README: Exporting from any framework)";
  for (const auto& n : m.graph().node()) {
    auto props = metadata_props(n, kNodeMetadata);
    auto fx = props.find(kFxNode);
    if (fx == props.end() || fx->second.find("_native_batch_norm_legit_functional") == std::string::npos) continue;
    // A BatchNormalization trains with training_mode 1 (opset 14 on), or with its statistics
    // outputs before that.
    bool training_form = false;
    if (n.op_type() == "BatchNormalization") {
      training_form = n.output_size() > 1;
      for (const auto& a : n.attribute())
        if (a.name() == "training_mode") training_form = a.i() != 0;
    }
    if (training_form || !seen.insert(fx->second.substr(0, fx->second.find(' '))).second) continue;
    std::string module = "?";
    if (auto sc = props.find("pkg.torch.onnx.name_scopes"); sc != props.end()) {
      std::vector<std::string> scopes = name_list(sc->second);
      if (scopes.size() >= 2) module = scopes[scopes.size() - 2];
    }
    std::string form = n.op_type() == "BatchNormalization"
                           ? "in inference form (training_mode 0): it normalizes with the running statistics and never "
                             "updates them"
                           : fmt::format("fused into this {} ({}): it trains without it", n.op_type(),
                                         props.count("pkg.onnxscript.rewriter.rule_name")
                                             ? props["pkg.onnxscript.rewriter.rule_name"]
                                             : "an exporter rewrite");
    lines.push_back(fmt::format("node '{}': BatchNorm '{}' ran in training mode in the exported program, but the file "
                                "has it {}. {}",
                                n.name(), module, form, advice));
  }

  // Files without that metadata say only what they hold. An inference-form BatchNormalization (the
  // legacy exporter's default eval mode, tf2onnx) trains with its running statistics fixed, which
  // no framework's training does unless the model was put in eval mode on purpose.
  int64_t opset = 0;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "BatchNormalization" || metadata_props(n, kNodeMetadata).count(kFxNode)) continue;
    int named = n.output_size();
    while (named > 0 && n.output(named - 1).empty()) --named;
    bool training_form = opset < 14 && named > 1;
    for (const auto& a : n.attribute())
      if (a.name() == "training_mode") training_form = a.i() != 0;
    if (!training_form)
      lines.push_back(fmt::format("node '{}': BatchNormalization is in inference form (training_mode 0): it trains "
                                  "normalising with its fixed running statistics, not with batch statistics as the "
                                  "framework trains it; export it in training mode (PyTorch: dynamo=False, "
                                  "training=torch.onnx.TrainingMode.TRAINING) unless that is what you want",
                                  n.name()));
  }

  // tf2onnx drops bias Adds whose bias is all zeros (a freshly initialised Keras layer's), and
  // nothing in the file tells such a layer from one with use_bias=False: name the layers that may
  // have lost one.
  if (m.producer_name() == "tf2onnx") {
    std::set<std::string> initializers;
    for (const auto& t : m.graph().initializer()) initializers.insert(t.name());
    std::map<std::string, std::vector<const onnx::NodeProto*>> readers;
    for (const auto& n : m.graph().node())
      for (const auto& in : n.input()) readers[in].push_back(&n);
    auto added_bias = [&](const std::string& out) {  // the output's one reader adds an initializer
      auto r = readers.find(out);
      if (r == readers.end() || r->second.size() != 1 || r->second[0]->op_type() != "Add") return false;
      for (const auto& in : r->second[0]->input())
        if (in != out && initializers.count(in)) return true;
      return false;
    };
    std::vector<std::string> bare;
    for (const auto& n : m.graph().node()) {
      bool weight = n.input_size() > 1 && initializers.count(n.input(1));
      if (!weight || n.output_size() < 1) continue;
      if (((n.op_type() == "Conv" || n.op_type() == "ConvTranspose") && (n.input_size() < 3 || n.input(2).empty())) ||
          (n.op_type() == "Gemm" && (n.input_size() < 3 || n.input(2).empty())) ||
          (n.op_type() == "MatMul" && !added_bias(n.output(0))))
        if (!added_bias(n.output(0))) bare.push_back(n.name());
    }
    if (!bare.empty())
      lines.push_back(fmt::format("{} layer(s) have no bias in this tf2onnx file: {}. tf2onnx drops all-zero biases "
                                  "(a freshly initialised Keras layer's), so if the Keras layer has one (use_bias=True, "
                                  "the default) it does not train here; export after its bias is non-zero "
                                  "(README: Exporting from any framework)",
                                  bare.size(), joined(bare, 6)));
  }
  return lines;
}

// The names of a metadata list value: "['a', 'b.c']" -> {a, b.c}
std::vector<std::string> name_list(const std::string& s) {
  std::vector<std::string> names;
  for (size_t i = 0; (i = s.find('\'', i)) != std::string::npos;) {
    size_t end = s.find('\'', i + 1);
    if (end == std::string::npos) break;
    names.push_back(s.substr(i + 1, end - i - 1));
    i = end + 1;
  }
  return names;
}

}  // namespace onnxdp
