// Shape rules of the tensor ops (see graph/op_table.h).
#include "graph/graph.h"

namespace onnxdp {

void shape_Identity(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Cast(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Shape(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Flatten(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Reshape(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Transpose(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Squeeze(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Unsqueeze(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Concat(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Split(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Slice(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Gather(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Expand(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Tile(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Pad(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Trilu(ShapeCtx& c) { c.fail("shape rule not written yet"); }

}  // namespace onnxdp
