#include "importer/export_ties.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <set>

#include "importer/export_metadata.h"
#include "importer/onnx_io.h"

namespace onnxdp {

namespace {

constexpr int kValueInfoMetadata = 4, kNodeMetadata = 9, kGraphMetadata = 16;
const char* const kSignature = "pkg.torch.export.ExportedProgram.graph_signature";
const char* const kFoldedFrom = "pkg.onnxscript.optimizer.folded_from";

bool is_float(int32_t data_type) {
  return data_type == onnx::TensorProto::FLOAT || data_type == onnx::TensorProto::DOUBLE ||
         data_type == onnx::TensorProto::FLOAT16 || data_type == onnx::TensorProto::BFLOAT16;
}

bool default_domain(const onnx::NodeProto& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

// Written by torch.onnx.export(dynamo=True): the graph signature, torch.export's marks on values,
// or the exported program's op on nodes.
bool has_torch_export_metadata(const onnx::ModelProto& m) {
  const onnx::GraphProto& gp = m.graph();
  if (metadata_props(gp, kGraphMetadata).count(kSignature)) return true;
  for (const auto& vi : gp.value_info()) {
    auto props = metadata_props(vi, kValueInfoMetadata);
    if (props.count("pkg.torch.export.graph_signature.InputSpec.kind") || props.count(kFoldedFrom)) return true;
  }
  for (const auto& n : gp.node())
    if (metadata_props(n, kNodeMetadata).count("pkg.torch.onnx.fx_node")) return true;
  return false;
}

bool legacy_torch_file(const onnx::ModelProto& m) {
  return m.producer_name() == "pytorch" && !has_torch_export_metadata(m);
}

std::string joined(const std::vector<std::string>& names, size_t most) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > most) s += fmt::format(", … ({} in all)", names.size());
  return s;
}

// b's dims are a's with the last two swapped (rank >= 2).
bool transposed_dims(const onnx::TensorProto& a, const onnx::TensorProto& b) {
  const int r = a.dims_size();
  if (r < 2 || b.dims_size() != r || a.data_type() != b.data_type()) return false;
  for (int k = 0; k < r - 2; ++k)
    if (a.dims(k) != b.dims(k)) return false;
  return a.dims(r - 2) == b.dims(r - 1) && a.dims(r - 1) == b.dims(r - 2);
}

// a [..., R, C] and b [..., C, R]: b[..., j, i] == a[..., i, j] bit for bit (a constant-folded
// Transpose copies bits).
bool equals_transposed(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.nbytes() != b.nbytes() || a.shape().size() < 2) return false;
  const size_t r = a.shape().size();
  const int64_t rows = a.shape()[r - 2], cols = a.shape()[r - 1];
  const int64_t batch = rows * cols == 0 ? 0 : a.numel() / (rows * cols);
  const size_t es = dtype_size(a.dtype());
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if (std::memcmp(pa + ((n * rows + i) * cols + j) * es, pb + ((n * cols + j) * rows + i) * es, es) != 0)
          return false;
  return true;
}

// Every element has the same bits (zeros, ones, any fill).
bool constant_fill(const Tensor& t) {
  const size_t es = dtype_size(t.dtype());
  const char* p = static_cast<const char*>(t.data());
  for (int64_t i = 1; i < t.numel(); ++i)
    if (std::memcmp(p, p + i * es, es) != 0) return false;
  return true;
}

// The module a legacy-exported node belongs to: its name's scope ("/layers.0/linear1/MatMul" ->
// "/layers.0/linear1"), each part without the "_N" the exporter appends for the module's N+1-th
// call ("/a_1/MatMul", a's second call, -> "/a"). Empty when the name has no scope.
std::string module_of(const std::string& node_name) {
  size_t last = node_name.rfind('/');
  if (last == std::string::npos || last == 0) return "";
  std::string module;
  for (size_t start = 1; start <= last;) {
    size_t end = node_name.find('/', start);
    std::string part = node_name.substr(start, end - start);
    size_t us = part.rfind('_');
    if (us != std::string::npos && us + 1 < part.size() &&
        part.find_first_not_of("0123456789", us + 1) == std::string::npos)
      part.resize(us);
    module += "/" + part;
    start = end + 1;
  }
  return module;
}

}  // namespace

std::vector<std::string> untie_deduplicated_initializers(onnx::ModelProto& m) {
  if (!legacy_torch_file(m)) return {};
  onnx::GraphProto& gp = *m.mutable_graph();
  std::map<std::string, int> init_index;
  for (int i = 0; i < gp.initializer_size(); ++i) init_index[gp.initializer(i).name()] = i;
  std::set<std::string> graph_outputs;
  for (const auto& o : gp.output()) graph_outputs.insert(o.name());

  // value -> the modules of the nodes reading it
  std::map<std::string, std::set<std::string>> readers;
  for (const auto& n : gp.node())
    for (const auto& in : n.input())
      if (!(default_domain(n) && n.op_type() == "Identity")) readers[in].insert(module_of(n.name()));
  // An `onnx::` name is a tensor the constant folding computed (a Linear weight transposed for a
  // MatMul): two equal ones are the same parameter folded twice when one module (a module called
  // twice) reads both, else two parameters of equal value (deep-copied layers) that train apart.
  auto one_module = [&](const std::string& a, const std::string& b) {
    for (const std::string& ma : readers[a])
      if (ma.empty() || readers[b].count(ma) || readers[b].count("")) return true;
    return readers[a].empty() || readers[b].empty();
  };

  // source initializer -> the names its Identity nodes write, in node order
  std::map<std::string, std::vector<std::string>> copies;
  std::vector<std::string> order;  // sources, as first met
  std::vector<int> removed;
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& n = gp.node(i);
    if (!default_domain(n) || n.op_type() != "Identity" || n.input_size() != 1 || n.output_size() != 1) continue;
    auto src = init_index.find(n.input(0));
    const std::string& out = n.output(0);
    if (src == init_index.end() || !is_float(gp.initializer(src->second).data_type()) || out.empty() ||
        graph_outputs.count(out) || init_index.count(out) || (out.rfind("onnx::", 0) == 0 && one_module(n.input(0), out)))
      continue;
    if (!copies.count(n.input(0))) order.push_back(n.input(0));
    copies[n.input(0)].push_back(out);
    removed.push_back(i);
  }
  for (auto it = removed.rbegin(); it != removed.rend(); ++it) gp.mutable_node()->DeleteSubrange(*it, 1);

  std::vector<std::string> notes;
  for (const std::string& source : order) {
    for (const std::string& name : copies[source]) {
      onnx::TensorProto* t = gp.add_initializer();
      *t = gp.initializer(init_index[source]);
      t->set_name(name);
    }
    notes.push_back(fmt::format(
        "initializer '{}' stood for {} tensors of the PyTorch module (torch.onnx.export(dynamo=False) "
        "deduplicated equal initial values into Identity nodes of it); onnxdp trains them apart, as PyTorch "
        "does: {}, {}",
        source, copies[source].size() + 1, source, joined(copies[source], 8)));
  }
  return notes;
}

std::vector<std::string> tie_transposed_copies(onnx::ModelProto& m, const std::string& model_dir) {
  onnx::GraphProto& gp = *m.mutable_graph();
  const bool legacy = legacy_torch_file(m);
  std::map<std::string, int> init_index;
  for (int i = 0; i < gp.initializer_size(); ++i) init_index[gp.initializer(i).name()] = i;
  std::map<std::string, std::vector<std::string>> folded_from;
  for (const auto& vi : gp.value_info()) {
    auto props = metadata_props(vi, kValueInfoMetadata);
    if (auto f = props.find(kFoldedFrom); f != props.end()) folded_from[vi.name()] = name_list(f->second);
  }

  // Values are read only for candidate pairs, each at most once.
  std::map<std::string, std::unique_ptr<Tensor>> values;
  auto value = [&](const std::string& name) -> const Tensor& {
    auto& v = values[name];
    if (!v) v = std::make_unique<Tensor>(tensor_from_proto(gp.initializer(init_index.at(name)), model_dir));
    return *v;
  };
  auto is_onnx_named = [](const std::string& name) { return name.rfind("onnx::", 0) == 0; };

  // copy -> (original, why the file shows the copy was computed from it)
  std::vector<std::pair<std::string, std::string>> ties;
  std::set<std::string> tied;  // copies and originals already decided
  for (const auto& b : gp.initializer()) {
    if (!is_float(b.data_type()) || b.dims_size() < 2) continue;
    std::vector<std::string> candidates;
    bool from_metadata = false;
    if (auto f = folded_from.find(b.name()); f != folded_from.end()) {
      if (f->second.size() == 1 && f->second[0] != b.name() && init_index.count(f->second[0])) {
        candidates.push_back(f->second[0]);
        from_metadata = true;
      }
    } else if (legacy && is_onnx_named(b.name())) {
      for (const auto& a : gp.initializer())
        if (!is_onnx_named(a.name()) && transposed_dims(a, b)) candidates.push_back(a.name());
    }
    for (const std::string& a_name : candidates) {
      const onnx::TensorProto& a = gp.initializer(init_index.at(a_name));
      if (tied.count(a_name) || tied.count(b.name()) || !transposed_dims(a, b)) continue;
      const Tensor& av = value(a_name);
      if (!from_metadata) {
        // A fill, or a symmetric square matrix, equals the transpose of any other parameter
        // initialised the same way: no proof that B was computed from A.
        const size_t r = av.shape().size();
        if (constant_fill(av) || (av.shape()[r - 1] == av.shape()[r - 2] && equals_transposed(av, av))) continue;
      }
      if (!equals_transposed(av, value(b.name()))) continue;
      ties.emplace_back(b.name(), a_name);
      tied.insert(b.name());
      tied.insert(a_name);
      break;
    }
  }
  if (ties.empty()) return {};

  std::vector<std::string> notes;
  std::set<std::string> copies;
  for (const auto& [copy, original] : ties) {
    copies.insert(copy);
    const int r = gp.initializer(init_index.at(original)).dims_size();
    // Transpose(original) -> copy, first in the graph (its input is an initializer).
    onnx::NodeProto* n = gp.add_node();
    n->set_op_type("Transpose");
    n->set_name("onnxdp_tie/" + copy);
    n->add_input(original);
    n->add_output(copy);
    onnx::AttributeProto* perm = n->add_attribute();
    perm->set_name("perm");
    perm->set_type(onnx::AttributeProto::INTS);
    for (int k = 0; k < r - 2; ++k) perm->add_ints(k);
    perm->add_ints(r - 1);
    perm->add_ints(r - 2);
    for (int i = gp.node_size() - 1; i > 0; --i) gp.mutable_node()->SwapElements(i, i - 1);
    notes.push_back(fmt::format(
        "initializer '{}' is '{}' transposed ({}): one parameter of the source model stored twice; onnxdp "
        "computes it with a Transpose node of '{}' so that both uses train that one tensor, and the trained model "
        "keeps the node",
        copy, original,
        folded_from.count(copy) ? "the exporter folded it from that parameter"
                                : "a constant the PyTorch exporter folded, equal to it transposed",
        original));
  }
  // The copies leave the initializers (and the graph inputs, where initializers are listed there).
  auto* inits = gp.mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i)
    if (copies.count(inits->Get(i).name())) inits->DeleteSubrange(i, 1);
  auto* inputs = gp.mutable_input();
  for (int i = inputs->size() - 1; i >= 0; --i)
    if (copies.count(inputs->Get(i).name())) inputs->DeleteSubrange(i, 1);
  return notes;
}

std::map<std::string, std::string> exported_program_inputs(const onnx::ModelProto& m) {
  std::map<std::string, std::string> kinds;
  auto props = metadata_props(m.graph(), kGraphMetadata);
  auto sig = props.find(kSignature);
  if (sig == props.end()) return kinds;
  // "# inputs" lines until "# outputs": `<placeholder>: <KIND> target='<name>' ...`; a user input
  // has no target and is listed by its own name.
  const std::string& s = sig->second;
  bool in_inputs = false;
  for (size_t start = 0; start < s.size();) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    const std::string line = s.substr(start, end - start);
    start = end + 1;
    if (line.rfind("# ", 0) == 0) {
      in_inputs = line == "# inputs";
      continue;
    }
    size_t colon = line.find(": ");
    if (!in_inputs || colon == std::string::npos) continue;
    size_t kind_end = line.find(' ', colon + 2);
    std::string kind = line.substr(colon + 2, kind_end == std::string::npos ? std::string::npos : kind_end - colon - 2);
    std::string name = line.substr(0, colon);
    if (size_t t = line.find("target='"); t != std::string::npos) {
      size_t q = line.find('\'', t + 8);
      if (q == std::string::npos) continue;
      name = line.substr(t + 8, q - t - 8);
    }
    if (!name.empty() && !kind.empty()) kinds[name] = kind;
  }
  return kinds;
}

}  // namespace onnxdp
