// CPU kernels of the internal gradient ops (category grad in graph/op_table.h), float32 and
// float64. Sums accumulate in double except inside the BLAS calls.
//
//   ConvGradFilter        dW[g] [Mg, Cg*K] = sum over images of dy[g] [Mg, P] x col[g]^T [P, Cg*K]
//                         (col: the im2col of x, as Conv's forward builds it; exec/cpu/conv_gemm.h)
//   MaxPoolGrad           each dy element goes to the first maximum of its window (the tap the
//                         forward MaxPool picks), added where windows overlap
//   AveragePoolGrad       each dy element spread evenly over its window's counted taps
//   BatchNormalizationGrad  training mode, batch statistics (biased variance) recomputed
//   LayerNormalizationGrad  over the trailing axes from `axis`, statistics recomputed
//   GatherGrad            scatter-add of dy's rows into the rows the indices picked
//   GatherElementsGrad    scatter-add of dy's elements into the elements the indices picked
//   GatherNDGrad          scatter-add of dy's slices into the slices the index tuples picked
//   ResizeGrad            Resize linear / cubic's adjoint: dy spread back with the interpolation
//                         weights, axis by axis in reverse (in double)
//   SoftmaxCrossEntropyLossGrad / NegativeLogLikelihoodLossGrad  with weights, ignore_index and
//                         reduction as the forward kernels (exec/cpu/nn.cpp)
//   SoftmaxGrad / LogSoftmaxGrad  each row's sum (of dy * y, or of dy) in double, then dx in T

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/cpu/attention.h"
#include "exec/cpu/blas.h"
#include "exec/cpu/blocked.h"
#include "exec/cpu/broadcast.h"
#include "exec/cpu/conv_gemm.h"
#include "exec/cpu/clones.h"
#include "exec/cpu/gather_elements.h"
#include "exec/cpu/gather_nd.h"
#include "exec/cpu/in_float.h"
#include "exec/cpu/mask_rows.h"
#include "exec/cpu/pool_windows.h"
#include "exec/cpu/resize_interp.h"
#include "exec/cpu/row_sum.h"
#include "exec/functors.h"
#include "exec/kernel.h"
#include "graph/passes/block_channels.h"

namespace onnxdp {

namespace {

std::vector<int64_t> ints_of(const TensorRef& t) {
  std::vector<int64_t> v(size_t(t.numel));
  for (int64_t i = 0; i < t.numel; ++i)
    v[size_t(i)] = t.dtype == DType::i64 ? t.as<int64_t>()[i] : int64_t(t.as<int32_t>()[i]);
  return v;
}

double load(const TensorRef& t, int64_t i) {
  return t.dtype == DType::f64 ? t.as<double>()[i] : double(t.as<float>()[i]);
}

void store(const TensorRef& t, int64_t i, double v) {
  if (t.dtype == DType::f64) t.as<double>()[i] = v;
  else t.as<float>()[i] = float(v);
}

// Calls f.template operator()<T>() for a float32 / float64 tensor dtype, else fails.
template <class F>
void dispatch_float(const KernelCtx& c, DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    default: c.fail("dtype {} is not supported; this op runs on float32 and float64", dtype_name(t));
  }
}

// ---- ConvGradFilter ----------------------------------------------------------------------------

// x [N, C, D..], dy [N, M, O..] -> dW [M, Cg, k..]: the attributes as a window geometry (the
// pads explicit), the work done by the convolution engine (exec/cpu/conv_gemm.h).
template <class T>
void conv_grad_filter(KernelCtx& c) {
  const Shape &xs = *c.in(0).shape, &ys = *c.in(1).shape;
  const size_t n = xs.size() - 2;
  const int64_t group = c.node.i("group");
  ConvWindows g;
  g.bound.assign(xs.begin() + 2, xs.end());
  g.iter.assign(ys.begin() + 2, ys.end());
  g.kernel = c.node.ints("kernel_shape");
  g.strides = c.node.ints_or("strides", std::vector<int64_t>(n, 1));
  g.dilations = c.node.ints_or("dilations", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> pads = c.node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  g.pad_begin.assign(pads.begin(), pads.begin() + int64_t(n));
  const ConvChannels ch{xs[0], group, xs[1] / group, ys[1] / group, blocked_input(c.node, 0), blocked_input(c.node, 1)};
  conv_filter_grad<T>(g, ch, c.in(0).as<T>(), c.in(1).as<T>(), c.out(0).as<T>(), c.in_tag(0), c.in_tag(1));
}

// ---- pooling -----------------------------------------------------------------------------------

// Planes lo..hi of MaxPoolGrad over uniform windows (PoolWindows::flat [window, out_size]): each
// window's first maximum found for all outputs of a plane at once, tap by tap (`best` and `at`
// [out_size]: the running maxima and their offsets; no branches, as MaxPool's max_pool_flat),
// then each dy element added to dx there, in output order; dx zeroed before. A NaN must win
// (takes_max): a plane that holds one finds its windows' maxima again by that rule.
template <class T>
ONNXDP_CPU_CLONES void max_pool_grad_flat(const T* x, const T* dy, T* dx, int64_t lo, int64_t hi, int64_t in_size,
                                          int64_t out_size, const int32_t* flat, int64_t window, T* best,
                                          int32_t* at) {
  for (int64_t plane = lo; plane < hi; ++plane) {
    const T* xp = x + plane * in_size;
    const T* dyp = dy + plane * out_size;
    T* dxp = dx + plane * in_size;
    bool nan = false;
    for (int64_t p = 0; p < out_size; ++p) {
      at[p] = flat[p];
      best[p] = xp[flat[p]];
      nan |= best[p] != best[p];
    }
    for (int64_t k = 1; k < window; ++k) {
      const int32_t* taps = flat + k * out_size;
      for (int64_t p = 0; p < out_size; ++p) {
        const T v = xp[taps[p]], b = best[p];
        // The offset through a mask (a select the compiler keeps branch-free), the value a max.
        const int32_t take = -int32_t(v > b);
        at[p] ^= (at[p] ^ taps[p]) & take;
        best[p] = v > b ? v : b;
        nan |= v != v;
      }
    }
    if (nan)
      for (int64_t p = 0; p < out_size; ++p) {
        at[p] = flat[p];
        for (int64_t k = 1; k < window; ++k)
          if (takes_max(xp[flat[k * out_size + p]], xp[at[p]])) at[p] = flat[k * out_size + p];
      }
    for (int64_t p = 0; p < out_size; ++p) dxp[at[p]] += dyp[p];
  }
}

// x [N, C, D..], dy [N, C, O..] -> dx like x. One (n, c) plane per iteration: planes do not share
// elements, so no two threads write one dx element. The windows: exec/cpu/pool_windows.h, as the
// forward's.
template <class T>
void max_pool_grad(KernelCtx& c) {
  const TensorRef &xr = c.in(0), &dyr = c.in(1), &dxr = c.out(0);
  const PoolWindows w = pool_windows(c.node, *xr.shape, *dyr.shape);
  const int64_t planes = xr.dim(0) * xr.dim(1);
  const T* x = xr.as<T>();
  const T* dy = dyr.as<T>();
  T* dx = dxr.as<T>();
  std::fill(dx, dx + dxr.numel, T(0));
  const bool parallel = dxr.numel > parallel_min_elements();
  if (w.window > 0) {
    split_rows(planes, parallel, [&](int, int64_t lo, int64_t hi) {
      std::vector<T> best(size_t(w.out_size));
      std::vector<int32_t> at(size_t(w.out_size));
      max_pool_grad_flat(x, dy, dx, lo, hi, w.in_size, w.out_size, w.flat.data(), w.window, best.data(), at.data());
    });
    return;
  }
  parallel_for(planes, parallel, [&](int64_t plane) {
    const T* xp = x + plane * w.in_size;
    T* dxp = dx + plane * w.in_size;
    for (int64_t p = 0; p < w.out_size; ++p) {
      int64_t best = -1;
      w.for_each_tap(p, [&](int64_t r) {
        // The forward's rule (takes_max): the first maximum wins, a NaN above all.
        if (best < 0 || takes_max(xp[r], xp[best])) best = r;
      });
      if (best >= 0) dxp[best] += dy[plane * w.out_size + p];
    }
  });
}

// dy [N, C, O..] -> dx [N, C, D..].
template <class T>
void average_pool_grad(KernelCtx& c) {
  const TensorRef &dyr = c.in(0), &dxr = c.out(0);
  const PoolWindows w = pool_windows(c.node, *dxr.shape, *dyr.shape);
  const int64_t planes = dxr.dim(0) * dxr.dim(1);
  const bool include_pad = c.node.i("count_include_pad") == 1;
  const T* dy = dyr.as<T>();
  T* dx = dxr.as<T>();
  std::fill(dx, dx + dxr.numel, T(0));
  parallel_for(planes, dxr.numel > parallel_min_elements(), [&](int64_t plane) {
    T* dxp = dx + plane * w.in_size;
    for (int64_t p = 0; p < w.out_size; ++p) {
      const int64_t count = include_pad ? w.padded[size_t(p)] : w.taps(p);
      if (count == 0) continue;  // a window entirely in padding reads nothing
      const T share = T(double(dy[plane * w.out_size + p]) / double(count));
      w.for_each_tap(p, [&](int64_t r) { dxp[r] += share; });
    }
  });
}

// ---- normalisations ----------------------------------------------------------------------------

// One channel of BatchNormalizationGrad from its four sums over its M elements (d = x - k: sum d,
// sum d^2, sum dy, sum dy * d; the formulas below): dscale, dbias and dx = a * dy + b * x + c's
// coefficients.
inline void batch_norm_grad_coefficients(double k, const std::array<double, 4>& sums, double M, double eps,
                                         double scale, double& dscale, double& dbias, double& a, double& b,
                                         double& c) {
  const double mean_d = sums[0] / M, mu = k + mean_d;
  const double var = std::max(sums[1] / M - mean_d * mean_d, 0.0);
  const double inv = 1.0 / std::sqrt(var + eps);
  const double sum_dy_xhat = (sums[3] - mean_d * sums[2]) * inv;
  dbias = sums[2];
  dscale = sum_dy_xhat;
  a = scale * inv;
  b = -a * inv * sum_dy_xhat / M;
  c = -a * sums[2] / M - b * mu;
}

// W elements as doubles (D) and as floats (F): vectors of one register of x86-64-v4's clones (W 8)
// or of x86-64-v3's (W 4). A vector wider than the clone's registers is no help: GCC splits a
// 64-byte one into pieces through the stack in the x86-64-v3 clone (batch_norm_grad_channels ran
// there with its partial sums spilled, half as fast as on 32-byte vectors). vector_lanes()
// (exec/cpu/clones.h) says which W this CPU takes.
template <int W> struct Lanes;
template <> struct Lanes<4> {
  using D = double __attribute__((vector_size(32)));
  using F = float __attribute__((vector_size(16)));
};
template <> struct Lanes<8> {
  using D = double __attribute__((vector_size(64)));
  using F = float __attribute__((vector_size(32)));
};

// (Vectors pass by reference: by value, a wide one has another ABI without AVX-512 or AVX.)
template <int W, class T>
[[gnu::always_inline]] inline void load_doubles(const T* p, typename Lanes<W>::D& v) {
  if constexpr (std::is_same_v<T, float>) {
    typename Lanes<W>::F f;
    std::memcpy(&f, p, sizeof f);
    v = __builtin_convertvector(f, typename Lanes<W>::D);
  } else {
    for (int i = 0; i < W; ++i) v[i] = double(p[i]);
  }
}

// W elements of dy as the gradient sees them, as doubles: ReluGrad's (0 where relu_y <= 0, a NaN
// relu_y keeping dy) where Masked. For floats the select runs on the floats, before the
// conversion: on 8 doubles (a 64-byte vector) GCC split it lane by lane in the x86-64-v3 clone.
template <int W, class T, bool Masked>
[[gnu::always_inline]] inline void load_grad(const T* dy, const T* relu_y, typename Lanes<W>::D& v) {
  if constexpr (Masked && std::is_same_v<T, float>) {
    using F = typename Lanes<W>::F;
    const F zero = {};
    F g, r;
    std::memcpy(&g, dy, sizeof g);
    std::memcpy(&r, relu_y, sizeof r);
    g = r <= zero ? zero : g;
    v = __builtin_convertvector(g, typename Lanes<W>::D);
  } else if constexpr (Masked) {
    for (int i = 0; i < W; ++i) v[i] = double(fn::ReluGrad{}(dy[i], relu_y[i]));
  } else {
    load_doubles<W>(dy, v);
  }
}

// The four terms of batch_norm_grad_row_sums for W elements: d, d^2, dy, dy * d with d = x - k.
template <int W, class T, bool Masked>
[[gnu::always_inline]] inline void batch_norm_grad_terms(const T* x, const T* dy, const T* relu_y, double k,
                                                         typename Lanes<W>::D (&t)[4]) {
  typename Lanes<W>::D xv, g;
  load_doubles<W>(x, xv);
  load_grad<W, T, Masked>(dy, relu_y, g);
  const typename Lanes<W>::D d = xv - k;
  t[0] = d;
  t[1] = d * d;
  t[2] = g;
  t[3] = g * d;
}

// row_sum_wide's 16 partial sums, held as vectors (partial q in lane q % W of vector q / W), added
// as it adds them: q += q + 8, then 4, 2 and 1 apart.
[[gnu::always_inline]] inline double wide_total(const Lanes<8>::D& p0, const Lanes<8>::D& p1) {
  const Lanes<8>::D h = p0 + p1;
  return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}
[[gnu::always_inline]] inline double wide_total(const Lanes<4>::D& p0, const Lanes<4>::D& p1, const Lanes<4>::D& p2,
                                                const Lanes<4>::D& p3) {
  const Lanes<4>::D h = (p0 + p2) + (p1 + p3);
  return (h[0] + h[2]) + (h[1] + h[3]);
}

// The four sums of batch_norm_grad_channels over one row of n elements, with d = x - k and dy as
// the gradient sees it (ReluGrad's where Masked: 0 where relu_y <= 0): sum d, sum d^2, sum dy,
// sum dy * d, each row_sum_wide's value bit for bit (term i into partial sum i mod 16, the
// partials added pairwise), their partials held in registers (named vectors: an array of them
// the compiler keeps on the stack). W 8: all four sums in one pass over the row, two vectors
// each, 8 of AVX-512's 32 registers. W 4: two sums per pass, four vectors each (all four sums'
// would take all 16 of AVX2's registers); the second pass reads the row from L1. A row's last
// terms are padded with +0 terms, x = k and dy = 0 (adding +0 leaves a partial as it is: partials
// start at +0 and so are never -0; a k of +-inf or NaN makes the channel's sums NaN from its
// first element anyway). Four row_sum_wide calls, each reading the row with its own tail and
// pairwise end, kept BatchNormalizationGrad the cnn step's largest op (rows of 64 and 16
// elements): 0.35-0.38 ms a step, 0.27-0.30 in one pass (its partials first held in an array,
// zeroed by a `rep stos` per row: 0.34), on an AVX-512 Xeon.
template <int W, class T, bool Masked>
[[gnu::always_inline]] inline void batch_norm_grad_row_sums(const T* x, const T* dy, const T* relu_y, int64_t n,
                                                            double k, double (&sums)[4]) {
  using D = typename Lanes<W>::D;
  // A pass over the row: add(x, dy, relu_y) on each block of 16 terms, the last n % 16 through
  // copies padded as above.
  const auto pass = [&](const auto& add) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) add(x + i, dy + i, Masked ? relu_y + i : nullptr);
    if (i < n) {
      T xc[16], dc[16] = {}, rc[16] = {};
      std::fill(xc, xc + 16, T(k));
      std::copy(x + i, x + n, xc);
      std::copy(dy + i, dy + n, dc);
      if constexpr (Masked) std::copy(relu_y + i, relu_y + n, rc);
      add(xc, dc, rc);
    }
  };
  if constexpr (W == 8) {
    D a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
    pass([&](const T* xb, const T* db, const T* rb) {
      D t[4];
      batch_norm_grad_terms<W, T, Masked>(xb, db, rb, k, t);
      a0 += t[0], a1 += t[1], a2 += t[2], a3 += t[3];
      batch_norm_grad_terms<W, T, Masked>(xb + 8, db + 8, Masked ? rb + 8 : nullptr, k, t);
      b0 += t[0], b1 += t[1], b2 += t[2], b3 += t[3];
    });
    sums[0] = wide_total(a0, b0);
    sums[1] = wide_total(a1, b1);
    sums[2] = wide_total(a2, b2);
    sums[3] = wide_total(a3, b3);
  } else {
    for (int first = 0; first < 4; first += 2) {
      D a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
      pass([&](const T* xb, const T* db, const T* rb) {
        D t[4];
        const auto at = [&](int v) {  // terms 4v..4v + 3 of the block
          batch_norm_grad_terms<W, T, Masked>(xb + 4 * v, db + 4 * v, Masked ? rb + 4 * v : nullptr, k, t);
        };
        at(0), a0 += t[first], b0 += t[first + 1];
        at(1), a1 += t[first], b1 += t[first + 1];
        at(2), a2 += t[first], b2 += t[first + 1];
        at(3), a3 += t[first], b3 += t[first + 1];
      });
      sums[first] = wide_total(a0, a1, a2, a3);
      sums[first + 1] = wide_total(b0, b1, b2, b3);
    }
  }
}

// dy, x [N, C, S], scale [C] -> dx, dscale, dbias. Per channel, with M = N*S, the batch mean mu,
// the biased variance var, inv = 1/sqrt(var + eps) and xhat = (x - mu) * inv:
//   dbias = sum(dy), dscale = sum(dy * xhat),
//   dx = scale * inv * (dy - dbias / M - xhat * dscale / M)
//      = a * dy + b * x + c  with a = scale * inv, b = -a * inv * dscale / M,
//                                  c = -a * dbias / M - b * mu.
// Channels lo..hi of BatchNormalizationGrad: dscale and dbias [C] (entries lo..hi), and dx when
// it is wanted (dx != nullptr). One pass over x and dy gathers the four sums the rest follows
// from, of d = x - k (k the channel's first element, so d is small next to the values): sum d,
// sum d^2, sum dy, sum dy * d; then mu = k + sum d / M, var = sum d^2 / M - (sum d / M)^2 and
// sum dy * (x - mu) = sum dy * d - (mu - k) * sum dy. In double, the shift keeps the cancellation
// at about 1e-16 * ((mu - k) / std)^2, far below float's rounding. A second pass writes dx. Both
// passes walk the share's rows in memory order (image by image, its channels lo..hi: contiguous),
// which the hardware prefetches, where a channel's rows alone are short strided runs (an 8x8
// plane is 256 bytes); each channel's rows are still added in image order. A row's four sums are
// row_sum_wide's, taken in one pass (batch_norm_grad_row_sums).
//
// With relu_y (Masked), each dy element is first ReluGrad's, dy where relu_y > 0, else 0, read
// on the fly in both passes: BatchNormalization + Relu backward without ReluGrad's own pass.
template <int W, class T, bool Masked>
ONNXDP_CPU_CLONES void batch_norm_grad_channels(const T* x, const T* dy_in, const T* relu_y, T* dx, int64_t N,
                                                int64_t C, int64_t S, int64_t lo, int64_t hi, double eps,
                                                const double* scale, double* dscale, double* dbias) {
  // Element k of dy as the gradient sees it.
  const auto dy = [&](int64_t k) -> T {
    if constexpr (Masked) return fn::ReluGrad{}(dy_in[k], relu_y[k]);
    else return dy_in[k];
  };
  const double M = double(N * S);
  const size_t count = size_t(hi - lo);
  std::vector<double> k(count, 0.0), sum_d(count, 0.0), sum_dd(count, 0.0), sum_dy(count, 0.0),
      sum_dy_d(count, 0.0);
  for (int64_t ch = lo; ch < hi && N > 0 && S > 0; ++ch) k[size_t(ch - lo)] = double(x[ch * S]);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = lo; ch < hi; ++ch) {
      const size_t j = size_t(ch - lo);
      const int64_t row = (n * C + ch) * S;
      double sums[4];
      batch_norm_grad_row_sums<W, T, Masked>(x + row, dy_in + row, Masked ? relu_y + row : nullptr, S, k[j], sums);
      sum_d[j] += sums[0];
      sum_dd[j] += sums[1];
      sum_dy[j] += sums[2];
      sum_dy_d[j] += sums[3];
    }
  // dx = a * dy + b * x + c per channel.
  std::vector<double> a(count), b(count), c(count);
  for (int64_t ch = lo; ch < hi; ++ch) {
    const size_t j = size_t(ch - lo);
    batch_norm_grad_coefficients(k[j], {sum_d[j], sum_dd[j], sum_dy[j], sum_dy_d[j]}, M, eps, scale[ch], dscale[ch],
                                 dbias[ch], a[j], b[j], c[j]);
  }
  if (!dx) return;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = lo; ch < hi; ++ch) {
      const size_t j = size_t(ch - lo);
      const double aj = a[j], bj = b[j], cj = c[j];
      const int64_t row = (n * C + ch) * S;
      for (int64_t i = 0; i < S; ++i) dx[row + i] = T(aj * double(dy(row + i)) + bj * double(x[row + i]) + cj);
    }
}

// The channel-blocked layout's rows lo..hi (exec/cpu/blocked.h; row r: image r / (C / 16), block
// r % (C / 16)): the four sums of batch_norm_grad_channels over each row, sums[(r * 4 + k) * 16 + l]
// for sum k (d, d^2, dy, dy * d) of lane l, each row_sum_wide's bit for bit (block_row_sums).
template <class T, bool Masked>
ONNXDP_CPU_CLONES void batch_norm_grad_sums_blocked(const T* x, const T* dy_in, const T* relu_y, int64_t C, int64_t S,
                                                    int64_t lo, int64_t hi, const double* k, double* sums) {
  const int64_t blocks = C / kChannelBlock;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t base = r * S * kChannelBlock;
    const double* kr = k + (r % blocks) * kChannelBlock;
    double out[4][16];
    block_row_sums<4>(S, [&](int64_t j, double (&t)[4][16]) {
      for (int l = 0; l < 16; ++l) {
        const int64_t e = base + j * 16 + l;
        T g = dy_in[e];
        if constexpr (Masked) g = fn::ReluGrad{}(dy_in[e], relu_y[e]);
        const double d = double(x[e]) - kr[l], dyv = double(g);
        t[0][l] = d;
        t[1][l] = d * d;
        t[2][l] = dyv;
        t[3][l] = dyv * d;
      }
    }, out);
    for (int q = 0; q < 4; ++q)
      for (int l = 0; l < 16; ++l) sums[(r * 4 + q) * kChannelBlock + l] = out[q][l];
  }
}

// Rows lo..hi of the blocked dx = a * dy + b * x + c per channel, as batch_norm_grad_channels.
template <class T, bool Masked>
ONNXDP_CPU_CLONES void batch_norm_grad_dx_blocked(const T* x, const T* dy_in, const T* relu_y, T* dx, int64_t C,
                                                  int64_t S, int64_t lo, int64_t hi, const double* a, const double* b,
                                                  const double* c) {
  const int64_t blocks = C / kChannelBlock;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t base = r * S * kChannelBlock, off = (r % blocks) * kChannelBlock;
    for (int64_t j = 0; j < S; ++j)
      for (int l = 0; l < 16; ++l) {
        const int64_t e = base + j * 16 + l;
        T g = dy_in[e];
        if constexpr (Masked) g = fn::ReluGrad{}(dy_in[e], relu_y[e]);
        dx[e] = T(a[off + l] * double(g) + b[off + l] * double(x[e]) + c[off + l]);
      }
  }
}

// BatchNormalizationGrad over channel-blocked dy, x (and relu_y) into a blocked dx: the rows'
// sums over all threads, added per channel in image order, then dx over all threads; the values
// of batch_norm_grad_channels bit for bit.
template <class T>
void batch_norm_grad_blocked(KernelCtx& c, const std::vector<double>& scale, std::vector<double>& dscale,
                             std::vector<double>& dbias) {
  const TensorRef& xr = c.in(1);
  const int64_t N = xr.dim(0), C = xr.dim(1), S = N * C != 0 ? xr.numel / (N * C) : 0;
  for (int k : {0, 3})
    if (c.has_in(k) && !blocked_input(c.node, k)) c.fail("input 1 is blocked and input {} is not: all or none", k);
  if (c.has_out(0) && !blocked_output(c.node, 0)) c.fail("input 1 is blocked and output 0 is not: all or none");
  const T* dy = c.in(0).as<T>();
  const T* x = xr.as<T>();
  const T* relu_y = c.has_in(3) ? c.in(3).as<T>() : nullptr;
  T* dx = c.has_out(0) ? c.out(0).as<T>() : nullptr;
  const double eps = c.node.f("epsilon"), M = double(N * S);
  const int64_t rows = N * (C / kChannelBlock);
  const bool parallel = xr.numel > parallel_min_elements();
  std::vector<double> k(static_cast<size_t>(C), 0.0), sums(static_cast<size_t>(rows * 4 * kChannelBlock));
  for (int64_t ch = 0; ch < C && N > 0 && S > 0; ++ch) k[size_t(ch)] = double(x[blocked_offset(0, ch, 0, C, S)]);
  split_rows(rows, parallel, [&](int, int64_t lo, int64_t hi) {
    if (relu_y) batch_norm_grad_sums_blocked<T, true>(x, dy, relu_y, C, S, lo, hi, k.data(), sums.data());
    else batch_norm_grad_sums_blocked<T, false>(x, dy, nullptr, C, S, lo, hi, k.data(), sums.data());
  });
  std::vector<double> a(static_cast<size_t>(C)), b(static_cast<size_t>(C)), cc(static_cast<size_t>(C));
  for (int64_t ch = 0; ch < C; ++ch) {
    double sum[4] = {0, 0, 0, 0};
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = n * (C / kChannelBlock) + ch / kChannelBlock;
      for (int q = 0; q < 4; ++q) sum[q] += sums[size_t((r * 4 + q) * kChannelBlock + ch % kChannelBlock)];
    }
    const size_t j = size_t(ch);
    batch_norm_grad_coefficients(k[j], {sum[0], sum[1], sum[2], sum[3]}, M, eps, scale[j], dscale[j], dbias[j], a[j],
                                 b[j], cc[j]);
  }
  if (!dx) return;
  split_rows(rows, parallel, [&](int, int64_t lo, int64_t hi) {
    if (relu_y) batch_norm_grad_dx_blocked<T, true>(x, dy, relu_y, dx, C, S, lo, hi, a.data(), b.data(), cc.data());
    else batch_norm_grad_dx_blocked<T, false>(x, dy, nullptr, dx, C, S, lo, hi, a.data(), b.data(), cc.data());
  });
}

template <class T>
void batch_norm_grad(KernelCtx& c) {
  const TensorRef &dyr = c.in(0), &xr = c.in(1), &sr = c.in(2);
  const int64_t N = xr.dim(0), C = xr.dim(1), S = N * C != 0 ? xr.numel / (N * C) : 0;
  const double eps = c.node.f("epsilon");
  const T* dy = dyr.as<T>();
  const T* x = xr.as<T>();
  const T* relu_y = c.has_in(3) ? c.in(3).as<T>() : nullptr;
  T* dx = c.has_out(0) ? c.out(0).as<T>() : nullptr;
  std::vector<double> scale(static_cast<size_t>(C)), dscale(static_cast<size_t>(C)), dbias(static_cast<size_t>(C));
  for (int64_t ch = 0; ch < C; ++ch) scale[size_t(ch)] = load(sr, ch);
  if (blocked_input(c.node, 1)) {
    batch_norm_grad_blocked<T>(c, scale, dscale, dbias);
    for (int64_t ch = 0; ch < C; ++ch) {
      if (c.has_out(1)) store(c.out(1), ch, dscale[size_t(ch)]);
      if (c.has_out(2)) store(c.out(2), ch, dbias[size_t(ch)]);
    }
    return;
  }
  // Blocks of channels whose inputs fit in the core's cache: the second pass (dx) reads them there.
  const int64_t step = batch_norm_block(N * S * int64_t(sizeof(T)) * (relu_y ? 3 : 2));
  const bool wide = vector_lanes() == 8;
  split_rows(C, xr.numel > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    for (int64_t b0 = lo; b0 < hi; b0 += step) {
      const int64_t b1 = std::min(hi, b0 + step);
      const auto run = [&](auto channels) {
        channels(x, dy, relu_y, dx, N, C, S, b0, b1, eps, scale.data(), dscale.data(), dbias.data());
      };
      if (relu_y) wide ? run(batch_norm_grad_channels<8, T, true>) : run(batch_norm_grad_channels<4, T, true>);
      else wide ? run(batch_norm_grad_channels<8, T, false>) : run(batch_norm_grad_channels<4, T, false>);
    }
  });
  for (int64_t ch = 0; ch < C; ++ch) {
    if (c.has_out(1)) store(c.out(1), ch, dscale[size_t(ch)]);
    if (c.has_out(2)) store(c.out(2), ch, dbias[size_t(ch)]);
  }
}

// Scale (broadcasting to the normalised shape `norm`) expanded to [prod(norm)] doubles.
std::vector<double> expand_scale(const TensorRef& t, const Shape& norm) {
  const Shape& s = *t.shape;
  const int64_t inner = shape_numel(norm);
  std::vector<double> out(static_cast<size_t>(inner));
  const size_t r = norm.size(), off = r - s.size();
  for (int64_t j = 0; j < inner; ++j) {
    int64_t rem = j, src = 0, stride = 1;
    for (size_t i = r; i-- > 0;) {
      const int64_t coord = rem % norm[i];
      rem /= norm[i];
      if (i >= off) {
        const int64_t d = s[i - off];
        src += (d == 1 ? 0 : coord) * stride;
        stride *= d;
      }
    }
    out[size_t(j)] = load(t, src);
  }
  return out;
}

// Rows lo..hi of LayerNormalizationGrad, X and dY [outer, inner]: dX (when dx is not null), and
// each row's terms of dScale and dB added into ds and db (when not null).
template <class T>
ONNXDP_CPU_CLONES void layer_norm_grad_rows(const T* dy, const T* x, T* dx, int64_t lo, int64_t hi, int64_t inner,
                                            double eps, const double* scale, double* ds, double* db) {
  for (int64_t r = lo; r < hi; ++r) {
    const T* xrow = x + r * inner;
    const T* dyrow = dy + r * inner;
    double mean, inv;
    row_mean_inv_std(xrow, inner, eps, mean, inv);
    // One pass over the row for its terms of ds and db and for sum(g) and sum(g * xhat), each sum
    // in row_sum_wide's order (term j into partial j mod 16, the partials added pairwise, the last
    // n % 16 terms a block padded with +0 terms): the same values bit for bit as three passes, a
    // quarter faster on tiny_lm's rows of 32 (52 against 70 ns a row). Every index into the
    // partials is a constant, so that they stay in registers (row_sum.h says why).
    double part_g[16] = {}, part_gx[16] = {};
    const auto terms = [&](int64_t j, double& g_term, double& gx_term) {
      const double d = double(dyrow[j]), xhat = (double(xrow[j]) - mean) * inv, g = d * scale[j];
      if (ds) {
        ds[j] += d * xhat;
        db[j] += d;
      }
      g_term = g;
      gx_term = g * xhat;
    };
    int64_t j = 0;
    for (; j + 16 <= inner; j += 16)
      for (int q = 0; q < 16; ++q) {
        double g, gx;
        terms(j + q, g, gx);
        part_g[q] += g;
        part_gx[q] += gx;
      }
    if (j < inner) {
      double tail_g[16] = {}, tail_gx[16] = {};
      for (int q = 0; j + q < inner; ++q) terms(j + q, tail_g[q], tail_gx[q]);
      for (int q = 0; q < 16; ++q) part_g[q] += tail_g[q], part_gx[q] += tail_gx[q];
    }
    for (int q = 0; q < 8; ++q) part_g[q] += part_g[q + 8], part_gx[q] += part_gx[q + 8];
    for (int q = 0; q < 4; ++q) part_g[q] += part_g[q + 4], part_gx[q] += part_gx[q + 4];
    const double sum_g = (part_g[0] + part_g[2]) + (part_g[1] + part_g[3]);
    const double sum_gx = (part_gx[0] + part_gx[2]) + (part_gx[1] + part_gx[3]);
    if (!dx) continue;
    const double mean_g = sum_g / double(inner), mean_g_xhat = sum_gx / double(inner);
    for (int64_t j = 0; j < inner; ++j) {
      const double xhat = (double(xrow[j]) - mean) * inv, g = double(dyrow[j]) * scale[j];
      dx[r * inner + j] = T(inv * (g - mean_g - xhat * mean_g_xhat));
    }
  }
}

// dy, x viewed as [outer, inner] (inner = prod(x.shape[axis:])), scale -> dx, dscale [inner],
// dbias [inner]. Per row, with xhat = (x - mean) * inv and g = dy * scale:
//   dx = inv * (g - mean(g) - xhat * mean(g * xhat));
// dscale = sum over rows of dy * xhat, dbias = sum over rows of dy (per-thread partial sums).
template <class T>
void layer_norm_grad(KernelCtx& c) {
  const TensorRef &dyr = c.in(0), &xr = c.in(1);
  const Shape& xs = *xr.shape;
  const int64_t axis = normalize_axis(c.node.i("axis"), xr.rank(), c.node);
  const Shape norm(xs.begin() + axis, xs.end());
  const int64_t inner = shape_numel(norm), outer = inner ? xr.numel / inner : 0;
  const double eps = c.node.f("epsilon");
  const std::vector<double> scale = expand_scale(c.in(2), norm);
  const T* dy = dyr.as<T>();
  const T* x = xr.as<T>();
  T* dx = c.has_out(0) ? c.out(0).as<T>() : nullptr;
  const bool params = c.has_out(1) || c.has_out(2);
  const int threads = cpu_threads();
  std::vector<double> dscale(params ? size_t(threads) * size_t(inner) : 0, 0.0);
  std::vector<double> dbias(dscale.size(), 0.0);
  split_rows(outer, dyr.numel > parallel_min_elements(), [&](int t, int64_t lo, int64_t hi) {
    double* ds = params ? dscale.data() + size_t(t) * size_t(inner) : nullptr;
    double* db = params ? dbias.data() + size_t(t) * size_t(inner) : nullptr;
    layer_norm_grad_rows(dy, x, dx, lo, hi, inner, eps, scale.data(), ds, db);
  });
  for (int k = 1; k < 3; ++k) {
    if (!c.has_out(k)) continue;
    const std::vector<double>& part = k == 1 ? dscale : dbias;
    for (int64_t j = 0; j < inner; ++j) {
      double v = 0;
      for (int t = 0; t < threads; ++t) v += part[size_t(t) * size_t(inner) + size_t(j)];
      store(c.out(k), j, v);
    }
  }
}

// ---- GatherGrad --------------------------------------------------------------------------------

// dy [outer, n, inner], indices [n] -> ddata [outer, dim, inner] with ddata[o, idx[i], :] +=
// dy[o, i, :]. Work is split over (o, block of inner columns): each piece owns its ddata
// elements, and repeated indices are added in index order (deterministic).
template <class T>
void gather_grad(KernelCtx& c) {
  const TensorRef &dyr = c.in(0), &dxr = c.out(0);
  const Shape& ds = *dxr.shape;
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(ds.size()), c.node);
  const int64_t dim = ds[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < ds.size(); ++d) {
    if (int64_t(d) < axis) outer *= ds[d];
    if (int64_t(d) > axis) inner *= ds[d];
  }
  std::vector<int64_t> idx = ints_of(c.in(1));
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < -dim || idx[i] >= dim)
      c.fail("index {} (element {} of the indices) is out of range for axis {} of size {}", idx[i], i, axis, dim);
    if (idx[i] < 0) idx[i] += dim;
  }
  const int64_t n = int64_t(idx.size());
  const T* dy = dyr.as<T>();
  T* dx = dxr.as<T>();
  std::fill(dx, dx + dxr.numel, T(0));
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * blocks, dyr.numel > parallel_min_elements(), [&](int64_t t) {
    const int64_t o = t / blocks, j0 = (t % blocks) * kBlock, j1 = std::min(inner, j0 + kBlock);
    for (int64_t i = 0; i < n; ++i) {
      const T* src = dy + (o * n + i) * inner;
      T* dst = dx + (o * dim + idx[size_t(i)]) * inner;
      for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  });
}

// ---- losses ------------------------------------------------------------------------------------

// Per label position i (of N*D): the class it picks (-1 when ignored) and its weight (0 when
// ignored); and g[i], the gradient of the loss with respect to the i-th term -w*logp[...]
// divided by w: dy[i] (none), dy (sum), dy / sum of the counted weights (mean).
struct LossGrad {
  std::vector<int64_t> label;
  std::vector<double> weight;
  std::vector<double> g;
};

LossGrad loss_grad(const KernelCtx& c, const TensorRef& dyr, const TensorRef& labels, int weights_k,
                   int64_t classes) {
  const bool has_ignore = c.node.has("ignore_index");
  const int64_t ignore = has_ignore ? c.node.i("ignore_index") : 0;
  const std::vector<int64_t> lab = ints_of(labels);
  LossGrad r;
  r.label.resize(lab.size());
  r.weight.resize(lab.size());
  double wsum = 0;
  for (size_t i = 0; i < lab.size(); ++i) {
    const int64_t l = lab[i];
    if (has_ignore && l == ignore) {
      r.label[i] = -1;
      r.weight[i] = 0;
      continue;
    }
    if (l < 0 || l >= classes)
      c.fail("label {} at flat index {} is outside [0, {}){}", l, i, classes,
             has_ignore ? fmt::format(" and is not ignore_index {}", ignore) : std::string());
    r.label[i] = l;
    r.weight[i] = c.has_in(weights_k) ? load(c.in(weights_k), l) : 1.0;
    wsum += r.weight[i];
  }
  const std::string& reduction = c.node.s("reduction");
  r.g.resize(lab.size());
  for (size_t i = 0; i < lab.size(); ++i) {
    if (reduction == "none") r.g[i] = load(dyr, int64_t(i));
    else if (reduction == "sum") r.g[i] = load(dyr, 0);
    else r.g[i] = load(dyr, 0) / wsum;  // all ignored: every weight is 0 and nothing is written
  }
  return r;
}

// dy, scores [N, C, D], labels [N, D], weights? -> dscores = w * g * (softmax(scores) - onehot).
template <class T>
void sce_grad(KernelCtx& c) {
  const TensorRef &sr = c.in(1), &dxr = c.out(0);
  const int64_t N = sr.dim(0), C = sr.dim(1), D = N * C != 0 ? sr.numel / (N * C) : 1;
  const LossGrad lg = loss_grad(c, c.in(0), c.in(2), 3, C);
  const T* x = sr.as<T>();
  T* dx = dxr.as<T>();
  parallel_for(N * D, sr.numel > parallel_min_elements(), [&](int64_t i) {
    const int64_t n = i / D, d = i % D;
    const T* xi = x + n * C * D + d;  // class k at xi[k * D]
    T* dxi = dx + n * C * D + d;
    const int64_t l = lg.label[size_t(i)];
    if (l < 0) {
      for (int64_t k = 0; k < C; ++k) dxi[k * D] = T(0);
      return;
    }
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < C; ++k) mx = std::max(mx, double(xi[k * D]));
    double s = 0;
    for (int64_t k = 0; k < C; ++k) s += std::exp(double(xi[k * D]) - mx);
    const double scale = lg.weight[size_t(i)] * lg.g[size_t(i)];
    for (int64_t k = 0; k < C; ++k) {
      const double p = std::exp(double(xi[k * D]) - mx) / s;
      dxi[k * D] = T(scale * (p - (k == l ? 1.0 : 0.0)));
    }
  });
}

// dy, labels [N, D], x_shape [N, C, D], weights? -> dx with dx[n, label, d] = -w * g, 0 elsewhere.
template <class T>
void nll_grad(KernelCtx& c) {
  const TensorRef& dxr = c.out(0);
  const int64_t N = dxr.dim(0), C = dxr.dim(1), D = N * C != 0 ? dxr.numel / (N * C) : 1;
  const LossGrad lg = loss_grad(c, c.in(0), c.in(1), 3, C);
  T* dx = dxr.as<T>();
  std::fill(dx, dx + dxr.numel, T(0));
  for (int64_t i = 0; i < N * D; ++i) {
    const int64_t l = lg.label[size_t(i)];
    if (l >= 0) dx[(i / D) * C * D + l * D + i % D] = T(-lg.weight[size_t(i)] * lg.g[size_t(i)]);
  }
}

}  // namespace

void ConvGradFilter_forward(KernelCtx& c) {
  if (is_16bit_float(c.in(0).dtype)) return in_float(c, conv_grad_filter<float>);  // --mixed-precision
  dispatch_float(c, c.in(0).dtype, [&]<class T>() { conv_grad_filter<T>(c); });
}
void MaxPoolGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(0).dtype, [&]<class T>() { max_pool_grad<T>(c); });
}
void AveragePoolGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(0).dtype, [&]<class T>() { average_pool_grad<T>(c); });
}
void BatchNormalizationGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(1).dtype, [&]<class T>() { batch_norm_grad<T>(c); });
}
void LayerNormalizationGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(1).dtype, [&]<class T>() { layer_norm_grad<T>(c); });
}
// ddata = 0, then dy[e] added at the element GatherElements read for e, in element order.
void GatherElementsGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(0).dtype, [&]<class T>() {
    const TensorRef &dyr = c.in(0), &dxr = c.out(0);
    const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(dxr.shape->size()), c.node);
    const T* dy = dyr.as<T>();
    T* dx = dxr.as<T>();
    std::fill(dx, dx + dxr.numel, T(0));
    for_each_gathered_element(c, *dxr.shape, *dyr.shape, axis, ints_of(c.in(1)),
                              [&](int64_t e, int64_t off) { dx[off] += dy[e]; });
  });
}

// ddata = 0, then each dy slice added into the data slice GatherND read it from, in index order
// (exec/cpu/gather_nd.h).
void GatherNDGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(0).dtype, [&]<class T>() {
    const TensorRef &dyr = c.in(0), &dxr = c.out(0);
    const NDSlices s = gather_nd_slices(c, *dxr.shape, *c.in(1).shape, c.node.i("batch_dims"), ints_of(c.in(1)));
    const T* dy = dyr.as<T>();
    T* dx = dxr.as<T>();
    std::fill(dx, dx + dxr.numel, T(0));
    for (size_t t = 0; t < s.offset.size(); ++t)
      for (int64_t j = 0; j < s.slice; ++j) dx[s.offset[t] + j] += dy[int64_t(t) * s.slice + j];
  });
}

// dx = the adjoint of Resize linear / cubic applied to dy, in double (exec/cpu/resize_interp.h).
void ResizeGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(0).dtype, [&]<class T>() {
    const TensorRef &dyr = c.in(0), &dxr = c.out(0);
    const ResizeArgs args = resize_args(c, 2);
    const ResizeInterp rz = resize_interp(c.node, *dxr.shape, args.roi(), args.scales(), args.sizes());
    std::vector<double> dy(size_t(dyr.numel));
    for (int64_t i = 0; i < dyr.numel; ++i) dy[size_t(i)] = double(dyr.as<T>()[i]);
    const std::vector<double> dx = resize_interp_adjoint(rz, *dxr.shape, std::move(dy));
    for (int64_t i = 0; i < dxr.numel; ++i) dxr.as<T>()[i] = T(dx[size_t(i)]);
  });
}

void GatherGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(0).dtype, [&]<class T>() { gather_grad<T>(c); });
}
void SoftmaxCrossEntropyLossGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(1).dtype, [&]<class T>() { sce_grad<T>(c); });
}
void NegativeLogLikelihoodLossGrad_forward(KernelCtx& c) {
  dispatch_float(c, c.in(0).dtype, [&]<class T>() { nll_grad<T>(c); });
}

namespace {
// With db: dx row by row, each row's piece added into db's double sums while in cache, so db is
// dx's columns summed in row order from 0, ReduceSum's sums bit for bit
// (exec/cpu/reduction.cpp), where a ReduceSum of dx would read it all from memory again. The
// threads take blocks of columns (multiples of 16), so the sums do not depend on their number.
template <class T, class F>
void gelu_grad_and_sums(KernelCtx& c, const F& f) {
  const T *dy = c.in(0).as<T>(), *x = c.in(1).as<T>();
  T *dx = c.out(0).as<T>(), *db = c.out(1).as<T>();
  const int64_t n = c.in(1).shape->back(), rows = n == 0 ? 0 : c.in(1).numel / n, chunks = (n + 15) / 16;
  split_rows(chunks, rows * n > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    const int64_t c0 = lo * 16, w = std::min(n, hi * 16) - c0;
    if (w <= 0) return;
    std::vector<double> sums(size_t(w), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t at = r * n + c0;
      detail::flat_run(dx + at, w, f, dy + at, x + at);
      add_row_to_sums(sums.data(), dx + at, w);
    }
    for (int64_t j = 0; j < w; ++j) db[c0 + j] = T(sums[size_t(j)]);
  });
}

// dy and x have dx's shape (the shape rule says so): one flat loop per form, which vectorizes.
template <class T>
void gelu_grad(KernelCtx& c) {
  const bool tanh = c.node.s("approximate") == "tanh";
  if (c.has_out(1)) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (tanh) gelu_grad_and_sums<T>(c, fn::GeluTanhGrad{});
      else gelu_grad_and_sums<T>(c, fn::GeluGrad{});
    }
    return;
  }
  if (tanh) broadcast_map<T, T, T>(c.out(0), fn::GeluTanhGrad{}, c.in(0), c.in(1));
  else broadcast_map<T, T, T>(c.out(0), fn::GeluGrad{}, c.in(0), c.in(1));
}
}  // namespace

// 16-bit floats through float; db only for float32 and float64 (the shape rule's).
void GeluGrad_forward(KernelCtx& c) {
  if (is_16bit_float(c.in(1).dtype)) return in_float(c, gelu_grad<float>);
  dispatch_float(c, c.in(1).dtype, [&]<class T>() { gelu_grad<T>(c); });
}

namespace {
// dy, y and dx of one shape (the shape rule's): one flat loop, which vectorizes.
template <class T>
void relu_grad(KernelCtx& c) {
  broadcast_map<T, T, T>(c.out(0), fn::ReluGrad{}, c.in(0), c.in(1));
}

// dy, x and dx of one shape; the bounds (inputs 2, 3) one element of x's dtype or float32, absent:
// the type's range.
template <class T>
void clip_grad(KernelCtx& c) {
  const auto bound = [&](int k, T dflt) {
    if (!c.has_in(k)) return dflt;
    return c.in(k).dtype == DType::f32 ? T(*c.in(k).as<float>()) : *c.in(k).as<T>();
  };
  const fn::ClipGrad<T> f{bound(2, std::numeric_limits<T>::lowest()), bound(3, std::numeric_limits<T>::max())};
  broadcast_map<T, T, T>(c.out(0), f, c.in(0), c.in(1));
}
}  // namespace

// 16-bit floats through float: exact, the result is dy or 0.
void ReluGrad_forward(KernelCtx& c) {
  if (is_16bit_float(c.in(1).dtype)) return in_float(c, relu_grad<float>);
  dispatch_float(c, c.in(1).dtype, [&]<class T>() { relu_grad<T>(c); });
}

// 16-bit floats through float (their bounds too): exact, the result is dy or 0.
void ClipGrad_forward(KernelCtx& c) {
  if (is_16bit_float(c.in(1).dtype)) return in_float(c, clip_grad<float>);
  dispatch_float(c, c.in(1).dtype, [&]<class T>() { clip_grad<T>(c); });
}

namespace {
// dy, y and dx viewed as [outer, n, inner], the softmax along n; rows lo..hi of the outer dim.
// Softmax: s = sum(dy * y), dx = y * (dy - s); LogSoftmax: s = sum(dy), dx = dy - exp(y) * s. The
// sum is a double, rounded to T once, as the ReduceSum of the unfused chain.
// Masked (SoftmaxGrad's mask, inner 1): dx[j] of row o is 0 where mask[row_mask[o] + j] ==
// fill_when, as Where(mask, 0, dx) after the unmasked gradient would make it.
template <class T, bool Log, bool Masked = false>
ONNXDP_CPU_CLONES void softmax_grad_rows(const T* dy, const T* y, T* dx, int64_t lo, int64_t hi, int64_t n,
                                         int64_t inner, const int32_t* mask = nullptr,
                                         const int64_t* row_mask = nullptr, bool fill_when = true) {
  const auto term = [](T g, T v) { return Log ? double(g) : double(g) * double(v); };
  const auto value = [](T g, T v, T s) { return Log ? T(g - fn::m::exp(v) * s) : T(v * T(g - s)); };
  for (int64_t o = lo; o < hi; ++o) {
    const int64_t base = o * n * inner;
    const T *g = dy + base, *v = y + base;
    T* d = dx + base;
    if constexpr (Masked) {
      const int32_t* mo = mask + row_mask[o];
      const int32_t when = fill_when ? 1 : 0;
      const T s = T(row_sum(n, [&](int64_t j) { return term(g[j], v[j]); }));
      for (int64_t j = 0; j < n; ++j) d[j] = mo[j] == when ? T(0) : value(g[j], v[j], s);
      continue;
    }
    if (inner == 1) {
      const T s = T(row_sum(n, [&](int64_t j) { return term(g[j], v[j]); }));
      for (int64_t j = 0; j < n; ++j) d[j] = value(g[j], v[j], s);
      continue;
    }
    // inner > 1: walk the [n, inner] slab row by row, keeping a sum per column.
    std::vector<double> sum(size_t(inner), 0.0);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) sum[size_t(i)] += term(g[j * inner + i], v[j * inner + i]);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) d[j * inner + i] = value(g[j * inner + i], v[j * inner + i], T(sum[size_t(i)]));
  }
}

// Threads split the outer dim.
template <class T, bool Log>
void softmax_grad_along(const T* dy, const T* y, T* dx, int64_t outer, int64_t n, int64_t inner) {
  split_rows(outer, outer * n * inner > parallel_min_elements(),
             [&](int, int64_t lo, int64_t hi) { softmax_grad_rows<T, Log>(dy, y, dx, lo, hi, n, inner); });
}

template <bool Log>
void softmax_grad(KernelCtx& c) {
  const TensorRef& y = c.in(1);
  const int64_t axis = normalize_axis(c.node.i("axis"), y.rank(), c.node);
  int64_t outer = 1, inner = 1;
  const int64_t n = y.dim(int(axis));
  for (int d = 0; d < axis; ++d) outer *= y.dim(d);
  for (int d = int(axis) + 1; d < y.rank(); ++d) inner *= y.dim(d);
  if (y.numel == 0) return;
  dispatch_float(c, y.dtype, [&]<class T>() {
    softmax_grad_along<T, Log>(c.in(0).as<const T>(), y.as<const T>(), c.out(0).as<T>(), outer, n, inner);
  });
}
}  // namespace

void SoftmaxGrad_forward(KernelCtx& c) {
  if (!c.has_in(2)) return softmax_grad<false>(c);
  // With the mask (the last axis, the shape rule's): dx, then 0 where the mask selects the fill.
  const TensorRef& y = c.in(1);
  if (y.numel == 0) return;
  const int64_t n = y.dim(y.rank() - 1), outer = y.numel / n;
  const MaskRows m = mask_rows(c.in(2), *y.shape);
  const bool when = c.node.i("fill_when") != 0;
  dispatch_float(c, y.dtype, [&]<class T>() {
    const T* pdy = c.in(0).as<const T>();
    const T* py = y.as<const T>();
    T* pdx = c.out(0).as<T>();
    split_rows(outer, y.numel > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
      softmax_grad_rows<T, false, true>(pdy, py, pdx, lo, hi, n, 1, m.data.data(), m.start.data(), when);
    });
  });
}
void LogSoftmaxGrad_forward(KernelCtx& c) { softmax_grad<true>(c); }

// FusedAttentionGrad (dy, q, k, v, p, mask?) -> dq, dk, dv: per head, on one thread, in the
// blocks of rows FusedAttention_forward used (exec/cpu/attention.h), over the columns each block
// reaches: dP = dy v^T (nan_to_zero: 0 where p is NaN); dv += p^T dy (p's NaNs read as 0 there);
// dS = SoftmaxGrad(dP, p), 0 where masked (the masked SoftmaxGrad's values); dq = scale * dS k;
// dk += scale * dS^T q (heads 0: dkt += scale * q^T dS). The products read and write the heads
// where they are, as FusedAttention_forward's do.
void FusedAttentionGrad_forward(KernelCtx& c) {
  const AttentionDims a = attention_dims_of(c, 1);
  if (a.count == 0) return;
  const AttentionRows rows = attention_rows(c, a, 5);
  const double scale = c.node.f("scale");
  const bool nan_to_zero = c.node.i("nan_to_zero") != 0;
  dispatch_float(c, c.in(1).dtype, [&]<class T>() {
    // heads 2: q, k and v one tensor (input 1), their gradients one too (output 0), each head's
    // slots found by a.q_at, a.k_at and a.v_at; the heads write disjoint slots of dqkv.
    const T *dy = c.in(0).as<const T>(), *q = c.in(1).as<const T>(), *p = c.in(4).as<const T>();
    const T *k = a.packed ? q : c.in(2).as<const T>(), *v = a.packed ? q : c.in(3).as<const T>();
    T* dq = c.out(0).as<T>();
    T *dk = a.packed ? dq : c.out(1).as<T>(), *dv = a.packed ? dq : c.out(2).as<T>();
    const int64_t zero = 0, lq = a.q_stride(), lk = a.k_stride(), lv = a.v_stride(), ly = a.y_stride();
    const bool parallel = a.count > 1 && a.count * a.tq * a.tk * (a.d + a.dv) >= blas_split_min_work();
    parallel_for(a.count, parallel, [&](int64_t i) {
      thread_local std::vector<T> ds, zeroed;
      const T *qh = q + a.q_at(i), *kh = k + a.k_at(i), *vh = v + a.v_at(i), *dyh = dy + a.y_at(i);
      const T* ph = p + i * a.tq * a.tk;
      T *dqh = dq + a.q_at(i), *dkh = dk + a.k_at(i), *dvh = dv + a.v_at(i);
      // dk and dv add up over the blocks: zeroed first (k as rows [Tk, D] or as kt [D, Tk]).
      const int64_t k_rows = a.heads ? a.tk : a.d, k_cols = a.heads ? a.d : a.tk;
      for (int64_t r = 0; r < k_rows; ++r) std::fill_n(dkh + r * lk, k_cols, T(0));
      for (int64_t r = 0; r < a.tk; ++r) std::fill_n(dvh + r * lv, a.dv, T(0));
      ds.resize(size_t(std::min(a.tq, kAttentionRowBlock) * a.tk));
      for (int64_t r0 = 0; r0 < a.tq; r0 += kAttentionRowBlock) {
        const int64_t r1 = std::min(a.tq, r0 + kAttentionRowBlock), nr = r1 - r0, l = rows.block_reach(a, i, r0, r1);
        const T* pb = ph + r0 * a.tk;
        blas_gemm(false, true, nr, l, a.dv, T(1), dyh + r0 * ly, ly, vh, lv, T(0), ds.data(), a.tk);
        const T* pz = nan_to_zero ? attention_nan_zeroed(pb, nr, a.tk, l, zeroed) : pb;
        blas_gemm(true, false, l, a.dv, nr, T(1), pz, a.tk, dyh + r0 * ly, ly, T(1), dvh, lv);
        for (int64_t r = r0; r < r1; ++r) {
          T* row = ds.data() + (r - r0) * a.tk;
          const int64_t o = i * a.tq + r, n = rows.reach(o);
          if (nan_to_zero && pz != pb)  // Where(IsNaN(p), 0, p)'s gradient: 0 where p is NaN
            for (int64_t j = 0; j < n; ++j) row[j] = std::isnan(pb[(r - r0) * a.tk + j]) ? T(0) : row[j];
          if (rows.masked_within(o))
            softmax_grad_rows<T, false, true>(row, pb + (r - r0) * a.tk, row, 0, 1, n, 1, rows.mask_row(o), &zero,
                                              rows.fill_when);
          else
            softmax_grad_rows<T, false>(row, pb + (r - r0) * a.tk, row, 0, 1, n, 1);
          std::fill(row + n, row + l, T(0));
        }
        blas_gemm(false, !a.heads, nr, a.d, l, T(scale), ds.data(), a.tk, kh, lk, T(0), dqh + r0 * lq, lq);
        if (a.heads)
          blas_gemm(true, false, l, a.d, nr, T(scale), ds.data(), a.tk, qh + r0 * lq, lq, T(1), dkh, lk);
        else
          blas_gemm(true, false, a.d, l, nr, T(scale), qh + r0 * lq, lq, ds.data(), a.tk, T(1), dkh, lk);
      }
    });
  });
}

}  // namespace onnxdp
