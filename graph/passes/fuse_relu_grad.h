// fuse_relu_grad: BatchNormalization + Relu backward in one pass. A convolutional block's
// Relu(BatchNormalization(x)) has for its gradient BatchNormalizationGrad(ReluGrad(dy, y), x, ..):
// ReluGrad writes a whole tensor that the BatchNormalizationGrad alone reads, twice. This pass
// rewrites
//   - BatchNormalizationGrad(ReluGrad(dy, y), x, scale), the ReluGrad's output read by it alone:
//     BatchNormalizationGrad(dy, x, scale, y), whose kernels take each dy element as ReluGrad's
//     (dy where y > 0, else 0) as they read it.
// The values are those of the nodes replaced (the same elements, the same arithmetic).
//
// Runs on a finished graph (after autodiff: the gradient ops have no gradients). A graph output,
// or a value in `keep` (read after the run), is never fused away. Returns the number of ReluGrad
// nodes removed.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

int fuse_relu_grad(Graph& g, const std::vector<ValueId>& keep = {});

}  // namespace onnxdp
