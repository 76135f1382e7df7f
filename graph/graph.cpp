#include "graph/graph.h"

#include <set>
#include <sstream>

namespace onnxdp {

// ---- op table ---------------------------------------------------------------------------------

namespace {

std::vector<AttrSpec> parse_schema(const char* op, const std::string& schema) {
  std::vector<AttrSpec> specs;
  std::stringstream ss(schema);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    auto eq = item.find('=');
    AttrSpec a;
    a.name = item.substr(0, colon);
    std::string kind = item.substr(colon + 1, eq == std::string::npos ? std::string::npos : eq - colon - 1);
    std::string dflt = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (kind == "i") a.kind = AttrKind::i;
    else if (kind == "f") a.kind = AttrKind::f;
    else if (kind == "s") a.kind = AttrKind::s;
    else if (kind == "ints") a.kind = AttrKind::ints;
    else if (kind == "floats") a.kind = AttrKind::floats;
    else if (kind == "t") a.kind = AttrKind::t;
    else throw Error(std::string("op table: bad attribute kind in ") + op + ": " + item);
    if (eq != std::string::npos) {
      if (a.kind == AttrKind::i) a.default_value = Attr(int64_t(std::stoll(dflt)));
      else if (a.kind == AttrKind::f) a.default_value = Attr(std::stof(dflt));
      else if (a.kind == AttrKind::s) a.default_value = Attr(dflt);
    }
    specs.push_back(std::move(a));
  }
  return specs;
}

const std::vector<OpInfo>& op_infos() {
  static const std::vector<OpInfo> infos = [] {
    std::vector<OpInfo> v;
#define ONNXDP_X(op, cat, imin, imax, omin, omax, schema) \
  v.push_back(OpInfo{Op::op, #op, #cat, imin, imax, omin, omax, parse_schema(#op, schema)});
    ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X
    return v;
  }();
  return infos;
}

}  // namespace

const AttrSpec* OpInfo::find_attr(const std::string& n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

const OpInfo& op_info(Op op) { return op_infos()[size_t(op)]; }
const char* op_name(Op op) { return op_info(op).name; }

std::optional<Op> op_from_name(const std::string& name) {
  for (const auto& i : op_infos())
    if (name == i.name) return i.op;
  return std::nullopt;
}

std::optional<Op> composite_from_name(const std::string& name) {
  static const std::pair<const char*, Op> composites[] = {
#define ONNXDP_X(op, cat, as) {#op, Op::as},
      ONNXDP_COMPOSITES(ONNXDP_X)
#undef ONNXDP_X
  };
  for (const auto& [n, as] : composites)
    if (name == n) return as;
  return std::nullopt;
}

// ---- Node -------------------------------------------------------------------------------------

std::string Node::describe() const {
  return fmt::format("node {} ({})", name.empty() ? "<unnamed>" : name, op_name(op));
}

namespace {
template <class T>
const T& get_attr(const Node& n, const std::string& a, const char* kind) {
  auto it = n.attrs.find(a);
  if (it != n.attrs.end()) {
    if (auto* p = std::get_if<T>(&it->second)) return *p;
    throw Error(fmt::format("{}: attribute '{}' is not of kind {}", n.describe(), a, kind));
  }
  const AttrSpec* spec = op_info(n.op).find_attr(a);
  if (spec && spec->default_value)
    if (auto* p = std::get_if<T>(&*spec->default_value)) return *p;
  throw Error(fmt::format("{}: attribute '{}' is required", n.describe(), a));
}
}  // namespace

int64_t Node::i(const std::string& a) const { return get_attr<int64_t>(*this, a, "int"); }
float Node::f(const std::string& a) const { return get_attr<float>(*this, a, "float"); }
const std::string& Node::s(const std::string& a) const { return get_attr<std::string>(*this, a, "string"); }
const std::vector<int64_t>& Node::ints(const std::string& a) const {
  return get_attr<std::vector<int64_t>>(*this, a, "ints");
}
const std::vector<float>& Node::floats(const std::string& a) const {
  return get_attr<std::vector<float>>(*this, a, "floats");
}
const Tensor& Node::t(const std::string& a) const { return get_attr<Tensor>(*this, a, "tensor"); }
std::vector<int64_t> Node::ints_or(const std::string& a, std::vector<int64_t> dflt) const {
  return has(a) ? ints(a) : dflt;
}

// ---- Graph ------------------------------------------------------------------------------------

void index_producers(Graph& g) {
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (ValueId o : g.nodes[ni].outputs)
      if (o != kNoValue) g.value(o).producer = int(ni);
}

std::vector<int> count_readers(const Graph& g) {
  std::vector<int> readers(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++readers[size_t(v)];
  return readers;
}

ValueId Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return ValueId(values.size() - 1);
}

ValueId Graph::find(const std::string& n) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == n) return ValueId(i);
  return kNoValue;
}

int Graph::add_node(Op op, std::string node_name, std::vector<ValueId> ins, std::vector<std::string> out_names,
                    std::map<std::string, Attr> attrs) {
  Node n;
  n.name = std::move(node_name);
  n.op = op;
  n.inputs = std::move(ins);
  n.attrs = std::move(attrs);
  int idx = int(nodes.size());
  for (auto& on : out_names) {
    Value v;
    v.name = on;
    v.producer = idx;
    n.outputs.push_back(add_value(std::move(v)));
  }
  nodes.push_back(std::move(n));
  infer_node(*this, idx);
  return idx;
}

std::vector<ValueId> Graph::parameters() const {
  std::vector<ValueId> r;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == ValueKind::parameter) r.push_back(ValueId(i));
  return r;
}

// ---- shape rules ------------------------------------------------------------------------------

#define ONNXDP_X(op, ...) void shape_##op(ShapeCtx&);
ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X

ShapeRule shape_rule(Op op) {
  static const ShapeRule rules[] = {
#define ONNXDP_X(op, ...) &shape_##op,
      ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X
  };
  return rules[size_t(op)];
}

const Value& ShapeCtx::in(int k) const {
  if (!has(k)) fail("input {} is missing", k);
  return graph.value(node.inputs[size_t(k)]);
}

const Tensor* ShapeCtx::constant(int k) const {
  if (!has(k)) return nullptr;
  const Value& v = in(k);
  return v.kind == ValueKind::constant && !v.data.empty() ? &v.data : nullptr;
}

const Tensor& ShapeCtx::require_constant(int k, const char* what) const {
  const Tensor* t = constant(k);
  if (!t)
    fail("input {} ('{}', the {}) must be known before training starts; onnxdp needs static shapes",
         k, in(k).name, what);
  return *t;
}

void infer_node(Graph& g, int node_index) {
  Node& n = g.nodes[size_t(node_index)];
  const OpInfo& info = op_info(n.op);
  int nin = int(n.inputs.size()), nout = int(n.outputs.size());
  if (nin < info.in_min || nin > info.in_max)
    fail("{}: has {} inputs, the op takes {} to {}", n.describe(), nin, info.in_min, info.in_max);
  if (nout < info.out_min || nout > info.out_max)
    fail("{}: has {} outputs, the op gives {} to {}", n.describe(), nout, info.out_min, info.out_max);
  ShapeCtx ctx{g, n, {}};
  for (ValueId o : n.outputs) ctx.out.push_back(o == kNoValue ? nullptr : &g.value(o));
  const std::string who = n.describe();
  try {
    shape_rule(n.op)(ctx);
    // A rule's arithmetic is checked (graph/checked.h); what it promises must also be a shape a
    // tensor can have, so that the planner and kernels multiply only dims of valid shapes.
    for (size_t k = 0; k < ctx.out.size(); ++k)
      if (ctx.out[k]) shape_numel(ctx.out[k]->shape);
  } catch (const Error& e) {
    // Errors of shared helpers (checked arithmetic, broadcasting, shape_numel) name the node too.
    if (std::string_view(e.what()).starts_with(who)) throw;
    throw Error(who + ": " + e.what());
  }
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      fail("shapes {} and {} do not broadcast", shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const Node& n) {
  if (axis < -rank || axis >= rank)
    fail("{}: axis {} is out of range for rank {}", n.describe(), axis, rank);
  return axis < 0 ? axis + rank : axis;
}

// ---- verifier ---------------------------------------------------------------------------------

namespace {
bool attr_kind_matches(const Attr& a, AttrKind k) {
  switch (k) {
    case AttrKind::i: return std::holds_alternative<int64_t>(a);
    case AttrKind::f: return std::holds_alternative<float>(a);
    case AttrKind::s: return std::holds_alternative<std::string>(a);
    case AttrKind::ints: return std::holds_alternative<std::vector<int64_t>>(a);
    case AttrKind::floats: return std::holds_alternative<std::vector<float>>(a);
    case AttrKind::t: return std::holds_alternative<Tensor>(a);
  }
  return false;
}
}  // namespace

void verify(const Graph& g) {
  std::vector<int> defined(g.values.size(), 0);
  std::set<std::string> names;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    if (!names.insert(v.name).second) fail("value '{}' is defined more than once", v.name);
    if (v.kind == ValueKind::parameter || v.kind == ValueKind::constant) {
      if (v.data.empty()) fail("value '{}' is a {} without data", v.name,
                               v.kind == ValueKind::parameter ? "parameter" : "constant");
      if (v.data.dtype() != v.dtype || v.data.shape() != v.shape)
        fail("value '{}': data is {} {}, value says {} {}", v.name, dtype_name(v.data.dtype()),
             shape_str(v.data.shape()), dtype_name(v.dtype), shape_str(v.shape));
      defined[i] = 1;
    }
  }
  for (ValueId in : g.inputs) {
    if (g.value(in).kind != ValueKind::input) fail("graph input '{}' is not of kind input", g.value(in).name);
    defined[size_t(in)] = 1;
  }
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    const OpInfo& info = op_info(n.op);
    for (ValueId in : n.inputs) {
      if (in == kNoValue) continue;
      if (in < 0 || size_t(in) >= g.values.size()) fail("{}: input id {} does not exist", n.describe(), in);
      if (!defined[size_t(in)])
        fail("{}: input '{}' is used before it is defined (or the graph has a cycle)", n.describe(),
             g.value(in).name);
    }
    for (const auto& [name, a] : n.attrs) {
      const AttrSpec* spec = info.find_attr(name);
      if (!spec) fail("{}: unknown attribute '{}'", n.describe(), name);
      if (!attr_kind_matches(a, spec->kind)) fail("{}: attribute '{}' has the wrong kind", n.describe(), name);
    }
    // Re-run the shape rule on a copy and compare.
    Graph& mg = const_cast<Graph&>(g);
    std::vector<std::pair<DType, Shape>> saved;
    for (ValueId o : n.outputs)
      saved.emplace_back(o == kNoValue ? DType::f32 : g.value(o).dtype, o == kNoValue ? Shape{} : g.value(o).shape);
    infer_node(mg, int(ni));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == kNoValue) continue;
      Value& o = mg.value(n.outputs[k]);
      const DType rule_dtype = o.dtype;
      const Shape rule_shape = o.shape;  // what the rule gives, before the saved type goes back
      o.dtype = saved[k].first;
      o.shape = saved[k].second;
      if (rule_dtype != o.dtype || rule_shape != o.shape)
        fail("{}: output '{}' is {} {}, its shape rule gives {} {}", n.describe(), o.name, dtype_name(o.dtype),
             shape_str(o.shape), dtype_name(rule_dtype), shape_str(rule_shape));
      if (defined[size_t(n.outputs[k])]) fail("{}: output '{}' is defined twice", n.describe(), o.name);
      defined[size_t(n.outputs[k])] = 1;
    }
  }
  for (ValueId o : g.outputs)
    if (!defined[size_t(o)]) fail("graph output '{}' is never defined", g.value(o).name);
}

// ---- printer ----------------------------------------------------------------------------------

std::string print_graph(const Graph& g) {
  auto val = [&](ValueId id) {
    if (id == kNoValue) return std::string("_");
    const Value& v = g.value(id);
    return fmt::format("%{}:{}{}", v.name, dtype_name(v.dtype), shape_str(v.shape));
  };
  std::string s = fmt::format("graph {} ({} nodes)\n", g.name, g.nodes.size());
  for (ValueId i : g.inputs) s += "  input  " + val(i) + "\n";
  for (const auto& v : g.values)
    if (v.kind == ValueKind::parameter) s += fmt::format("  param  %{}:{}{}\n", v.name, dtype_name(v.dtype), shape_str(v.shape));
  for (const Node& n : g.nodes) {
    std::string outs, ins;
    for (ValueId o : n.outputs) outs += (outs.empty() ? "" : ", ") + val(o);
    for (ValueId i : n.inputs) ins += (ins.empty() ? "" : ", ") + val(i);
    s += fmt::format("  {} = {}({})  # {}\n", outs, op_name(n.op), ins, n.name);
  }
  for (ValueId o : g.outputs) s += "  output " + val(o) + "\n";
  return s;
}

}  // namespace onnxdp
