// Shape rules of the nn ops (see graph/op_table.h).
#include "graph/graph.h"

namespace onnxdp {

void shape_Conv(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_ConvTranspose(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_MaxPool(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_AveragePool(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_GlobalAveragePool(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_BatchNormalization(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_LayerNormalization(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_Dropout(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_SoftmaxCrossEntropyLoss(ShapeCtx& c) { c.fail("shape rule not written yet"); }
void shape_NegativeLogLikelihoodLoss(ShapeCtx& c) { c.fail("shape rule not written yet"); }

}  // namespace onnxdp
