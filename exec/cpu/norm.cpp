// CPU kernels of BatchNormalization and LayerNormalization. Statistics are accumulated in double
// (two passes: mean, then the mean of squared deviations) whatever the tensor dtype.
#include <cmath>
#include <vector>

#include "exec/cpu/blocked.h"
#include "exec/cpu/clones.h"
#include "exec/cpu/row_sum.h"
#include "exec/functors.h"
#include "exec/kernel.h"
#include "graph/passes/block_channels.h"

namespace onnxdp {

namespace {

// A small float tensor (per-channel parameters) as doubles.
std::vector<double> to_doubles(const KernelCtx& c, int k) {
  const TensorRef& t = c.in(k);
  std::vector<double> v(size_t(t.numel));
  switch (t.dtype) {
    case DType::f32:
      for (int64_t i = 0; i < t.numel; ++i) v[size_t(i)] = t.as<float>()[i];
      break;
    case DType::f64:
      for (int64_t i = 0; i < t.numel; ++i) v[size_t(i)] = t.as<double>()[i];
      break;
    default: c.fail("input {} is {}; expected float32 or float64", k, dtype_name(t.dtype));
  }
  return v;
}

void store(const TensorRef& t, int64_t i, double v) {
  if (t.dtype == DType::f64) t.as<double>()[i] = v;
  else t.as<float>()[i] = float(v);
}

// Channels lo..hi's batch mean and biased variance over x [N, C, S], in double: the mean, then
// the mean of squared deviations. Each pass walks the share's rows in memory order (image by
// image, its channels lo..hi: contiguous), which the hardware prefetches, where a channel's rows
// alone are short strided runs (an 8x8 plane is 256 bytes); each channel's rows are added in
// image order, each row a row_sum_wide (vectorized in the x86-64-v3 clone).
template <class T>
ONNXDP_CPU_CLONES void batch_norm_stats(const T* x, int64_t N, int64_t C, int64_t S, int64_t lo, int64_t hi,
                                        double* mean, double* var) {
  const double M = double(N * S);
  for (int64_t ch = lo; ch < hi; ++ch) mean[ch] = var[ch] = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = lo; ch < hi; ++ch) {
      const T* xr = x + (n * C + ch) * S;
      mean[ch] += row_sum_wide(S, [&](int64_t i) { return double(xr[i]); });
    }
  for (int64_t ch = lo; ch < hi; ++ch) mean[ch] /= M;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = lo; ch < hi; ++ch) {
      const T* xr = x + (n * C + ch) * S;
      const double m = mean[ch];
      var[ch] += row_sum_wide(S, [&](int64_t i) {
        const double d = double(xr[i]) - m;
        return d * d;
      });
    }
  for (int64_t ch = lo; ch < hi; ++ch) var[ch] /= M;
}

// Rows lo..hi of x, y [N*C, S]: y = x * a[ch] + b[ch] in double, ch = row % C; with Relu, Relu's
// functor applied to that (activation Relu: the Relu after the node in the same pass).
template <class T, bool Relu>
ONNXDP_CPU_CLONES void batch_norm_apply_rows(const T* x, T* y, int64_t lo, int64_t hi, int64_t C, int64_t S,
                                             const double* a, const double* b) {
  for (int64_t nc = lo; nc < hi; ++nc) {
    const double ac = a[nc % C], bc = b[nc % C];
    const T* xr = x + nc * S;
    T* yr = y + nc * S;
    for (int64_t i = 0; i < S; ++i) {
      const T v = T(double(xr[i]) * ac + bc);
      yr[i] = Relu ? fn::Relu{}(v) : v;
    }
  }
}

template <class T>
void batch_norm_apply(bool relu, const T* x, T* y, int64_t lo, int64_t hi, int64_t C, int64_t S, const double* a,
                      const double* b) {
  if (relu) batch_norm_apply_rows<T, true>(x, y, lo, hi, C, S, a, b);
  else batch_norm_apply_rows<T, false>(x, y, lo, hi, C, S, a, b);
}

// The channel-blocked layout's rows (exec/cpu/blocked.h; row r = image r / (C / 16), block
// r % (C / 16): S positions of 16 channels). sums[r * 16 + l] = row_sum_wide over the row of lane l's
// x, or with `mean` (per channel) of (x - mean)^2: batch_norm_stats' row sums, bit for bit.
template <class T>
ONNXDP_CPU_CLONES void batch_norm_row_sums_blocked(const T* x, int64_t C, int64_t S, int64_t lo, int64_t hi,
                                                   const double* mean, double* sums) {
  const int64_t blocks = C / kChannelBlock;
  for (int64_t r = lo; r < hi; ++r) {
    const T* xr = x + r * S * kChannelBlock;
    double out[1][16];
    if (!mean) {
      block_row_sums<1>(S, [&](int64_t j, double (&t)[1][16]) {
        for (int l = 0; l < 16; ++l) t[0][l] = double(xr[j * 16 + l]);
      }, out);
    } else {
      const double* m = mean + (r % blocks) * kChannelBlock;
      block_row_sums<1>(S, [&](int64_t j, double (&t)[1][16]) {
        for (int l = 0; l < 16; ++l) {
          const double d = double(xr[j * 16 + l]) - m[l];
          t[0][l] = d * d;
        }
      }, out);
    }
    for (int l = 0; l < 16; ++l) sums[r * kChannelBlock + l] = out[0][l];
  }
}

// Rows lo..hi of the blocked x, y: y = x * a[ch] + b[ch] in double (and Relu), as
// batch_norm_apply_rows.
template <class T, bool Relu>
ONNXDP_CPU_CLONES void batch_norm_apply_blocked(const T* x, T* y, int64_t lo, int64_t hi, int64_t C, int64_t S,
                                                const double* a, const double* b) {
  const int64_t blocks = C / kChannelBlock;
  for (int64_t r = lo; r < hi; ++r) {
    const double* ar = a + (r % blocks) * kChannelBlock;
    const double* br = b + (r % blocks) * kChannelBlock;
    const T* xr = x + r * S * kChannelBlock;
    T* yr = y + r * S * kChannelBlock;
    for (int64_t j = 0; j < S; ++j)
      for (int l = 0; l < 16; ++l) {
        const T v = T(double(xr[j * 16 + l]) * ar[l] + br[l]);
        yr[j * 16 + l] = Relu ? fn::Relu{}(v) : v;
      }
  }
}

// Per channel, the sum over images in image order of the rows' sums (sums [N * C / 16 rows, 16]),
// divided by M: batch_norm_stats' mean or variance.
void add_rows_in_image_order(const std::vector<double>& sums, int64_t N, int64_t C, double M, double* out) {
  for (int64_t ch = 0; ch < C; ++ch) out[ch] = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch) out[ch] += sums[size_t(blocked_offset(n, ch, 0, C, 1))];
  for (int64_t ch = 0; ch < C; ++ch) out[ch] /= M;
}

// x [N, C, S] (S = product of the spatial dims, 1 for [N, C]).
//   inference: y = (x - mean) / sqrt(var + eps) * scale + bias with the running mean/var inputs;
//   training:  the same with the batch mean and biased (population) variance per channel, and
//              outputs 1/2 = running * momentum + batch * (1 - momentum); with unbiased_running_var
//              (set by the trainer, graph/op_table.h) output 2 takes the batch variance times
//              M / (M - 1), M = N * S, as PyTorch. M = 1 has no unbiased variance (PyTorch's is
//              NaN, or it refuses the batch): the biased one, 0, is used then.
template <class T>
void batch_norm(KernelCtx& c) {
  const TensorRef& xr = c.in(0);
  const int64_t N = xr.dim(0), C = xr.dim(1), S = N * C != 0 ? xr.numel / (N * C) : 0;
  const double eps = c.node.f("epsilon"), momentum = c.node.f("momentum");
  const bool training = c.node.i("training_mode") != 0;
  const double M = double(N * S);
  const double var_factor = c.node.i("unbiased_running_var") != 0 && M > 1 ? M / (M - 1) : 1.0;
  const std::vector<double> scale = to_doubles(c, 1), bias = to_doubles(c, 2);
  std::vector<double> mean = to_doubles(c, 3), var = to_doubles(c, 4);
  const T* x = xr.as<T>();
  T* y = c.out(0).as<T>();
  const bool parallel = xr.numel > parallel_min_elements(), relu = c.node.s("activation") == "Relu";

  // y = x * a + b per channel: a = scale / sqrt(var + eps), b = bias - mean * a.
  std::vector<double> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  const auto coefficients = [&](int64_t ch, double m, double v) {
    a[size_t(ch)] = scale[size_t(ch)] / std::sqrt(v + eps);
    b[size_t(ch)] = bias[size_t(ch)] - m * a[size_t(ch)];
  };
  // The channel-blocked layout (exec/cpu/blocked.h): the same statistics, each image's rows summed
  // by any thread and each channel's rows added in image order after; y over all threads.
  const bool layout_blocked = blocked_input(c.node, 0);
  if (layout_blocked != blocked_output(c.node, 0)) c.fail("input 0 and output 0 are blocked both or neither");
  const int64_t rows = layout_blocked ? N * (C / kChannelBlock) : N * C;
  if (training) {
    std::vector<double> batch_mean(static_cast<size_t>(C)), batch_var(static_cast<size_t>(C));
    // Plain layout: blocks of channels whose x fits in the core's cache (batch_norm_block), the
    // variance pass and y's pass reading the block from there, not from memory. Where the channels
    // are fewer than the threads, the statistics first and y's rows over all threads after, as for
    // inference.
    const bool y_done = !layout_blocked && C >= (parallel ? cpu_threads() : 1);
    if (layout_blocked) {
      std::vector<double> sums(static_cast<size_t>(rows * kChannelBlock));
      split_rows(rows, parallel, [&](int, int64_t lo, int64_t hi) {
        batch_norm_row_sums_blocked(x, C, S, lo, hi, nullptr, sums.data());
      });
      add_rows_in_image_order(sums, N, C, M, batch_mean.data());
      split_rows(rows, parallel, [&](int, int64_t lo, int64_t hi) {
        batch_norm_row_sums_blocked(x, C, S, lo, hi, batch_mean.data(), sums.data());
      });
      add_rows_in_image_order(sums, N, C, M, batch_var.data());
    } else {
      split_rows(C, parallel, [&](int, int64_t lo, int64_t hi) {
        for (int64_t b0 = lo, step = batch_norm_block(N * S * int64_t(sizeof(T))); b0 < hi; b0 += step) {
          const int64_t b1 = std::min(hi, b0 + step);
          batch_norm_stats(x, N, C, S, b0, b1, batch_mean.data(), batch_var.data());
          if (!y_done) continue;
          for (int64_t ch = b0; ch < b1; ++ch) coefficients(ch, batch_mean[size_t(ch)], batch_var[size_t(ch)]);
          for (int64_t n = 0; n < N; ++n)
            batch_norm_apply(relu, x, y, n * C + b0, n * C + b1, C, S, a.data(), b.data());
        }
      });
    }
    for (int64_t ch = 0; ch < C; ++ch) {
      if (c.has_out(1)) store(c.out(1), ch, mean[size_t(ch)] * momentum + batch_mean[size_t(ch)] * (1 - momentum));
      if (c.has_out(2))
        store(c.out(2), ch, var[size_t(ch)] * momentum + batch_var[size_t(ch)] * var_factor * (1 - momentum));
    }
    if (y_done) return;
    mean = batch_mean;
    var = batch_var;
  } else {
    // Outputs 1/2 only make sense in training; pass the running statistics through if asked.
    for (int64_t ch = 0; ch < C; ++ch) {
      if (c.has_out(1)) store(c.out(1), ch, mean[size_t(ch)]);
      if (c.has_out(2)) store(c.out(2), ch, var[size_t(ch)]);
    }
  }

  for (int64_t ch = 0; ch < C; ++ch) coefficients(ch, mean[size_t(ch)], var[size_t(ch)]);
  split_rows(rows, parallel, [&](int, int64_t lo, int64_t hi) {
    if (!layout_blocked) batch_norm_apply(relu, x, y, lo, hi, C, S, a.data(), b.data());
    else if (relu) batch_norm_apply_blocked<T, true>(x, y, lo, hi, C, S, a.data(), b.data());
    else batch_norm_apply_blocked<T, false>(x, y, lo, hi, C, S, a.data(), b.data());
  });
}

// Element j of the normalised block [inner] from a tensor that broadcasts to `norm` (Scale, B).
std::vector<double> expand_to(const KernelCtx& c, int k, const Shape& norm) {
  std::vector<double> v = to_doubles(c, k);
  const Shape& s = *c.in(k).shape;
  const int64_t inner = shape_numel(norm);
  std::vector<double> out(static_cast<size_t>(inner));
  const size_t r = norm.size(), off = r - s.size();
  for (int64_t j = 0; j < inner; ++j) {
    int64_t rem = j, src = 0, stride = 1;
    for (size_t i = r; i-- > 0;) {
      int64_t coord = rem % norm[i];
      rem /= norm[i];
      if (i >= off) {
        int64_t d = s[i - off];
        src += (d == 1 ? 0 : coord) * stride;
        stride *= d;
      }
    }
    out[size_t(j)] = v[size_t(src)];
  }
  return out;
}

// Rows lo..hi of X [outer, inner] normalised into y; each row's mean and 1 / std into mean and
// inv_std (when not null).
template <class T>
ONNXDP_CPU_CLONES void layer_norm_rows(const T* x, T* y, int64_t lo, int64_t hi, int64_t inner, double eps,
                                       const double* scale, const double* bias, double* mean, double* inv_std) {
  for (int64_t r = lo; r < hi; ++r) {
    const T* xrow = x + r * inner;
    double m, inv;
    row_mean_inv_std(xrow, inner, eps, m, inv);
    for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = T((double(xrow[j]) - m) * inv * scale[j] + bias[j]);
    if (mean) mean[r] = m;
    if (inv_std) inv_std[r] = inv;
  }
}

// X viewed as [outer, inner] with inner = prod(X.shape[axis:]): each row normalised with its own
// mean and biased variance; Mean / InvStdDev [outer] (shaped [.., 1, ..1] by the shape rule).
template <class T>
void layer_norm(KernelCtx& c) {
  const TensorRef& xr = c.in(0);
  const Shape& xs = *xr.shape;
  const int64_t axis = normalize_axis(c.node.i("axis"), xr.rank(), c.node);
  const Shape norm(xs.begin() + axis, xs.end());
  const int64_t inner = shape_numel(norm), outer = inner ? xr.numel / inner : 0;
  const double eps = c.node.f("epsilon");
  const std::vector<double> scale = expand_to(c, 1, norm);
  const std::vector<double> bias = c.has_in(2) ? expand_to(c, 2, norm) : std::vector<double>(size_t(inner), 0.0);
  const T* x = xr.as<T>();
  T* y = c.out(0).as<T>();

  std::vector<double> mean(c.has_out(1) ? size_t(outer) : 0), inv_std(c.has_out(2) ? size_t(outer) : 0);
  split_rows(outer, xr.numel > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    layer_norm_rows(x, y, lo, hi, inner, eps, scale.data(), bias.data(), mean.empty() ? nullptr : mean.data(),
                    inv_std.empty() ? nullptr : inv_std.data());
  });
  for (size_t r = 0; r < mean.size(); ++r) store(c.out(1), int64_t(r), mean[r]);
  for (size_t r = 0; r < inv_std.size(); ++r) store(c.out(2), int64_t(r), inv_std[r]);
}

}  // namespace

void BatchNormalization_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return batch_norm<float>(c);
    case DType::f64: return batch_norm<double>(c);
    default: c.fail("input 0 is {}; BatchNormalization runs on float32 and float64", dtype_name(c.in(0).dtype));
  }
}

void LayerNormalization_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return layer_norm<float>(c);
    case DType::f64: return layer_norm<double>(c);
    default: c.fail("input 0 is {}; LayerNormalization runs on float32 and float64", dtype_name(c.in(0).dtype));
  }
}

}  // namespace onnxdp
