// See fold_scales.h.
#include "graph/passes/fold_scales.h"

#include <vector>

#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

struct ScaleFolder : NodeRewrite {
  int removed = 0;
  using NodeRewrite::NodeRewrite;

  // The value of x when it is a one-element float32 constant; else false.
  bool scalar_constant(ValueId x, float& s) const {
    const Value& v = g.value(x);
    if (v.kind != ValueKind::constant || v.dtype != DType::f32 || v.data.numel() != 1) return false;
    s = v.data.as<float>()[0];
    return true;
  }

  // A float32 MatMul / FusedMatMul with operands of rank 2 or more.
  bool product(const Node& n) const {
    if (n.op != Op::MatMul && n.op != Op::FusedMatMul) return false;
    const Value &a = g.value(n.inputs[0]), &b = g.value(n.inputs[1]);
    return a.shape.size() >= 2 && b.shape.size() >= 2 && a.dtype == DType::f32 && b.dtype == DType::f32;
  }

  void scale(Node& p, float s) {
    const float alpha = p.op == Op::FusedMatMul ? p.f("alpha") : 1.0f;
    p.op = Op::FusedMatMul;
    p.attrs["alpha"] = Attr(alpha * s);
  }

  // Mul(P, s): the product of P writes the Mul's output.
  bool after_product(size_t ni, ValueId pv, float s) {
    const Value& v = g.value(pv);
    if (v.kind != ValueKind::activation || v.producer < 0 || drop[size_t(v.producer)]) return false;
    if (readers[size_t(pv)] != 1 || kept.count(pv)) return false;
    Node& p = g.nodes[size_t(v.producer)];
    if (!product(p) || p.has_input(2) || (p.op == Op::FusedMatMul && !p.s("activation").empty())) return false;
    scale(p, s);
    const ValueId y = g.nodes[ni].outputs[0];
    g.value(y).producer = v.producer;
    g.value(pv).producer = -1;
    p.outputs[0] = y;
    return true;
  }

  // Mul(X, s) read by products alone, as A or B: they read X, scaled.
  bool before_products(size_t ni, ValueId x, float s) {
    const ValueId y = g.nodes[ni].outputs[0];
    if (kept.count(y) || readers[size_t(y)] == 0) return false;
    std::vector<Node*> users;
    int uses = 0;
    for (size_t k = ni + 1; k < g.nodes.size(); ++k) {
      if (drop[k]) continue;
      Node& n = g.nodes[k];
      int here = 0;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] == y) {
          if (i > 1 || !product(n)) return false;
          ++here;
        }
      if (here == 2) return false;  // X * X: s twice; rare, left alone
      if (here) users.push_back(&n), uses += here;
    }
    if (uses != readers[size_t(y)]) return false;
    for (Node* n : users) {
      for (ValueId& in : n->inputs)
        if (in == y) in = x;
      scale(*n, s);
    }
    readers[size_t(x)] += uses;
    readers[size_t(y)] = 0;
    return true;
  }

  bool mul(size_t ni) {
    const Node& m = g.nodes[ni];
    if (m.inputs.size() != 2 || g.value(m.outputs[0]).dtype != DType::f32) return false;
    for (int k = 0; k < 2; ++k) {
      float s;
      if (!scalar_constant(m.inputs[size_t(k)], s)) continue;
      const ValueId other = m.inputs[size_t(1 - k)];
      // s broadcast over X alone: the Mul's output has X's shape.
      if (g.value(other).shape != g.value(m.outputs[0]).shape) return false;
      if (!after_product(ni, other, s) && !before_products(ni, other, s)) return false;
      for (ValueId in : m.inputs) --readers[size_t(in)];  // the Mul's own reads go with it
      drop[ni] = true;
      return true;
    }
    return false;
  }
};

}  // namespace

int fold_scales(Graph& g, const std::vector<ValueId>& keep) {
  ScaleFolder f(g, keep);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    if (g.nodes[ni].op == Op::Mul) f.removed += f.mul(ni);
  f.finish();
  return f.removed;
}

}  // namespace onnxdp
