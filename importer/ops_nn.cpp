// ONNX import of the nn ops: one function per op (see graph/op_table.h).
#include "importer/importer.h"

namespace onnxdp {

void import_Conv(ImportCtx& c) { c.fail("import not written yet"); }
void import_ConvTranspose(ImportCtx& c) { c.fail("import not written yet"); }
void import_MaxPool(ImportCtx& c) { c.fail("import not written yet"); }
void import_AveragePool(ImportCtx& c) { c.fail("import not written yet"); }
void import_GlobalAveragePool(ImportCtx& c) { c.fail("import not written yet"); }
void import_BatchNormalization(ImportCtx& c) { c.fail("import not written yet"); }
void import_LayerNormalization(ImportCtx& c) { c.fail("import not written yet"); }
void import_Dropout(ImportCtx& c) { c.fail("import not written yet"); }
void import_SoftmaxCrossEntropyLoss(ImportCtx& c) { c.fail("import not written yet"); }
void import_NegativeLogLikelihoodLoss(ImportCtx& c) { c.fail("import not written yet"); }

}  // namespace onnxdp
