// See fold_transposes.h.
#include "graph/passes/fold_transposes.h"

#include <utility>
#include <vector>

#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

struct Folder : NodeRewrite {
  using NodeRewrite::NodeRewrite;

  static std::vector<int64_t> perm_of(const Node& t, size_t rank) {
    if (t.has("perm")) return t.ints("perm");
    std::vector<int64_t> p(rank);
    for (size_t i = 0; i < rank; ++i) p[i] = int64_t(rank - 1 - i);
    return p;
  }

  // The Transpose node producing x when it swaps the last two dims of x (rank 2 or more, the
  // others in place), else nullptr.
  Node* matrix_transpose(ValueId x) {
    Node* t = producer_of(x, Op::Transpose);
    const size_t r = t ? g.value(x).shape.size() : 0;
    if (r < 2) return nullptr;
    std::vector<int64_t> swap_last(r);
    for (size_t i = 0; i < r; ++i) swap_last[i] = int64_t(i);
    std::swap(swap_last[r - 2], swap_last[r - 1]);
    return perm_of(*t, r) == swap_last ? t : nullptr;
  }

  // Node n reads input k through the Transpose t instead: t's input.
  void bypass(Node& n, size_t k, const Node& t) {
    --readers[size_t(n.inputs[k])];
    n.inputs[k] = t.inputs[0];
    ++readers[size_t(t.inputs[0])];
  }

  int flip(Node& n, const char* attr) {
    n.attrs[attr] = Attr(int64_t(n.i(attr) == 0));
    return 1;
  }

  // MatMul / FusedMatMul (both operands of rank 2 or more, float32) reading A or B through a
  // matrix transpose: FusedMatMul with that operand's transA / transB flipped.
  void product_inputs(Node& n) {
    const Value &a = g.value(n.inputs[0]), &b = g.value(n.inputs[1]);
    if (a.shape.size() < 2 || b.shape.size() < 2 || a.dtype != DType::f32 || b.dtype != DType::f32) return;
    for (size_t k = 0; k < 2; ++k)
      if (Node* t = matrix_transpose(n.inputs[k])) {
        bypass(n, k, *t);
        n.op = Op::FusedMatMul;
        flip(n, k == 0 ? "transA" : "transB");
      }
  }

  // Gemm reading A or B through a matrix transpose: the flag instead.
  void gemm_inputs(Node& n) {
    for (size_t k = 0; k < 2; ++k)
      if (Node* t = matrix_transpose(n.inputs[k])) {
        bypass(n, k, *t);
        flip(n, k == 0 ? "transA" : "transB");
      }
  }

  // Transpose node ni of a Gemm's output (no C, read by the Transpose alone): the Gemm of the
  // swapped operands writes the Transpose's output.
  bool transposed_gemm(size_t ni) {
    Node& t = g.nodes[ni];
    const ValueId y = t.inputs[0];
    const Value& v = g.value(y);
    if (v.shape.size() != 2 || perm_of(t, 2) != std::vector<int64_t>{1, 0}) return false;
    if (v.producer < 0 || drop[size_t(v.producer)] || readers[size_t(y)] != 1 || kept.count(y)) return false;
    Node& gm = g.nodes[size_t(v.producer)];
    if (gm.op != Op::Gemm || gm.has_input(2)) return false;
    const int64_t ta = gm.i("transA"), tb = gm.i("transB");
    std::swap(gm.inputs[0], gm.inputs[1]);
    gm.attrs["transA"] = Attr(int64_t(tb == 0));
    gm.attrs["transB"] = Attr(int64_t(ta == 0));
    const ValueId out = t.outputs[0];
    g.value(out).producer = v.producer;
    g.value(y).producer = -1;
    gm.outputs[0] = out;
    --readers[size_t(y)];
    drop[ni] = true;
    return true;
  }

  // Transpose(Transpose(X, p), q), the inner read by this one alone: Transpose(X, p∘q).
  bool compose(size_t ni) {
    Node& outer = g.nodes[ni];
    const ValueId mid = outer.inputs[0];
    Node* inner = sole_producer(mid, Op::Transpose);
    if (!inner) return false;
    const size_t rank = g.value(mid).shape.size();
    const std::vector<int64_t> p = perm_of(*inner, rank), q = perm_of(outer, rank);
    std::vector<int64_t> r(rank);
    for (size_t i = 0; i < rank; ++i) r[i] = p[size_t(q[i])];  // out[i] = mid[q[i]] = x[p[q[i]]]
    outer.attrs["perm"] = Attr(r);
    bypass(outer, 0, *inner);
    drop[size_t(inner - g.nodes.data())] = true;
    return true;
  }

  // Reshape(Transpose(Reshape(X, s1), p), s2) at node ni, where s1 only merges runs of X's
  // adjacent dims, p moves those runs whole and s2 splits them back into X's dims:
  // Transpose(X, the runs' dims in p's order) in place of the outer Reshape.
  bool unreshape(size_t ni) {
    Node& outer = g.nodes[ni];
    Node* t = producer_of(outer.inputs[0], Op::Transpose);
    Node* inner = t ? producer_of(t->inputs[0], Op::Reshape) : nullptr;
    if (!inner) return false;
    const ValueId x = inner->inputs[0];
    const Shape &xs = g.value(x).shape, &s1 = g.value(t->inputs[0]).shape, &s2 = g.value(outer.outputs[0]).shape;
    std::vector<std::vector<int64_t>> runs;  // per dim of s1, the dims of X it merges
    size_t i = 0;
    for (int64_t d : s1) {
      std::vector<int64_t> run;
      int64_t size = 1;
      while (i < xs.size() && (run.empty() || size < d)) {
        if (xs[i] <= 0) return false;
        size *= xs[i];
        run.push_back(int64_t(i++));
      }
      if (size != d) return false;
      runs.push_back(std::move(run));
    }
    for (; i < xs.size(); ++i) {  // trailing ones
      if (runs.empty() || xs[i] != 1) return false;
      runs.back().push_back(int64_t(i));
    }
    std::vector<int64_t> perm;
    Shape moved;
    for (int64_t r : perm_of(*t, s1.size()))
      for (int64_t d : runs[size_t(r)]) {
        perm.push_back(d);
        moved.push_back(xs[size_t(d)]);
      }
    if (moved != s2) return false;
    const ValueId mid = outer.inputs[0];
    for (ValueId u : outer.inputs)
      if (u != kNoValue) --readers[size_t(u)];
    outer.op = Op::Transpose;
    outer.inputs = {x};
    ++readers[size_t(x)];
    outer.attrs = {{"perm", Attr(perm)}};
    release(mid);
    return true;
  }

  // The node producing v when it is of this op and not dropped, else nullptr.
  Node* producer_of(ValueId v, Op op) {
    if (v == kNoValue) return nullptr;
    const Value& x = g.value(v);
    if (x.producer < 0 || drop[size_t(x.producer)]) return nullptr;
    Node& n = g.nodes[size_t(x.producer)];
    return n.op == op ? &n : nullptr;
  }

  // v's producer goes when nothing reads v and it is a Transpose or Reshape, and so on up.
  void release(ValueId v) {
    while (v != kNoValue && readers[size_t(v)] == 0 && !kept.count(v)) {
      Node* n = producer_of(v, Op::Transpose);
      if (!n) n = producer_of(v, Op::Reshape);
      if (!n) return;
      drop[size_t(n - g.nodes.data())] = true;
      for (ValueId u : n->inputs)
        if (u != kNoValue) --readers[size_t(u)];
      v = n->inputs[0];
    }
  }
};

}  // namespace

int fold_transposes(Graph& g, const std::vector<ValueId>& keep) {
  Folder f(g, keep);
  int removed = 0;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    Node& n = g.nodes[ni];
    if (n.op == Op::Transpose) removed += f.compose(ni) || f.transposed_gemm(ni);
    else if (n.op == Op::MatMul || n.op == Op::FusedMatMul) f.product_inputs(n);
    else if (n.op == Op::Gemm || n.op == Op::FusedGemm) f.gemm_inputs(n);
  }
  // Transposes nothing reads any more.
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    if (n.op == Op::Transpose && !f.drop[ni] && f.readers[size_t(n.outputs[0])] == 0 && !f.kept.count(n.outputs[0])) {
      f.drop[ni] = true;
      --f.readers[size_t(n.inputs[0])];
      ++removed;
    }
  }
  f.finish();
  return removed;
}

int merge_transposes(Graph& g, const std::vector<ValueId>& keep) {
  Folder f(g, keep);
  int merged = 0;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (f.drop[ni]) continue;
    const Op op = g.nodes[ni].op;
    if (op == Op::Reshape && f.unreshape(ni)) {
      merged += 1 + f.compose(ni);
    } else if (op == Op::Transpose) {
      merged += f.compose(ni);
    }
  }
  f.finish();
  return merged;
}

}  // namespace onnxdp
