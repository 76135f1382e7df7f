// block_channels (CPU): the activations that pass from one oneDNN convolution to the next stay in
// the channel-blocked layout oneDNN's convolutions run in (exec/cpu/blocked.h: 16 channels
// innermost), instead of being reordered from and to plain NCHW around every Conv, its input
// gradient and its filter gradient. In a ResNet step those reorders were a fifth of the
// convolutions' time (bench/results/2026-12-05-conv-engines.md).
//
// The layout is the nodes' business, not the values': a node reading or writing a blocked tensor
// lists the slot in its attribute blocked_inputs / blocked_outputs (onnxdp's own: import refuses
// them), and its CPU kernel reads the layout there. The value keeps its plain shape and size.
//
// Which values: the pass ties values that must share a layout into groups (a BatchNormalization's
// x and y; its gradient's dy, x, relu_y and dx; an elementwise op's output and its operands of the
// output's shape, such as Add, Relu, ReluGrad, Clip, Sigmoid, Mul or Where, whose other operands
// are scalars: those ops compute element by element in any layout; Add, Sub, Mul, Div and Expand
// also with an operand broadcast over the spatial dims only, a bias or layer scale [C, 1, 1] or
// an [N, C, 1, 1], which they read plain: exec/cpu/blocked.h's storage shapes), and a group is
// blocked when every value in it
//   - is a float32 (or bool: an elementwise gradient's mask) activation of rank 3 to 5 whose
//     channels (dim 1) are a positive multiple of 16, not a graph output nor a value kept for after
//     the run (`keep`);
//   - is read and written only by the ops above, or as the activation of Conv, ConvTranspose or
//     ConvGradFilter of one group, which oneDNN runs in this layout (a Conv may read one layout and
//     write the other), or of a depthwise window that exec/cpu/conv_depthwise.h's blocked loops
//     take (blocked_depthwise_window; both its activations tied, blocked or plain together), or
//     by a Transpose (either side in either layout: a ConvNeXt block's turns to channels-last and
//     back copy 16 channels at a time), or read by a ReduceSum / ReduceMean over every spatial
//     dim (a bias gradient, a global average), whose output is plain.
// A group with any other reader (a pool, a Reshape) stays plain. Running on the finished graph
// (after the fusions), the pass changes no value but the depthwise windows', the reductions' and
// oneDNN's 1x1 windows': each other kernel computes what it computes on plain tensors, bit for
// bit; the blocked depthwise loops sum each channel's taps in another order than the plain ones,
// a reduction over a blocked x walks its elements in storage order (in double, as on plain
// tensors), and oneDNN runs a 1x1 window on plain tensors by its gemm path, on a blocked one by
// its blocked kernels (the same bits on the AVX-512 Intel VM of the records, not on an AVX2 AMD
// EPYC): within float rounding (tests/graph/test_block_channels.cpp; each kernel against its
// plain run: tests/exec/test_blocked_ops.cpp). Blocked, a MobileNet-style depthwise window runs
// with every lane of a vector a channel: on this repo's Intel VM 1.3-1.6x the plain loops' speed
// forward and 1.2-1.6x in the filter gradient (bench/results/2026-12-07-blocked-depthwise.md).
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

inline constexpr const char* kBlockedInputs = "blocked_inputs";
inline constexpr const char* kBlockedOutputs = "blocked_outputs";

// Whether node n reads its input k / writes its output k in the blocked layout.
bool blocked_input(const Node& n, int k);
bool blocked_output(const Node& n, int k);

// Whether `a` broadcasts against `out` over nothing but (some of) its first two dims: at most
// out's rank, every dim from 2 on (right-aligned) 1. Add, Sub, Mul, Div and Expand read such an
// operand plain beside a blocked output (exec/cpu/blocked.h, blocked_storage).
bool channel_operand(const Shape& a, const Shape& out);

// Whether a depthwise window (one input and one output channel a group, the channels a multiple
// of 16) runs in the blocked layout: exec/cpu/conv_depthwise.h's blocked loops take it. 2-D, unit
// strides and dilations, 3, 5 or 7 kernel columns and at most 16 rows, each side's leading padding
// smaller than the kernel.
bool blocked_depthwise_window(const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& dilations, const std::vector<int64_t>& pad_begin);

// Marks the groups above; returns how many values it blocked. `depthwise`: whether the blocked
// depthwise loops run on this CPU (exec/cpu/conv_depthwise.h, depthwise_blocked_loops: AVX-512).
// Without them a depthwise window and its neighbours stay plain: blocked, its passes would go to
// oneDNN's blocked kernels or the engine's plain copies (on an AVX2-only AMD EPYC, ConvNeXt's 7x7
// filter gradient 5.5 GFLOP/s blocked against 8.4 plain; bench/results/2026-12-07-convnext-blocked.md).
int block_channels(Graph& g, const std::vector<ValueId>& keep = {}, bool depthwise = true);

}  // namespace onnxdp
