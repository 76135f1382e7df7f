// fuse_masked_softmax: attention's masked scores in one pass. Exporters write a causal or padding
// mask as Softmax(Where(mask, -inf, scores)) (masked_fill), and autodiff gives its gradient as
// Where(mask, 0, SoftmaxGrad(dy, y)): each Where writes a whole [batch, heads, T, T] tensor that
// the next node alone reads. This pass rewrites
//   - Softmax(Where(mask, fill, x)) along the last axis, float32 / float64, fill a one-element
//     constant of x's dtype (float32 exactly), x of the Where's shape, the Where's output read by
//     the Softmax alone: MaskedSoftmax(x, mask) with `fill` and fill_when 1 (Where(mask, x, fill):
//     fill_when 0), which reads each x element as the Where would have written it;
//   - then Where(mask, 0, SoftmaxGrad(dy, y)) of that Softmax's output y (the zero in the slot the
//     fill had, a +0 constant, the same mask value, the SoftmaxGrad's output read by the Where
//     alone): SoftmaxGrad(dy, y, mask) with the same fill_when, which writes 0 where the Where did.
// The values are those of the nodes replaced (the same elements, the same arithmetic).
//
// On the CPU backend's graphs graph/passes/fuse_attention.h has taken attention whole before
// this pass runs; what is left here is a masked softmax it does not match (one with Dropout on
// its output, as a model trained with attention dropout has, or one read by other nodes too).
//
// The CPU backend's graphs only (compile's CompileOptions::cpu: CUDA has no MaskedSoftmax and
// no masked SoftmaxGrad). Runs on a finished graph (after autodiff: MaskedSoftmax has no gradient
// rule). A graph output, or a value in `keep` (read after the run), is never fused away. Returns
// the number of Where nodes removed.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

int fuse_masked_softmax(Graph& g, const std::vector<ValueId>& keep = {});

}  // namespace onnxdp
