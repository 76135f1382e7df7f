// Conv, ConvTranspose and ConvGradFilter on cuDNN, and the pooling ops on our own kernels
// (exec/cuda/conv_launch.h says why not cuDNN's pooling), seen from the graph.
//
// All three convolutions are one cuDNN convolution (mode CUDNN_CROSS_CORRELATION, fp32 data and
// compute, CUDNN_FMA_MATH so no TF32; under --mixed-precision float16 / bfloat16 data with fp32
// compute and CUDNN_TENSOR_OP_MATH, cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations, as
// PyTorch sets them) between a "conv input" grid X [N, C, I..], a filter
// W [K, C/groups, k..] and a "conv output" grid Y [N, K, O..], with Y[o] reading X[o*s - p + t*d]:
//   Conv            y = conv(x, W)            cudnnConvolutionForward        X = x, W = W, Y = y
//   ConvTranspose   y = conv^T(x, W)          cudnnConvolutionBackwardData   X = y, W = W, Y = x
//                   (the graph's Conv input gradient: graph/gradients_nn.cpp)
//   ConvGradFilter  dW = x (*) dy             cudnnConvolutionBackwardFilter X = x, W = dW, Y = dy
// then Conv / ConvTranspose's bias by cudnnAddTensor (y += B broadcast over the channels).
// The algorithm is the first the *_v7 heuristics rate usable without a Tensor Core math type,
// preferring GEMM-based / direct ones (plain fp32 sums, like the CPU's GEMM) that are
// deterministic, then any GEMM-based / direct one, FFT / Winograd only when cuDNN offers nothing
// else; cached per device and geometry. Its workspace is cudaMallocAsync'ed on the stream and
// freed (cudaFreeAsync) after the call.
// conv_call computes every descriptor argument into a ConvCall; the device path hands them to
// cuDNN, the emulated path to host loops with cuDNN's documented semantics on exactly those
// arguments (tests/gpu/test_cuda_conv.cpp), so the mapping is tested without a GPU.
//
// cuDNN's legacy convolution descriptor has one pad per spatial dim, applied at both ends, and its
// output size is (I + 2p - span) / s + 1. The CPU kernels use only the leading pad p (the output
// size, from the shape rule, implies the trailing one), so a node runs here iff, per dim, p >= 0
// and cuDNN's formula with the leading pad gives the node's conv output size: then every tap cuDNN
// reads or writes is one the CPU kernel does. Asymmetric pads pass when the trailing pad does not
// change the size (e.g. pads 0, 1 with a stride of 2 on an odd extent); the rest are refused
// (SAME_UPPER on even extents with stride 2, say) and run on the CPU.
// 1-D convolutions run as 2-D with a leading spatial dim of 1; 2-D and 3-D as they are.
//
// Empty tensors: an empty output is nothing to do; a non-empty output whose other operands are
// empty (no input channels, an empty spatial extent, a batch of 0 for ConvGradFilter) is zeros,
// plus the bias for Conv / ConvTranspose. cuDNN is not called for those (its descriptors take
// no zero dims).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "exec/cuda/conv_launch.h"
#include "exec/kernel.h"

namespace onnxdp::cuda {

inline constexpr int kConvMaxDims = 5;  // cuDNN tensor rank: 4 (1-D, 2-D) or 5 (3-D)

struct ConvCall {
  bool ok = false;
  std::string why;  // !ok: what is not handled

  enum class Kind {
    nothing,          // the output is empty
    fill,             // the output is zeros (+ bias): an operand is empty
    forward,          // cudnnConvolutionForward
    backward_data,    // cudnnConvolutionBackwardData
    backward_filter,  // cudnnConvolutionBackwardFilter
  };
  Kind kind = Kind::nothing;
  DType type = DType::f32;  // every operand's: f32, or f16 / bf16 (float sums, one rounding)

  // Descriptors (packed NCHW / NCDHW): X, W (a filter descriptor, CUDNN_TENSOR_NCHW) and Y, each
  // `nb_dims` long; the convolution's pads / strides / dilations `nb_dims - 2` long.
  int nb_dims = 4;
  int x_dims[kConvMaxDims] = {}, w_dims[kConvMaxDims] = {}, y_dims[kConvMaxDims] = {};
  int pads[kConvMaxDims - 2] = {}, strides[kConvMaxDims - 2] = {}, dilations[kConvMaxDims - 2] = {};
  int groups = 1;
  bool cross_correlation = true;  // CUDNN_CROSS_CORRELATION (false: CUDNN_CONVOLUTION)
  float alpha = 1, beta = 0;      // out = alpha * op + beta * out

  // Buffers: which of the node's tensors each cuDNN operand is (the inputs as numbered, the output
  // -1). Conv: X in0, W in1, Y out; ConvTranspose: Y in0, W in1, X out; ConvGradFilter: X in0,
  // Y in1, W out.
  int x_is = 0, w_is = 1, y_is = -1;

  // Bias (input 2 of Conv / ConvTranspose): cudnnAddTensor(alpha 1, [1, channels, 1..], B,
  // beta 1, out) after the convolution (or the zero fill).
  bool bias = false;
  int bias_channels = 0;
  int64_t out_numel = 0;
};

// The cuDNN call of node n (Conv, ConvTranspose or ConvGradFilter) on inputs of these dtypes and
// shapes (bias: input 2 present) giving an output of shape `out`. ok false with `why` for what
// cuDNN does not compute as the CPU kernel does.
ConvCall conv_call(const Node& n, const std::vector<DType>& in_types, const std::vector<Shape>& in_shapes,
                   bool bias, const Shape& out);

// Exactly what the device path does with `call`, on host memory: cuDNN's convolution definitions
// (fp32 accumulation, beta 0 overwrites; 16-bit operands widened, the result rounded once) and
// cudnnAddTensor (16-bit: the bias added in float to the rounded result, rounded again), after the argument checks cuDNN makes
// (the output dims must be its forward formula's). Evidence for the mapping, not for cuDNN.
void conv_emulate(const ConvCall& call, const std::vector<TensorRef>& in, const TensorRef& out);

// The pooling launch of node n (MaxPool, AveragePool, MaxPoolGrad, AveragePoolGrad,
// GlobalAveragePool) for its input / output dtypes and shapes; ok false with `why` when refused.
struct PoolPlan {
  bool ok = false;
  std::string why;
  PoolLaunch launch;  // pointers unset
};
PoolPlan pool_plan(const Node& n, DType x_type, const Shape& x, const Shape& y);

}  // namespace onnxdp::cuda
