// The sum of a row's terms in double, for the kernels that reduce along a row (Softmax,
// LayerNormalization and its gradient):
//
//   const double mean = row_sum(n, [&](int64_t j) { return double(x[j]); }) / double(n);
//
// Four interleaved partial sums (term j goes to sum j mod 4), added pairwise at the end: the
// additions do not wait on each other, and the compiler may run the four as vector lanes. A
// single running sum in strict order (what plain C++ asks for) cannot vectorize and waits on
// every addition's latency.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "exec/cpu/clones.h"

namespace onnxdp {

// Always inlined: inside a row loop built for x86-64-v3 (exec/cpu/clones.h) the sum is then built
// for it too.
template <class Term>
[[gnu::always_inline]] inline double row_sum(int64_t n, const Term& term) {
  double part[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int q = 0; q < 4; ++q) part[q] += term(j + q);
  for (; j < n; ++j) part[j % 4] += term(j);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// The same with sixteen interleaved partial sums (term j goes to sum j mod 16), added pairwise at
// the end: four vectors of four doubles, so four additions are in flight where row_sum waits on
// one vector addition's latency per four terms. For long rows of cheap terms that several sums
// share (BatchNormalization and its gradient, exec/cpu/norm.cpp and grad.cpp); its rounding
// differs from row_sum's only in the order of the additions. The last n % 16 terms go in as one
// more block of 16 padded with +0 terms (adding +0 leaves a partial as it is: partials start at
// +0 and so are never -0), and every index into the partials is a constant, so that they stay in
// registers: a tail that indexed them by j % 16 kept them in memory, zeroed by a `rep stos` per
// row, and short rows (LayerNormalization's 32, an 8x8 plane's 64) paid that on every row.
template <class Term>
[[gnu::always_inline]] inline double row_sum_wide(int64_t n, const Term& term) {
  double part[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int q = 0; q < 16; ++q) part[q] += term(j + q);
  if (j < n) {
    double tail[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int q = 0; j + q < n; ++q) tail[q] = term(j + q);
    for (int q = 0; q < 16; ++q) part[q] += tail[q];
  }
  for (int q = 0; q < 8; ++q) part[q] += part[q + 8];
  for (int q = 0; q < 4; ++q) part[q] += part[q + 4];
  return (part[0] + part[2]) + (part[1] + part[3]);
}

// row_sum_wide for the 16 channels of one row of a channel-blocked tensor (exec/cpu/blocked.h: n
// positions of 16 lanes), K sums at once: terms(j, t) sets t[k][l], term k of lane l at position
// j, and out[k][l] is row_sum_wide(n, that term), each lane's additions in row_sum_wide's order
// (term j into partial sum j mod 16, the partials added pairwise): the same value bit for bit as
// the plain row's sum. The lanes are the vector.
template <int K, class Terms>
[[gnu::always_inline]] inline void block_row_sums(int64_t n, const Terms& terms, double (&out)[K][16]) {
  double part[K][16][16] = {};  // [sum][partial][lane]
  double t[K][16];
  for (int64_t j = 0; j < n; ++j) {
    terms(j, t);
    const int64_t q = j % 16;
    for (int k = 0; k < K; ++k)
      for (int l = 0; l < 16; ++l) part[k][q][l] += t[k][l];
  }
  for (int k = 0; k < K; ++k) {
    for (int w = 8; w > 0; w /= 2)
      for (int q = 0; q < w; ++q)
        for (int l = 0; l < 16; ++l) part[k][q][l] += part[k][q + w][l];
    for (int l = 0; l < 16; ++l) out[k][l] = part[k][0][l];
  }
}

// How many channels of a BatchNormalization (or its gradient) to take through all its passes at a
// time, a channel's inputs being `channel_bytes` (all images): about 1 MB in all, at least one
// channel, so that the passes after the first read the block from the core's cache (2 MB of L2 on
// the Xeons measured) rather than from memory. Each channel's sums are the same whatever the
// block: the rows of a channel are added in image order either way.
inline int64_t batch_norm_block(int64_t channel_bytes) {
  constexpr int64_t kBlockBytes = int64_t(1) << 20;
  return channel_bytes > 0 ? std::max<int64_t>(1, kBlockBytes / channel_bytes) : 1;
}

// A LayerNormalization row's statistics: its mean, and 1 / sqrt(biased variance + eps) with the
// variance summed from the deviations, all in double, each sum a row_sum_wide (rows of hundreds of
// elements: gpt_small's LayerNormalizationGrad took 7.5 ms per step with row_sum's four partial
// sums). Always inlined, as row_sum.
template <class T>
[[gnu::always_inline]] inline void row_mean_inv_std(const T* x, int64_t n, double eps, double& mean, double& inv_std) {
  const double m = row_sum_wide(n, [&](int64_t j) { return double(x[j]); }) / double(n);
  const double ss = row_sum_wide(n, [&](int64_t j) {
    const double d = double(x[j]) - m;
    return d * d;
  });
  mean = m;
  inv_std = 1.0 / std::sqrt(ss / double(n) + eps);
}

// acc[c] += double(p[c]) for c < w: one row's terms into per-column sums (a bias gradient's
// columns, summed row by row in ReduceSum's order). The columns are independent, so this
// vectorizes; built for x86-64-v3 and v4 too.
template <class T>
ONNXDP_CPU_CLONES void add_row_to_sums(double* acc, const T* p, int64_t w) {
  for (int64_t c = 0; c < w; ++c) acc[c] += double(p[c]);
}

}  // namespace onnxdp
