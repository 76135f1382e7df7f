// CPU kernels of Conv and ConvTranspose (N-D, groups, strides, dilations, pads, auto_pad).
//
// Conv is im2col + GEMM: for image n and group g,
//   col [Cg*K, P]  = the input taps each output position sees (zero where the tap is padding)
//   y   [Mg, P]    = W_g [Mg, Cg*K] x col
// with K = prod(kernel), P = prod(output spatial). ConvTranspose is the adjoint, GEMM + col2im:
//   col [Mg*K, Pin] = W_g^T [Mg*K, Cg] x x_g [Cg, Pin]
//   y   [Mg, Pout] += col scattered to the output positions the taps hit.
// Both use one table `tap_index` [K, P]: the flat spatial offset on the other side of each
// (tap, position) pair, -1 where that falls into padding. The thread team runs the (image, group)
// pairs in parallel; with a single pair, blas_gemm splits the GEMM among the threads (exec/cpu/blas.h).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "exec/cpu/blas.h"
#include "exec/cpu/clones.h"
#include "exec/cpu/in_float.h"
#include "exec/kernel.h"

namespace onnxdp {

namespace {

// A sliding window between an iterated grid `iter` and a bounded grid `bound`: position o of
// `iter` and kernel tap k meet bound coordinate o*stride - pad_begin + k*dilation in each dim.
struct WindowGeom {
  std::vector<int64_t> iter, bound, kernel, strides, dilations, pad_begin;
  int64_t iter_size() const { return prod(iter); }
  int64_t bound_size() const { return prod(bound); }
  int64_t kernel_size() const { return prod(kernel); }
  static int64_t prod(const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t d : v) p *= d;
    return p;
  }
};

// [K, P] table: for tap t (row-major over the kernel) and iterated position p (row-major), the
// flat offset in the bound grid, or -1 outside it.
std::vector<int64_t> tap_index(const WindowGeom& g) {
  const size_t n = g.iter.size();
  const int64_t K = g.kernel_size(), P = g.iter_size();
  const int64_t last = g.iter[n - 1];
  std::vector<int64_t> idx(size_t(K * P));
  std::vector<int64_t> k(n, 0), o(n, 0);
  for (int64_t t = 0; t < K; ++t) {
    std::fill(o.begin(), o.end(), 0);
    for (int64_t q = 0; q < P / std::max<int64_t>(last, 1); ++q) {
      // Offset contributed by the outer dims (all but the last).
      bool inside = true;
      int64_t base = 0;
      for (size_t i = 0; i + 1 < n; ++i) {
        int64_t c = o[i] * g.strides[i] - g.pad_begin[i] + k[i] * g.dilations[i];
        if (c < 0 || c >= g.bound[i]) inside = false;
        base = base * g.bound[i] + c;
      }
      base *= g.bound[n - 1];
      int64_t* row = idx.data() + t * P + q * last;
      for (int64_t ol = 0; ol < last; ++ol) {
        int64_t c = ol * g.strides[n - 1] - g.pad_begin[n - 1] + k[n - 1] * g.dilations[n - 1];
        row[ol] = inside && c >= 0 && c < g.bound[n - 1] ? base + c : -1;
      }
      for (size_t i = n - 1; i-- > 0;) {  // next outer position
        if (++o[i] < g.iter[i]) break;
        o[i] = 0;
      }
    }
    for (size_t i = n; i-- > 0;) {  // next tap
      if (++k[i] < g.kernel[i]) break;
      k[i] = 0;
    }
  }
  return idx;
}

// C [m, n] = op(A) [m, k] x op(B) [k, n], row-major.
template <class T>
void gemm(bool ta, bool tb, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  blas_gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
}

int blas_int(const KernelCtx& c, int64_t v) {
  if (v > int64_t(INT32_MAX)) c.fail("a GEMM dimension of {} exceeds the BLAS int range", v);
  return int(v);
}

enum class AutoPad { notset, same_upper, same_lower, valid };

AutoPad auto_pad(const Node& n) {
  const std::string& s = n.s("auto_pad");
  if (s == "SAME_UPPER") return AutoPad::same_upper;
  if (s == "SAME_LOWER") return AutoPad::same_lower;
  if (s == "VALID") return AutoPad::valid;
  return AutoPad::notset;
}

// Floor division (the spec's pad split rounds toward -inf when the total is negative).
int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

// The attributes common to both ops, defaults filled; pad_begin left for the caller.
WindowGeom read_geom(const KernelCtx& c) {
  const Shape &x = *c.in(0).shape, &w = *c.in(1).shape;
  size_t n = x.size() - 2;
  WindowGeom g;
  g.kernel.assign(w.begin() + 2, w.end());
  g.strides = c.node.ints_or("strides", std::vector<int64_t>(n, 1));
  g.dilations = c.node.ints_or("dilations", std::vector<int64_t>(n, 1));
  return g;
}

template <class T>
void conv(KernelCtx& c) {
  const TensorRef &xr = c.in(0), &wr = c.in(1), &yr = c.out(0);
  const Shape &xs = *xr.shape, &ys = *yr.shape;
  const size_t n = xs.size() - 2;
  const int64_t N = xs[0], C = xs[1], M = ys[1], group = c.node.i("group");
  const int64_t Cg = C / group, Mg = M / group;

  WindowGeom g = read_geom(c);
  g.iter.assign(ys.begin() + 2, ys.end());
  g.bound.assign(xs.begin() + 2, xs.end());
  AutoPad ap = auto_pad(c.node);
  std::vector<int64_t> pads = c.node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  g.pad_begin.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (ap == AutoPad::notset) {
      g.pad_begin[i] = pads[i];
    } else if (ap != AutoPad::valid) {
      int64_t span = (g.kernel[i] - 1) * g.dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (g.iter[i] - 1) * g.strides[i] + span - g.bound[i]);
      g.pad_begin[i] = ap == AutoPad::same_upper ? total / 2 : total - total / 2;
    }
  }
  const int64_t K = g.kernel_size(), P = g.iter_size(), S = g.bound_size();
  // A 1x1 window with unit strides and no padding sees the input itself: no im2col.
  bool direct = K == 1 && P == S;
  for (size_t i = 0; i < n; ++i) direct = direct && g.strides[i] == 1 && g.pad_begin[i] == 0;
  const std::vector<int64_t> idx = direct ? std::vector<int64_t>() : tap_index(g);

  const T* x = xr.as<T>();
  const T* w = wr.as<T>();
  const T* bias = c.has_in(2) ? c.in(2).as<T>() : nullptr;
  T* y = yr.as<T>();
  const int bm = blas_int(c, Mg), bn = blas_int(c, P), bk = blas_int(c, Cg * K);

  parallel_for(N * group, N * group > 1, [&](int64_t task) {
    const int64_t img = task / group, gi = task % group;
    const T* xg = x + (img * C + gi * Cg) * S;            // [Cg, S]
    T* yg = y + (img * M + gi * Mg) * P;                  // [Mg, P]
    const T* wg = w + gi * Mg * Cg * K;                   // [Mg, Cg*K]
    std::vector<T> col(direct ? 0 : size_t(Cg * K * P));  // [Cg*K, P]
    const T* colp = xg;
    if (!direct) {
      for (int64_t ch = 0; ch < Cg; ++ch) {
        const T* xc = xg + ch * S;
        T* cc = col.data() + ch * K * P;
        for (int64_t j = 0; j < K * P; ++j) cc[j] = idx[size_t(j)] < 0 ? T(0) : xc[idx[size_t(j)]];
      }
      colp = col.data();
    }
    gemm(false, false, bm, bn, bk, wg, bk, colp, bn, yg, bn);
    if (bias)
      for (int64_t m = 0; m < Mg; ++m)
        for (int64_t p = 0; p < P; ++p) yg[m * P + p] += bias[gi * Mg + m];
  });
}

template <class T>
void conv_transpose(KernelCtx& c) {
  const TensorRef &xr = c.in(0), &wr = c.in(1), &yr = c.out(0);
  const Shape &xs = *xr.shape, &ys = *yr.shape;
  const size_t n = xs.size() - 2;
  const int64_t N = xs[0], C = xs[1], M = ys[1], group = c.node.i("group");
  const int64_t Cg = C / group, Mg = M / group;

  // Iterate over the input positions; the taps land in the output.
  WindowGeom g = read_geom(c);
  g.iter.assign(xs.begin() + 2, xs.end());
  g.bound.assign(ys.begin() + 2, ys.end());
  AutoPad ap = auto_pad(c.node);
  std::vector<int64_t> pads = c.node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  std::vector<int64_t> out_pad = c.node.ints_or("output_padding", std::vector<int64_t>(n, 0));
  bool from_total = c.node.has("output_shape") || ap == AutoPad::same_upper || ap == AutoPad::same_lower;
  g.pad_begin.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (from_total) {
      // The spec's split of the padding the requested output size implies (pads are ignored).
      int64_t span = (g.kernel[i] - 1) * g.dilations[i] + 1;
      int64_t total = g.strides[i] * (g.iter[i] - 1) + out_pad[i] + span - g.bound[i];
      g.pad_begin[i] = ap == AutoPad::same_upper ? floor_div2(total) : total - floor_div2(total);
    } else if (ap == AutoPad::notset) {
      g.pad_begin[i] = pads[i];
    }
  }
  const int64_t K = g.kernel_size(), Pin = g.iter_size(), Pout = g.bound_size();
  const std::vector<int64_t> idx = tap_index(g);

  const T* x = xr.as<T>();
  const T* w = wr.as<T>();
  const T* bias = c.has_in(2) ? c.in(2).as<T>() : nullptr;
  T* y = yr.as<T>();
  const int bm = blas_int(c, Mg * K), bn = blas_int(c, Pin), bk = blas_int(c, Cg);

  parallel_for(N * group, N * group > 1, [&](int64_t task) {
    const int64_t img = task / group, gi = task % group;
    const T* xg = x + (img * C + gi * Cg) * Pin;  // [Cg, Pin]
    const T* wg = w + gi * Cg * Mg * K;           // [Cg, Mg*K]
    T* yg = y + (img * M + gi * Mg) * Pout;       // [Mg, Pout]
    std::vector<T> col(size_t(Mg * K * Pin));     // [Mg*K, Pin]
    gemm(true, false, bm, bn, bk, wg, bm, xg, bn, col.data(), bn);
    for (int64_t m = 0; m < Mg; ++m) {
      T* ym = yg + m * Pout;
      std::fill(ym, ym + Pout, bias ? bias[gi * Mg + m] : T(0));
      const T* cm = col.data() + m * K * Pin;  // [K, Pin]
      for (int64_t j = 0; j < K * Pin; ++j)
        if (idx[size_t(j)] >= 0) ym[idx[size_t(j)]] += cm[j];
    }
  });
}

}  // namespace

void Conv_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return conv<float>(c);
    case DType::f64: return conv<double>(c);
    case DType::f16:
    case DType::bf16: return in_float(c, conv<float>);  // --mixed-precision
    default: c.fail("input 0 is {}; Conv runs on float16, bfloat16, float32 and float64", dtype_name(c.in(0).dtype));
  }
}

void ConvTranspose_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return conv_transpose<float>(c);
    case DType::f64: return conv_transpose<double>(c);
    case DType::f16:
    case DType::bf16: return in_float(c, conv_transpose<float>);  // --mixed-precision, and Conv's input gradient
    default:
      c.fail("input 0 is {}; ConvTranspose runs on float16, bfloat16, float32 and float64", dtype_name(c.in(0).dtype));
  }
}

}  // namespace onnxdp
