// CPU kernels of the nn ops (see graph/op_table.h).
#include "exec/kernel.h"

namespace onnxdp {

void Conv_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void ConvTranspose_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void MaxPool_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void AveragePool_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void GlobalAveragePool_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void BatchNormalization_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void LayerNormalization_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Dropout_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void SoftmaxCrossEntropyLoss_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void NegativeLogLikelihoodLoss_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }

}  // namespace onnxdp
