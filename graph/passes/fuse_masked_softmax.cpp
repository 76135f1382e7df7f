// See fuse_masked_softmax.h.
#include "graph/passes/fuse_masked_softmax.h"

#include <cmath>

#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

struct MaskFuser : NodeRewrite {
  using NodeRewrite::NodeRewrite;
  std::vector<std::vector<int>> consumers;  // per value: the nodes reading it

  // Whether value v is an activation read by one node input only, nothing else keeping it.
  bool read_once(ValueId v) const {
    const Value& x = g.value(v);
    return x.kind == ValueKind::activation && x.producer >= 0 && !drop[size_t(x.producer)] && readers[size_t(v)] == 1 &&
           !kept.count(v);
  }

  static bool last_axis(const Node& n, size_t rank) {
    int64_t a = n.i("axis");
    if (a < 0) a += int64_t(rank);
    return rank > 0 && a == int64_t(rank) - 1;
  }

  // Softmax node si reading a Where of a fill constant: MaskedSoftmax. Returns the Where's slot
  // of the fill (1 or 2), 0 when nothing was fused.
  int forward(size_t si) {
    Node& sm = g.nodes[si];
    const ValueId w = sm.inputs[0];
    const Value& wv = g.value(w);
    if ((wv.dtype != DType::f32 && wv.dtype != DType::f64) || !last_axis(sm, wv.shape.size()) || !read_once(w)) return 0;
    const Node& where = g.nodes[size_t(wv.producer)];
    if (where.op != Op::Where) return 0;
    double fill = 0;
    int slot = 0;
    for (int k : {1, 2}) {
      const ValueId other = where.inputs[size_t(3 - k)];
      if (scalar_constant(where.inputs[size_t(k)], wv.dtype, fill) && g.value(other).shape == wv.shape &&
          g.value(other).dtype == wv.dtype) {
        slot = k;
        break;
      }
    }
    // The fill is a float attribute: it must be one exactly (any float32; a float64 in range).
    if (slot == 0 || !(double(float(fill)) == fill || std::isinf(fill))) return 0;
    const ValueId mask = where.inputs[0], x = where.inputs[size_t(3 - slot)];
    const int where_node = wv.producer;
    drop[size_t(where_node)] = true;
    reads(g.nodes[size_t(where_node)], {});
    g.value(w).producer = -1;  // the Where's output goes with it
    sm.op = Op::MaskedSoftmax;
    reads(sm, {x, mask});
    sm.attrs["fill"] = Attr(float(fill));
    sm.attrs["fill_when"] = Attr(int64_t(slot == 1));
    return slot;
  }

  // The SoftmaxGrad of MaskedSoftmax node sm's output, followed by the Where that zeroes its
  // masked elements: the SoftmaxGrad with the mask. Returns whether it fused.
  bool backward(const Node& sm, int slot) {
    const ValueId y = sm.outputs[0], mask = sm.inputs[1];
    for (int gi : consumers[size_t(y)]) {
      Node& grad = g.nodes[size_t(gi)];
      if (drop[size_t(gi)] || grad.op != Op::SoftmaxGrad || grad.inputs.size() != 2 || grad.inputs[1] != y) continue;
      const ValueId dx = grad.outputs[0];
      if (!last_axis(grad, g.value(y).shape.size()) || !read_once(dx) || consumers[size_t(dx)].size() != 1) continue;
      const int wi = consumers[size_t(dx)][0];
      Node& where = g.nodes[size_t(wi)];
      double zero = 1;
      if (drop[size_t(wi)] || where.op != Op::Where || where.inputs[0] != mask ||
          where.inputs[size_t(3 - slot)] != dx ||
          !scalar_constant(where.inputs[size_t(slot)], g.value(dx).dtype, zero) || zero != 0 || std::signbit(zero) ||
          g.value(where.outputs[0]).shape != g.value(dx).shape)
        continue;
      reads(grad, {grad.inputs[0], grad.inputs[1], mask});
      grad.attrs["fill_when"] = Attr(int64_t(slot == 1));
      grad.outputs[0] = where.outputs[0];
      g.value(dx).producer = -1;  // the SoftmaxGrad writes the Where's output instead
      reads(where, {});
      drop[size_t(wi)] = true;
      return true;
    }
    return false;
  }
};

}  // namespace

int fuse_masked_softmax(Graph& g, const std::vector<ValueId>& keep) {
  MaskFuser f(g, keep);
  f.consumers.resize(g.values.size());
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (ValueId v : g.nodes[ni].inputs)
      if (v != kNoValue) f.consumers[size_t(v)].push_back(int(ni));
  int removed = 0;
  for (size_t si = 0; si < g.nodes.size(); ++si) {
    if (g.nodes[si].op != Op::Softmax) continue;
    const int slot = f.forward(si);
    if (slot == 0) continue;
    ++removed;
    removed += f.backward(g.nodes[si], slot);
  }
  f.finish();
  return removed;
}

}  // namespace onnxdp
