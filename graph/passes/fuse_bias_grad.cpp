// See fuse_bias_grad.h.
#include "graph/passes/fuse_bias_grad.h"

#include <algorithm>
#include <vector>

#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

// Whether constant value `axes` names every dim of a rank-r tensor but the last, once each.
bool all_but_last(const Graph& g, ValueId axes, size_t r) {
  const Value& a = g.value(axes);
  if (a.data.empty() || a.dtype != DType::i64) return false;
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < a.data.numel(); ++i) {
    const int64_t d = a.data.as<int64_t>()[i];
    dims.push_back(d < 0 ? d + int64_t(r) : d);
  }
  std::sort(dims.begin(), dims.end());
  if (dims.size() + 1 != r) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != int64_t(i)) return false;
  return true;
}

}  // namespace

int fuse_bias_grad(Graph& g, const std::vector<ValueId>& keep) {
  NodeRewrite w(g, keep);
  int fused = 0;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& s = g.nodes[ni];
    if (s.op != Op::ReduceSum || w.drop[ni] || !s.has_input(1) || s.outputs.size() != 1 || s.i("keepdims") != 0)
      continue;
    const ValueId dx = s.inputs[0];
    const Value& v = g.value(dx);
    if (v.producer < 0 || w.drop[size_t(v.producer)] || (v.dtype != DType::f32 && v.dtype != DType::f64) ||
        v.shape.size() < 2 || !all_but_last(g, s.inputs[1], v.shape.size()))
      continue;
    Node& gelu = g.nodes[size_t(v.producer)];
    if (gelu.op != Op::GeluGrad || gelu.outputs.size() != 1 || gelu.outputs[0] != dx) continue;
    gelu.outputs.push_back(s.outputs[0]);
    g.value(s.outputs[0]).producer = v.producer;
    for (ValueId u : s.inputs) --w.readers[size_t(u)];
    w.drop[ni] = true;
    ++fused;
  }
  w.finish();
  return fused;
}

}  // namespace onnxdp
