#include "importer/graph_export.h"

#include <cstring>
#include <string_view>

#include "importer/onnx_io.h"

namespace onnxdp {

namespace {

// The collectives, the gradient ops and the fused ones (graph/passes/fuse_epilogues.h) are
// onnxdp's own: domain onnxdp.
bool is_onnx_op(Op op) {
  std::string_view cat = op_info(op).category;
  return cat != "collective" && cat != "grad" && op != Op::FusedGemm && op != Op::FusedMatMul;
}

void set_value_info(const Value& v, onnx::ValueInfoProto* vi) {
  vi->set_name(v.name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(v.dtype));
  auto* sh = tt->mutable_shape();
  for (int64_t d : v.shape) sh->add_dim()->set_dim_value(d);
}

void set_attr(const std::string& name, const Attr& a, onnx::AttributeProto* p) {
  p->set_name(name);
  if (auto* i = std::get_if<int64_t>(&a)) {
    p->set_type(onnx::AttributeProto::INT);
    p->set_i(*i);
  } else if (auto* f = std::get_if<float>(&a)) {
    p->set_type(onnx::AttributeProto::FLOAT);
    p->set_f(*f);
  } else if (auto* s = std::get_if<std::string>(&a)) {
    p->set_type(onnx::AttributeProto::STRING);
    p->set_s(*s);
  } else if (auto* is = std::get_if<std::vector<int64_t>>(&a)) {
    p->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : *is) p->add_ints(v);
  } else if (auto* fs = std::get_if<std::vector<float>>(&a)) {
    p->set_type(onnx::AttributeProto::FLOATS);
    for (float v : *fs) p->add_floats(v);
  } else if (auto* t = std::get_if<Tensor>(&a)) {
    p->set_type(onnx::AttributeProto::TENSOR);
    tensor_to_proto(*t, p->mutable_t());
  }
}

}  // namespace

onnx::ModelProto graph_to_onnx(const Graph& g, int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("onnxdp");
  auto* def = m.add_opset_import();
  def->set_domain("");
  def->set_version(opset);
  auto* own = m.add_opset_import();
  own->set_domain("onnxdp");
  own->set_version(1);
  onnx::GraphProto* gp = m.mutable_graph();
  gp->set_name(g.name.empty() ? "onnxdp" : g.name);
  for (ValueId i : g.inputs) set_value_info(g.value(i), gp->add_input());
  for (ValueId o : g.outputs) set_value_info(g.value(o), gp->add_output());
  std::vector<char> used(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId in : n.inputs)
      if (in != kNoValue) used[size_t(in)] = 1;
  for (ValueId o : g.outputs) used[size_t(o)] = 1;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    if ((v.kind == ValueKind::parameter || v.kind == ValueKind::constant) && used[i] && !v.data.empty()) {
      onnx::TensorProto* t = gp->add_initializer();
      t->set_name(v.name);
      tensor_to_proto(v.data, t);
    }
  }
  for (const Node& n : g.nodes) {
    onnx::NodeProto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(op_name(n.op));
    if (!is_onnx_op(n.op)) np->set_domain("onnxdp");
    for (ValueId in : n.inputs) np->add_input(in == kNoValue ? "" : g.value(in).name);
    for (ValueId o : n.outputs) np->add_output(o == kNoValue ? "" : g.value(o).name);
    for (const auto& [name, a] : n.attrs) set_attr(name, a, np->add_attribute());
  }
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    if (v.kind == ValueKind::activation && v.producer >= 0) set_value_info(v, gp->add_value_info());
  }
  return m;
}

}  // namespace onnxdp
