// CPU kernels of the reduction ops (see graph/op_table.h).
#include "exec/kernel.h"

namespace onnxdp {

void ReduceMean_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void ReduceSum_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void ReduceMax_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }

}  // namespace onnxdp
