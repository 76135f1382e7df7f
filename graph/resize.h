// Resize with mode "nearest": which input element each output element copies, per axis. Shared by
// the shape rule (graph/shapes_tensor.cpp), the CPU kernel (exec/cpu/tensor.cpp) and the gradient
// (graph/gradients_tensor.cpp: GatherGrad along each resized axis, in reverse).
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

struct ResizeNearest {
  Shape out;                             // the output shape
  std::vector<std::vector<int64_t>> src;  // per axis: the input index of each output index
  bool identity(size_t axis) const;       // the axis is copied as it is
};

// n is a Resize node on input shape `in`, with the constant scales (input 2) or sizes (input 3)
// given; fails naming the node for what onnxdp does not resize (modes other than nearest,
// tf_crop_and_resize, antialias, aspect-ratio policies other than stretch).
ResizeNearest resize_nearest(const Node& n, const Shape& in, const Tensor* scales, const Tensor* sizes);

}  // namespace onnxdp
