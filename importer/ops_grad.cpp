// Import functions of the internal gradient ops (category grad in graph/op_table.h). They are
// emitted by onnxdp's gradient rules and are not ONNX operators: a model naming one fails.
#include "importer/importer.h"

namespace onnxdp {

namespace {
[[noreturn]] void not_importable(ImportCtx& c) { c.fail("internal onnxdp op, not importable"); }
}  // namespace

void import_ConvGradFilter(ImportCtx& c) { not_importable(c); }
void import_MaxPoolGrad(ImportCtx& c) { not_importable(c); }
void import_AveragePoolGrad(ImportCtx& c) { not_importable(c); }
void import_BatchNormalizationGrad(ImportCtx& c) { not_importable(c); }
void import_LayerNormalizationGrad(ImportCtx& c) { not_importable(c); }
void import_GatherGrad(ImportCtx& c) { not_importable(c); }
void import_GatherElementsGrad(ImportCtx& c) { not_importable(c); }
void import_GatherNDGrad(ImportCtx& c) { not_importable(c); }
void import_ResizeGrad(ImportCtx& c) { not_importable(c); }
void import_SoftmaxCrossEntropyLossGrad(ImportCtx& c) { not_importable(c); }
void import_NegativeLogLikelihoodLossGrad(ImportCtx& c) { not_importable(c); }
void import_GeluGrad(ImportCtx& c) { not_importable(c); }
void import_SoftmaxGrad(ImportCtx& c) { not_importable(c); }
void import_LogSoftmaxGrad(ImportCtx& c) { not_importable(c); }

}  // namespace onnxdp
