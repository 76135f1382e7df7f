// Gradient rules of the nn ops (see graph/autodiff.h).
#include "graph/autodiff.h"

namespace onnxdp {

void grad_Conv(GradCtx& c) { gradient_missing(c); }
void grad_ConvTranspose(GradCtx& c) { gradient_missing(c); }
void grad_MaxPool(GradCtx& c) { gradient_missing(c); }
void grad_AveragePool(GradCtx& c) { gradient_missing(c); }
void grad_GlobalAveragePool(GradCtx& c) { gradient_missing(c); }
void grad_BatchNormalization(GradCtx& c) { gradient_missing(c); }
void grad_LayerNormalization(GradCtx& c) { gradient_missing(c); }
void grad_Dropout(GradCtx& c) { gradient_missing(c); }
void grad_SoftmaxCrossEntropyLoss(GradCtx& c) { gradient_missing(c); }
void grad_NegativeLogLikelihoodLoss(GradCtx& c) { gradient_missing(c); }

}  // namespace onnxdp
