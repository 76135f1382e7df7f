// autocast: mixed-precision training as PyTorch's autocast does it for matrix products
// (`--mixed-precision bf16`): every MatMul and Gemm on float32 inputs runs on bfloat16 copies of
// them (or float16 ones; a Cast before each float input) and its result is cast back to float32 for its readers.
// The parameters stay float32 (the master weights the optimizer updates, and the trained model);
// their gradients come back float32 through Cast's gradient. Everything else (losses, softmax,
// normalisations, elementwise ops, convolutions) stays float32.
//
// The product itself is the 16-bit GEMM of the kernels: float sums rounded once to bfloat16, as
// PyTorch's CPU and CUDA autocast compute it, so the values a Linear layer produces equal
// PyTorch's; PyTorch then keeps some elementwise results in bfloat16 where onnxdp keeps float32
// (e.g. a scaled attention score), which only adds roundings PyTorch makes and onnxdp does not.
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
