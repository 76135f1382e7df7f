// See fuse_epilogues.h.
#include "graph/passes/fuse_epilogues.h"

#include <set>
#include <vector>

namespace onnxdp {

int fuse_epilogues(Graph& g) {
  std::vector<int> readers(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++readers[size_t(v)];
  const std::set<ValueId> outputs(g.outputs.begin(), g.outputs.end());

  std::vector<bool> drop(g.nodes.size(), false);
  int fused = 0;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& relu = g.nodes[ni];
    if (relu.op != Op::Relu || relu.inputs.size() != 1 || relu.outputs.size() != 1) continue;
    const ValueId y = relu.inputs[0];
    const Value& yv = g.value(y);
    if (yv.kind != ValueKind::activation || yv.producer < 0 || readers[size_t(y)] != 1 || outputs.count(y)) continue;
    Node& gemm = g.nodes[size_t(yv.producer)];
    if (gemm.op != Op::Gemm || drop[size_t(yv.producer)] || yv.dtype != DType::f32) continue;
    // The Gemm takes the Relu's place as the producer of its output, from the Gemm's position
    // (earlier, so every reader still comes after it).
    gemm.op = Op::FusedGemm;
    gemm.attrs["activation"] = Attr(std::string("Relu"));
    gemm.outputs[0] = relu.outputs[0];
    g.value(relu.outputs[0]).producer = yv.producer;
    g.value(y).producer = -1;
    drop[ni] = true;
    ++fused;
  }
  if (!fused) return 0;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size() - size_t(fused));
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    if (!drop[ni]) kept.push_back(std::move(g.nodes[ni]));
  g.nodes = std::move(kept);
  index_producers(g);
  return fused;
}

}  // namespace onnxdp
