// fold_scales: a product scaled by a constant is one product. Attention multiplies its scores by
// 1/sqrt(head dim) (Mul(MatMul(q, kᵀ), s)), and autodiff scales the scores' gradient by the same
// s before the two products that read it; each Mul is a whole pass over a [batch, heads, t, t]
// tensor. This pass rewrites, for s a one-element float32 constant (never a parameter: a trained
// scale changes between steps):
//   - Mul(P, s) or Mul(s, P), P the output of a float32 MatMul or FusedMatMul without bias or
//     activation (operands of rank 2 or more) that the Mul alone reads: the product writes the
//     Mul's output with its alpha times s;
//   - Mul(X, s) or Mul(s, X) read only by such products (with or without bias or activation) as
//     their operand A or B: each reads X with its alpha times s.
// A MatMul becomes a FusedMatMul with that alpha. The values differ from the nodes replaced by
// one rounding at most (s times the sum, rounded once, where the Mul rounded the sum and then
// the product).
//
// Runs on a finished graph, after fold_transposes (the products of the scaled scores' gradient
// read it through a Transpose until then). A graph output, or a value in `keep`, is never folded
// away. Returns the number of Mul nodes removed.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

int fold_scales(Graph& g, const std::vector<ValueId>& keep = {});

}  // namespace onnxdp
