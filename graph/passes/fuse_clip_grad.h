// fuse_clip_grad: Clip's gradient in one pass. Its rule (graph/gradients_math.cpp, grad_Clip)
// writes dx = dy where min <= x <= max as Where(Less(x, min), 0, dy) and then Where(Greater(x,
// max), 0, ..): up to four passes over tensors of x's size, each node's output read by the next
// alone (a MobileNetV2 step's ReLU6 gradients: a sixth of its time). This pass rewrites
//   - Where(Greater(x, max), 0, Where(Less(x, min), 0, dy)) (either order), each comparison and
//     the inner Where read by the next node alone: ClipGrad(dy, x, min, max);
//   - a lone Where(Less(x, min), 0, dy) or Where(Greater(x, max), 0, dy): ClipGrad with that bound;
// where the zero is a +0 constant, dy, x and the output are float32 or float64 of one shape, and
// the bounds one element of x's dtype or float32 (Clip's). The values are those of the nodes
// replaced (each element dy or +0, on the same comparisons; a NaN x passes dy in both).
//
// The CPU backend's graphs only (compile's CompileOptions::cpu: CUDA has no ClipGrad). Runs on a
// finished graph (after autodiff: ClipGrad has no gradient rule). A graph output, or a value in
// `keep` (read after the run), is never fused away. Returns the number of Where nodes turned into
// ClipGrad.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

int fuse_clip_grad(Graph& g, const std::vector<ValueId>& keep = {});

}  // namespace onnxdp
