// Shape rules of the logical ops (see graph/op_table.h).
#include "graph/graph.h"

namespace onnxdp {

void shape_Equal(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Less(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Greater(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Not(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Where(ShapeCtx& c) { c.fail("shape rule not written yet"); }

}  // namespace onnxdp
