// Shape rules of the reduction ops (see graph/op_table.h).
#include "graph/graph.h"

namespace onnxdp {

void shape_ReduceMean(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_ReduceSum(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_ReduceMax(ShapeCtx& c) { c.fail("shape rule not written yet"); }

}  // namespace onnxdp
