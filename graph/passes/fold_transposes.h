// fold_transposes: a matrix transpose that a product can take as an operand flag is not copied.
// Exporters write a Linear layer as MatMul(x, Transpose(W)), and autodiff gives its weight
// gradient as Transpose(Gemm(..)): both copy the whole weight every step. This pass rewrites
//   - MatMul(A, Transpose(W)) or FusedMatMul(A, Transpose(W), ..) without transB, W 2-D, float32:
//     FusedMatMul(A, W, ..) with transB (a Linear layer reading its weight as stored);
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

}  // namespace onnxdp
