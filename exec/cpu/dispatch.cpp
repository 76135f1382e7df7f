#include "exec/kernel.h"

namespace onnxdp {

#define ONNXDP_X(op, ...) void op##_forward(KernelCtx&);
ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X

Kernel cpu_kernel(Op op) {
  static const Kernel kernels[] = {
#define ONNXDP_X(op, ...) &op##_forward,
      ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X
  };
  return kernels[size_t(op)];
}

std::vector<Tensor> run_node(const Graph& g, const Node& n, const std::vector<const Tensor*>& inputs,
                             const RunState& run) {
  KernelCtx ctx{n, {}, {}, run};
  for (const Tensor* t : inputs) {
    TensorRef r;
    if (t) r = TensorRef{const_cast<void*>(t->data()), t->dtype(), &t->shape(), t->numel()};
    ctx.inputs.push_back(r);
  }
  std::vector<Tensor> outs;
  outs.reserve(n.outputs.size());
  for (ValueId o : n.outputs) {
    if (o == kNoValue) {
      outs.emplace_back();
      continue;
    }
    outs.emplace_back(g.value(o).dtype, g.value(o).shape);
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    TensorRef r;
    if (n.outputs[k] != kNoValue) r = TensorRef{outs[k].data(), outs[k].dtype(), &outs[k].shape(), outs[k].numel()};
    ctx.outputs.push_back(r);
  }
  cpu_kernel(n.op)(ctx);
  return outs;
}

}  // namespace onnxdp
