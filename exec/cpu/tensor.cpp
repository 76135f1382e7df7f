// CPU kernels of the tensor ops (see graph/op_table.h).
#include "exec/kernel.h"

namespace onnxdp {

void Identity_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Cast_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Shape_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Flatten_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Reshape_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Transpose_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Squeeze_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Unsqueeze_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Concat_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Split_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Slice_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Gather_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Expand_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Tile_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Pad_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Trilu_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }

}  // namespace onnxdp
