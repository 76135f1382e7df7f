// Float convolutions through oneDNN (Debian's libdnnl, what PyTorch and ONNX Runtime run on CPUs),
// when the build found it (ONNXDP_HAVE_DNNL): the engine of exec/cpu/conv_gemm.h asks here first
// and does the work itself where this returns false (no oneDNN, double precision, a shape oneDNN
// refuses, or ONNXDP_CONV_ENGINE=im2col).
//
// Why: oneDNN's JIT convolutions run in its blocked layouts (channels in blocks of 16 innermost) at
// 145-200 GFLOP/s on this project's ResNet shapes (one AVX-512 core, sgemm 162), 100-180 with the
// reorders from and to onnxdp's plain NCHW tensors counted, against 45-83 for im2col + OpenBLAS
// (bench/results/2026-12-05-conv-engines.md). A primitive per shape is made once per thread and
// kept with its blocked buffers and reorders.
//
// Threads: oneDNN always runs on one thread (its OpenMP team is set to 1 on every thread that
// calls it); onnxdp's own team (exec/cpu/threads.h) splits the batch into one range of images per
// thread, each a primitive of its own; the filter gradient's per-thread sums are added in thread
// order, so results depend on the thread count only, as with the im2col engine.
#pragma once

#include "exec/cpu/conv_gemm.h"

namespace onnxdp {

enum class ConvEngine { automatic, im2col };
// The engine float convolutions take: automatic (oneDNN where it is built in and takes the shape)
// unless ONNXDP_CONV_ENGINE=im2col is set; tests switch it to compare the two.
ConvEngine conv_engine();
void set_conv_engine(ConvEngine e);
// Whether this build has oneDNN.
bool dnnl_built();

// As conv_forward / conv_transpose / conv_filter_grad (exec/cpu/conv_gemm.h) for float; false
// where oneDNN does not run it (nothing written then).
bool dnnl_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w, const float* bias,
                       float* y);
bool dnnl_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                         const float* bias, float* y);
bool dnnl_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy, float* dw);

}  // namespace onnxdp
