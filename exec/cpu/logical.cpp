// CPU kernels of the logical ops (see graph/op_table.h).
#include "exec/kernel.h"

namespace onnxdp {

void Equal_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Less_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Greater_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Not_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Where_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }

}  // namespace onnxdp
