// fuse_attention: attention as exporters write it, MatMul + scale + mask + Softmax + MatMul,
// becomes one FusedAttention node (graph/op_table.h), whose gradient is one FusedAttentionGrad node. The CPU
// kernels then run each head in cache, a block of rows at a time, and skip the blocks a causal
// mask leaves empty (exec/cpu/attention.h): no [batch, heads, T, T] tensor of scores, masked
// scores or score gradients is written, only the probabilities the gradient needs.
//
// Matched, on the forward graph (before autodiff), float32 or float64 throughout ("constant": a
// constant value, or a parameter in `fixed`):
//   y = MatMul(Softmax(m), v), the Softmax along the last axis and its output read by that MatMul
//   alone (no dropout between them: a training graph with attention dropout stays as it is);
//   m = Where(mask, fill, s) or Where(mask, s, fill) with fill a one-element float constant
//   (exactly a float); or m = Add(s, b) (either order) with b an additive mask of 0 and one fill
//   f, -inf or at most -1e30 (graph/attention.h's kVastNegative): Where(mask, f, 0),
//   Where(mask, 0, f) (one-element constants, the 0 a +0) or a float constant holding only 0 and
//   f (scaled_dot_product_attention's causal mask as torch.onnx.export writes it, f the lowest
//   float), which for scores within 1e30 is Where(b == f, f, s); or m = s;
//   s = Mul(x, c), Mul(c, x) or Div(x, c) with c a one-element float constant (scale c or 1 / c),
//   or s = x (scale 1); x = MatMul(q, kt), where q and kt may each be Mul(.., c) by a one-element
//   constant too (the scale their product; scaled_dot_product_attention's export scales each by
//   the square root); q [N.., Tq, D], kt [N.., D, Tk], v [N.., Tk, Dv], their leading dims equal
//   (no broadcasting), every intermediate read by the next node alone and none of them kept (a
//   graph output or in `keep`). An additive mask's Where goes too once no other node reads it.
// When q, kt and v are Transposes of [B, T, H, D] tensors (merge_transposes, before this pass,
// makes one Transpose of what exporters spell through Reshapes; perms [0, 2, 1, 3], [0, 2, 3, 1] and
// [0, 2, 1, 3], each read only here) and y is read only by a Transpose back ([0, 2, 1, 3]; or by a
// Reshape to y's own shape read only by it), those four Transposes go too (heads 1: the kernels
// read the heads in place). When those [B, T, H, D] tensors are in turn Reshapes of a Split's
// three outputs (q, k, v in that order, each read only there) cutting a [B, T, 3 * H * D] value
// into thirds along its last axis (a GPT-style layer's one Linear for q, k and v), the Split and
// Reshapes go as well (heads 2: the kernels read q, k and v in that value's rows, and the
// gradient is one dqkv there: no Split forward, no Concat backward; gpt_small's 4 Splits and 4
// Concats took 3.6 ms of a 170 ms step).
//
// The values are the unfused nodes' to rounding: the same products, softmax and gradient, summed
// in blocks of rows and columns, the scale applied to the product (a scale on q and k rounds
// differently). Scores beyond 1e30, +inf or NaN under an additive mask are the exception (s + f
// is not f there; the fused node reads f). Returns the number of attentions fused.
//
// The CPU backend's graphs only (compile's CompileOptions::cpu): CUDA has no FusedAttention kernel.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

// `fixed`: parameters whose values never change (compile passes those decide_trainability
// freezes), read as constants like Constant values; no other parameter is.
int fuse_attention(Graph& g, const std::vector<ValueId>& keep = {}, const std::vector<ValueId>& fixed = {});

}  // namespace onnxdp
