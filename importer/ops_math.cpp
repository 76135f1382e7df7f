// ONNX import of the math ops: one function per op (see graph/op_table.h).
#include "importer/importer.h"

namespace onnxdp {

void import_Add(ImportCtx& c) { c.fail("import not written yet"); }
void import_Sub(ImportCtx& c) { c.fail("import not written yet"); }
void import_Mul(ImportCtx& c) { c.fail("import not written yet"); }
void import_Div(ImportCtx& c) { c.fail("import not written yet"); }
void import_Pow(ImportCtx& c) { c.fail("import not written yet"); }
void import_Min(ImportCtx& c) { c.fail("import not written yet"); }
void import_Max(ImportCtx& c) { c.fail("import not written yet"); }
void import_Sqrt(ImportCtx& c) { c.fail("import not written yet"); }
void import_Exp(ImportCtx& c) { c.fail("import not written yet"); }
void import_Log(ImportCtx& c) { c.fail("import not written yet"); }
void import_Neg(ImportCtx& c) { c.fail("import not written yet"); }
void import_Abs(ImportCtx& c) { c.fail("import not written yet"); }
void import_Reciprocal(ImportCtx& c) { c.fail("import not written yet"); }
void import_Relu(ImportCtx& c) { c.fail("import not written yet"); }
void import_LeakyRelu(ImportCtx& c) { c.fail("import not written yet"); }
void import_Sigmoid(ImportCtx& c) { c.fail("import not written yet"); }
void import_Tanh(ImportCtx& c) { c.fail("import not written yet"); }
void import_Erf(ImportCtx& c) { c.fail("import not written yet"); }
void import_Gelu(ImportCtx& c) { c.fail("import not written yet"); }
void import_Softplus(ImportCtx& c) { c.fail("import not written yet"); }
void import_Clip(ImportCtx& c) { c.fail("import not written yet"); }
void import_Softmax(ImportCtx& c) { c.fail("import not written yet"); }
void import_LogSoftmax(ImportCtx& c) { c.fail("import not written yet"); }
void import_MatMul(ImportCtx& c) { c.fail("import not written yet"); }
void import_Gemm(ImportCtx& c) { c.fail("import not written yet"); }

}  // namespace onnxdp
