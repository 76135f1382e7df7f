// autocast: mixed-precision training as PyTorch's autocast does it for matrix products and
// convolutions (`--mixed-precision bf16` or `fp16`): every MatMul, Gemm, Conv and ConvTranspose
// on float32 inputs runs on 16-bit copies of them (a Cast before each float input: data, weight,
// bias) and its result is cast back to float32 for its readers. The parameters stay float32 (the
// master weights the optimizer updates, and the trained model); their gradients come back float32
// through Cast's gradient, and the products' own gradients (the backward GEMMs, ConvTranspose for
// a Conv's input, ConvGradFilter for its weight) run on the 16-bit values. Everything else
// (losses, softmax, normalisations, pooling, elementwise ops) stays float32.
//
// The product itself is the 16-bit kernel: float sums rounded once to the 16-bit type, as
// PyTorch's CPU and CUDA autocast compute it, so the values a Linear layer produces equal
// PyTorch's; PyTorch then keeps some results in 16 bits where onnxdp keeps float32 (a scaled
// attention score, GELU, a BatchNorm after a Conv), which only adds roundings PyTorch makes and
// onnxdp does not.
//
// Runs on the forward graph, before the loss and autodiff. Returns the number of products cast.
#pragma once
#include "graph/graph.h"

namespace onnxdp {

int autocast(Graph& g, DType low);
// The option's pass: "no" leaves g as it is (returns 0), "bf16" and "fp16" cast to bfloat16 and
// float16; anything else fails naming --mixed-precision. float16 training also needs loss
// scaling (train/loss_scaler.h), which the trainer adds.
int autocast(Graph& g, const std::string& mixed_precision);

}  // namespace onnxdp
