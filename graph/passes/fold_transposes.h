// fold_transposes: a matrix transpose that a product can take as an operand flag is not copied.
// Exporters write a Linear layer as MatMul(x, Transpose(W)), attention as MatMul(q, Transpose(k)),
// and autodiff gives a product's gradients as products with transposed operands and a weight
// gradient as Transpose(Gemm(..)): each copies a whole operand every step. This pass rewrites
//   - MatMul(.., Transpose(X), ..) or FusedMatMul of it, float32, both operands of rank 2 or more,
//     the Transpose swapping X's last two dims: FusedMatMul reading X as stored with that
//     operand's transA / transB flipped (a Linear layer's weight, attention's keys, a batched
//     product's gradients);
//   - Gemm(Transpose(X), ..) or Gemm(.., Transpose(X), ..), X 2-D: the Gemm reads X with its
//     transA / transB flipped;
//   - Transpose(Gemm(A, B)) of a Gemm without C, read by that Transpose alone: Gemm(B, A) with
//     transA = !transB and transB = !transA writes the transposed product (Yᵀ = op(B)ᵀ op(A)ᵀ);
//   - Transpose(Transpose(X, p), q), the inner read by the outer alone: Transpose(X, p∘q).
// A Transpose left without readers goes. The values are those of the nodes replaced: the products
// compute the same sums from the same elements.
//
// Runs on a finished graph (after autodiff and fuse_epilogues: FusedMatMul has no gradient rule,
// and fuse_epilogues makes the MatMul + bias Adds into FusedMatMul first). A graph output, or a
// value in `keep` (read after the run), is never folded away. Returns the number of Transposes
// removed.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

int fold_transposes(Graph& g, const std::vector<ValueId>& keep = {});

// merge_transposes: a transpose exporters spell in several nodes becomes one Transpose, on the
// forward graph (before fuse_attention, which then finds its head transposes):
//   - Reshape(Transpose(Reshape(X, s1), p), s2), where s1 only merges runs of X's adjacent dims,
//     p moves those runs whole and s2 splits them back into X's dims: Transpose(X, the runs' dims
//     in p's order). The dynamo exporter writes k.transpose(-1, -2) of [B, H, T, D] so: Reshape
//     to [B * H, T, D], Transpose [0, 2, 1], Reshape to [B, H, D, T];
//   - then, as above, Transpose(Transpose(X, p), q), the inner read by the outer alone:
//     Transpose(X, p∘q).
// The values are the same elements in the same places. Reshapes and Transposes left without
// readers go. Returns the number of nodes rewritten.
int merge_transposes(Graph& g, const std::vector<ValueId>& keep = {});

}  // namespace onnxdp
