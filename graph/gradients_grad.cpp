// Gradient rules of the internal gradient ops (category grad in graph/op_table.h): onnxdp does
// not differentiate its backward pass (no second derivatives).
#include "graph/autodiff.h"

namespace onnxdp {

void grad_ConvGradFilter(GradCtx& c) { gradient_missing(c); }
void grad_MaxPoolGrad(GradCtx& c) { gradient_missing(c); }
void grad_AveragePoolGrad(GradCtx& c) { gradient_missing(c); }
void grad_BatchNormalizationGrad(GradCtx& c) { gradient_missing(c); }
void grad_LayerNormalizationGrad(GradCtx& c) { gradient_missing(c); }
void grad_GatherGrad(GradCtx& c) { gradient_missing(c); }
void grad_GatherElementsGrad(GradCtx& c) { gradient_missing(c); }
void grad_GatherNDGrad(GradCtx& c) { gradient_missing(c); }
void grad_ResizeGrad(GradCtx& c) { gradient_missing(c); }
void grad_SoftmaxCrossEntropyLossGrad(GradCtx& c) { gradient_missing(c); }
void grad_NegativeLogLikelihoodLossGrad(GradCtx& c) { gradient_missing(c); }
void grad_GeluGrad(GradCtx& c) { gradient_missing(c); }
void grad_ReluGrad(GradCtx& c) { gradient_missing(c); }
void grad_ClipGrad(GradCtx& c) { gradient_missing(c); }
void grad_SoftmaxGrad(GradCtx& c) { gradient_missing(c); }
void grad_FusedAttentionGrad(GradCtx& c) { gradient_missing(c); }
void grad_LogSoftmaxGrad(GradCtx& c) { gradient_missing(c); }

}  // namespace onnxdp
