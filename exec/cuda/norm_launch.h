// The launch interface of the CUDA normalisation and loss kernels (exec/cuda/norm.cu), in plain
// C++17 so nvcc and the host compiler both read it. The host side (exec/cuda/norm.cpp) fills one
// launch from a node; the per-row bodies below are the kernels' bodies, also run on the host by the
// *_emulate functions.
//
// Reductions: ONE BLOCK PER REDUCED ROW (a LayerNormalization row, a BatchNormalization channel, a
// loss position's classes, a column of LayerNormalizationGrad's dscale / dbias, all loss terms for
// a reduced loss). The block's `lanes` threads (a power of two, <= kNmMaxLanes) each accumulate in
// double over the row's elements lane, lane + lanes, ...; the lanes' partials are then added in a
// fixed shared-memory tree (part[t] += part[t + s], s = lanes/2 .. 1). Deterministic, double like
// the CPU kernels, only the order of the additions differs from the CPU's sequential loops. NmBlock
// runs the same phases on the host (lane loops instead of threads, the same tree), so the
// emulation does the device's arithmetic exactly.
//
// Labels are read in the kernels. A label outside [0, C) that is not ignore_index, which the CPU
// kernels refuse with an error, cannot raise one from a kernel: its loss term, weight and gradient
// row are NaN, so the loss (or that row of a reduction "none" loss) and the gradients are NaN.
#pragma once
#include <math.h>

#include <cstdint>

#include "exec/functors.h"  // ONNXDP_HD

namespace onnxdp::cuda {

inline constexpr int kNmMaxRank = 8;
inline constexpr int kNmMaxLanes = 256;

// A float tensor read / written as doubles whatever its dtype (f32 or f64).
struct NmIn {
  const void* p = nullptr;
  bool f64 = false;
};
struct NmOut {
  void* p = nullptr;
  bool f64 = false;
};

ONNXDP_HD inline double nm_ld(const NmIn& v, int64_t i) {
  return v.f64 ? static_cast<const double*>(v.p)[i] : double(static_cast<const float*>(v.p)[i]);
}
ONNXDP_HD inline void nm_st(const NmOut& v, int64_t i, double x) {
  if (v.f64) static_cast<double*>(v.p)[i] = x;
  else static_cast<float*>(v.p)[i] = float(x);
}

// A LayerNormalization parameter (Scale, B) broadcast to the normalised block [inner]: element j
// of the block reads v[index(j)]. direct: v has inner elements in the block's order; otherwise j is
// split over the block's dims `size` (row-major) and `stride` is 0 on the broadcast dims.
struct NmBcast {
  NmIn v;
  bool present = false;
  bool direct = true;
  int rank = 0;
  int64_t size[kNmMaxRank] = {}, stride[kNmMaxRank] = {};
};

ONNXDP_HD inline double nm_param(const NmBcast& b, int64_t j, double absent) {
  if (!b.present) return absent;
  if (b.direct) return nm_ld(b.v, j);
  int64_t src = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    src += (j % b.size[d]) * b.stride[d];
    j /= b.size[d];
  }
  return nm_ld(b.v, src);
}

// One block's lanes and their shared partials (2 * lanes doubles: two sums at once). On the device
// each thread is one lane and each() runs its own lane; on the host each() loops over the lanes.
// Between phases every lane must be done: the reductions start and end with a barrier.
struct NmBlock {
  int lanes = 1;
  double* part = nullptr;

  template <class F>
  ONNXDP_HD void each(F&& f) const {
#ifdef __CUDA_ARCH__
    f(int(threadIdx.x));
#else
    for (int t = 0; t < lanes; ++t) f(t);
#endif
  }
  ONNXDP_HD void barrier() const {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
  }
  // part[0] (and part[lanes] when two) <- the tree sum (or max) of the lanes' partials.
  ONNXDP_HD void tree(bool two, bool max) const {
    barrier();
    for (int s = lanes / 2; s > 0; s /= 2) {
      each([&](int t) {
        if (t >= s) return;
        if (max) part[t] = part[t] < part[t + s] ? part[t + s] : part[t];  // std::max's choice
        else part[t] += part[t + s];
        if (two) part[lanes + t] += part[lanes + t + s];
      });
      barrier();
    }
  }
  ONNXDP_HD double sum() const {
    tree(false, false);
    const double a = part[0];
    barrier();  // everyone has read part[0] before the next phase writes part
    return a;
  }
  ONNXDP_HD void sum2(double& a, double& b) const {
    tree(true, false);
    a = part[0];
    b = part[lanes];
    barrier();
  }
  ONNXDP_HD double max() const {
    tree(false, true);
    const double a = part[0];
    barrier();
    return a;
  }
};

// ---- LayerNormalization(Grad) -------------------------------------------------------------------

// x viewed as [outer, inner] (inner = prod(x.shape[axis:])).
//   forward: y = (x - mean) * inv * scale + bias per row, mean / inv_std to the optional outputs;
//   grad:    dx = inv * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale; with dscale / dbias
//            asked for, each row's mean and inv go to stats [2 * outer] for ln_grad_column.
struct LnLaunch {
  bool f64 = false;  // x / y / dy / dx dtype
  int lanes = 32;
  int64_t outer = 0, inner = 0;
  double eps = 0;
  const void* x = nullptr;
  const void* dy = nullptr;  // grad
  void* y = nullptr;         // forward: y; grad: dx (may be null)
  NmBcast scale, bias;
  NmOut mean, inv;           // forward, optional (p null)
  NmOut dscale, dbias;       // grad, optional (p null)
  double* stats = nullptr;   // grad with dscale or dbias: [outer] x {mean, inv}
};

// The mean and 1 / sqrt(variance + eps) of row x[0..n), LayerNormalization's statistics: the lanes'
// partial sums in double, then the block's tree (every lane gets the same values).
template <class T>
ONNXDP_HD inline void ln_stats(const T* x, int64_t n, double eps, const NmBlock& b, double& mean, double& inv) {
  const int L = b.lanes;
  b.each([&](int t) {
    double s = 0;
    for (int64_t j = t; j < n; j += L) s += double(x[j]);
    b.part[t] = s;
  });
  mean = b.sum() / double(n);
  b.each([&](int t) {
    double ss = 0;
    for (int64_t j = t; j < n; j += L) {
      const double d = double(x[j]) - mean;
      ss += d * d;
    }
    b.part[t] = ss;
  });
  inv = 1.0 / sqrt(b.sum() / double(n) + eps);
}

template <class T>
ONNXDP_HD inline void ln_row(const LnLaunch& l, int64_t r, const NmBlock& b) {
  const T* x = static_cast<const T*>(l.x) + r * l.inner;
  const int64_t n = l.inner;
  const int L = b.lanes;
  double mean, inv;
  ln_stats(x, n, l.eps, b, mean, inv);
  T* y = static_cast<T*>(l.y) + r * l.inner;
  b.each([&](int t) {
    for (int64_t j = t; j < n; j += L)
      y[j] = T((double(x[j]) - mean) * inv * nm_param(l.scale, j, 1.0) + nm_param(l.bias, j, 0.0));
    if (t != 0) return;
    if (l.mean.p) nm_st(l.mean, r, mean);
    if (l.inv.p) nm_st(l.inv, r, inv);
  });
}

template <class T>
ONNXDP_HD inline void ln_grad_row(const LnLaunch& l, int64_t r, const NmBlock& b) {
  const T* x = static_cast<const T*>(l.x) + r * l.inner;
  const T* dy = static_cast<const T*>(l.dy) + r * l.inner;
  const int64_t n = l.inner;
  const int L = b.lanes;
  double mean, inv;
  ln_stats(x, n, l.eps, b, mean, inv);
  b.each([&](int t) {
    double sg = 0, sgx = 0;
    for (int64_t j = t; j < n; j += L) {
      const double xhat = (double(x[j]) - mean) * inv, g = double(dy[j]) * nm_param(l.scale, j, 1.0);
      sg += g;
      sgx += g * xhat;
    }
    b.part[t] = sg;
    b.part[L + t] = sgx;
  });
  double sum_g = 0, sum_gx = 0;
  b.sum2(sum_g, sum_gx);
  const double mean_g = sum_g / double(n), mean_gx = sum_gx / double(n);
  T* dx = static_cast<T*>(l.y);
  b.each([&](int t) {
    if (dx)
      for (int64_t j = t; j < n; j += L) {
        const double xhat = (double(x[j]) - mean) * inv, g = double(dy[j]) * nm_param(l.scale, j, 1.0);
        dx[r * n + j] = T(inv * (g - mean_g - xhat * mean_gx));
      }
    if (t == 0 && l.stats) {
      l.stats[2 * r] = mean;
      l.stats[2 * r + 1] = inv;
    }
  });
}

// Column j of dscale / dbias: the sums over rows of dy * xhat and dy (the rows' stats from
// ln_grad_row).
template <class T>
ONNXDP_HD inline void ln_grad_column(const LnLaunch& l, int64_t j, const NmBlock& b) {
  const T* x = static_cast<const T*>(l.x);
  const T* dy = static_cast<const T*>(l.dy);
  const int L = b.lanes;
  b.each([&](int t) {
    double ds = 0, db = 0;
    for (int64_t r = t; r < l.outer; r += L) {
      const int64_t k = r * l.inner + j;
      const double xhat = (double(x[k]) - l.stats[2 * r]) * l.stats[2 * r + 1];
      ds += double(dy[k]) * xhat;
      db += double(dy[k]);
    }
    b.part[t] = ds;
    b.part[L + t] = db;
  });
  double ds = 0, db = 0;
  b.sum2(ds, db);
  b.each([&](int t) {
    if (t != 0) return;
    if (l.dscale.p) nm_st(l.dscale, j, ds);
    if (l.dbias.p) nm_st(l.dbias, j, db);
  });
}

// ---- BatchNormalization(Grad) -------------------------------------------------------------------

// x [N, C, S]; one block per channel: element m < N*S of channel ch is x[(m / S * C + ch) * S + m % S].
//   forward: training: batch mean and biased variance, running outputs = in * momentum + batch *
//            (1 - momentum), the running var's batch variance times var_factor (M / (M - 1) with
//            unbiased_running_var and M > 1, else 1; as exec/cpu/norm.cpp); inference: the running
//            stats (passed through to outputs 1 / 2 when present); y = x * a + (bias - mean * a),
//            a = scale / sqrt(var + eps).
//   grad:    dbias = sum(dy), dscale = sum(dy * xhat), dx = scale * inv * (dy - dbias / M - xhat *
//            dscale / M) with the batch statistics.
struct BnLaunch {
  bool f64 = false;
  int lanes = 32;
  bool training = false;
  int64_t N = 0, C = 0, S = 0;
  double eps = 0, momentum = 0;
  double var_factor = 1;             // forward, training: the running var's factor on the batch variance
  const void* x = nullptr;
  const void* dy = nullptr;          // grad
  const void* relu_y = nullptr;      // grad, optional: dy taken as ReluGrad(dy, relu_y)
  bool relu = false;                 // forward: activation Relu, y = Relu(x * a + c)
  void* y = nullptr;                 // forward: y; grad: dx (may be null)
  NmIn scale, bias, mean, var;       // forward (grad: scale only)
  NmOut out_mean, out_var;           // forward, optional
  NmOut dscale, dbias;               // grad, optional
};

ONNXDP_HD inline int64_t bn_offset(const BnLaunch& l, int64_t ch, int64_t m) {
  return (m / l.S * l.C + ch) * l.S + m % l.S;
}

template <class T>
ONNXDP_HD inline void bn_channel(const BnLaunch& l, int64_t ch, const NmBlock& b) {
  const T* x = static_cast<const T*>(l.x);
  const int64_t M = l.N * l.S;
  const int L = b.lanes;
  double mean = 0, var = 0;
  if (l.training) {
    b.each([&](int t) {
      double s = 0;
      for (int64_t m = t; m < M; m += L) s += double(x[bn_offset(l, ch, m)]);
      b.part[t] = s;
    });
    mean = b.sum() / double(M);
    b.each([&](int t) {
      double ss = 0;
      for (int64_t m = t; m < M; m += L) {
        const double d = double(x[bn_offset(l, ch, m)]) - mean;
        ss += d * d;
      }
      b.part[t] = ss;
    });
    var = b.sum() / double(M);
  } else {
    mean = nm_ld(l.mean, ch);
    var = nm_ld(l.var, ch);
  }
  b.each([&](int t) {
    if (t != 0) return;
    if (l.training) {
      if (l.out_mean.p) nm_st(l.out_mean, ch, nm_ld(l.mean, ch) * l.momentum + mean * (1 - l.momentum));
      if (l.out_var.p) nm_st(l.out_var, ch, nm_ld(l.var, ch) * l.momentum + var * l.var_factor * (1 - l.momentum));
    } else {
      if (l.out_mean.p) nm_st(l.out_mean, ch, mean);
      if (l.out_var.p) nm_st(l.out_var, ch, var);
    }
  });
  const double a = nm_ld(l.scale, ch) / sqrt(var + l.eps);
  const double c = nm_ld(l.bias, ch) - mean * a;
  T* y = static_cast<T*>(l.y);
  b.each([&](int t) {
    for (int64_t m = t; m < M; m += L) {
      const int64_t k = bn_offset(l, ch, m);
      const T v = T(double(x[k]) * a + c);
      y[k] = l.relu ? fn::Relu{}(v) : v;
    }
  });
}

// Element k of BatchNormalizationGrad's dy: with relu_y, ReluGrad's (dy where relu_y > 0, else 0).
template <class T>
ONNXDP_HD inline double bn_dy(const BnLaunch& l, int64_t k) {
  const T dy = static_cast<const T*>(l.dy)[k];
  return l.relu_y ? double(fn::ReluGrad{}(dy, static_cast<const T*>(l.relu_y)[k])) : double(dy);
}

template <class T>
ONNXDP_HD inline void bn_grad_channel(const BnLaunch& l, int64_t ch, const NmBlock& b) {
  const T* x = static_cast<const T*>(l.x);
  const int64_t Mi = l.N * l.S;
  const double M = double(Mi);
  const int L = b.lanes;
  b.each([&](int t) {
    double s = 0;
    for (int64_t m = t; m < Mi; m += L) s += double(x[bn_offset(l, ch, m)]);
    b.part[t] = s;
  });
  const double mu = b.sum() / M;
  b.each([&](int t) {
    double ss = 0;
    for (int64_t m = t; m < Mi; m += L) {
      const double d = double(x[bn_offset(l, ch, m)]) - mu;
      ss += d * d;
    }
    b.part[t] = ss;
  });
  const double inv = 1.0 / sqrt(b.sum() / M + l.eps);
  b.each([&](int t) {
    double sdy = 0, sdyx = 0;
    for (int64_t m = t; m < Mi; m += L) {
      const int64_t k = bn_offset(l, ch, m);
      const double d = bn_dy<T>(l, k);
      sdy += d;
      sdyx += d * (double(x[k]) - mu) * inv;
    }
    b.part[t] = sdy;
    b.part[L + t] = sdyx;
  });
  double sum_dy = 0, sum_dy_xhat = 0;
  b.sum2(sum_dy, sum_dy_xhat);
  T* dx = static_cast<T*>(l.y);
  const double a = nm_ld(l.scale, ch) * inv, mean_dy = sum_dy / M, mean_dy_xhat = sum_dy_xhat / M;
  b.each([&](int t) {
    if (t == 0) {
      if (l.dscale.p) nm_st(l.dscale, ch, sum_dy_xhat);
      if (l.dbias.p) nm_st(l.dbias, ch, sum_dy);
    }
    if (!dx) return;
    for (int64_t m = t; m < Mi; m += L) {
      const int64_t k = bn_offset(l, ch, m);
      const double xhat = (double(x[k]) - mu) * inv;
      dx[k] = T(a * (bn_dy<T>(l, k) - mean_dy - xhat * mean_dy_xhat));
    }
  });
}

// ---- SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss (and Grads) -----------------------------

enum class NmReduction : uint8_t { none, sum, mean };

// x [N, C, D] (D = product of the dims after C; scores for SCE, log-probabilities for NLL), labels
// [N, D] (int64 or int32), weights [C]?; P = N * D label positions i = n * D + d, class k of
// position i at x[n * C * D + k * D + d].
struct LossLaunch {
  bool f64 = false;  // x / out / dy / dx dtype
  int lanes = 32;
  int64_t N = 0, C = 0, D = 1;
  const void* x = nullptr;         // forward, SCE grad
  const void* labels = nullptr;
  bool labels_i32 = false;
  NmIn weights;                    // p null: every weight 1
  bool has_ignore = false;
  int64_t ignore = 0;
  NmReduction reduction = NmReduction::mean;
  void* out = nullptr;             // forward: the loss; grad: dx
  void* log_prob = nullptr;        // SCE forward output 1, optional
  NmIn dy;                         // grad
  double* terms = nullptr;         // forward, reduction sum / mean: [2 * P] = picked terms, weights
  double* wsum = nullptr;          // grad, reduction mean: [1], the total weight (loss_weight_sum)
};

// The class of position i (-1: ignored; -2: outside [0, C), an error) and its weight (0 ignored,
// NaN for an error).
ONNXDP_HD inline int64_t loss_label(const LossLaunch& l, int64_t i, double& w) {
  const int64_t lab =
      l.labels_i32 ? int64_t(static_cast<const int32_t*>(l.labels)[i]) : static_cast<const int64_t*>(l.labels)[i];
  if (l.has_ignore && lab == l.ignore) {
    w = 0;
    return -1;
  }
  if (lab < 0 || lab >= l.C) {
    w = NAN;
    return -2;
  }
  w = l.weights.p ? nm_ld(l.weights, lab) : 1.0;
  return lab;
}

// Position i's loss term -w * (x[label] - lse) (lse 0 for NLL) to out (reduction none) or terms.
template <class T>
ONNXDP_HD inline void loss_pick(const LossLaunch& l, int64_t i, double lse) {
  const T* xi = static_cast<const T*>(l.x) + (i / l.D) * l.C * l.D + i % l.D;
  double w = 0, picked = 0;
  const int64_t lab = loss_label(l, i, w);
  if (lab >= 0) picked = -w * (double(xi[lab * l.D]) - lse);
  else if (lab == -2) picked = NAN;
  if (l.reduction == NmReduction::none) {
    static_cast<T*>(l.out)[i] = T(picked);
  } else {
    l.terms[i] = picked;
    l.terms[l.N * l.D + i] = w;
  }
}

// SCE forward at position i: lse = max + log(sum(exp(x - max))) over the classes, log_prob = x - lse.
template <class T>
ONNXDP_HD inline void sce_position(const LossLaunch& l, int64_t i, const NmBlock& b) {
  const T* xi = static_cast<const T*>(l.x) + (i / l.D) * l.C * l.D + i % l.D;
  const int64_t C = l.C, D = l.D;
  const int L = b.lanes;
  b.each([&](int t) {
    double mx = -INFINITY;
    for (int64_t k = t; k < C; k += L) mx = mx < double(xi[k * D]) ? double(xi[k * D]) : mx;
    b.part[t] = mx;
  });
  const double mx = b.max();
  b.each([&](int t) {
    double s = 0;
    for (int64_t k = t; k < C; k += L) s += exp(double(xi[k * D]) - mx);
    b.part[t] = s;
  });
  const double lse = mx + log(b.sum());
  b.each([&](int t) {
    if (l.log_prob) {
      T* lp = static_cast<T*>(l.log_prob) + (i / D) * C * D + i % D;
      for (int64_t k = t; k < C; k += L) lp[k * D] = T(double(xi[k * D]) - lse);
    }
    if (t == 0) loss_pick<T>(l, i, lse);
  });
}

// The reduced loss (one block): sum of the terms, divided by the sum of the weights for mean.
template <class T>
ONNXDP_HD inline void loss_reduce(const LossLaunch& l, const NmBlock& b) {
  const int64_t P = l.N * l.D;
  const int L = b.lanes;
  b.each([&](int t) {
    double s = 0, w = 0;
    for (int64_t i = t; i < P; i += L) {
      s += l.terms[i];
      w += l.terms[P + i];
    }
    b.part[t] = s;
    b.part[L + t] = w;
  });
  double sum = 0, wsum = 0;
  b.sum2(sum, wsum);
  b.each([&](int t) {
    if (t == 0) static_cast<T*>(l.out)[0] = T(l.reduction == NmReduction::sum ? sum : sum / wsum);
  });
}

// The total weight of the counted labels (one block), for the mean's gradient.
ONNXDP_HD inline void loss_weight_sum(const LossLaunch& l, const NmBlock& b) {
  const int64_t P = l.N * l.D;
  const int L = b.lanes;
  b.each([&](int t) {
    double s = 0;
    for (int64_t i = t; i < P; i += L) {
      double w = 0;
      loss_label(l, i, w);
      s += w;
    }
    b.part[t] = s;
  });
  const double w = b.sum();
  b.each([&](int t) {
    if (t == 0) l.wsum[0] = w;
  });
}

// d loss / d term i, divided by its weight: dy[i] (none), dy (sum), dy / total weight (mean).
ONNXDP_HD inline double loss_g(const LossLaunch& l, int64_t i) {
  if (l.reduction == NmReduction::none) return nm_ld(l.dy, i);
  if (l.reduction == NmReduction::sum) return nm_ld(l.dy, 0);
  return nm_ld(l.dy, 0) / l.wsum[0];
}

// SCE grad at position i: dx = w * g * (softmax(x) - onehot(label)); 0 when ignored.
template <class T>
ONNXDP_HD inline void sce_grad_position(const LossLaunch& l, int64_t i, const NmBlock& b) {
  const T* xi = static_cast<const T*>(l.x) + (i / l.D) * l.C * l.D + i % l.D;
  T* dxi = static_cast<T*>(l.out) + (i / l.D) * l.C * l.D + i % l.D;
  const int64_t C = l.C, D = l.D;
  const int L = b.lanes;
  double w = 0;
  const int64_t lab = loss_label(l, i, w);  // the same in every lane: the branches below are uniform
  if (lab == -1) {
    b.each([&](int t) {
      for (int64_t k = t; k < C; k += L) dxi[k * D] = T(0);
    });
    return;
  }
  b.each([&](int t) {
    double mx = -INFINITY;
    for (int64_t k = t; k < C; k += L) mx = mx < double(xi[k * D]) ? double(xi[k * D]) : mx;
    b.part[t] = mx;
  });
  const double mx = b.max();
  b.each([&](int t) {
    double s = 0;
    for (int64_t k = t; k < C; k += L) s += exp(double(xi[k * D]) - mx);
    b.part[t] = s;
  });
  const double s = b.sum();
  const double scale = w * loss_g(l, i);  // NaN for a label outside [0, C)
  b.each([&](int t) {
    for (int64_t k = t; k < C; k += L) {
      const double p = exp(double(xi[k * D]) - mx) / s;
      dxi[k * D] = T(scale * (p - (k == lab ? 1.0 : 0.0)));
    }
  });
}

// NLL grad, one thread per element e of dx [N, C, D]: -w * g at the label's class, 0 elsewhere.
template <class T>
ONNXDP_HD inline void nll_grad_one(const LossLaunch& l, int64_t e) {
  const int64_t d = e % l.D, k = (e / l.D) % l.C, n = e / (l.C * l.D);
  double w = 0;
  const int64_t i = n * l.D + d;
  const int64_t lab = loss_label(l, i, w);
  double v = 0;
  if (lab == k) v = -w * loss_g(l, i);
  else if (lab == -2) v = NAN;
  static_cast<T*>(l.out)[e] = T(v);
}

// Lanes for rows of n elements: a warp for short rows, 256 threads for long ones.
inline int nm_lanes(int64_t n) { return n >= 4096 ? 256 : n >= 512 ? 128 : 32; }

void ln_launch(const LnLaunch& l, bool grad, void* stream);
void ln_emulate(const LnLaunch& l, bool grad);
void bn_launch(const BnLaunch& l, bool grad, void* stream);
void bn_emulate(const BnLaunch& l, bool grad);
// softmax: SCE (else NLL). Forward: the loss (and log_prob); grad: dx.
void loss_launch(const LossLaunch& l, bool softmax, bool grad, void* stream);
void loss_emulate(const LossLaunch& l, bool softmax, bool grad);

}  // namespace onnxdp::cuda
