// Gradient rules of the logical ops (see graph/autodiff.h).
#include "graph/autodiff.h"

namespace onnxdp {

void grad_Equal(GradCtx& c) { no_gradient(c); }
void grad_Less(GradCtx& c) { no_gradient(c); }
void grad_Greater(GradCtx& c) { no_gradient(c); }
void grad_Not(GradCtx& c) { no_gradient(c); }
void grad_LessOrEqual(GradCtx& c) { no_gradient(c); }
void grad_GreaterOrEqual(GradCtx& c) { no_gradient(c); }
void grad_And(GradCtx& c) { no_gradient(c); }
void grad_Or(GradCtx& c) { no_gradient(c); }
void grad_Xor(GradCtx& c) { no_gradient(c); }

void grad_Where(GradCtx& c) {  // dx = dy where cond, dy_other = dy where !cond
  ValueId zero = c.scalar(0, c.graph.value(c.dy()).dtype);
  if (c.needs(1)) c.add(1, c.reduce_to(c.emit(Op::Where, {c.in_id(0), c.dy(), zero}), c.in(1).shape));
  if (c.needs(2)) c.add(2, c.reduce_to(c.emit(Op::Where, {c.in_id(0), zero, c.dy()}), c.in(2).shape));
}

// Bool outputs: nothing flows back to x.
void grad_IsNaN(GradCtx& c) { no_gradient(c); }
void grad_IsInf(GradCtx& c) { no_gradient(c); }

}  // namespace onnxdp
