// The CPU convolutions' one engine: Conv (exec/cpu/conv.cpp), ConvTranspose (the same file; also
// Conv's input gradient) and ConvGradFilter (exec/cpu/grad.cpp; Conv's and ConvTranspose's weight
// gradient) are each a loop over chunks of the batch, every chunk one im2col into a buffer that
// stays in cache and one BLAS product, or, for depthwise windows, a direct loop.
// Float convolutions go first to onnxdp's own AVX-512 loops: the depthwise ones
// (exec/cpu/conv_depthwise.h: one channel per group, 2-D windows at stride 1, plain tensors) and
// the small-plane ones (exec/cpu/conv_small.h: images of at most 64 positions written to fewer
// than 16 channels); then to oneDNN (exec/cpu/onednn.h); what none takes, and every float64 one,
// runs here.
//
// A chunk is a few whole images when an image has few window positions (the sample CNNs' 8x8 and
// 4x4 grids: one product over the columns of many images, instead of one tiny product each), or a
// range of rows of one image when it has many; either way about kChunkElements elements of im2col.
// The products are oriented the way OpenBLAS runs them fastest for a convolution's few output
// channels (measured here, one thread, OpenBLAS 0.3.21: a product with 16 rows and 4096 columns
// at 47 GFLOP/s, its transpose with 4096 rows and 16 columns at 56-78, a 512^3 sgemm at 100):
//   Conv            y^T [R, Mg] = col^T [R, Cg*K] x W_g^T [Cg*K, Mg], then y^T written into y
//   ConvGradFilter  dW_g^T [Cg*K, Mg] += col [Cg*K, R] x dy_g^T [R, Mg], dW transposed at the end
//   ConvTranspose   col [Mg*K, R] = W_g^T [Mg*K, Cg] x x_g [Cg, R], then col2im into y
// with R the chunk's window positions (images x positions), K the taps of the kernel. (For the
// CNN's first layer, 9 multiply-adds per output, Conv is W_g x col instead; for 64 or more outputs
// per group on one image, in place in y.) im2col and col2im move whole planes: the input is
// zero-padded and split into its stride phases once per image, after which each tap's view is one
// contiguous stretch of a phase (exec/cpu/conv_gemm.cpp, "windows as shifted planes"); where that
// layout would waste too many columns (small images) a flat gather table or per-row runs do it.
#pragma once
#include <cstdint>
#include <vector>

#include "exec/kernel.h"  // ValueTag

namespace onnxdp {

// A sliding window between an iterated grid `iter` and a bounded grid `bound` (spatial dims only):
// iterated position o and kernel tap k meet bound coordinate o*stride - pad_begin + k*dilation in
// each dim; outside the bound grid is padding (reads as zero, writes vanish). Conv and
// ConvGradFilter iterate over the output and read the input; ConvTranspose iterates over its input
// and writes its output.
struct ConvWindows {
  std::vector<int64_t> iter, bound, kernel, strides, dilations, pad_begin;
  int64_t iter_size() const { return prod(iter); }
  int64_t bound_size() const { return prod(bound); }
  int64_t kernel_size() const { return prod(kernel); }
  static int64_t prod(const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t d : v) p *= d;
    return p;
  }
};

// The channel counts: `images` images, `groups` groups, per group `in` channels on the side the
// window reads from (Conv's input, ConvTranspose's input) and `out` on the other side.
// in_blocked / out_blocked: that side's activation (x, dy) is in the channel-blocked layout of
// exec/cpu/blocked.h (float only); oneDNN reads and writes it as it is, the engine here through
// plain copies.
struct ConvChannels {
  int64_t images, groups, in, out;
  bool in_blocked = false, out_blocked = false;
};

// Which of the three a call is: own loops that take some shapes (exec/cpu/conv_small.h,
// exec/cpu/conv_depthwise.h) say so per pass.
enum class ConvPass { forward, transpose, filter_grad };

// Conv: x [N, G*in, bound..], w [G*out, in, kernel..], bias [G*out] or nullptr -> y [N, G*out, iter..].
// x_tag names x's contents where the caller knows them (the filter gradient reads x again;
// exec/cpu/onednn.h shares work between the two).
template <class T>
void conv_forward(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* w, const T* bias, T* y,
                  ValueTag x_tag = {});

// ConvTranspose: x [N, G*in, iter..], w [G*in, out, kernel..], bias [G*out] or nullptr
// -> y [N, G*out, bound..] (every output element the sum of the taps that land on it, plus bias).
// x_tag names x's contents where the caller knows them (a Conv's input gradient: its dy, which
// the filter gradient reads next; exec/cpu/onednn.h shares work between the two).
template <class T>
void conv_transpose(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* w, const T* bias, T* y,
                    ValueTag x_tag = {});

// ConvGradFilter: x [N, G*in, bound..], dy [N, G*out, iter..] -> dw [G*out, in, kernel..], the
// sum over images and positions of dy times the input each tap saw. x_tag and dy_tag as above.
template <class T>
void conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* dy, T* dw,
                      ValueTag x_tag = {}, ValueTag dy_tag = {});

}  // namespace onnxdp
