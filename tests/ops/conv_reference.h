// A naive N-D convolution in double, straight from the definition (one loop per image, channel,
// position and tap; no im2col, no BLAS, no chunks): the independent reference the CPU
// convolution engine's tests (tests/ops/test_nn.cpp: Conv, ConvTranspose; tests/ops/test_grad.cpp:
// ConvGradFilter) hold its three kernels against on the shapes each of its paths takes.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/cpu/onednn.h"
#include "exec/cpu/threads.h"
#include "graph/tensor.h"

namespace onnxdp::convref {

// Position o of the iterated grid and tap k meet bound coordinate o*stride - pad_begin + k*dilation
// in each spatial dim. f(o_flat, k_flat, b_flat) for every pair that lands inside the bound grid.
struct Windows {
  Shape iter, bound, kernel;
  std::vector<int64_t> strides, dilations, pad_begin;
};

inline int64_t numel(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

// The multi-index of flat index i in shape s (row-major).
inline std::vector<int64_t> unflat(int64_t i, const Shape& s) {
  std::vector<int64_t> v(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    v[d] = i % s[d];
    i /= s[d];
  }
  return v;
}

template <class F>
void each_tap(const Windows& w, const F& f) {
  for (int64_t o = 0; o < numel(w.iter); ++o)
    for (int64_t k = 0; k < numel(w.kernel); ++k) {
      const std::vector<int64_t> oi = unflat(o, w.iter), ki = unflat(k, w.kernel);
      int64_t b = 0;
      bool inside = true;
      for (size_t d = 0; d < oi.size(); ++d) {
        const int64_t c = oi[d] * w.strides[d] - w.pad_begin[d] + ki[d] * w.dilations[d];
        inside = inside && c >= 0 && c < w.bound[d];
        b = b * w.bound[d] + c;
      }
      if (inside) f(o, k, b);
    }
}

inline double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f64 ? t.as<double>()[i] : double(t.as<float>()[i]);
}

// Conv: x [N, C, bound], w [M, C/group, kernel], bias [M] (or empty) -> y [N, M, iter].
inline std::vector<double> conv(const Tensor& x, const Tensor& w, const Tensor* bias, const Windows& g, int64_t group) {
  const int64_t N = x.shape()[0], C = x.shape()[1], M = w.shape()[0], Cg = C / group, Mg = M / group;
  const int64_t P = numel(g.iter), S = numel(g.bound), K = numel(g.kernel);
  std::vector<double> y(size_t(N * M * P), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t p = 0; p < P; ++p) y[size_t((n * M + m) * P + p)] = bias ? at(*bias, m) : 0.0;
      for (int64_t cl = 0; cl < Cg; ++cl) {
        const int64_t c = m / Mg * Cg + cl;
        each_tap(g, [&](int64_t o, int64_t k, int64_t b) {
          y[size_t((n * M + m) * P + o)] += at(x, (n * C + c) * S + b) * at(w, (m * Cg + cl) * K + k);
        });
      }
    }
  return y;
}

// ConvTranspose: x [N, C, iter], w [C, M/group, kernel], bias [M] (or empty) -> y [N, M, bound]:
// each input element spread over the outputs its taps reach.
inline std::vector<double> conv_transpose(const Tensor& x, const Tensor& w, const Tensor* bias, const Windows& g,
                                          int64_t group) {
  const int64_t N = x.shape()[0], C = x.shape()[1], Mg = w.shape()[1], M = Mg * group, Cg = C / group;
  const int64_t P = numel(g.iter), S = numel(g.bound), K = numel(g.kernel);
  std::vector<double> y(size_t(N * M * S), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t s = 0; s < S; ++s) y[size_t((n * M + m) * S + s)] = bias ? at(*bias, m) : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ml = 0; ml < Mg; ++ml) {
        const int64_t m = c / Cg * Mg + ml;
        each_tap(g, [&](int64_t o, int64_t k, int64_t b) {
          y[size_t((n * M + m) * S + b)] += at(x, (n * C + c) * P + o) * at(w, (c * Mg + ml) * K + k);
        });
      }
  return y;
}

// ConvGradFilter: x [N, C, bound], dy [N, M, iter] -> dW [M, C/group, kernel].
inline std::vector<double> filter_grad(const Tensor& x, const Tensor& dy, const Windows& g, int64_t group) {
  const int64_t N = x.shape()[0], C = x.shape()[1], M = dy.shape()[1], Cg = C / group, Mg = M / group;
  const int64_t P = numel(g.iter), S = numel(g.bound), K = numel(g.kernel);
  std::vector<double> dw(size_t(M * Cg * K), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t cl = 0; cl < Cg; ++cl) {
        const int64_t c = m / Mg * Cg + cl;
        each_tap(g, [&](int64_t o, int64_t k, int64_t b) {
          dw[size_t((m * Cg + cl) * K + k)] += at(dy, (n * M + m) * P + o) * at(x, (n * C + c) * S + b);
        });
      }
  return dw;
}

}  // namespace onnxdp::convref

namespace onnxdp::convref {

// The cases the engine's tests run: each takes one of its paths (`path` says which), and the
// set covers every one: gathered images, rows of one image in chunks, Conv's three product
// orientations (y^T, in place for wide outputs, W x col for narrow windows), the 1x1 window read
// in place, windows as shifted (phase) planes at strides 1 and 2, short rows (flat table), rows
// where planes would drop too many positions (runs), the direct depthwise loops on short and
// long rows and the depthwise filter gradient over padded planes, 1-D and 3-D. The paths named are
// the engine's own (float64, and float32 without oneDNN); on an AVX-512 CPU a float32 case with
// planes of at most 64 positions, one group and fewer than 16 outputs takes the small-plane loops
// (exec/cpu/conv_small.h) instead, as the cases marked "small planes" are there for, and a float32
// depthwise 2-D case at stride 1 with rows of 12 or more outputs takes the depthwise loops
// (exec/cpu/conv_depthwise.h; a 3-row window's filter gradient only on rows of 28 or more), as the cases
// marked "depthwise loops" are there for (and "depthwise 5x5 on 13x19" too).
struct Case {
  const char* path;
  Shape x;
  int64_t M;
  std::vector<int64_t> kernel, strides, dilations, pads;
  int64_t group;
  bool bias;
};

inline std::vector<Case> engine_cases() {
  return {
      {"grouped, strided, dilated, asymmetric pads, 3 images in one product", {3, 6, 7, 9}, 8, {3, 2}, {2, 1}, {1, 2}, {1, 0, 2, 1}, 2, true},
      {"depthwise, short rows (flat table), stride 2", {2, 4, 6, 7}, 4, {3, 3}, {2, 2}, {1, 1}, {1, 0, 1, 2}, 4, true},
      {"depthwise, long rows (runs), dilation 2", {2, 3, 5, 21}, 3, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}, 3, false},
      {"depthwise, long rows (runs), stride 3", {1, 2, 4, 60}, 2, {2, 5}, {1, 3}, {1, 1}, {0, 2, 1, 1}, 2, true},
      {"depth multiplier 2 (direct loops)", {2, 3, 5, 5}, 6, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3, true},
      {"depthwise 7x7 mostly padding, 16 channels (ConvNeXt; oneDNN's filter gradient left to the direct loops)", {3, 16, 6, 5}, 16, {7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 16, true},
      {"depthwise 3x5 dilation 2, stride 2, uneven pads (direct loops over padded planes)", {2, 4, 9, 12}, 4, {3, 5}, {2, 2}, {2, 2}, {2, 1, 1, 2}, 4, false},
      {"depthwise 5x5 on 13x19: whole vectors of positions (one of 16 floats, two of 8 doubles) and a masked last one per row (padded planes)", {2, 3, 13, 19}, 3, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 3, true},
      {"depthwise 1-D, stride 2, dilation 2, uneven pads (padded planes, one row)", {2, 3, 37}, 3, {5}, {2}, {2}, {3, 1}, 3, true},
      // Depthwise windows by the AVX-512 loops (exec/cpu/conv_depthwise.h) where the CPU has them:
      // tiles of 14, 8 and 4 output rows, whole and masked vectors of columns, kernel columns in
      // groups, chunks of rows and of images in the filter gradient, dy read in place where the
      // kernel's columns make one group (3x3 on rows of 28 or more, 5x3, 7x2), short last turns.
      {"depthwise 7x7 on 23x37 (depthwise loops: 14-row tiles, the last one cut to 9 rows, a masked third vector)", {2, 5, 23, 37}, 5, {7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 5, true},
      {"depthwise 3x3 on 22x16 (depthwise loops: a tile of 14 rows then 8, one whole vector)", {3, 4, 22, 16}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 4, false},
      {"depthwise 5x3, uneven pads, 17 output rows (depthwise loops: a 4-row tile cut to 3)", {2, 3, 18, 20}, 3, {5, 3}, {1, 1}, {1, 1}, {2, 0, 1, 2}, 3, true},
      {"depthwise 5x5 on 14x13 (depthwise loops: rows shorter than a vector)", {3, 4, 14, 13}, 4, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 4, true},
      {"depthwise 5x11 on 16x40 (depthwise loops: kernel columns in groups of 3, 3, 3 and 2)", {1, 2, 16, 40}, 2, {5, 11}, {1, 1}, {1, 1}, {2, 5, 2, 5}, 2, true},
      {"depthwise 7x5 on 70x18 (depthwise loops: columns in groups of 2, 2 and 1, dy rows in two chunks; the second vector's 2 columns of two row blocks in one tile)", {1, 2, 70, 18}, 2, {7, 5}, {1, 1}, {1, 1}, {3, 2, 3, 2}, 2, false},
      {"depthwise 3x3 on 10x30 (depthwise loops: dy in place, 3 images a chunk, a short last turn, a masked second vector)", {3, 4, 10, 30}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 4, true},
      {"depthwise 3x3 on 70x28 (depthwise loops: dy in place, rows in chunks of 63 and 7)", {1, 2, 70, 28}, 2, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 2, false},
      {"depthwise 7x2 on 15x29, uneven pads (depthwise loops: one column group, dy in place, a one-row last turn)", {2, 3, 15, 29}, 3, {7, 2}, {1, 1}, {1, 1}, {3, 0, 3, 1}, 3, true},
      {"one input channel, 8 outputs (product; small planes)", {5, 1, 8, 8}, 8, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true},
      // Small planes (exec/cpu/conv_small.h): the AVX-512 loops where the CPU has them.
      {"8 -> 16 on 4x4: the input gradient by the small-plane loops", {3, 8, 4, 4}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {"8 -> 16 on 4x4, 300 images (small planes: the filter gradient's 16 outputs in two tiles, chunks of 256 and 44 images)", {300, 8, 4, 4}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, false},
      {"2 -> 12 on 3x5, 270 images, uneven pads (small planes: tiles of 8 and 4 outputs, chunks of 256 and 14 images)", {270, 2, 3, 5}, 12, {2, 3}, {1, 1}, {1, 1}, {1, 0, 0, 2}, 1, true},
      {"16 -> 8 on 4x4, 2 images a thread's share (small planes)", {5, 16, 4, 4}, 8, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, false},
      {"7x7 planes, 5x5 window, 13 outputs (small planes: 49 positions as runs, dy through whole-vector copies, tiles of 8, 4 and 1 channels)", {3, 3, 7, 7}, 13, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 1, true},
      {"stride 2 on 8x8, uneven pads (small planes: views as permutes; the input gradient a strided transpose)", {2, 4, 8, 8}, 6, {3, 3}, {2, 2}, {1, 1}, {1, 0, 1, 1}, 1, true},
      {"dilation 2, uneven pads, 3x2 window on 6x7 (small planes: 42 -> 35 positions, permutes of whole-vector copies)", {2, 2, 6, 7}, 3, {3, 2}, {1, 1}, {2, 1}, {2, 0, 1, 1}, 1, false},
      {"1-D, 60 positions, 15 outputs (small planes)", {40, 3, 60}, 15, {3}, {1}, {1}, {1, 1}, 1, true},
      {"stride 1, long rows (planes), dilation 2", {3, 5, 9, 20}, 6, {3, 2}, {1, 1}, {2, 3}, {2, 1, 0, 3}, 1, true},
      {"stride 1, one large image in chunks of rows (planes)", {1, 2, 90, 90}, 3, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {"stride 2, one large image in chunks of rows (phase planes)", {1, 2, 180, 180}, 3, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {"dilation 4 on long rows, one large image in chunks of rows (runs)", {1, 2, 300, 36}, 3, {3, 3}, {1, 1}, {1, 4}, {1, 4, 1, 4}, 1, true},
      {"stride 2, 72 taps x channels (phase planes, the y^T product)", {3, 8, 9, 11}, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 1}, 1, true},
      {"stride 2, 72 taps x channels, short rows (flat table, the y^T product)", {3, 8, 5, 5}, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {"stride 2, 64 outputs per group (in-place product)", {2, 3, 6, 6}, 64, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {"stride 1, short rows (flat table)", {4, 3, 6, 6}, 5, {3, 3}, {1, 1}, {1, 1}, {1, 0, 0, 1}, 1, false},
      {"1x1 read in place, 2 groups", {2, 4, 3, 5}, 6, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 2, true},
      {"1x1 stride 2 (phase planes)", {3, 4, 5, 6}, 5, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 1, false},
      {"1-D, stride 2 (phase planes)", {3, 2, 11}, 4, {4}, {2}, {2}, {3, 1}, 1, true},
      {"3-D, strides 1, 2, 1 (runs)", {2, 2, 4, 5, 6}, 3, {2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}, 1, false},
      // oneDNN's blocked kernels (channels in blocks of 16): a ResNet's downsampling, two groups of 16.
      {"16 -> 32 channels, stride 2 (oneDNN: blocked)", {3, 16, 9, 9}, 32, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {"2 groups of 16 channels, 1x1 and 3x3 pads (oneDNN: blocked, grouped)", {2, 32, 6, 7}, 32, {3, 3}, {1, 1}, {1, 1}, {1, 0, 1, 2}, 2, false},
      // 16 -> 16 at unit strides: oneDNN runs the forward as the backward-data pass of the reversed window.
      {"16 -> 16 channels, stride 1 (oneDNN: forward as backward data, reversed taps)", {2, 16, 7, 9}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {"16 -> 16 channels, stride 1, dilation 2, uneven pads (oneDNN: forward as backward data)", {2, 16, 6, 7}, 16, {3, 2}, {1, 1}, {2, 1}, {2, 0, 1, 1}, 1, false},
  };
}

// Restores the calling thread's kernel thread count (the cases run at several) when it ends.
// Restores the thread count and the oneDNN switch a test changes.
struct KeepThreads {
  int before = cpu_threads();
  bool dnnl = dnnl_enabled();
  ~KeepThreads() {
    set_cpu_threads(before);
    set_dnnl_enabled(dnnl);
  }
};

// The oneDNN settings a dtype's convolutions can run under: float32 with oneDNN (where the build
// has it; the im2col engine again where not) and without; float64 always takes the im2col engine.
inline std::vector<bool> dnnl_settings_for(DType t) {
  if (t == DType::f32) return {true, false};
  return {false};
}

// The case's window geometry, given Conv's output spatial shape.
inline Windows windows_of(const Case& c, const Shape& y) {
  const size_t n = c.kernel.size();
  Windows w;
  w.iter.assign(y.begin() + 2, y.end());
  w.bound.assign(c.x.begin() + 2, c.x.end());
  w.kernel = c.kernel;
  w.strides = c.strides;
  w.dilations = c.dilations;
  w.pad_begin.assign(c.pads.begin(), c.pads.begin() + int64_t(n));
  return w;
}

// Conv's output spatial size per dim: floor((D + pads - span) / stride) + 1.
inline Shape conv_output_shape(const Case& c) {
  const size_t n = c.kernel.size();
  Shape y = {c.x[0], c.M};
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = (c.kernel[i] - 1) * c.dilations[i] + 1;
    y.push_back((c.x[i + 2] + c.pads[i] + c.pads[i + n] - span) / c.strides[i] + 1);
  }
  return y;
}

}  // namespace onnxdp::convref
