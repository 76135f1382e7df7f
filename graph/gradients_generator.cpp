// Gradient rules of the generator ops: none depends differentiably on an input.
#include "graph/autodiff.h"

namespace onnxdp {

void grad_Constant(GradCtx& c) { no_gradient(c); }
void grad_ConstantOfShape(GradCtx& c) { no_gradient(c); }
void grad_Range(GradCtx& c) { no_gradient(c); }

}  // namespace onnxdp
