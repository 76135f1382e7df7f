// See fuse_gelu.h.
#include "graph/passes/fuse_gelu.h"

#include <cmath>

#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

struct GeluFuser : NodeRewrite {
  using NodeRewrite::NodeRewrite;

  // Whether v is a constant float scalar within 1e-6 of want.
  bool scalar(ValueId v, double want) const {
    const Value& x = g.value(v);
    if (x.kind != ValueKind::constant || x.data.numel() != 1 || !dtype_is_float(x.dtype)) return false;
    return std::abs(x.data.to_f64()[0] - want) <= 1e-6;
  }

  // The other operand of binary node n when one operand satisfies pred; kNoValue otherwise.
  template <class Pred>
  static ValueId other_than(const Node& n, Pred pred) {
    if (n.inputs.size() != 2) return kNoValue;
    if (pred(n.inputs[0])) return n.inputs[1];
    if (pred(n.inputs[1])) return n.inputs[0];
    return kNoValue;
  }

  // a = Add(Erf(d), 1) with d = x / sqrt 2 (Div or Mul by 1 / sqrt 2), for this x: the nodes to drop.
  bool erf_term(ValueId a, ValueId x, std::vector<Node*>& chain) {
    Node* add = sole_producer(a, Op::Add);
    if (!add) return false;
    const ValueId e = other_than(*add, [&](ValueId v) { return scalar(v, 1.0); });
    Node* erf = sole_producer(e, Op::Erf);
    if (!erf) return false;
    const ValueId d = erf->inputs[0];
    Node* div = sole_producer(d, Op::Div);
    Node* mul = div ? nullptr : sole_producer(d, Op::Mul);
    if (div && !(div->inputs[0] == x && scalar(div->inputs[1], M_SQRT2))) return false;
    if (mul && other_than(*mul, [&](ValueId v) { return scalar(v, M_SQRT1_2); }) != x) return false;
    if (!div && !mul) return false;
    chain.insert(chain.end(), {add, erf, div ? div : mul});
    return true;
  }

  // Node n = Mul(.., ..) ending a GELU: becomes Gelu(x).
  bool fuse(Node& n) {
    if (n.inputs.size() != 2 || !dtype_is_float(g.value(n.outputs[0]).dtype)) return false;
    std::vector<Node*> chain;
    ValueId x = kNoValue;
    // Mul(Mul(x, a), 0.5) with a the erf term.
    const ValueId inner = other_than(n, [&](ValueId v) { return scalar(v, 0.5); });
    if (Node* m = sole_producer(inner, Op::Mul)) {
      for (int k = 0; k < 2 && x == kNoValue; ++k) {
        const ValueId cand = m->inputs[size_t(k)], a = m->inputs[size_t(1 - k)];
        std::vector<Node*> c;
        if (erf_term(a, cand, c)) x = cand, chain = c;
      }
      if (x != kNoValue) chain.push_back(m);
    }
    // Mul(Mul(x, 0.5), a).
    for (int k = 0; k < 2 && x == kNoValue; ++k) {
      Node* h = sole_producer(n.inputs[size_t(k)], Op::Mul);
      if (!h) continue;
      const ValueId cand = other_than(*h, [&](ValueId v) { return scalar(v, 0.5); });
      std::vector<Node*> c;
      if (cand != kNoValue && erf_term(n.inputs[size_t(1 - k)], cand, c)) {
        x = cand;
        chain = c;
        chain.push_back(h);
      }
    }
    if (x == kNoValue || g.value(x).dtype != g.value(n.outputs[0]).dtype) return false;
    for (Node* c : chain) drop[size_t(c - g.nodes.data())] = true;
    n.op = Op::Gelu;
    n.inputs = {x};
    n.attrs = {{"approximate", Attr(std::string("none"))}};
    return true;
  }
};

}  // namespace

int fuse_gelu(Graph& g) {
  GeluFuser f(g, {});
  int fused = 0;
  for (Node& n : g.nodes)
    if (n.op == Op::Mul) fused += f.fuse(n);
  f.finish();
  return fused;
}

}  // namespace onnxdp
