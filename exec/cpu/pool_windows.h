// The windows of the pooling kernels (MaxPool, AveragePool in exec/cpu/pool.cpp; MaxPoolGrad,
// AveragePoolGrad in exec/cpu/grad.cpp), N-D, built once per call and shared by every plane.
//
// x [N, C, D1..Dn] pooled to y [N, C, O1..On] (the shape rule gives O). Output coordinate o of dim
// i covers the input coordinates o*stride - pad_begin + k*dilation, k < kernel; taps outside
// [0, D) are padding. For AveragePool's count_include_pad, a padding tap counts when it lies in
// the explicit (or auto) pads, i.e. in [-pad_begin, D + pad_end); taps past that (from ceil_mode)
// never count.
//
// A window is the product of per-dim tap lists. The first spatial dim keeps its lists (`rows`);
// the other dims' windows are one table (`rest_*`), whose size is their outputs times their
// kernel taps, so the table stays small while visiting a tap is two array reads.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

struct PoolWindows {
  std::vector<int64_t> in;         // spatial dims of x
  int64_t in_size = 1;             // elements of one x plane
  int64_t out_size = 1;            // elements of one y plane
  int64_t out_rest = 1;            // outputs per coordinate of the first spatial dim
  std::vector<std::vector<int64_t>> rows;   // [O1]: the first dim's taps inside x, as plane offsets
  std::vector<int64_t> rest_begin;          // [out_rest + 1]: window q of the other dims is
  std::vector<int64_t> rest_offset;         //   rest_offset[rest_begin[q] .. rest_begin[q + 1])
  std::vector<int64_t> padded;              // [out_size]: taps within x plus its pads
  // When every window has the same taps inside x, `window` of them (no padding reached, the usual
  // unpadded 2x2 / 3x3 pooling), and the table stays small: tap k of output p (in for_each_tap's
  // order) as a plane offset, flat [window, out_size], so a kernel visits tap k of all outputs in
  // one loop that vectorizes (gathers and blends, no branches). window = 0 otherwise (the kernels
  // use for_each_tap).
  int64_t window = 0;
  std::vector<int32_t> flat;

  // Calls tap(offset) for each tap of output p inside x (offset within the plane), row-major
  // over the kernel: the order in which MaxPool's first maximum wins.
  template <class F>
  void for_each_tap(int64_t p, F&& tap) const {
    const int64_t q = p % out_rest;
    const int64_t* rest = rest_offset.data();
    const int64_t b = rest_begin[size_t(q)], e = rest_begin[size_t(q) + 1];
    for (int64_t r : rows[size_t(p / out_rest)])
      for (int64_t j = b; j < e; ++j) tap(r + rest[j]);
  }
  // The number of output p's taps inside x.
  int64_t taps(int64_t p) const {
    const int64_t q = p % out_rest;
    return int64_t(rows[size_t(p / out_rest)].size()) * (rest_begin[size_t(q) + 1] - rest_begin[size_t(q)]);
  }
};

// Whether v takes over from best as a window's maximum when the taps are visited in order: the
// first maximum wins, and a NaN is above all (the first one), as torch's max_pool; MaxPoolGrad
// routes dy by the same rule. Branch-free (bitwise ors of the comparisons): as branches, the
// comparisons of random data mispredict half the time.
template <class T>
[[gnu::always_inline]] inline bool takes_max(T v, T best) {
  return (v > best) | ((v != v) & (best == best));
}

// The windows of pooling node `node` (kernel_shape, strides, dilations, pads, auto_pad) from x
// [N, C, D..] to y [N, C, O..].
PoolWindows pool_windows(const Node& node, const Shape& x, const Shape& y);

}  // namespace onnxdp
