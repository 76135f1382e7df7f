// See fuse_attention.h.
#include "graph/passes/fuse_attention.h"

#include <cmath>
#include <limits>
#include <set>

#include "graph/attention.h"
#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

struct AttentionFuser : NodeRewrite {
  std::set<ValueId> fixed;  // parameters read as constants

  AttentionFuser(Graph& graph, const std::vector<ValueId>& keep, const std::vector<ValueId>& fixed_parameters)
      : NodeRewrite(graph, keep), fixed(fixed_parameters.begin(), fixed_parameters.end()) {}

  // Whether x's value is known now and for good: a constant, or a parameter that never changes.
  bool known(ValueId x) const {
    const Value& c = g.value(x);
    return c.kind == ValueKind::constant || (c.kind == ValueKind::parameter && fixed.count(x) && c.data.numel() > 0);
  }

  // The value of x when it is a one-element float constant of dtype t.
  bool scalar_constant(ValueId x, DType t, double& v) const {
    const Value& c = g.value(x);
    if (!known(x) || c.dtype != t || c.data.numel() != 1) return false;
    v = c.data.to_f64()[0];
    return true;
  }

  // The [B, T, H, D] tensor that value v is Transpose(.., perm) of, read only here; else kNoValue.
  ValueId transposed_from(ValueId v, const std::vector<int64_t>& perm) {
    Node* t = sole_producer(v, Op::Transpose);
    if (!t || t->ints_or("perm", {}) != perm || g.value(t->inputs[0]).shape.size() != 4) return kNoValue;
    return t->inputs[0];
  }

  // Node n is MatMul(Softmax(..), v): fuses when the pattern of fuse_attention.h holds.
  bool fuse(size_t ni) {
    Node& pv = g.nodes[ni];
    const DType t = g.value(pv.outputs[0]).dtype;
    if (t != DType::f32 && t != DType::f64) return false;
    ValueId probs = pv.inputs[0];
    std::vector<Node*> gone;
    // Where(IsNaN(p), 0, p) between the Softmax and the product (scaled_dot_product_attention's
    // export zeroes the NaN rows of a fully masked query so).
    int64_t nan_to_zero = 0;
    Node* sm = nullptr;
    if (Node* w = sole_producer(probs, Op::Where)) {
      const ValueId p = w->inputs[2];
      const Value& isn = g.value(w->inputs[0]);
      double z = 1;
      if (isn.producer < 0 || drop[size_t(isn.producer)] || isn.kind != ValueKind::activation ||
          readers[size_t(w->inputs[0])] != 1 || kept.count(w->inputs[0]))
        return false;
      Node& is_nan = g.nodes[size_t(isn.producer)];
      if (is_nan.op != Op::IsNaN || is_nan.inputs[0] != p || !scalar_constant(w->inputs[1], t, z) || z != 0 ||
          std::signbit(z) || readers[size_t(p)] != 2 || kept.count(p) || g.value(p).shape != g.value(probs).shape)
        return false;
      gone = {w, &is_nan};
      --readers[size_t(p)];  // read by the Where and the IsNaN, both going: as if read once
      sm = sole_producer(p, Op::Softmax);
      ++readers[size_t(p)];
      probs = p;
      nan_to_zero = 1;
    } else {
      sm = sole_producer(probs, Op::Softmax);
    }
    if (!sm) return false;
    const Shape ps = g.value(probs).shape;  // a copy: additive_mask may add a value
    int64_t axis = sm->i("axis");
    if (axis < 0) axis += int64_t(ps.size());
    if (ps.size() < 2 || axis != int64_t(ps.size()) - 1) return false;
    gone.push_back(sm);
    // The mask.
    ValueId m = sm->inputs[0], mask = kNoValue;
    double fill = 0;
    int64_t fill_when = 1;
    Node* bias_where = nullptr;  // an additive mask's Where, dropped when nothing else reads it
    if (Node* w = sole_producer(m, Op::Where)) {
      int slot = 0;
      for (int k : {1, 2})
        if (scalar_constant(w->inputs[size_t(k)], t, fill) && g.value(w->inputs[size_t(3 - k)]).shape == ps) {
          slot = k;
          break;
        }
      if (slot == 0 || !(double(float(fill)) == fill || std::isinf(fill))) return false;
      mask = w->inputs[0];
      fill_when = slot == 1;
      m = w->inputs[size_t(3 - slot)];
      gone.push_back(w);
    } else if (Node* add = sole_producer(m, Op::Add)) {
      // s + b with b 0 or a vast negative f (scaled_dot_product_attention's causal mask as
      // exported): Where(b == f, f, s) for any score s within 1e30 (s + f rounds to f).
      int k = 0;
      while (k < 2 && !(g.value(add->inputs[size_t(k)]).shape == ps &&
                        additive_mask(add->inputs[size_t(1 - k)], t, mask, fill, fill_when, bias_where)))
        ++k;
      if (k == 2) return false;
      m = add->inputs[size_t(k)];
      gone.push_back(add);
    }
    // The scale.
    double scale = 1;
    ValueId x = m;
    Node* mul = sole_producer(m, Op::Mul);
    Node* div = mul ? nullptr : sole_producer(m, Op::Div);
    if (mul || div) {
      Node& s = mul ? *mul : *div;
      double c = 0;
      int k = -1;
      if (scalar_constant(s.inputs[1], t, c)) k = 0;
      else if (mul && scalar_constant(s.inputs[0], t, c)) k = 1;
      if (k < 0 || g.value(s.inputs[size_t(k)]).shape != ps) return false;
      x = s.inputs[size_t(k)];
      scale = div ? 1.0 / c : c;
      gone.push_back(&s);
    }
    Node* qk = sole_producer(x, Op::MatMul);
    if (!qk) return false;
    gone.push_back(qk);
    ValueId q = qk->inputs[0], k = qk->inputs[1], v = pv.inputs[1];
    // Operands scaled before the product (scaled_dot_product_attention as exported scales q and
    // k by the square root of the scale each).
    for (ValueId* operand : {&q, &k}) {
      Node* om = sole_producer(*operand, Op::Mul);
      if (!om) continue;
      double c = 0;
      const Shape& os = g.value(*operand).shape;
      for (int j : {0, 1})
        if (scalar_constant(om->inputs[size_t(j)], t, c) && g.value(om->inputs[size_t(1 - j)]).shape == os) {
          *operand = om->inputs[size_t(1 - j)];
          scale *= c;
          gone.push_back(om);
          break;
        }
    }
    for (ValueId u : {q, k, v})
      if (g.value(u).dtype != t) return false;
    AttentionDims a;
    if (!attention_dims(g.value(q).shape, g.value(k).shape, g.value(v).shape, false, a).empty() ||
        a.p_shape() != ps)
      return false;
    // The head transposes, when all four can go.
    Node* node = &pv;  // becomes the FusedAttention node
    ValueId y = pv.outputs[0];
    int64_t heads = 0;
    const ValueId q4 = transposed_from(q, {0, 2, 1, 3}), k4 = transposed_from(k, {0, 2, 3, 1}),
                  v4 = transposed_from(v, {0, 2, 1, 3});
    // The Transpose back reads y, or a Reshape of y to its own shape read only there (HF GPT-2's
    // export reshapes y so before transposing it).
    Node *back = nullptr, *same = nullptr;
    ValueId yb = y;
    for (size_t ri = ni + 1; ri < g.nodes.size() && !back; ++ri) {
      Node& r = g.nodes[ri];
      if (drop[ri] || r.inputs.empty() || r.inputs[0] != yb) continue;
      if (r.op == Op::Transpose) back = &r;
      else if (r.op == Op::Reshape && !same && g.value(r.outputs[0]).shape == g.value(y).shape &&
               readers[size_t(r.outputs[0])] == 1 && !kept.count(r.outputs[0]))
        yb = (same = &r)->outputs[0];
    }
    if (q4 != kNoValue && k4 != kNoValue && v4 != kNoValue && back && readers[size_t(y)] == 1 && !kept.count(y) &&
        back->ints_or("perm", {}) == std::vector<int64_t>{0, 2, 1, 3}) {
      for (ValueId u : {q, k, v}) gone.push_back(&g.nodes[size_t(g.value(u).producer)]);
      gone.push_back(&pv);
      if (same) gone.push_back(same);
      q = q4;
      k = k4;
      v = v4;
      node = back;
      heads = 1;
    }
    // q, k and v cut from one Linear layer's output: read there (heads 2).
    int64_t num_heads = 0;
    if (heads == 1) {
      std::vector<Node*> split;
      const ValueId qkv = packed_qkv(q, k, v, t, split);
      if (qkv != kNoValue) {
        gone.insert(gone.end(), split.begin(), split.end());
        num_heads = g.value(q).shape[2];
        q = qkv;
        k = v = kNoValue;
        heads = 2;
      }
    }
    if (mask != kNoValue && g.value(mask).dtype != DType::boolean) mask = constant_mask(mask);
    // The rewrite: `node` becomes FusedAttention, writing the Softmax's output as p.
    for (Node* n : gone) {
      for (ValueId o : n->outputs) g.value(o).producer = -1;
      for (ValueId u : n->inputs)
        if (u != kNoValue) --readers[size_t(u)];
      n->inputs.clear();
      drop[size_t(n - g.nodes.data())] = true;
    }
    for (ValueId u : node->inputs) --readers[size_t(u)];
    node->op = Op::FusedAttention;
    node->inputs = {q, k, v};
    if (mask != kNoValue) node->inputs.push_back(mask);
    for (ValueId u : node->inputs)
      if (u != kNoValue) ++readers[size_t(u)];
    node->outputs = {node->outputs[0], probs};
    node->attrs.clear();
    node->attrs["scale"] = Attr(float(scale));
    node->attrs["heads"] = Attr(heads);
    if (heads == 2) node->attrs["num_heads"] = Attr(num_heads);
    if (nan_to_zero) node->attrs["nan_to_zero"] = Attr(nan_to_zero);
    if (mask != kNoValue) {
      node->attrs["fill"] = Attr(float(fill));
      node->attrs["fill_when"] = Attr(fill_when);
    }
    if (bias_where && readers[size_t(bias_where->outputs[0])] == 0 && !kept.count(bias_where->outputs[0])) {
      for (ValueId u : bias_where->inputs) --readers[size_t(u)];
      g.value(bias_where->outputs[0]).producer = -1;
      bias_where->inputs.clear();
      drop[size_t(bias_where - g.nodes.data())] = true;
    }
    return true;
  }

  // The value qkv [B, T, 3 * H * D] of dtype t when q4, k4 and v4 ([B, T, H, D] alike) are
  // Reshapes of the three outputs of one Split along qkv's last axis, in that order (equal thirds:
  // a Linear layer's output cut into q, k and v), each read only there; the Split and the
  // Reshapes are added to `gone`. Else kNoValue.
  ValueId packed_qkv(ValueId q4, ValueId k4, ValueId v4, DType t, std::vector<Node*>& gone) {
    const Shape& s4 = g.value(q4).shape;
    if (g.value(k4).shape != s4 || g.value(v4).shape != s4) return kNoValue;
    Node* reshape[3] = {sole_producer(q4, Op::Reshape), sole_producer(k4, Op::Reshape), sole_producer(v4, Op::Reshape)};
    for (Node* r : reshape)
      if (!r) return kNoValue;
    const Value& part = g.value(reshape[0]->inputs[0]);
    if (part.producer < 0 || drop[size_t(part.producer)]) return kNoValue;
    Node& split = g.nodes[size_t(part.producer)];
    if (split.op != Op::Split || split.outputs.size() != 3) return kNoValue;
    const ValueId qkv = split.inputs[0];
    const Shape& xs = g.value(qkv).shape;
    if (g.value(qkv).dtype != t || xs != Shape{s4[0], s4[1], 3 * s4[2] * s4[3]}) return kNoValue;
    int64_t axis = split.i("axis");
    if (axis < 0) axis += 3;
    if (axis != 2) return kNoValue;
    for (int j = 0; j < 3; ++j) {
      const ValueId sj = split.outputs[size_t(j)];
      if (reshape[j]->inputs[0] != sj || readers[size_t(sj)] != 1 || kept.count(sj) ||
          g.value(sj).shape != Shape{s4[0], s4[1], s4[2] * s4[3]})
        return kNoValue;
    }
    gone.push_back(&split);
    gone.insert(gone.end(), reshape, reshape + 3);
    return qkv;
  }

  // A bool constant true where float constant b is not 0.
  ValueId constant_mask(ValueId b) {
    const Value& bv = g.value(b);
    const std::vector<double> e = bv.data.to_f64();
    Value mv;
    mv.name = bv.name + "/mask";
    mv.dtype = DType::boolean;
    mv.shape = bv.shape;
    mv.kind = ValueKind::constant;
    mv.data = Tensor(DType::boolean, bv.shape);
    for (size_t i = 0; i < e.size(); ++i) mv.data.as<bool>()[i] = e[i] != 0;
    const ValueId id = g.add_value(std::move(mv));
    readers.push_back(0);
    return id;
  }

  // A fill an additive mask may hold (graph/attention.h's kVastNegative: -inf, or the lowest
  // float as scaled_dot_product_attention's export writes it), exactly a float.
  static bool vast_negative(double f) { return f <= kVastNegative && double(float(f)) == f; }

  // Whether b, added to the scores, is a mask of 0 and one vast negative fill f: Where(cond, f, 0)
  // (mask cond, fill_when 1) or Where(cond, 0, f) (fill_when 0), both one-element constants of
  // dtype t, the 0 a +0; or a float constant of 0s and fs (mask b itself, made bool by
  // constant_mask).
  bool additive_mask(ValueId b, DType t, ValueId& mask, double& fill, int64_t& fill_when, Node*& where) {
    const Value& bv = g.value(b);
    if (bv.dtype != t) return false;
    if (known(b)) {
      const std::vector<double> e = bv.data.to_f64();
      double f = 0;
      for (double x : e) {
        if (x == 0) continue;
        if (f == 0) f = x;
        if (x != f || !vast_negative(x)) return false;
      }
      if (f == 0) return false;  // all 0: no mask (left as an Add)
      mask = b;                  // made a bool constant at the rewrite (constant_mask)
      fill = f;
      fill_when = 1;
      return true;
    }
    if (bv.producer < 0 || drop[size_t(bv.producer)] || g.nodes[size_t(bv.producer)].op != Op::Where) return false;
    Node& w = g.nodes[size_t(bv.producer)];
    double a = 0, z = 0;
    if (!scalar_constant(w.inputs[1], t, a) || !scalar_constant(w.inputs[2], t, z)) return false;
    const auto pzero = [](double v) { return v == 0 && !std::signbit(v); };
    if (vast_negative(a) && pzero(z)) {
      fill = a;
      fill_when = 1;
    } else if (pzero(a) && vast_negative(z)) {
      fill = z;
      fill_when = 0;
    } else {
      return false;
    }
    mask = w.inputs[0];
    where = &w;
    return true;
  }
};

}  // namespace

int fuse_attention(Graph& g, const std::vector<ValueId>& keep, const std::vector<ValueId>& fixed) {
  AttentionFuser f(g, keep, fixed);
  int fused = 0;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    if (!f.drop[ni] && g.nodes[ni].op == Op::MatMul && f.fuse(ni)) ++fused;
  f.finish();
  return fused;
}

}  // namespace onnxdp
