// Shape rules of the math ops (see graph/op_table.h).
#include "graph/graph.h"

namespace onnxdp {

void shape_Add(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Sub(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Mul(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Div(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Pow(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Min(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Max(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Sqrt(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Exp(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Log(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Neg(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Abs(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Reciprocal(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Relu(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_LeakyRelu(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Sigmoid(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Tanh(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Erf(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Gelu(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Softplus(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Clip(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Softmax(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_LogSoftmax(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_MatMul(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Gemm(ShapeCtx& c) { c.fail("shape rule not written yet"); }

}  // namespace onnxdp
