#include "importer/importer.h"

#include <algorithm>
#include <array>
#include <set>

#include "graph/passes/block_channels.h"
#include "importer/onnx_io.h"

namespace onnxdp {

namespace {

// The default import (importer/importer.h): the node as read; onnxdp's own categories refused.
void import_as_read(ImportCtx& c) {
  const std::string category = op_info(c.node.op).category;
  if (category == "grad" || category == "collective")
    c.fail("{} is an internal onnxdp op, not importable", op_name(c.node.op));
}

}  // namespace

ImportFn import_fn(Op op) {
  static const std::array<ImportFn, kOpCount> fns = [] {
    std::array<ImportFn, kOpCount> f;
    f.fill(&import_as_read);
#define ONNXDP_X(op) f[size_t(Op::op)] = &import_##op;
    ONNXDP_IMPORTS(ONNXDP_X)
#undef ONNXDP_X
    return f;
  }();
  return fns[size_t(op)];
}

ImportFn composite_import_fn(const std::string& name) {
  static const std::pair<const char*, ImportFn> fns[] = {
#define ONNXDP_X(op, ...) {#op, &import_##op},
      ONNXDP_COMPOSITES(ONNXDP_X)
#undef ONNXDP_X
  };
  for (const auto& [n, fn] : fns)
    if (name == n) return fn;
  return nullptr;
}

ModelInfo model_info(const onnx::ModelProto& m, const std::string& path) {
  ModelInfo info;
  info.path = path;
  info.ir_version = m.ir_version();
  info.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  for (const auto& o : m.opset_import()) info.opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = o.version();
  return info;
}

std::string ImportCtx::unique_value_name(const std::string& base) {
  std::string nm = base;
  if (!value_names) {
    for (int k = 1; graph.find(nm) != kNoValue; ++k) nm = base + "_" + std::to_string(k);
    return nm;
  }
  for (int k = 1; value_names->count(nm); ++k) nm = base + "_" + std::to_string(k);
  value_names->insert(nm);
  return nm;
}

ValueId ImportCtx::add_constant(Tensor t, const std::string& hint) {
  Value v;
  v.name = unique_value_name((node.name.empty() ? std::string(op_name(node.op)) : node.name) + "/" + hint);
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.kind = ValueKind::constant;
  v.data = std::move(t);
  return graph.add_value(std::move(v));
}

ValueId ImportCtx::add_node(Op op, const std::string& suffix, std::vector<ValueId> inputs,
                            std::map<std::string, Attr> attrs) {
  const std::string base = (node.name.empty() ? std::string(op_name(node.op)) : node.name) + "/" + suffix;
  Node n;
  n.name = base;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  Value v;
  v.name = unique_value_name(base);
  v.producer = int(graph.nodes.size());
  n.outputs.push_back(graph.add_value(std::move(v)));
  helper_values.push_back(n.outputs[0]);
  shapes_current = false;
  graph.nodes.push_back(std::move(n));
  return graph.nodes.back().outputs[0];
}

std::vector<ValueId> ImportCtx::add_node_n(Op op, const std::string& suffix, std::vector<ValueId> inputs, int n,
                                           std::map<std::string, Attr> attrs) {
  ValueId first = add_node(op, suffix, std::move(inputs), std::move(attrs));
  Node& nd = graph.nodes.back();
  for (int k = 1; k < n; ++k) {
    Value v;
    v.name = unique_value_name(graph.value(first).name + ":" + std::to_string(k));
    v.producer = int(graph.nodes.size()) - 1;
    ValueId id = graph.add_value(std::move(v));
    nd.outputs.push_back(id);
    helper_values.push_back(id);
  }
  return nd.outputs;
}

void ImportCtx::bind_output(size_t k, ValueId v) {
  if (std::find(helper_values.begin(), helper_values.end(), v) == helper_values.end())
    fail("internal: output {} is bound to a value this node's import did not make", k);
  if (std::find(bound_outputs.begin(), bound_outputs.end(), v) != bound_outputs.end())
    fail("internal: one value is bound to two outputs");
  if (bound_outputs.size() <= k) bound_outputs.resize(k + 1, kNoValue);
  bound_outputs[k] = v;
}

const Shape& ImportCtx::static_shape(ValueId v, const char* what) {
  if (graph.value(v).kind == ValueKind::activation && !shapes_current) {
    if (!options || !options->infer_shapes)
      fail("needs the static shape of {} while importing (load the model with load_graph)", what);
    options->infer_shapes(graph);
    shapes_current = true;
  }
  return graph.value(v).shape;
}

void ImportCtx::attr_to_input(const std::string& attr, size_t index) {
  auto it = node.attrs.find(attr);
  if (it == node.attrs.end()) return;
  auto* ints = std::get_if<std::vector<int64_t>>(&it->second);
  if (!ints) fail("attribute '{}' must be a list of ints", attr);
  ValueId c = add_constant(Tensor::from_i64(*ints), attr);
  node.attrs.erase(it);
  if (node.inputs.size() <= index) node.inputs.resize(index + 1, kNoValue);
  node.inputs[index] = c;
}

namespace {

Attr convert_attr(const onnx::AttributeProto& a, const std::string& model_dir, const ImportCtx& ctx) {
  switch (a.type()) {
    case onnx::AttributeProto::INT: return Attr(int64_t(a.i()));
    case onnx::AttributeProto::FLOAT: return Attr(a.f());
    case onnx::AttributeProto::STRING: return Attr(a.s());
    case onnx::AttributeProto::INTS: return Attr(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case onnx::AttributeProto::FLOATS: return Attr(std::vector<float>(a.floats().begin(), a.floats().end()));
    case onnx::AttributeProto::TENSOR: return Attr(tensor_from_proto(a.t(), model_dir));
    default: ctx.fail("attribute '{}' has a type onnxdp does not support ({})", a.name(), int(a.type()));
  }
}

Shape declared_shape(const onnx::ValueInfoProto& vi, const ImportOptions& opt) {
  auto it = opt.input_shapes.find(vi.name());
  if (it != opt.input_shapes.end()) return it->second;
  const auto& tt = vi.type().tensor_type();
  if (!tt.has_shape()) fail("graph input '{}' has no shape in the model; give its shape", vi.name());
  Shape s;
  for (int k = 0; k < tt.shape().dim_size(); ++k) {
    const auto& d = tt.shape().dim(k);
    if (d.has_dim_value() && d.dim_value() >= 0) {
      s.push_back(d.dim_value());
    } else if (k == 0) {
      s.push_back(opt.batch_size);
    } else {
      fail("graph input '{}' dim {} is symbolic ('{}'); onnxdp needs its size (from the data)", vi.name(), k,
           d.dim_param());
    }
  }
  return s;
}

// The graph input's shape, which must be one a tensor can have (dims multiply to at most 2^62).
Shape static_shape(const onnx::ValueInfoProto& vi, const ImportOptions& opt) {
  Shape s = declared_shape(vi, opt);
  try {
    shape_numel(s);
  } catch (const Error& e) {
    fail("graph input '{}': {}", vi.name(), e.what());
  }
  return s;
}

}  // namespace

Graph import_graph(const onnx::ModelProto& m, const std::string& model_dir, const ImportOptions& opt) {
  if (m.ir_version() < 3) fail("model IR version {} is older than 3, which onnxdp reads", m.ir_version());
  int opset = -1;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = int(o.version());
  if (opset < 0) fail("model imports no default-domain (ai.onnx) opset");
  if (opset < kMinOpset || opset > kMaxOpset)
    fail("model uses default-domain opset {}, onnxdp imports opsets {} to {}", opset, kMinOpset, kMaxOpset);

  const onnx::GraphProto& gp = m.graph();
  Graph g;
  g.name = gp.name();
  std::map<std::string, ValueId> by_name;
  std::unordered_set<std::string> value_names;  // every value's name (ImportCtx::unique_value_name)

  for (const auto& init : gp.initializer()) {
    if (init.name().empty()) fail("an initializer has no name");
    if (by_name.count(init.name())) fail("initializer '{}' is defined more than once", init.name());
    Value v;
    v.name = init.name();
    v.data = tensor_from_proto(init, model_dir);
    v.dtype = v.data.dtype();
    v.shape = v.data.shape();
    // Floating initializers are parameters (trainable or running statistics); integer ones are
    // fixed shape arithmetic and fold as constants.
    v.kind = dtype_is_float(v.dtype) ? ValueKind::parameter : ValueKind::constant;
    // (C++17 evaluates the right side of `=` first: take the id before v's name is moved out.)
    ValueId id = g.add_value(std::move(v));
    by_name[init.name()] = id;
    value_names.insert(init.name());
  }
  for (const auto& vi : gp.input()) {
    if (by_name.count(vi.name())) continue;  // an initializer listed as input (IR < 4)
    if (!vi.type().has_tensor_type()) fail("graph input '{}' is not a tensor; onnxdp handles tensors only", vi.name());
    Value v;
    v.name = vi.name();
    int et = vi.type().tensor_type().elem_type();
    if (!dtype_from_onnx(et, &v.dtype))
      fail("graph input '{}' has element type {}, which onnxdp does not support", vi.name(), onnx_type_name(et));
    auto ci = opt.constant_inputs.find(vi.name());
    if (ci != opt.constant_inputs.end()) {
      v.kind = ValueKind::constant;
      v.data = ci->second;
      v.shape = v.data.shape();
      if (v.data.dtype() != v.dtype) fail("graph input '{}' is {}, the value bound to it is {}", vi.name(), dtype_name(v.dtype), dtype_name(v.data.dtype()));
      ValueId id = g.add_value(std::move(v));
      by_name[vi.name()] = id;
      value_names.insert(vi.name());
      continue;
    }
    v.shape = static_shape(vi, opt);
    v.kind = ValueKind::input;
    ValueId id = g.add_value(std::move(v));
    by_name[vi.name()] = id;
    value_names.insert(vi.name());
    g.inputs.push_back(id);
  }

  for (const auto& np : gp.node()) {
    const std::string& domain = np.domain();
    Node n;
    n.name = np.name();
    ImportCtx ctx{g, np, opset, n, &opt};
    ctx.value_names = &value_names;
    if (!(domain.empty() || domain == "ai.onnx"))
      ctx.fail("domain '{}' is not supported (onnxdp imports the default ONNX domain)", domain);
    auto op = op_from_name(np.op_type());
    ImportFn composite = nullptr;
    if (!op && (op = composite_from_name(np.op_type()))) composite = composite_import_fn(np.op_type());
    if (!op) ctx.fail("op {} is not supported by onnxdp", np.op_type());
    n.op = *op;
    for (const auto& in : np.input()) {
      if (in.empty()) {
        n.inputs.push_back(kNoValue);
        continue;
      }
      auto it = by_name.find(in);
      if (it == by_name.end())
        ctx.fail("input '{}' is not produced by any earlier node, initializer or graph input (unknown name, "
                 "nodes out of order, or a cycle)", in);
      n.inputs.push_back(it->second);
    }
    while (!n.inputs.empty() && n.inputs.back() == kNoValue) n.inputs.pop_back();
    for (const auto& a : np.attribute()) {
      // Lists of strings (the recurrent ops' activations) have no Attr form: a composite reads
      // them from the proto itself; any other op refuses them in convert_attr.
      if (composite && a.type() == onnx::AttributeProto::STRINGS) continue;
      n.attrs[a.name()] = convert_attr(a, model_dir, ctx);
    }
    for (const char* own : {kBlockedInputs, kBlockedOutputs})
      if (n.attrs.count(own)) ctx.fail("attribute '{}' is onnxdp's own (the CPU's tensor layout, set when it compiles), "
                                       "not an ONNX attribute", own);
    (composite ? composite : import_fn(n.op))(ctx);
    const OpInfo& info = op_info(n.op);
    for (const auto& [name, a] : n.attrs)
      if (!info.find_attr(name)) ctx.fail("attribute '{}' is not supported", name);
    int idx = int(g.nodes.size());
    for (int k = 0; k < np.output_size(); ++k) {
      const std::string& out = np.output(k);
      if (!out.empty() && by_name.count(out)) ctx.fail("output '{}' is already defined elsewhere", out);
      if (size_t(k) < ctx.bound_outputs.size() && ctx.bound_outputs[size_t(k)] != kNoValue) {
        // A composite's output made by a helper node: it takes the ONNX name (an unnamed one
        // stays internal and dead-node removal drops it).
        if (!out.empty()) {
          g.value(ctx.bound_outputs[size_t(k)]).name = out;
          by_name[out] = ctx.bound_outputs[size_t(k)];
          value_names.insert(out);
        }
        continue;
      }
      if (out.empty()) {
        n.outputs.push_back(kNoValue);
        continue;
      }
      Value v;
      v.name = out;
      v.producer = idx;
      ValueId id = g.add_value(std::move(v));
      by_name[out] = id;
      value_names.insert(out);
      n.outputs.push_back(id);
    }
    while (!n.outputs.empty() && n.outputs.back() == kNoValue) n.outputs.pop_back();
    if (n.outputs.empty() && !ctx.bound_outputs.empty()) {
      // Every output the ONNX node names is bound: the node's own output is unused but kept so
      // the node stays well formed until dead-node removal.
      Value v;
      v.name = ctx.unique_value_name((n.name.empty() ? np.op_type() : n.name) + "/unused");
      v.producer = idx;
      n.outputs.push_back(g.add_value(std::move(v)));
    }
    g.nodes.push_back(std::move(n));
  }
  for (const auto& out : gp.output()) {
    auto it = by_name.find(out.name());
    if (it == by_name.end()) fail("graph output '{}' is not produced by any node", out.name());
    g.outputs.push_back(it->second);
  }
  return g;
}

}  // namespace onnxdp
