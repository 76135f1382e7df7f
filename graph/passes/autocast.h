// autocast: mixed-precision training as PyTorch's autocast does it for matrix products
// (`--mixed-precision bf16`): every MatMul and Gemm on float32 inputs runs on bfloat16 copies of
// them (a Cast before each float input) and its result is cast back to float32 for its readers.
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

}  // namespace onnxdp
