// A bool mask broadcast to a tensor x [.., n], read a row of x at a time: the masked softmaxes'
// (MaskedSoftmax, SoftmaxGrad with a mask: graph/passes/fuse_masked_softmax.h) take element j of
// row o's mask at data[start[o] + j]. The mask is copied as 32-bit 0 / 1 (once per kernel call,
// the mask's own size: a causal mask is [1, 1, T, T]), so that a loop choosing between floats by
// it vectorizes (GCC 12 leaves a bool-indexed choice between floats scalar: MaskedSoftmax took
// 0.5 ns more per element than Softmax).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "exec/cpu/broadcast.h"

namespace onnxdp {

struct MaskRows {
  std::vector<int64_t> start;  // per row of x: offset of its mask row in `data`
  std::vector<int32_t> data;   // the mask as 0 / 1; its last dim expanded to n where it broadcasts there
};

// The shape rule has checked that `mask` broadcasts to x. A mask whose last dim is 1 (one value
// per row) is expanded to rows of n, so every row reads n contiguous values.
inline MaskRows mask_rows(const TensorRef& mask, const Shape& x) {
  MaskRows r;
  const int64_t n = x.empty() ? 1 : x.back(), rows = n ? shape_numel(x) / n : 0;
  const std::vector<int64_t> st = broadcast_strides(*mask.shape, x);
  r.start.resize(size_t(rows));
  // The rows in order, their index over x's leading dims counted like an odometer.
  const size_t lead = x.size() - 1;
  std::vector<int64_t> at(lead, 0);
  int64_t off = 0;
  for (int64_t o = 0; o < rows; ++o) {
    r.start[size_t(o)] = off;
    for (size_t d = lead; d-- > 0;) {
      off += st[d];
      if (++at[d] < x[d]) break;
      off -= st[d] * x[d];
      at[d] = 0;
    }
  }
  const bool* m = mask.as<const bool>();
  if (st.back() == 0 && n > 1) {  // one value per row: expanded to a row of n
    r.data.resize(size_t(mask.numel * n));
    for (int64_t i = 0; i < mask.numel; ++i) std::fill_n(r.data.begin() + i * n, n, int32_t(m[i]));
    for (int64_t& s : r.start) s *= n;
  } else {
    r.data.assign(m, m + mask.numel);
  }
  return r;
}

}  // namespace onnxdp
