// CPU kernels of the math ops (see graph/op_table.h).
#include "exec/kernel.h"

namespace onnxdp {

void Add_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Sub_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Mul_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Div_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Pow_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Min_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Max_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Sqrt_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Exp_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Log_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Neg_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Abs_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Reciprocal_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Relu_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void LeakyRelu_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Sigmoid_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Tanh_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Erf_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Gelu_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Softplus_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Clip_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Softmax_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void LogSoftmax_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void MatMul_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }
void Gemm_forward(KernelCtx& c) { c.fail("CPU kernel not written yet"); }

}  // namespace onnxdp
