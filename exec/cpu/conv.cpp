// CPU kernels of Conv and ConvTranspose (N-D, groups, strides, dilations, pads, auto_pad): the
// attributes resolved to a window geometry here, the work done by the convolution engine
// (exec/cpu/conv_gemm.h: im2col + GEMM over chunks of the batch, direct loops for depthwise
// windows), which ConvGradFilter (exec/cpu/grad.cpp) shares.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "exec/cpu/conv_gemm.h"
#include "exec/cpu/in_float.h"
#include "exec/kernel.h"
#include "graph/passes/block_channels.h"

namespace onnxdp {

namespace {

enum class AutoPad { notset, same_upper, same_lower, valid };

AutoPad auto_pad(const Node& n) {
  const std::string& s = n.s("auto_pad");
  if (s == "SAME_UPPER") return AutoPad::same_upper;
  if (s == "SAME_LOWER") return AutoPad::same_lower;
  if (s == "VALID") return AutoPad::valid;
  return AutoPad::notset;
}

// Floor division (the spec's pad split rounds toward -inf when the total is negative).
int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

// The attributes common to both ops, defaults filled; pad_begin left for the caller.
ConvWindows read_geom(const KernelCtx& c) {
  const Shape &x = *c.in(0).shape, &w = *c.in(1).shape;
  size_t n = x.size() - 2;
  ConvWindows g;
  g.kernel.assign(w.begin() + 2, w.end());
  g.strides = c.node.ints_or("strides", std::vector<int64_t>(n, 1));
  g.dilations = c.node.ints_or("dilations", std::vector<int64_t>(n, 1));
  return g;
}

template <class T>
void kernel_conv(KernelCtx& c) {
  const TensorRef &xr = c.in(0), &wr = c.in(1), &yr = c.out(0);
  const Shape &xs = *xr.shape, &ys = *yr.shape;
  const size_t n = xs.size() - 2;
  const int64_t group = c.node.i("group");

  ConvWindows g = read_geom(c);
  g.iter.assign(ys.begin() + 2, ys.end());
  g.bound.assign(xs.begin() + 2, xs.end());
  AutoPad ap = auto_pad(c.node);
  std::vector<int64_t> pads = c.node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  g.pad_begin.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (ap == AutoPad::notset) {
      g.pad_begin[i] = pads[i];
    } else if (ap != AutoPad::valid) {
      int64_t span = (g.kernel[i] - 1) * g.dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (g.iter[i] - 1) * g.strides[i] + span - g.bound[i]);
      g.pad_begin[i] = ap == AutoPad::same_upper ? total / 2 : total - total / 2;
    }
  }
  const ConvChannels ch{xs[0], group, xs[1] / group, ys[1] / group, blocked_input(c.node, 0), blocked_output(c.node, 0)};
  conv_forward<T>(g, ch, xr.as<T>(), wr.as<T>(), c.has_in(2) ? c.in(2).as<T>() : nullptr, yr.as<T>(),
                  c.in_tag(0));
}

template <class T>
void kernel_conv_transpose(KernelCtx& c) {
  const TensorRef &xr = c.in(0), &wr = c.in(1), &yr = c.out(0);
  const Shape &xs = *xr.shape, &ys = *yr.shape;
  const size_t n = xs.size() - 2;
  const int64_t group = c.node.i("group");

  // Iterate over the input positions; the taps land in the output.
  ConvWindows g = read_geom(c);
  g.iter.assign(xs.begin() + 2, xs.end());
  g.bound.assign(ys.begin() + 2, ys.end());
  AutoPad ap = auto_pad(c.node);
  std::vector<int64_t> pads = c.node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  std::vector<int64_t> out_pad = c.node.ints_or("output_padding", std::vector<int64_t>(n, 0));
  bool from_total = c.node.has("output_shape") || ap == AutoPad::same_upper || ap == AutoPad::same_lower;
  g.pad_begin.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (from_total) {
      // The spec's split of the padding the requested output size implies (pads are ignored).
      int64_t span = (g.kernel[i] - 1) * g.dilations[i] + 1;
      int64_t total = g.strides[i] * (g.iter[i] - 1) + out_pad[i] + span - g.bound[i];
      g.pad_begin[i] = ap == AutoPad::same_upper ? floor_div2(total) : total - floor_div2(total);
    } else if (ap == AutoPad::notset) {
      g.pad_begin[i] = pads[i];
    }
  }
  const ConvChannels ch{xs[0], group, xs[1] / group, ys[1] / group, blocked_input(c.node, 0), blocked_output(c.node, 0)};
  conv_transpose<T>(g, ch, xr.as<T>(), wr.as<T>(), c.has_in(2) ? c.in(2).as<T>() : nullptr, yr.as<T>(), c.in_tag(0));
}

}  // namespace

void Conv_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return kernel_conv<float>(c);
    case DType::f64: return kernel_conv<double>(c);
    case DType::f16:
    case DType::bf16: return in_float(c, kernel_conv<float>);  // --mixed-precision
    default: c.fail("input 0 is {}; Conv runs on float16, bfloat16, float32 and float64", dtype_name(c.in(0).dtype));
  }
}

void ConvTranspose_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return kernel_conv_transpose<float>(c);
    case DType::f64: return kernel_conv_transpose<double>(c);
    case DType::f16:
    case DType::bf16: return in_float(c, kernel_conv_transpose<float>);  // --mixed-precision, and Conv's input gradient
    default:
      c.fail("input 0 is {}; ConvTranspose runs on float16, bfloat16, float32 and float64", dtype_name(c.in(0).dtype));
  }
}

}  // namespace onnxdp
