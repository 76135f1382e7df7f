// oneDNN (Debian's libdnnl, what PyTorch and ONNX Runtime run on CPUs) behind the CPU backend's
// float convolutions and matrix products, when the build found it (ONNXDP_HAVE_DNNL) and
// ONNXDP_DNNL=0 does not turn it off.
//
// Convolutions: the engine of exec/cpu/conv_gemm.h asks here (after the depthwise loops of
// exec/cpu/conv_depthwise.h, which take plain depthwise windows at stride 1, and the small-plane
// loops of exec/cpu/conv_small.h, which take small images written to fewer than 16 channels) and
// does the work itself where these return false (no oneDNN, double precision, a shape oneDNN refuses). oneDNN's JIT
// convolutions run in its blocked layouts (channels in blocks of 16 innermost): on this project's
// ResNet shapes 110-182 GFLOP/s with the reorders from and to onnxdp's plain NCHW tensors counted
// (one AVX-512 core, sgemm 162), against 45-83 for im2col + OpenBLAS
// (bench/results/2026-12-05-conv-engines.md); 1x1 windows run in the plain layouts (oneDNN's gemm
// path), faster there. A tensor already in the blocked layout (ConvChannels::in_blocked /
// out_blocked: graph/passes/block_channels.h keeps the activations between convolutions so) is
// given to the primitive as it is, with no reorder. A primitive per shape, share of the batch and
// layout is made once per calling thread and kept with its blocked buffers, reorders and its own
// scratchpad (any thread of the caller's team may run it).
//
// Products: blas_gemm (exec/cpu/blas.h) calls oneDNN's sgemm for float, OpenBLAS's for double:
// 10-45 % faster on gpt_small's shapes here (bench/results/2026-12-05-gemm-engines.md); a product
// with a bias along its rows (a Linear layer's forward, blas_gemm_bias) runs as oneDNN's matmul
// primitive, the bias added in its kernel.
//
// Threads: oneDNN always runs on one thread (its OpenMP team is set to 1 on every thread that
// calls it); onnxdp's own team (exec/cpu/threads.h) splits the work instead: a product's blocks
// of rows or columns, a convolution's batch into one range of images per share, each a primitive
// of its own, the filter gradient's per-thread sums added in thread order. Results depend on the
// thread count only, as with OpenBLAS and the im2col engine.
#pragma once

#include "exec/cpu/conv_gemm.h"

namespace onnxdp {

// Whether float convolutions and products run through oneDNN: where the build has it, unless the
// environment sets ONNXDP_DNNL=0 (1 or unset: on; anything else fails the first call, naming the
// variable); tests switch it to compare both ways.
bool dnnl_enabled();
void set_dnnl_enabled(bool on);
// Whether this build has oneDNN.
bool dnnl_built();
// Sets oneDNN's team to one thread on the calling thread (once per thread); before any oneDNN call.
void dnnl_one_thread();

// As conv_forward / conv_transpose / conv_filter_grad (exec/cpu/conv_gemm.h) for float; false
// where oneDNN does not run it (nothing written then).
//
// A Conv's gradients read its dy twice: the input gradient (ConvTranspose, backward data to
// oneDNN) and then the filter gradient (ConvGradFilter), each in the same blocked layout. With
// the tags of the values (exec/kernel.h's ValueTag: a plan run and a value id, so the same tag
// means the same contents, whatever the address: mixed precision's float copies of different
// values may share one), an input's blocked buffer remembers what it holds, and the filter
// gradient reads dy from the input gradient's buffer where that holds the same images of the
// same value: one reorder of dy fewer per Conv and step. A later input gradient of the same shape
// overwrites the buffer and its record, so a stale copy is never read. Likewise the filter
// gradient reads x from the forward's buffer where that still holds x (no later forward of the
// same shape in between: in a training graph, the last Conv of each shape), one reorder of x
// fewer, at no memory cost. (Not for a forward with 16 channels on each side at unit strides: it
// runs as the backward-data pass of the reversed window, oneDNN's faster kernel there.)
bool dnnl_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w, const float* bias,
                       float* y, ValueTag x_tag = {});
bool dnnl_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                         const float* bias, float* y, ValueTag x_tag = {});
bool dnnl_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy, float* dw,
                           ValueTag x_tag = {}, ValueTag dy_tag = {});
// How many input reorders the tags above saved in this process so far (for tests).
int64_t dnnl_shared_reorders();

// C [m, n] = A [m, k] x op(B) + bias [n] along C's rows, on the calling thread: oneDNN's matmul
// with the bias added in its kernel, where blas_gemm_bias (exec/cpu/blas.h) would otherwise set
// C's rows to the bias and accumulate the product onto them, a pass over C of its own. Row-major
// with row lengths lda, ldb, ldc; B is [k, n], or [n, k] read transposed with tb. The primitive of
// a shape is made once per calling thread. False where oneDNN is off or refuses the shape
// (nothing written then).
bool dnnl_matmul_bias(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                      int64_t ldb, const float* bias, float* c, int64_t ldc);
// How many products dnnl_matmul_bias ran in this process so far (for tests).
int64_t dnnl_bias_products();

}  // namespace onnxdp
