// GatherElements' index walk, shared by its kernel (exec/cpu/tensor.cpp) and its gradient's
// (exec/cpu/grad.cpp): element e of the indices (shape is) reads the data element at the offset
// given, its axis coordinate replaced by indices[e] (negative counts from the end).
#pragma once
#include <cstdint>
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

template <class F>
void for_each_gathered_element(const KernelCtx& c, const Shape& data, const Shape& is, int64_t axis,
                               const std::vector<int64_t>& idx, F&& f) {
  const int r = int(data.size());
  const int64_t dim = data[size_t(axis)];
  std::vector<int64_t> stride(size_t(r), 1);
  for (int d = r - 2; d >= 0; --d) stride[size_t(d)] = stride[size_t(d + 1)] * data[size_t(d + 1)];
  std::vector<int64_t> at(size_t(r), 0);  // the coordinates of element e
  for (int64_t e = 0; e < int64_t(idx.size()); ++e) {
    int64_t k = idx[size_t(e)];
    if (k < -dim || k >= dim)
      c.fail("index {} (element {} of the indices) is out of range for axis {} of size {}", k, e, axis, dim);
    if (k < 0) k += dim;
    int64_t off = 0;
    for (int d = 0; d < r; ++d) off += (d == axis ? k : at[size_t(d)]) * stride[size_t(d)];
    f(e, off);
    for (int d = r - 1; d >= 0 && ++at[size_t(d)] == is[size_t(d)]; --d) at[size_t(d)] = 0;
  }
}

}  // namespace onnxdp
