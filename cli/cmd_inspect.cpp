// `onnxdp inspect MODEL [--json]`: what is in a model file, read from the protobuf alone, so it
// works on models onnxdp cannot run yet: inputs/outputs with their symbolic shapes, parameters
// (which would train, which are frozen), the op histogram and the ops onnxdp does not support.
// Unsupported ops are facts (exit 0); a file that does not parse is an error (exit 1).
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "compile/compile.h"
#include "train/trainer.h"
#include "graph/checked.h"
#include "graph/graph.h"
#include "importer/importer.h"
#include "importer/onnx_io.h"
#include "importer/export_metadata.h"
#include "importer/trainability.h"

namespace onnxdp::cli {

namespace {

using nlohmann::json;

// Bytes per element of an ONNX TensorProto.DataType (0 where it has no fixed size: strings,
// sub-byte types count as 1).
int64_t onnx_elem_size(int t) {
  switch (t) {
    case 1: case 6: case 12: return 4;     // FLOAT, INT32, UINT32
    case 2: case 3: case 9: return 1;      // UINT8, INT8, BOOL
    case 4: case 5: case 10: case 16: return 2;  // UINT16, INT16, FLOAT16, BFLOAT16
    case 7: case 11: case 13: case 14: return 8;  // INT64, DOUBLE, UINT64, COMPLEX64
    case 15: return 16;                    // COMPLEX128
    case 8: return 0;                      // STRING
    default: return 1;                     // float8 / 4-bit types and newer
  }
}

std::string dtype_str(int onnx_type) {
  DType d;
  if (dtype_from_onnx(onnx_type, &d)) return dtype_name(d);
  std::string s = onnx_type_name(onnx_type);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// A graph input/output: dtype and the declared (possibly symbolic) shape; shape is null when
// the model does not say its rank.
json value_info(const onnx::ValueInfoProto& vi, json& problems, const char* what) {
  json j{{"name", vi.name()}};
  const auto& type = vi.type();
  if (!type.has_tensor_type()) {
    j["dtype"] = type.has_sequence_type() ? "sequence" : type.has_map_type() ? "map" : "non-tensor";
    j["shape"] = nullptr;
    problems.push_back(fmt::format("{} '{}' is not a tensor; onnxdp handles tensors only", what, vi.name()));
    return j;
  }
  const auto& tt = type.tensor_type();
  j["dtype"] = dtype_str(tt.elem_type());
  DType d;
  if (!dtype_from_onnx(tt.elem_type(), &d))
    problems.push_back(fmt::format("{} '{}' has element type {}, which onnxdp does not support", what, vi.name(),
                                   onnx_type_name(tt.elem_type())));
  if (!tt.has_shape()) {
    j["shape"] = nullptr;
    return j;
  }
  json dims = json::array();
  for (const auto& dim : tt.shape().dim()) {
    if (dim.has_dim_value()) dims.push_back(dim.dim_value());
    else if (dim.has_dim_param() && !dim.dim_param().empty()) dims.push_back(dim.dim_param());
    else dims.push_back("?");
  }
  j["shape"] = dims;
  return j;
}

std::string shape_text(const json& shape) {
  if (shape.is_null()) return "[?]";
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i].is_string() ? shape[i].get<std::string>() : std::to_string(shape[i].get<int64_t>());
  }
  return s + "]";
}

std::string bytes_text(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

json inspect_model(const std::string& path, const TrainabilityOptions& trainability) {
  std::vector<std::string> notes;
  onnx::ModelProto m = load_model_proto(path, &notes);
  for (const std::string& w : export_warnings(m)) notes.push_back("warning: " + w);
  ModelInfo info = model_info(m, path);
  const onnx::GraphProto& gp = m.graph();
  json problems = json::array();

  json j;
  j["file"] = path;
  j["ir_version"] = info.ir_version;
  j["producer"] = info.producer;
  j["graph"] = gp.name();
  json opsets = json::object();
  for (const auto& [domain, version] : info.opsets) opsets[domain.empty() ? "ai.onnx" : domain] = version;
  j["opsets"] = opsets;
  auto def = info.opsets.find("");
  if (def == info.opsets.end())
    problems.push_back("the model imports no default-domain (ai.onnx) opset");
  else if (def->second < kMinOpset || def->second > kMaxOpset)
    problems.push_back(fmt::format("default-domain opset {} is outside the opsets onnxdp imports ({} to {})",
                                   def->second, kMinOpset, kMaxOpset));

  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : gp.initializer()) inits[t.name()] = &t;

  json inputs = json::array(), outputs = json::array();
  for (const auto& vi : gp.input())
    if (!inits.count(vi.name())) inputs.push_back(value_info(vi, problems, "graph input"));
  for (const auto& vi : gp.output()) outputs.push_back(value_info(vi, problems, "graph output"));
  j["inputs"] = inputs;
  j["outputs"] = outputs;

  // Which initializers train, and why the others do not: the decision `train` takes.
  const Trainability decision = decide_trainability(m, trainability);
  for (const std::string& n : decision.notes) notes.push_back(n);

  struct Sum {
    int64_t tensors = 0, elements = 0, bytes = 0;
    json to_json() const { return json{{"tensors", tensors}, {"elements", elements}, {"bytes", bytes}}; }
  } all, trainable, frozen;
  json init_list = json::array();
  for (const auto& t : gp.initializer()) {
    int64_t elements = 1;
    json dims = json::array();
    for (int64_t d : t.dims()) {
      dims.push_back(d);
      if (d < 0 || (d != 0 && elements > (int64_t(1) << 62) / d)) {
        std::string ds;
        for (int64_t x : t.dims()) ds += (ds.empty() ? "" : ", ") + std::to_string(x);
        problems.push_back(fmt::format("initializer '{}' has dims [{}]: negative, or more than 2^62 elements", t.name(), ds));
        elements = 0;
        break;
      }
      elements *= d;
    }
    int64_t bytes = checked_mul(elements, onnx_elem_size(t.data_type()), "an initializer's byte count");
    const InitializerRole* role = decision.find(t.name());
    const std::string reason = role ? role->reason : "";
    DType d;
    if (!dtype_from_onnx(t.data_type(), &d))
      problems.push_back(fmt::format("initializer '{}' has element type {}, which onnxdp does not support", t.name(),
                                     onnx_type_name(t.data_type())));
    bool trains = reason.empty();
    json e{{"name", t.name()}, {"dtype", dtype_str(t.data_type())}, {"shape", dims},
           {"elements", elements}, {"bytes", bytes}, {"trainable", trains},
           {"external", t.data_location() == onnx::TensorProto::EXTERNAL}};
    if (!trains) e["frozen_because"] = reason;
    init_list.push_back(e);
    for (Sum* s : {&all, trains ? &trainable : &frozen}) {
      s->tensors += 1;
      s->elements = checked_add(s->elements, elements, "the initializers' element count");
      s->bytes = checked_add(s->bytes, bytes, "the initializers' byte count");
    }
  }
  json params = all.to_json();
  params["trainable"] = trainable.to_json();
  params["frozen"] = frozen.to_json();
  j["parameters"] = params;
  j["initializers"] = init_list;

  json ops = json::object(), unsupported = json::array();
  for (const auto& n : gp.node()) {
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    std::string key = default_domain ? n.op_type() : n.domain() + ":" + n.op_type();
    ops[key] = ops.value(key, 0) + 1;
    if (!default_domain || !imports_op(n.op_type()))
      unsupported.push_back(json{{"node", n.name()}, {"op_type", n.op_type()},
                                 {"domain", default_domain ? "ai.onnx" : n.domain()}});
  }
  j["nodes"] = gp.node_size();
  j["ops"] = ops;
  j["unsupported_ops"] = unsupported;
  // The whole load (tensors, external data, shape rules) when the proto-level facts found nothing
  // wrong: what `run` and `train` would meet first.
  if (problems.empty() && unsupported.empty()) {
    try {
      load_graph(m, std::filesystem::path(path).parent_path().string());
    } catch (const Error& e) {
      problems.push_back(fmt::format("the model does not load: {}", e.what()));
    }
  }
  j["problems"] = problems;
  j["export_notes"] = notes;
  j["supported"] = unsupported.empty() && problems.empty();
  return j;
}

void print_text(const json& j) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line(fmt::format("model       {}", j["file"].get<std::string>()));
  line(fmt::format("ir version  {}", j["ir_version"].get<int64_t>()));
  line(fmt::format("producer    {}", j["producer"].get<std::string>()));
  std::string opsets;
  for (const auto& [domain, v] : j["opsets"].items()) opsets += (opsets.empty() ? "" : ", ") + domain + " " + v.dump();
  line(fmt::format("opsets      {}", opsets));

  size_t w = 4;
  for (const char* list : {"inputs", "outputs", "initializers"})
    for (const auto& v : j[list]) w = std::max(w, v["name"].get<std::string>().size());
  w = std::min<size_t>(w, 48);
  for (const char* list : {"inputs", "outputs"}) {
    line(fmt::format("{}", list));
    for (const auto& v : j[list])
      line(fmt::format("  {:<{}}  {:<5} {}", v["name"].get<std::string>(), w, v["dtype"].get<std::string>(),
                       shape_text(v["shape"])));
  }

  const json& p = j["parameters"];
  auto sum = [](const json& s) {
    return fmt::format("{} elements in {} tensors ({})", s["elements"].get<int64_t>(), s["tensors"].get<int64_t>(),
                       bytes_text(s["bytes"].get<int64_t>()));
  };
  line("parameters  " + sum(p));
  line("  trainable " + sum(p["trainable"]));
  line("  frozen    " + sum(p["frozen"]));
  for (const auto& v : j["initializers"]) {
    std::string status = v["trainable"].get<bool>() ? "trainable" : "frozen: " + v["frozen_because"].get<std::string>();
    line(fmt::format("  {:<{}}  {:<5} {:<16} {}", v["name"].get<std::string>(), w, v["dtype"].get<std::string>(),
                     shape_text(v["shape"]), status));
  }

  line(fmt::format("ops         {} nodes", j["nodes"].get<int64_t>()));
  std::vector<std::pair<int64_t, std::string>> hist;
  for (const auto& [op, count] : j["ops"].items()) hist.emplace_back(count.get<int64_t>(), op);
  std::stable_sort(hist.begin(), hist.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [count, op] : hist) line(fmt::format("  {:<24} {}", op, count));

  const json& un = j["unsupported_ops"];
  if (un.empty()) {
    line("unsupported ops: none");
  } else {
    line(fmt::format("unsupported ops: {} nodes", un.size()));
    for (const auto& u : un) {
      std::string node = u["node"].get<std::string>();
      line(fmt::format("  {} ({}, domain {})", node.empty() ? "<unnamed>" : node, u["op_type"].get<std::string>(),
                       u["domain"].get<std::string>()));
    }
  }
  for (const auto& note : j["export_notes"]) line("export: " + note.get<std::string>());
  for (const auto& pr : j["problems"]) line("problem: " + pr.get<std::string>());
  std::fputs(out.c_str(), stdout);
}

}  // namespace

// The training split and the bucket plan of the training graph onnxdp would run.
json inspect_training(const std::string& model, TrainOptions o, const std::string& loss) {
  o.model = model;
  o.loss = loss_kind_from_name(loss);
  int world = local_replicas(o.devices);
  TrainingGraph tg = training_graph(o, world, 0);
  json t;
  t["world_size"] = world;
  t["global_batch"] = o.batch_size;
  t["trainable"] = tg.trainable;
  t["frozen"] = tg.frozen;
  t["frozen_because"] = tg.frozen_reason;
  t["nodes"] = tg.g.nodes.size();
  json buckets = json::array();
  for (const Bucket& b : tg.buckets) {
    json names = json::array();
    for (size_t i : b.index) names.push_back(tg.trainable[i]);
    buckets.push_back({{"bytes", b.bytes}, {"parameters", names}});
  }
  t["buckets"] = buckets;
  return t;
}

void print_training(const json& t) {
  std::printf("\ntraining (world of %d, global batch %lld): %zu trainable, %zu frozen, %zu nodes\n",
              t["world_size"].get<int>(), (long long)t["global_batch"].get<int64_t>(), t["trainable"].size(),
              t["frozen"].size(), t["nodes"].get<size_t>());
  for (const auto& n : t["trainable"]) std::printf("  train   %s\n", n.get<std::string>().c_str());
  for (const auto& n : t["frozen"]) {
    const std::string name = n.get<std::string>();
    std::printf("  frozen  %s: %s\n", name.c_str(), t["frozen_because"].value(name, std::string("?")).c_str());
  }
  if (t["buckets"].empty()) {
    std::printf("gradient buckets: none (a world of one needs no all-reduce)\n");
    return;
  }
  std::printf("gradient buckets, in the order backward produces them:\n");
  size_t k = 0;
  for (const auto& b : t["buckets"]) {
    std::printf("  bucket %zu: %.3f MB, the gradients of %zu parameters:", k++, double(b["bytes"].get<size_t>()) / (1024.0 * 1024.0),
                b["parameters"].size());
    for (const auto& g : b["parameters"]) std::printf(" %s", g.get<std::string>().c_str());
    std::printf("\n");
  }
}

Command add_inspect_command(CLI::App& parent) {
  struct Options {
    std::string model;
    bool json = false;
    bool train = false;
    TrainOptions train_options;
    std::string loss = "cross_entropy";
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = parent.add_subcommand(
      "inspect", "Show a model's inputs, outputs, parameters (trainable or frozen), ops and unsupported ops");
  sub->add_option("model", opt->model, "The .onnx file")->required();
  sub->add_flag("--json", opt->json, "Print the same facts as one JSON object");
  sub->add_flag("--train", opt->train, "Also build the training graph: trainable/frozen split, gradient buckets");
  sub->add_option("--devices", opt->train_options.devices, "With --train: cpu or cpu:N (prints the bucket plan)")
      ->capture_default_str();
  sub->add_option("--batch-size", opt->train_options.batch_size, "With --train: global batch size")->capture_default_str();
  sub->add_option("--loss", opt->loss, "With --train: cross_entropy | mse | bce_with_logits | l1 | none")
      ->capture_default_str();
  sub->add_option("--freeze", opt->train_options.freeze, "Initializers not to train (regex, repeatable)");
  sub->add_option("--trainable", opt->train_options.trainable,
                  "Initializers to train although taken for constants (regex, repeatable)");
  sub->add_option("--bucket-mb", opt->train_options.bucket_mb, "With --train: gradient bucket size in MB")
      ->capture_default_str();
  return Command{sub, [opt] {
                   json j = inspect_model(opt->model, {opt->train_options.freeze, opt->train_options.trainable});
                   if (opt->train) j["train"] = inspect_training(opt->model, opt->train_options, opt->loss);
                   // Names in a model are not always valid UTF-8: replace bad bytes rather than fail.
                   if (opt->json) std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
                   else {
                     print_text(j);
                     if (j.contains("train")) print_training(j["train"]);
                   }
                   // Like a linter: the facts are printed either way; the exit status says whether
                   // onnxdp can run the model.
                   if (!j["supported"].get<bool>()) {
                     std::string first;
                     if (!j["unsupported_ops"].empty()) {
                       const json& u = j["unsupported_ops"][0];
                       first = fmt::format("node {} ({}, domain {}) is not supported", u["node"].get<std::string>(),
                                           u["op_type"].get<std::string>(), u["domain"].get<std::string>());
                     } else {
                       first = j["problems"][0].get<std::string>();
                     }
                     size_t more = j["unsupported_ops"].size() + j["problems"].size() - 1;
                     std::fprintf(stderr, "onnxdp: error: onnxdp cannot run %s: %s%s\n", opt->model.c_str(), first.c_str(),
                                  more ? fmt::format(" ({} more above)", more).c_str() : "");
                     return 1;
                   }
                   return 0;
                 }};
}

}  // namespace onnxdp::cli
