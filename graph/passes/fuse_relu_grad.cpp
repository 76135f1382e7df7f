// See fuse_relu_grad.h.
#include "graph/passes/fuse_relu_grad.h"

#include "graph/passes/rewrite.h"

namespace onnxdp {

int fuse_relu_grad(Graph& g, const std::vector<ValueId>& keep) {
  NodeRewrite r(g, keep);
  int fused = 0;
  for (Node& bn : g.nodes) {
    if (bn.op != Op::BatchNormalizationGrad || bn.inputs.size() != 3) continue;
    const ValueId d = bn.inputs[0];
    const Value& dv = g.value(d);
    if (dv.kind != ValueKind::activation || dv.producer < 0 || r.readers[size_t(d)] != 1 || r.kept.count(d)) continue;
    const Node& relu = g.nodes[size_t(dv.producer)];
    if (relu.op != Op::ReluGrad || r.drop[size_t(dv.producer)]) continue;
    // BatchNormalizationGrad's rule: relu_y has x's dtype and shape (ReluGrad's y has dy's).
    const Value &y = g.value(relu.inputs[1]), &x = g.value(bn.inputs[1]);
    if (y.dtype != x.dtype || y.shape != x.shape || g.value(relu.inputs[0]).dtype != x.dtype) continue;
    bn.inputs[0] = relu.inputs[0];
    bn.inputs.push_back(relu.inputs[1]);
    r.drop[size_t(dv.producer)] = true;
    ++fused;
  }
  r.finish();
  return fused;
}

}  // namespace onnxdp
