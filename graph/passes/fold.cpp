#include "graph/passes/fold.h"

#include "graph/shape_helpers.h"

namespace onnxdp {

namespace {
constexpr int64_t kMaxFoldBytes = int64_t(256) << 20;
}  // namespace

void infer_and_fold(Graph& g, const NodeRunner& run) {
  std::vector<Node> kept;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    infer_node(g, int(ni));
    Node& n = g.nodes[ni];
    bool known = true;
    // Shape and Size need only the static shape of their input, CastLike only the dtype of its
    // input 1.
    if (n.op != Op::Shape && n.op != Op::Size) {
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (n.inputs[k] != kNoValue && g.value(n.inputs[k]).kind != ValueKind::constant && !(n.op == Op::CastLike && k == 1))
          known = false;
    }
    // Training-mode Dropout draws fresh masks every step, never folded.
    if (n.op == Op::Dropout) known = false;
    // Folding allocates the outputs now, whatever size the model declares: a constant bigger than
    // kMaxFoldBytes stays a node and is computed when the plan runs, after the plan's memory check.
    for (ValueId o : n.outputs)
      if (o != kNoValue && tensor_bytes(g.value(o).shape, g.value(o).dtype) > kMaxFoldBytes) known = false;
    if (!known) {
      kept.push_back(std::move(n));
      continue;
    }
    std::vector<Tensor> outs;
    if (n.op == Op::Shape) {
      // The input may be an activation without data: Shape's kernel would see no shape, so the
      // shared helper reads the static shape from the graph.
      outs.push_back(Tensor::from_i64(shape_op_dims(g.value(n.inputs[0]).shape, n)));
    } else if (n.op == Op::Size) {
      outs.push_back(Tensor::scalar_i64(shape_numel(g.value(n.inputs[0]).shape)));
    } else {
      std::vector<const Tensor*> ins;
      for (ValueId in : n.inputs) ins.push_back(in == kNoValue ? nullptr : &g.value(in).data);
      if (n.op == Op::CastLike) ins[1] = nullptr;  // its kernel reads only input 0 and the output's dtype
      outs = run(g, n, ins);
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == kNoValue) continue;
      Value& v = g.value(n.outputs[k]);
      v.kind = ValueKind::constant;
      v.data = std::move(outs[k]);
      v.producer = -1;
    }
  }
  g.nodes = std::move(kept);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (ValueId o : g.nodes[ni].outputs)
      if (o != kNoValue) g.value(o).producer = int(ni);
}

}  // namespace onnxdp
