// Float depthwise windows by onnxdp's own AVX-512 loops: one input and one output channel per
// group (groups = channels), unit strides and dilations, 2-D kernels of 3, 5 or 7 rows, output rows
// of at least 12 columns (28 for a 3-row window's filter gradient): ConvNeXt's 7x7 and MobileNet's
// 3x3 windows at stride 1.
//
// oneDNN ran ConvNeXt's 7x7 on 56x56 planes (96 channels, plain tensors) at 40-46 % of the sgemm
// figure forward and backward-data, with its reorders to and from its blocked layout; the engine's
// filter gradient (exec/cpu/conv_gemm.cpp, depthwise_filter_grad_planes) at 29 %, one unaligned
// load a multiply-add (bench/results/2026-12-06-kernels-hot.md).
//
// Forward (and Conv's input gradient, the same window over dy with the kernel turned around): a
// plane is copied once into a zero-padded buffer, so no tap tests a bound. A register tile holds R
// output rows x one vector of 16 columns; for each kernel column j the KH weights are broadcast
// into registers, and each of the tile's R + KH - 1 padded input rows is loaded once (at column
// j) and multiplied into the KH output rows it reaches: about KH multiply-adds a load.
//
// Filter gradient: dw (i, j) is the sum over images and positions of x_pad (h + i, w + j) times
// dy (h, w). For a few kernel columns at a time and one vector of columns, each dy row is loaded
// once and meets the KH padded x rows below it, which rotate through registers (each loaded once):
// KH x BJ sums in registers. x is read where it lies, its padding as masked-off lanes and rows not
// loaded (a zero-padded copy of each plane, as the forward makes, took a tenth to a quarter of the
// time: 7x7 on 14x14 66-74 -> 82-88 GFLOP/s without it, 3x3 on 112x112 31-33 -> 41-42;
// bench/results/2026-12-07-depthwise-in-place.md). dy is copied to rows of whole vectors where the
// kernel's columns take several groups (each group reads it again), and read in place where they
// take one. Each lane sums at most kDepthwiseChunkTerms terms in float, then adds them in double,
// chunk by chunk in order; a channel's sums run on one thread, so dw is the same on any number of
// threads.
//
// Blocked (both x and y, or x and dy, in exec/cpu/blocked.h's layout, where
// graph/passes/block_channels.h keeps a depthwise window's neighbours so): every lane a channel,
// a position's 16 channels one vector. Forward: tiles of 14 outputs of a row (its last columns 8
// or 4), each input vector loaded once for the KW taps that reach it; the plane's borders are loop
// bounds (no padded copy, no masks). Filter gradient: a few kernel rows' taps a pass (all of a
// 3x3's), in bands of dy rows that stay in L1, two dy vectors at a time meeting each x vector once,
// float sums of at most 256 terms added in double, one thread a channel block. Any row length, 3,
// 5 or 7 kernel columns, at most 16 rows, the channels a multiple of 16. Hot, on this repo's Intel
// VM: the 5x5 and 7x7 windows' three passes at 68-104 % of the sgemm figure, the plain loops'
// 44-79 % (bench/results/2026-12-07-blocked-depthwise.md).
#pragma once
#include <cstdint>

#include "exec/cpu/conv_gemm.h"

namespace onnxdp {

// The filter gradient's chunks: each lane sums at most this many terms in float.
inline constexpr int64_t kDepthwiseChunkTerms = 64;

// Whether these loops take a call: an AVX-512F CPU, one input and one output channel per group, a
// 2-D window of unit strides and dilations, padding smaller than the kernel, and either plain
// tensors with 3, 5 or 7 kernel rows, at most 16 kernel columns and the pass's output rows at
// least 12 columns wide (the filter gradient's: dy's; 28 for a 3-row window's filter gradient), or
// both sides blocked (blocked_depthwise_window, channels a multiple of 16).
bool depthwise_takes(const ConvWindows& g, const ConvChannels& ch, ConvPass pass);

// Whether the blocked loops run on this CPU (AVX-512F): graph/passes/block_channels.h keeps
// depthwise windows plain where they do not.
bool depthwise_blocked_loops();

// As conv_forward, conv_transpose and conv_filter_grad (exec/cpu/conv_gemm.h), where
// depthwise_takes says so.
void depthwise_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                            const float* bias, float* y);
void depthwise_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                              const float* bias, float* y);
void depthwise_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy,
                                float* dw);

}  // namespace onnxdp
