// CPU kernels of the generator ops (see graph/op_table.h).
#include "exec/kernel.h"

namespace onnxdp {

void Constant_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void ConstantOfShape_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Range_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }

}  // namespace onnxdp
