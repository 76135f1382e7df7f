// The kept / reduced split of a reduction's input dims, shared by the CPU reduction kernels and the
// CUDA ones (exec/cuda/reduce.cpp): size-1 dims dropped, neighbours of the same kind merged
// (reducing the last two dims of [B, C, H, W] gives kept [B*C], reduced [H*W]); strides in elements
// of the contiguous input.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"  // Shape

namespace onnxdp {

struct ReduceDims {
  std::vector<int64_t> size, stride;
};

// Splits the input's dims into kept and reduced groups; red[d] marks a reduced dim.
inline void split_dims(const Shape& shape, const std::vector<char>& red, ReduceDims& kept, ReduceDims& reduced) {
  std::vector<int64_t> st(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    st[d] = acc;
    acc *= shape[d];
  }
  int last = -1;  // kind of the previous group: 0 kept, 1 reduced
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    ReduceDims& g = red[d] ? reduced : kept;
    if (last == int(red[d])) {  // contiguous neighbours of the same kind: one dim
      g.size.back() *= shape[d];
      g.stride.back() = st[d];
    } else {
      g.size.push_back(shape[d]);
      g.stride.push_back(st[d]);
    }
    last = int(red[d]);
  }
}

}  // namespace onnxdp
