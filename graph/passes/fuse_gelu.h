// fuse_gelu: the exact GELU as exporters spell it, x * 0.5 * (1 + erf(x / sqrt 2)) in five nodes
// (torch.onnx's legacy exporter: Div, Erf, Add, Mul, Mul), becomes one Gelu node, whose gradient
// is one GeluGrad node: two elementwise passes per step instead of about fifteen. Matched forms:
//   Mul(Mul(x, Add(Erf(d), 1)), 0.5) and Mul(Mul(x, 0.5), Add(Erf(d), 1)), operands of each Mul and
//   Add in either order, d = Div(x, sqrt 2) or Mul(x, 1 / sqrt 2), the constants float scalars
//   (to 1e-6), every value but the last read by the next node alone and none a graph output.
// The values are PyTorch's GELU's (x/2 (1 + erf(x / sqrt 2)) in one expression, as torch.nn.GELU
// computes it) to rounding. Runs on the forward graph, before the loss and autodiff. Returns the
// number of GELUs fused.
#pragma once
#include "graph/graph.h"

namespace onnxdp {

int fuse_gelu(Graph& g);

}  // namespace onnxdp
