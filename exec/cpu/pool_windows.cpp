// pool_windows (exec/cpu/pool_windows.h).
#include "exec/cpu/pool_windows.h"

#include <algorithm>
#include <limits>
#include <string>

namespace onnxdp {

PoolWindows pool_windows(const Node& node, const Shape& xs, const Shape& ys) {
  const size_t n = xs.size() - 2;
  const std::vector<int64_t> kernel = node.ints("kernel_shape");
  const std::vector<int64_t> strides = node.ints_or("strides", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> dil = node.ints_or("dilations", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> pads = node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  const std::string& ap = node.s("auto_pad");
  PoolWindows w;
  w.in.assign(xs.begin() + 2, xs.end());
  const std::vector<int64_t> out(ys.begin() + 2, ys.end());
  std::vector<int64_t> row_stride(n, 1);
  for (size_t i = n - 1; i-- > 0;) row_stride[i] = row_stride[i + 1] * w.in[i + 1];
  // Per dim and output coordinate: the taps inside x (as offsets) and the count within the pads.
  std::vector<std::vector<std::vector<int64_t>>> taps(n);
  std::vector<std::vector<int64_t>> padded(n);
  for (size_t i = 0; i < n; ++i) {
    w.in_size *= w.in[i];
    w.out_size *= out[i];
    if (i > 0) w.out_rest *= out[i];
    const int64_t span = (kernel[i] - 1) * dil[i] + 1;
    int64_t pb = 0, pe = 0;
    if (ap == "NOTSET") {
      pb = pads[i], pe = pads[i + n];
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (out[i] - 1) * strides[i] + span - w.in[i]);
      pb = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    }
    for (int64_t o = 0; o < out[i]; ++o) {
      std::vector<int64_t> valid;
      int64_t count = 0;
      for (int64_t k = 0; k < kernel[i]; ++k) {
        const int64_t x = o * strides[i] - pb + k * dil[i];
        if (x >= 0 && x < w.in[i]) valid.push_back(x * row_stride[i]);
        if (x >= -pb && x < w.in[i] + pe) ++count;
      }
      taps[i].push_back(std::move(valid));
      padded[i].push_back(count);
    }
  }
  w.rows = std::move(taps[0]);
  // The other dims' windows, output q in row-major order: the sums of one tap per dim, row-major.
  w.rest_begin.push_back(0);
  std::vector<int64_t> o(n, 0);
  for (int64_t q = 0; q < w.out_rest; ++q) {
    std::vector<int64_t> sums{0};
    for (size_t i = 1; i < n; ++i) {
      std::vector<int64_t> next;
      for (int64_t s : sums)
        for (int64_t t : taps[i][size_t(o[i])]) next.push_back(s + t);
      sums = std::move(next);
    }
    w.rest_offset.insert(w.rest_offset.end(), sums.begin(), sums.end());
    w.rest_begin.push_back(int64_t(w.rest_offset.size()));
    for (size_t i = n; i-- > 1;) {
      if (++o[i] < out[i]) break;
      o[i] = 0;
    }
  }
  // Counts within the pads: the product over dims, for every output position.
  w.padded.assign(size_t(w.out_size), 1);
  std::fill(o.begin(), o.end(), 0);
  for (int64_t p = 0; p < w.out_size; ++p) {
    for (size_t i = 0; i < n; ++i) w.padded[size_t(p)] *= padded[i][size_t(o[i])];
    for (size_t i = n; i-- > 0;) {
      if (++o[i] < out[i]) break;
      o[i] = 0;
    }
  }
  // The flat table, when the windows are uniform and it holds at most kMaxFlatTaps offsets.
  constexpr int64_t kMaxFlatTaps = int64_t(1) << 22;
  const int64_t window = w.out_size > 0 ? w.taps(0) : 0;
  bool uniform = window > 0 && w.in_size <= std::numeric_limits<int32_t>::max() && w.out_size <= kMaxFlatTaps / window;
  for (int64_t p = 1; uniform && p < w.out_size; ++p) uniform = w.taps(p) == window;
  if (uniform) {
    w.window = window;
    w.flat.resize(size_t(w.out_size * window));
    for (int64_t p = 0; p < w.out_size; ++p) {
      int64_t k = 0;
      w.for_each_tap(p, [&](int64_t off) { w.flat[size_t(k++ * w.out_size + p)] = int32_t(off); });
    }
  }
  return w;
}

}  // namespace onnxdp
