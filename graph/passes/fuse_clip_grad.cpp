// See fuse_clip_grad.h.
#include "graph/passes/fuse_clip_grad.h"

#include <cmath>

#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

// A Where(x < bound or x > bound, +0, g) whose comparison it alone reads.
struct Mask {
  int where = -1, compare = -1;
  ValueId g = kNoValue, x = kNoValue, bound = kNoValue;
  bool upper = false;  // Greater: the max bound
};

struct ClipFuser : NodeRewrite {
  using NodeRewrite::NodeRewrite;

  bool mask(int wi, Mask& m) {
    const Node& w = g.nodes[size_t(wi)];
    if (w.op != Op::Where || drop[size_t(wi)] || w.inputs.size() != 3 || w.outputs.size() != 1) return false;
    const Value& out = g.value(w.outputs[0]);
    double zero = 1;
    if ((out.dtype != DType::f32 && out.dtype != DType::f64) || !scalar_constant(w.inputs[1], out.dtype, zero) ||
        zero != 0 || std::signbit(zero))
      return false;
    Node* c = sole_producer(w.inputs[0], Op::Less);
    if (!c) c = sole_producer(w.inputs[0], Op::Greater);
    if (!c || c->inputs.size() != 2) return false;
    m = {wi, g.value(w.inputs[0]).producer, w.inputs[2], c->inputs[0], c->inputs[1], c->op == Op::Greater};
    const Value &dy = g.value(m.g), &x = g.value(m.x), &b = g.value(m.bound);
    return dy.shape == out.shape && x.shape == out.shape && dy.dtype == out.dtype && x.dtype == out.dtype &&
           shape_numel(b.shape) == 1 && (b.dtype == out.dtype || b.dtype == DType::f32);
  }

  void remove(int node) {
    drop[size_t(node)] = true;
    reads(g.nodes[size_t(node)], {});
    for (ValueId v : g.nodes[size_t(node)].outputs) g.value(v).producer = -1;
  }
};

}  // namespace

int fuse_clip_grad(Graph& g, const std::vector<ValueId>& keep) {
  ClipFuser f(g, keep);
  int fused = 0;
  // From the last node back, so that the outer Where of a pair comes before the inner one.
  for (int wi = int(g.nodes.size()) - 1; wi >= 0; --wi) {
    Mask outer;
    if (!f.mask(wi, outer)) continue;
    ValueId dy = outer.g, bounds[2] = {kNoValue, kNoValue};
    bounds[outer.upper] = outer.bound;
    f.remove(outer.compare);
    // The inner Where of the other bound on the same x, read by this one alone.
    const Value& gv = g.value(outer.g);
    Mask inner;
    if (gv.producer >= 0 && f.sole_producer(outer.g, Op::Where) && f.mask(gv.producer, inner) &&
        inner.x == outer.x && inner.upper != outer.upper) {
      dy = inner.g;
      bounds[inner.upper] = inner.bound;
      f.remove(inner.compare);
      f.remove(inner.where);
    }
    Node& w = g.nodes[size_t(wi)];
    w.op = Op::ClipGrad;
    f.reads(w, bounds[1] != kNoValue ? std::vector<ValueId>{dy, outer.x, bounds[0], bounds[1]}
                                     : bounds[0] != kNoValue ? std::vector<ValueId>{dy, outer.x, bounds[0]}
                                                             : std::vector<ValueId>{dy, outer.x});
    ++fused;
  }
  f.finish();
  return fused;
}

}  // namespace onnxdp
