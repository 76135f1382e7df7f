// Float convolutions over small planes, by onnxdp's own AVX-512 loops: the sample cnn's 8x8 and
// 4x4 images, where a plane is at most kSmallPlaneVectors vectors of 16 positions.
//
// A tap's view of a plane is then one vector: output vector v of tap t reads its 16 positions
// either as a run of the plane (lane l position start + l: unit strides between planes of one
// size; one masked load, the padding's lanes masked off) or, elsewhere, from source vectors a and
// a + 1 (one two-source permute, the padding's lanes zeroed by its mask); the picks are made once
// per shape. A register tile of output channels x position vectors (8 x 2 at most; where a plane
// is one vector and its views are runs, 8 x 3 images) sums, per input channel and tap, the tap's
// views times a broadcast weight, one multiply-add a vector, image after image; the views are
// made in registers as the tile needs them (an im2col in L1 cost a store and a load more per
// view, and was slower). Conv's input gradient is the same loop over
// dy in dx's grid, the weights rearranged. The filter gradient sums dy times the views, 8 output
// channels x 3 taps of sums in registers, image after image (each image's position vectors in
// turn where the views are runs), in float lanes over a chunk of images (256 terms a lane), then
// in double, chunk by chunk in order (the same sums on any number of threads); a thread's task is
// one chunk's sums for 8 output channels.
//
// oneDNN ran the shapes these loops take at 19-35 % of the sgemm figure (the cnn's 1 -> 8 window
// on 8x8 images, forward and filter gradient) and 47-55 % (its 8 -> 16 input gradient on 4x4
// images): its kernels hold 16 output channels in a vector, half empty with 8
// (bench/results/2026-12-06-small-planes.md).
//
// Taken for float tensors, one group, every plane (input and output) at most kSmallPlaneVectors
// vectors, each output vector's view of each tap within two consecutive source vectors (true at
// unit strides, and at strides where the rows are short), fewer than kSmallPlaneOutputs output
// channels (or the one exception below), on CPUs with AVX-512F. Elsewhere the engine goes on
// (exec/cpu/conv_gemm.cpp).
#pragma once
#include <cstdint>

#include "exec/cpu/conv_gemm.h"

namespace onnxdp {

inline constexpr int64_t kSmallPlaneVectors = 4;
// Taken only for fewer output channels than this: oneDNN's kernels hold 16 output channels in a
// vector, and ran most shapes with 16 or more faster than these loops (16 -> 16 up to 64 -> 64 on
// 8x8 planes, 8 -> 16 on 3x3). One exception: 16 outputs from at most kSmallPlaneWideInputs input
// channels over output planes of exactly one vector, forward and filter gradient (the cnn's
// 8 -> 16 on 4x4 images: forward 152-165 GFLOP/s here against oneDNN's 146-156 hot, 96-102 ->
// 119-131 in a step; filter gradient 117-133 against 94-98; 1 -> 16, 3 -> 16, 4 -> 16 on 4x4 1.2-2.4x
// oneDNN's; 16 -> 16 level, 64 -> 16 slower; bench/results/2026-12-07-small-filter.md).
inline constexpr int64_t kSmallPlaneOutputs = 16;
inline constexpr int64_t kSmallPlaneWideInputs = 8;

// Whether these loops take a call: the CPU, one group, the planes, fewer than kSmallPlaneOutputs
// output channels (or kSmallPlaneOutputs in the exception above). The layout is
// not asked: the loops read and write plain tensors, and the caller hands them plain copies of
// blocked ones (so the layout changes no value).
bool small_conv_takes(const ConvWindows& g, const ConvChannels& ch, ConvPass pass);

// As conv_forward, conv_transpose and conv_filter_grad (exec/cpu/conv_gemm.h), on plain tensors,
// where small_conv_takes says so.
void small_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                        const float* bias, float* y);
void small_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                          const float* bias, float* y);
void small_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy, float* dw);

}  // namespace onnxdp
