#include "graph/autodiff.h"

namespace onnxdp {

#define ONNXDP_X(op, ...) void grad_##op(GradCtx&);
ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X

GradRule grad_rule(Op op) {
  static const GradRule rules[] = {
#define ONNXDP_X(op, ...) &grad_##op,
      ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X
  };
  return rules[size_t(op)];
}

void no_gradient(GradCtx&) {}

void gradient_missing(GradCtx& c) {
  c.fail("onnxdp has no gradient rule for {} yet; freeze the parameters before it (--freeze) or file an issue",
         op_name(c.node.op));
}

std::vector<ValueId> GradCtx::emit_n(Op op, std::vector<ValueId> inputs, std::map<std::string, Attr> attrs, int n_out) {
  std::vector<std::string> names;
  std::string base = node.name.empty() ? std::string(op_name(node.op)) : node.name;
  for (int k = 0; k < n_out; ++k) names.push_back(fmt::format("grad{}{}/{}", counter++, base, op_name(op)));
  int idx = graph.add_node(op, fmt::format("grad{}/{}", counter++, base), std::move(inputs), names, std::move(attrs));
  return graph.nodes[size_t(idx)].outputs;
}

ValueId GradCtx::emit(Op op, std::vector<ValueId> inputs, std::map<std::string, Attr> attrs, int n_out) {
  return emit_n(op, std::move(inputs), std::move(attrs), n_out)[0];
}

ValueId GradCtx::constant(Tensor t) {
  Value v;
  v.name = fmt::format("grad{}/const", counter++);
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.kind = ValueKind::constant;
  v.data = std::move(t);
  return graph.add_value(std::move(v));
}

ValueId GradCtx::scalar(float x, DType t) {
  Tensor s(t, {});
  if (t == DType::f32) s.as<float>()[0] = x;
  else if (t == DType::f64) s.as<double>()[0] = x;
  else fail("scalar constant of dtype {} is not supported", dtype_name(t));
  return constant(std::move(s));
}

ValueId GradCtx::ints(const std::vector<int64_t>& v) { return constant(Tensor::from_i64(v)); }

ValueId GradCtx::reduce_to(ValueId grad, const Shape& target) {
  const Shape gs = graph.value(grad).shape;
  if (gs == target) return grad;
  std::vector<int64_t> axes;
  size_t lead = gs.size() - target.size();
  for (size_t i = 0; i < gs.size(); ++i)
    if (i < lead || (target[i - lead] == 1 && gs[i] != 1)) axes.push_back(int64_t(i));
  ValueId r = grad;
  if (!axes.empty()) r = emit(Op::ReduceSum, {grad, ints(axes)}, {{"keepdims", Attr(int64_t(0))}});
  if (graph.value(r).shape != target) r = emit(Op::Reshape, {r, ints(target)});
  return r;
}

void GradCtx::add(int k, ValueId g) {
  ValueId x = in_id(k);
  const Value& xv = graph.value(x);
  const Value& gv = graph.value(g);
  if (gv.shape != xv.shape || gv.dtype != xv.dtype)
    fail("rule produced a {} {} gradient for input {} of {} {}", dtype_name(gv.dtype), shape_str(gv.shape), k,
         dtype_name(xv.dtype), shape_str(xv.shape));
  auto it = grads.find(x);
  if (it == grads.end()) grads[x] = g;
  else it->second = emit(Op::Add, {it->second, g});
}

std::vector<ValueId> autodiff(Graph& g, ValueId loss, const std::vector<ValueId>& wrt, ValueId seed) {
  const Value& lv = g.value(loss);
  if (!dtype_is_float(lv.dtype) || shape_numel(lv.shape) != 1)
    fail("the loss '{}' must be a floating scalar, it is {} {}", lv.name, dtype_name(lv.dtype), shape_str(lv.shape));

  // Which values lie on a path from a wrt value to the loss: forward reach from wrt, backward from loss.
  const size_t nv = g.values.size();
  std::vector<char> from_wrt(nv, 0), to_loss(nv, 0);
  for (ValueId w : wrt) from_wrt[size_t(w)] = 1;
  const size_t n_forward = g.nodes.size();
  for (size_t ni = 0; ni < n_forward; ++ni) {
    const Node& n = g.nodes[ni];
    bool any = false;
    for (ValueId in : n.inputs) any |= in != kNoValue && from_wrt[size_t(in)] && dtype_is_float(g.value(in).dtype);
    if (any)
      for (ValueId o : n.outputs)
        if (o != kNoValue) from_wrt[size_t(o)] = 1;
  }
  to_loss[size_t(loss)] = 1;
  for (size_t ni = n_forward; ni-- > 0;) {
    const Node& n = g.nodes[ni];
    bool any = false;
    for (ValueId o : n.outputs) any |= o != kNoValue && to_loss[size_t(o)];
    if (any)
      for (ValueId in : n.inputs)
        if (in != kNoValue) to_loss[size_t(in)] = 1;
  }

  std::map<ValueId, ValueId> grads;
  int counter = 0;
  if (seed != kNoValue) {
    const Value& sv = g.value(seed);
    if (sv.dtype != lv.dtype || sv.shape != lv.shape)
      fail("autodiff: the seed '{}' ({} {}) must have the loss '{}''s type and shape ({} {})", sv.name,
           dtype_name(sv.dtype), shape_str(sv.shape), lv.name, dtype_name(lv.dtype), shape_str(lv.shape));
    grads[loss] = seed;
  } else {
    Tensor one(lv.dtype, lv.shape);
    if (lv.dtype == DType::f32) one.as<float>()[0] = 1.0f;
    else if (lv.dtype == DType::f64) one.as<double>()[0] = 1.0;
    else fail("the loss '{}' must be f32 or f64", lv.name);
    Value v;
    v.name = "grad/seed";
    v.dtype = lv.dtype;
    v.shape = lv.shape;
    v.kind = ValueKind::constant;
    v.data = std::move(one);
    grads[loss] = g.add_value(std::move(v));
  }

  for (size_t ni = n_forward; ni-- > 0;) {
    GradCtx c{g, g.nodes[ni], {}, {}, grads, counter};
    bool any_out = false;
    for (ValueId o : c.node.outputs) {
      auto it = o == kNoValue ? grads.end() : grads.find(o);
      c.out_grads.push_back(it == grads.end() ? kNoValue : it->second);
      any_out |= it != grads.end();
    }
    if (!any_out) continue;
    bool any_in = false;
    for (ValueId in : c.node.inputs) {
      bool w = in != kNoValue && from_wrt[size_t(in)] && to_loss[size_t(in)] && dtype_is_float(g.value(in).dtype);
      c.wants.push_back(w);
      any_in |= w;
    }
    if (!any_in) continue;
    grad_rule(c.node.op)(c);
  }

  std::vector<ValueId> out;
  for (ValueId w : wrt) {
    auto it = grads.find(w);
    out.push_back(it == grads.end() ? kNoValue : it->second);
  }
  return out;
}

}  // namespace onnxdp
