// Shape rules of the generator ops (see graph/op_table.h).
#include "graph/graph.h"

namespace onnxdp {

void shape_Constant(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_ConstantOfShape(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Range(ShapeCtx& c) { c.fail("shape rule not written yet"); }

}  // namespace onnxdp
