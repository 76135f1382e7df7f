// GatherND's index walk, shared by GatherND and ScatterND (exec/cpu/tensor.cpp) and GatherNDGrad
// (exec/cpu/grad.cpp). data [B.., D.., S..] (b = batch_dims leading dims B, the k dims D the tuples
// index, slice dims S), indices [B.., I.., k]: tuple t (row-major over [B.., I..]) addresses the
// contiguous slice data[batch of t, tuple t, :], of `slice` elements. Negative indices count from
// the end; one out of range fails naming its element.
#pragma once
#include <cstdint>
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

struct NDSlices {
  int64_t slice = 1;             // elements per slice: prod(S)
  std::vector<int64_t> offset;   // per tuple: its slice's first element in data
};

inline NDSlices gather_nd_slices(const KernelCtx& c, const Shape& data, const Shape& is, int64_t batch_dims,
                                 const std::vector<int64_t>& idx) {
  const int64_t b = batch_dims, k = is.back(), r = int64_t(data.size());
  std::vector<int64_t> stride(size_t(r), 1);  // data's row-major strides
  for (int64_t d = r - 2; d >= 0; --d) stride[size_t(d)] = stride[size_t(d + 1)] * data[size_t(d + 1)];
  NDSlices s;
  for (int64_t d = b + k; d < r; ++d) s.slice *= data[size_t(d)];
  int64_t tuples = 1, per_batch = 1;  // prod(B..I..), prod(I..)
  for (size_t d = 0; d + 1 < is.size(); ++d) {
    tuples *= is[d];
    if (int64_t(d) >= b) per_batch *= is[d];
  }
  const int64_t batch_stride = b ? stride[size_t(b - 1)] : 0;
  s.offset.resize(size_t(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = per_batch ? (t / per_batch) * batch_stride : 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = t * k + j, dim = data[size_t(b + j)];
      int64_t v = idx[size_t(e)];
      if (v < -dim || v >= dim)
        c.fail("index {} (element {} of the indices) is out of range for axis {} of size {}", v, e, b + j, dim);
      if (v < 0) v += dim;
      off += v * stride[size_t(b + j)];
    }
    s.offset[size_t(t)] = off;
  }
  return s;
}

}  // namespace onnxdp
