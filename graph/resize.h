// Resize: the geometry every mode shares (output shape, scales, crop, the source coordinate of each
// output index), then per mode what each output element reads. Shared by the shape rules
// (graph/shapes_tensor.cpp, graph/shapes_grad.cpp), the CPU kernels (exec/cpu/tensor.cpp: Resize;
// exec/cpu/grad.cpp: ResizeGrad) and the gradient (graph/gradients_tensor.cpp).
//
// Every function takes the Resize node (or the ResizeGrad node, which carries Resize's attributes)
// on input shape `in`, with its roi, scales and sizes (inputs 1..3, null when absent: all three
// must be known), and fails naming the node for what onnxdp does not resize: keep_aspect_ratio_policy
// other than stretch / not_larger / not_smaller, antialias with mode nearest, tf_crop_and_resize
// with mode nearest, modes and coordinate modes outside the ONNX lists.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

struct ResizeAxis {
  int64_t in = 0, out = 0;
  double scale = 1;                   // the scale the coordinates use: given, or from the sizes
  double roi_start = 0, roi_end = 1;  // tf_crop_and_resize's crop, as fractions of the axis
  bool resized = false;               // false: copied as it is (scale 1, same length, no crop)
};

// Per axis of `in`: lengths, scale, crop. Output lengths: floor(in * scale) from scales (refused
// with tf_crop_and_resize, where ONNX's text and reference disagree); the sizes as given
// (stretch), or every listed axis scaled by the smallest (not_larger) or largest (not_smaller) of
// sizes / in, rounded half up.
std::vector<ResizeAxis> resize_axes(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales,
                                    const Tensor* sizes);
Shape resize_output_shape(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales, const Tensor* sizes);

// The input coordinate output index i of axis `a` samples (coordinate_transformation_mode; may lie
// outside [0, in - 1]). align_corners and tf_crop_and_resize divide by the output's integer length
// less one, as PyTorch's align_corners does (ONNX's reference implementation uses in * scale, which
// differs only where that is not a whole number).
double resize_source(const Node& n, const ResizeAxis& a, int64_t i);

// mode nearest: which input element each output element copies, per axis.
struct ResizeNearest {
  Shape out;                              // the output shape
  std::vector<std::vector<int64_t>> src;  // per axis: the input index of each output index
  bool identity(size_t axis) const;       // the axis is copied as it is
};
ResizeNearest resize_nearest(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales,
                             const Tensor* sizes);

// modes linear and cubic, separable: along each resized axis, output index j is the weighted sum of
// `width` input indices (taps), indices clamped into the axis (the edge repeats), as ONNX's
// reference: linear 2 taps (1 - t, t); cubic 4 taps of the Keys kernel with cubic_coeff_a;
// antialias (when downscaling, scale < 1) widens the kernel by 1 / scale and normalises the
// weights; exclude_outside zeroes the weights of taps outside the axis and renormalises. The
// N-D result is the product over the axes (bilinear, bicubic, trilinear ...).
struct ResizeTaps {
  int64_t width = 0;            // taps per output index; 0: the axis is not resized
  std::vector<int64_t> src;     // [out * width] the input index of each tap
  std::vector<double> weight;   // [out * width]
  std::vector<char> outside;    // [out] tf_crop_and_resize: the source lies outside the input, the
                                // output is extrapolation_value (its gradient 0)
  bool crops() const;           // some output index is outside
};
struct ResizeInterp {
  Shape out;
  std::vector<ResizeTaps> axes;  // per axis of the input
};
ResizeInterp resize_interp(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales,
                           const Tensor* sizes);

}  // namespace onnxdp
