// The convolution engine of exec/cpu/conv_gemm.h: chunks, im2col / col2im, the products, and the
// direct loops of depthwise windows.
#include "exec/cpu/conv_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "exec/cpu/blas.h"
#include "exec/cpu/blocked.h"
#include "exec/cpu/onednn.h"
#include "exec/cpu/clones.h"
#include "exec/cpu/row_sum.h"
#include "exec/cpu/conv_depthwise.h"
#include "exec/cpu/conv_small.h"
#include "exec/cpu/scratch.h"

namespace onnxdp {

namespace {

// A chunk's im2col holds about this many elements (512 KB of float: half this machine's 1 MB L2
// per core), and at least kChunkMinColumns window positions so that its product stays wide.
constexpr int64_t kChunkElements = int64_t(1) << 17;
constexpr int64_t kChunkMinColumns = 256;

// Rows shorter than this (small images: the sample CNN's 8 and 4) are gathered through a flat
// table instead of run by run, whose per-run work would outweigh the few elements each moves.
constexpr int64_t kShortRow = 16;

// At most this many channels on the other side of a window with one input channel (Conv,
// ConvGradFilter) or one output channel (ConvTranspose) take the direct loops: a product with one
// or two columns runs far below BLAS's speed, while with more (the CNN's first layer, 1 -> 8
// channels) it is faster than the loops.
constexpr int64_t kDirectMaxChannels = 2;

// From this many output channels per group on, Conv's product over one image's columns runs as
// fast with the channels as its rows (measured: 80 GFLOP/s either way at 64), which writes y in
// place instead of through y^T.
constexpr int64_t kWideOutput = 64;

// Below this many multiply-adds per output (Cg x taps: the CNN's first layer has 9) the product
// is cheap next to moving its result, and Conv's y^T's strided transpose into y costs more than
// the product gains from that orientation: such windows take W_g x col, whose rows copy into y.
constexpr int64_t kNarrowWindow = 32;

// Where tap t meets row q of the iterated grid (a row: one position of all dims but the last; the
// last dim, of length L, runs along it): iterated positions o in [lo, hi) of the row meet bound
// elements base + o*stride (flat offsets in the bound grid, all inside it); the row's other
// positions meet padding. lo == hi: the whole row does.
struct TapRun {
  int64_t lo = 0, hi = 0, base = 0;
};

// The iterated grid as rows, and the run of every (tap, row) pair, [K, Q] row-major; for short
// rows also `flat` [K, P]: the bound offset each (tap, position) meets, -1 for padding.
struct Runs {
  int64_t K = 1, Q = 1, L = 1, stride = 1, bound_size = 1;
  std::vector<TapRun> runs;
  std::vector<int32_t> flat;
  const TapRun& at(int64_t t, int64_t q) const { return runs[size_t(t * Q + q)]; }
  const int32_t* flat_at(int64_t t, int64_t q) const { return flat.data() + (t * Q + q) * L; }
};

Runs tap_runs(const ConvWindows& g) {
  const size_t n = g.iter.size();
  Runs r;
  r.K = g.kernel_size();
  r.L = n ? g.iter[n - 1] : 1;
  r.Q = r.L ? g.iter_size() / r.L : 0;
  r.stride = n ? g.strides[n - 1] : 1;
  r.bound_size = g.bound_size();
  r.runs.resize(size_t(r.K * r.Q));
  if (n == 0) {  // no spatial dims: one position, one tap
    if (!r.runs.empty()) r.runs[0] = {0, 1, 0};
    return r;
  }
  const int64_t B = g.bound[n - 1], s = r.stride;
  std::vector<int64_t> k(n, 0), o(n, 0);
  for (int64_t t = 0; t < r.K; ++t) {
    // Along the row: bound coordinate off + o*s, inside when 0 <= off + o*s < B.
    const int64_t off = k[n - 1] * g.dilations[n - 1] - g.pad_begin[n - 1];
    const int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
    const int64_t hi = B - 1 - off < 0 ? 0 : std::min(r.L, (B - 1 - off) / s + 1);
    std::fill(o.begin(), o.end(), 0);
    for (int64_t q = 0; q < r.Q; ++q) {
      bool inside = lo < hi;
      int64_t base = 0;
      for (size_t i = 0; i + 1 < n; ++i) {
        const int64_t c = o[i] * g.strides[i] - g.pad_begin[i] + k[i] * g.dilations[i];
        inside = inside && c >= 0 && c < g.bound[i];
        base = base * g.bound[i] + c;
      }
      if (inside) r.runs[size_t(t * r.Q + q)] = {lo, hi, base * B + off};
      for (size_t i = n - 1; i-- > 0;) {  // next row
        if (++o[i] < g.iter[i]) break;
        o[i] = 0;
      }
    }
    for (size_t i = n; i-- > 0;) {  // next tap
      if (++k[i] < g.kernel[i]) break;
      k[i] = 0;
    }
  }
  if (r.L < kShortRow && r.bound_size <= std::numeric_limits<int32_t>::max()) {
    r.flat.assign(size_t(r.K * r.Q * r.L), -1);
    for (int64_t t = 0; t < r.K; ++t)
      for (int64_t q = 0; q < r.Q; ++q) {
        const TapRun& run = r.at(t, q);
        int32_t* f = r.flat.data() + (t * r.Q + q) * r.L;
        for (int64_t o = run.lo; o < run.hi; ++o) f[o] = int32_t(run.base + o * s);
      }
  }
  return r;
}

// The engine's two scratch buffers (exec/cpu/scratch.h) hold im2col and the product's other
// operand or result, and the padded planes of a task's images: a chunk's im2col (about
// kChunkElements, at least one row of the image) and product, and a task's padded input (its
// images' channels of one group, slightly larger than the input itself).

// A chunk: images [n0, n0 + images), iterated rows [q0, q1) of each; its columns (window
// positions) are image-major, R = images * (q1 - q0) * L.
struct Chunk {
  int64_t n0, images, q0, q1;
};

// How a call's work is cut: tasks of `images_per_task` images (the thread team shares the tasks
// of every group), each one chunk, or, one image per task, chunks of `rows_per_chunk` rows.
// An image's columns are Q rows of L.
struct Chunking {
  int64_t Q = 1, L = 1, images_per_task = 1, rows_per_chunk = 1, tasks = 0, max_columns = 0;
};

Chunking chunking(int64_t Q, int64_t L, int64_t images, int64_t groups, int64_t col_rows, bool direct) {
  Chunking c;
  c.Q = Q;
  c.L = L;
  const int64_t P = Q * L;
  const int64_t want = std::max(kChunkMinColumns, kChunkElements / std::max<int64_t>(col_rows, 1));
  const int64_t threads = in_thread_share() ? 1 : cpu_threads();
  const int64_t per_thread = (images + threads - 1) / threads;  // keep every thread busy
  // A direct window reads the input in place, one image at a time; others gather many images.
  c.images_per_task = direct ? 1 : std::clamp<int64_t>(want / std::max<int64_t>(P, 1), 1, std::max<int64_t>(per_thread, 1));
  c.rows_per_chunk = c.images_per_task > 1 ? Q : std::clamp<int64_t>(want / std::max<int64_t>(L, 1), 1, Q);
  c.tasks = (images + c.images_per_task - 1) / c.images_per_task * groups;
  c.max_columns = c.images_per_task > 1 ? c.images_per_task * P : c.rows_per_chunk * L;
  return c;
}

// Calls chunk(image group task's group, Chunk) for every chunk of task `task`, in row order.
template <class F>
void for_each_chunk(const Chunking& c, int64_t images, int64_t groups, int64_t task, const F& chunk) {
  const int64_t gi = task % groups, n0 = task / groups * c.images_per_task;
  const int64_t count = std::min(c.images_per_task, images - n0);
  if (count > 1 || c.rows_per_chunk >= c.Q) return chunk(gi, Chunk{n0, count, 0, c.Q});
  for (int64_t q0 = 0; q0 < c.Q; q0 += c.rows_per_chunk)
    chunk(gi, Chunk{n0, 1, q0, std::min(c.Q, q0 + c.rows_per_chunk)});
}

// col [channels*K, R] for a chunk: x points at the chunk's first image's first channel of the
// group (images `image_stride` apart, channels bound_size apart); row c*K + t holds what tap t
// sees of channel c at each of the chunk's positions (zero where that is padding).
template <class T>
ONNXDP_CPU_CLONES void im2col(const Runs& r, const Chunk& ck, const T* x, int64_t image_stride, int64_t channels, T* col) {
  const int64_t rows = ck.q1 - ck.q0, R = ck.images * rows * r.L, L = r.L, s = r.stride;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t t = 0; t < r.K; ++t) {
      T* dst = col + (c * r.K + t) * R;
      for (int64_t b = 0; b < ck.images; ++b) {
        const T* src = x + b * image_stride + c * r.bound_size;
        if (!r.flat.empty()) {
          const int32_t* f = r.flat_at(t, ck.q0);
          T* d = dst + b * rows * L;
          // Branch-free (a load from the clamped offset, then a select): vectorizes as a gather.
          for (int64_t j = 0; j < rows * L; ++j) {
            const int32_t i = f[j];
            const T v = src[std::max(i, 0)];
            d[j] = i < 0 ? T(0) : v;
          }
          continue;
        }
        for (int64_t q = ck.q0; q < ck.q1; ++q) {
          const TapRun& run = r.at(t, q);
          T* d = dst + (b * rows + q - ck.q0) * L;
          std::fill(d, d + run.lo, T(0));
          if (s == 1)
            std::copy(src + (run.base + run.lo), src + (run.base + run.hi), d + run.lo);
          else if (s == 2)  // a constant stride: the x86-64-v3 build vectorizes it (ResNets' downsampling)
            for (int64_t o = run.lo; o < run.hi; ++o) d[o] = src[run.base + o * 2];
          else
            for (int64_t o = run.lo; o < run.hi; ++o) d[o] = src[run.base + o * s];
          std::fill(d + run.hi, d + L, T(0));
        }
      }
    }
}

// The adjoint of im2col: y (the chunk's first image's first output channel of the group) gets
// every column of col [channels*K, R] added where its tap lands.
template <class T>
ONNXDP_CPU_CLONES void col2im_add(const Runs& r, const Chunk& ck, const T* col, int64_t image_stride, int64_t channels, T* y) {
  const int64_t rows = ck.q1 - ck.q0, R = ck.images * rows * r.L, L = r.L, s = r.stride;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t t = 0; t < r.K; ++t) {
      const T* src = col + (c * r.K + t) * R;
      for (int64_t b = 0; b < ck.images; ++b) {
        T* dst = y + b * image_stride + c * r.bound_size;
        if (!r.flat.empty()) {
          const int32_t* f = r.flat_at(t, ck.q0);
          const T* d = src + b * rows * L;
          for (int64_t j = 0; j < rows * L; ++j)
            if (f[j] >= 0) dst[f[j]] += d[j];
          continue;
        }
        for (int64_t q = ck.q0; q < ck.q1; ++q) {
          const TapRun& run = r.at(t, q);
          const T* d = src + (b * rows + q - ck.q0) * L;
          for (int64_t o = run.lo; o < run.hi; ++o) dst[run.base + o * s] += d[o];
        }
      }
    }
}

// dst [channels, R] <- the chunk's columns of src (images `image_stride` apart, channels P apart).
template <class T>
void gather_columns(const Chunk& ck, int64_t L, int64_t P, const T* src, int64_t image_stride, int64_t channels, T* dst) {
  const int64_t len = (ck.q1 - ck.q0) * L, R = ck.images * len;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t b = 0; b < ck.images; ++b) {
      const T* s = src + b * image_stride + c * P + ck.q0 * L;
      std::copy(s, s + len, dst + c * R + b * len);
    }
}

// A 1x1 window with unit strides and no padding: the iterated grid is the bound grid and im2col
// is the input itself.
bool is_direct(const ConvWindows& g) {
  bool direct = g.kernel_size() == 1 && g.iter == g.bound;
  for (size_t i = 0; i < g.iter.size(); ++i) direct = direct && g.strides[i] == 1 && g.pad_begin[i] == 0;
  return direct;
}

// ---- depthwise windows (one input channel per group): direct loops ------------------------------
// (Float 2-D windows at stride 1 with one channel per group, on AVX-512 CPUs, take the loops of
// exec/cpu/conv_depthwise.h before these are asked.)

// y [out, P] of one image and group = bias + the taps of each output channel's weights over
// x [S], the group's one input channel.
template <class T>
ONNXDP_CPU_CLONES void depthwise_forward(const Runs& r, int64_t out, const T* x, const T* w, const T* bias, T* y) {
  const int64_t L = r.L, s = r.stride, P = r.Q * L;
  for (int64_t m = 0; m < out; ++m) {
    T* ym = y + m * P;
    std::fill(ym, ym + P, bias ? bias[m] : T(0));
    for (int64_t t = 0; t < r.K; ++t) {
      const T wt = w[m * r.K + t];
      if (!r.flat.empty()) {
        const int32_t* f = r.flat_at(t, 0);
        for (int64_t j = 0; j < P; ++j)
          if (f[j] >= 0) ym[j] += wt * x[f[j]];
        continue;
      }
      for (int64_t q = 0; q < r.Q; ++q) {
        const TapRun& run = r.at(t, q);
        T* yr = ym + q * L;
        if (s == 1)
          for (int64_t o = run.lo; o < run.hi; ++o) yr[o] += wt * x[run.base + o];
        else
          for (int64_t o = run.lo; o < run.hi; ++o) yr[o] += wt * x[run.base + o * s];
      }
    }
  }
}

// ConvTranspose with one output channel per group: y [bound] of one image and group = bias + each
// of the group's `in` input channels x [P] spread over the taps with its weights w [in, K].
template <class T>
ONNXDP_CPU_CLONES void depthwise_transpose(const Runs& r, int64_t in, const T* x, int64_t x_channel_stride, const T* w,
                                           T bias, T* y) {
  const int64_t L = r.L, s = r.stride;
  std::fill(y, y + r.bound_size, bias);
  for (int64_t c = 0; c < in; ++c)
    for (int64_t t = 0; t < r.K; ++t) {
      const T wt = w[c * r.K + t];
      if (!r.flat.empty()) {
        const int32_t* f = r.flat_at(t, 0);
        const T* xc = x + c * x_channel_stride;
        for (int64_t j = 0; j < r.Q * L; ++j)
          if (f[j] >= 0) y[f[j]] += wt * xc[j];
        continue;
      }
      for (int64_t q = 0; q < r.Q; ++q) {
        const TapRun& run = r.at(t, q);
        const T* xr = x + c * x_channel_stride + q * L;
        if (s == 1)
          for (int64_t o = run.lo; o < run.hi; ++o) y[run.base + o] += wt * xr[o];
        else
          for (int64_t o = run.lo; o < run.hi; ++o) y[run.base + o * s] += wt * xr[o];
      }
    }
}

// The weight gradient of one output channel of a depthwise window: dw [K], each tap's sum over
// the images of dy (channel stride dy_image) times what the tap saw of x (x_image apart), in double.
// 3-D windows; 1-D and 2-D ones take depthwise_filter_grad_planes below.
template <class T>
ONNXDP_CPU_CLONES void depthwise_filter_grad(const Runs& r, int64_t images, const T* x, int64_t x_image, const T* dy,
                                             int64_t dy_image, T* dw) {
  const int64_t L = r.L, s = r.stride;
  for (int64_t t = 0; t < r.K; ++t) {
    double sum = 0;
    for (int64_t n = 0; n < images; ++n) {
      if (!r.flat.empty()) {
        const int32_t* f = r.flat_at(t, 0);
        const T* dyn = dy + n * dy_image;
        const T* xn = x + n * x_image;
        sum += row_sum(r.Q * L, [&](int64_t j) { return f[j] < 0 ? 0.0 : double(dyn[j]) * double(xn[f[j]]); });
        continue;
      }
      for (int64_t q = 0; q < r.Q; ++q) {
        const TapRun& run = r.at(t, q);
        const T* dyr = dy + n * dy_image + q * L + run.lo;
        const T* xr = x + n * x_image + run.base + run.lo * s;
        sum += row_sum(run.hi - run.lo, [&](int64_t j) { return double(dyr[j]) * double(xr[j * s]); });
      }
    }
    dw[t] = T(sum);
  }
}

// The same for 1-D and 2-D windows, as dot products over copies of the image: x zero-padded and
// split into the stride's column phases, and dy's rows. Tap (kh, kw) meets padded column
// ow * sw + kw * dwl: phase (kw * dwl) % sw, column ow + (kw * dwl) / sw there. So each tap reads
// a run of positions ow, ow + 1, .. side by side with dy's row, one 64-byte vector of positions at
// a time (16 floats, or 8 doubles), and kDepthwiseTaps taps are summed at once: one fused
// multiply-add each per vector of dy, the sums in registers. Position ow goes to lane ow mod the
// lane count; each lane sums an image's positions in the element type (in row, column order: a
// 56x56 float image gives a lane 196 terms), then adds that sum into its double total image by
// image, and the lanes' totals are added pairwise at the end. In a row's last vector, dy's lanes
// past the row are its copy's zero padding and x's are cleared (their columns may hold x's values,
// and 0 * inf is NaN); clearing them in every vector (a no-op mask in the whole ones) kept the
// sums in registers, where a separate masked last step had them spilled to the stack row by row.
// Aligning the taps' loads (shifted copies of the plane, or shuffles of aligned vectors) was no
// faster; summing a float model's taps in double throughout ran at half the lanes
// (bench/results/2026-12-06-depthwise.md).
constexpr int64_t kDepthwiseVectorBytes = 64, kDepthwiseTaps = 8;
inline float fused_multiply_add(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline double fused_multiply_add(double a, double b, double c) { return __builtin_fma(a, b, c); }
struct DepthwisePlanes {
  int64_t V;  // lanes: positions a vector
  int64_t OH, OW, H, W, KH, KW, sh, sw, dh, dwl, ph, pw;
  int64_t rows, cols, dy_cols, taps;  // padded rows; a phase row's columns; dy's row pitch; taps rounded up
  DepthwisePlanes(const ConvWindows& g, int64_t element_bytes) : V(kDepthwiseVectorBytes / element_bytes) {
    const bool two = g.iter.size() == 2;
    const size_t c = two ? 1 : 0;  // the column dim
    OH = two ? g.iter[0] : 1, H = two ? g.bound[0] : 1, KH = two ? g.kernel[0] : 1;
    sh = two ? g.strides[0] : 1, dh = two ? g.dilations[0] : 1, ph = two ? g.pad_begin[0] : 0;
    OW = g.iter[c], W = g.bound[c], KW = g.kernel[c], sw = g.strides[c], dwl = g.dilations[c], pw = g.pad_begin[c];
    rows = (OH - 1) * sh + (KH - 1) * dh + 1;
    dy_cols = (OW + V - 1) / V * V;
    cols = dy_cols + (KW - 1) * dwl / sw;
    taps = (KH * KW + kDepthwiseTaps - 1) / kDepthwiseTaps * kDepthwiseTaps;
  }
  int64_t plane_size() const { return sw * rows * cols; }
  int64_t buffer_size() const { return plane_size() + OH * dy_cols; }  // x's phases, then dy's rows
  int64_t acc_size() const { return taps * V; }
  // Where tap t's run for output row 0 starts in the phases.
  int64_t tap_base(int64_t t) const {
    const int64_t kh = t / KW, col = t % KW * dwl;
    return (col % sw * rows + kh * dh) * cols + col / sw;
  }
};

template <class T>
ONNXDP_CPU_CLONES void depthwise_filter_grad_planes(const DepthwisePlanes& p, int64_t images, const T* x,
                                                    int64_t x_image, const T* dy, int64_t dy_image, T* dw, T* buffer,
                                                    double* acc) {
  constexpr int64_t V = kDepthwiseVectorBytes / int64_t(sizeof(T)), B = kDepthwiseTaps;
  // GCC's vector extension: loops over lanes written out were vectorized across the taps.
  typedef T Lanes __attribute__((vector_size(kDepthwiseVectorBytes)));
  const int64_t K = p.KH * p.KW, full = p.OW / V * V;
  T* plane = buffer;
  T* dyd = buffer + p.plane_size();
  // The padding (and dy's row tails) are zero for every image: only what x and dy cover changes.
  std::fill(buffer, buffer + p.buffer_size(), T(0));
  std::fill(acc, acc + p.acc_size(), 0.0);
  const int64_t i0 = std::max<int64_t>(0, -p.ph), i1 = std::min(p.H, p.rows - p.ph);
  // The row's last vector: all bits of its lanes before OW, none past.
  typedef std::conditional_t<sizeof(T) == 4, int32_t, int64_t> Int;
  typedef Int Bits __attribute__((vector_size(kDepthwiseVectorBytes)));
  Bits tail, all;
  for (int64_t l = 0; l < V; ++l) tail[l] = full + l < p.OW ? Int(-1) : Int(0), all[l] = Int(-1);
  int64_t base[B];
  for (int64_t n = 0; n < images; ++n) {
    const T* xn = x + n * x_image;
    for (int64_t q = 0; q < p.sw; ++q) {  // phase q, column u: padded column u * sw + q, x's column that less pw
      T* pq = plane + q * p.rows * p.cols;
      const int64_t u0 = std::max<int64_t>(0, (p.pw - q + p.sw - 1) / p.sw),
                    u1 = std::min(p.cols, (p.W + p.pw - q + p.sw - 1) / p.sw);
      for (int64_t i = i0; i < i1; ++i) {
        const T* xr = xn + i * p.W + q - p.pw;
        T* row = pq + (i + p.ph) * p.cols;
        if (p.sw == 1)
          std::copy(xr + u0, xr + u1, row + u0);
        else
          for (int64_t u = u0; u < u1; ++u) row[u] = xr[u * p.sw];
      }
    }
    for (int64_t oh = 0; oh < p.OH; ++oh) std::copy_n(dy + n * dy_image + oh * p.OW, p.OW, dyd + oh * p.dy_cols);
    for (int64_t t0 = 0; t0 < p.taps; t0 += B) {
      for (int64_t b = 0; b < B; ++b) base[b] = p.tap_base(std::min(t0 + b, K - 1));  // past K: dropped
      Lanes part[B], dv, xv;
      for (int64_t b = 0; b < B; ++b) part[b] = Lanes{};
      // part[b] += dv * xv lane by lane, rounded once: one instruction where the CPU has FMA (the
      // AVX2 and AVX-512 clones), the C library's fma in the baseline build; the same value in all.
      // (Written out, not as a function: a 64-byte vector argument changes the call's ABI.)
      for (int64_t oh = 0; oh < p.OH; ++oh) {
        const T* d = dyd + oh * p.dy_cols;
        const T* xr = plane + oh * p.sh * p.cols;
        for (int64_t ow = 0; ow < p.dy_cols; ow += V) {
          std::memcpy(&dv, d + ow, sizeof dv);
          const Bits keep = ow < full ? all : tail;
#pragma GCC unroll 8  // the taps' sums in registers (otherwise they stay on the stack)
          for (int64_t b = 0; b < B; ++b) {
            std::memcpy(&xv, xr + base[b] + ow, sizeof xv);
            const Lanes xm = (Lanes)((Bits)xv & keep);
            for (int64_t l = 0; l < V; ++l) part[b][l] = fused_multiply_add(dv[l], xm[l], part[b][l]);
          }
        }
      }
      for (int64_t b = 0; b < B; ++b)  // the image's sums into the totals
        for (int64_t l = 0; l < V; ++l) acc[(t0 + b) * V + l] += double(part[b][l]);
    }
  }
  for (int64_t t = 0; t < K; ++t) {
    double* a = acc + t * V;
    for (int64_t w = V / 2; w > 0; w /= 2)
      for (int64_t l = 0; l < w; ++l) a[l] += a[l + w];
    dw[t] = T(a[0]);
  }
}

// dw [G, Mg, CK] (zeroed) = the threads' dW^T [G, CK, Mg] partial sums, added in thread order
// (deterministic for a given thread count) and transposed.
template <class T>
void transpose_partials(const std::vector<T>& partial, int threads, int64_t groups, int64_t CK, int64_t Mg, T* dw) {
  const size_t wsize = size_t(groups * Mg * CK);
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t m = 0; m < Mg; ++m) {
      T* dst = dw + (gi * Mg + m) * CK;
      for (int t = 0; t < threads; ++t) {
        const T* src = partial.data() + size_t(t) * wsize + gi * CK * Mg + m;
        for (int64_t k = 0; k < CK; ++k) dst[k] += src[k * Mg];
      }
    }
}

// ---- windows as shifted planes --------------------------------------------------------------------
//
// Iterated position o and tap k meet padded coordinate o*stride + k*dilation (padded: the bound
// grid shifted by pad_begin). Split the padded grid into its stride phases (phase ph of a dim
// holds the coordinates stride*u + ph): tap k's view of all positions is then phase
// (k*dilation) % stride read from offset (k*dilation) / stride, one shifted plane. Laying the
// positions out on the phase planes' row pitch ("virtual" positions: dim 0 as iterated, the others
// as a phase plane's extent) makes each im2col row one contiguous copy per (channel, tap, image),
// and col2im one contiguous add, instead of a run per row. The virtual positions past a row's end
// are computed too and dropped (planes are taken where that adds at most kPlaneWaste of the
// columns: 6 % at 32x32 with a 3x3 window, 12 % at 8x8 with stride 2); a phase plane has one row
// of slack at its end, which the last row's dropped positions read. With unit strides there is
// one phase: the zero-padded input itself.
constexpr double kPlaneWaste = 0.2;

// A phase plane's row r (row-major over all dims but the last) holds, at [lo, hi), the bound
// elements bound + first + (u - lo) * stride (the last dim's stride); the rest is padding.
struct PlaneRow {
  int64_t bound = -1, lo = 0, hi = 0, first = 0;
};

struct Plane {
  std::vector<int64_t> extent;      // [n] a phase plane's extents
  int64_t phase_size = 0;           // elements of one phase plane, slack included
  int64_t size = 0;                 // all phases of one channel
  int64_t Q = 0, L = 0;             // virtual positions per image: Q (iter[0]) rows of L
  int64_t stride = 1;               // the last dim's
  int64_t width = 1;                // the iterated grid's last dim: its rows' positions are contiguous
  std::vector<int64_t> tap_offset;  // [K] where tap t's view starts in a channel's phases
  std::vector<int64_t> virt;        // [P] the virtual position of each iterated position
  std::vector<PlaneRow> rows;       // [phases, rows of a phase plane]
  std::vector<char> used;           // [phases] read by some tap (a 1x1 window at stride 2: one of 4)
};

// The windows the planes take: some spatial dims, and few dropped positions.
bool plane_windows(const ConvWindows& g) {
  if (g.iter.empty()) return false;
  double virtual_positions = double(g.iter[0]);
  for (size_t i = 1; i < g.iter.size(); ++i)
    virtual_positions *= double(g.iter[i] + (g.kernel[i] - 1) * g.dilations[i] / g.strides[i]);
  return virtual_positions <= (1 + kPlaneWaste) * double(g.iter_size());
}

Plane make_plane(const ConvWindows& g) {
  const size_t n = g.iter.size();
  Plane pl;
  pl.extent.resize(n);
  int64_t phases = 1;
  for (size_t i = 0; i < n; ++i) {
    pl.extent[i] = g.iter[i] + (g.kernel[i] - 1) * g.dilations[i] / g.strides[i];
    phases *= g.strides[i];
  }
  const int64_t last = pl.extent[n - 1], rows = ConvWindows::prod(pl.extent) / last;
  pl.L = ConvWindows::prod(pl.extent) / pl.extent[0];
  pl.Q = g.iter[0];
  pl.phase_size = (pl.extent[0] + 1) * pl.L;
  pl.size = phases * pl.phase_size;
  pl.stride = g.strides[n - 1];
  pl.width = g.iter[n - 1];
  // Tap t: phase (k*d) % s, offset (k*d) / s in each dim.
  const int64_t K = g.kernel_size(), P = g.iter_size();
  pl.tap_offset.resize(size_t(K));
  pl.virt.resize(size_t(P));
  pl.used.assign(size_t(phases), 0);
  for (int64_t t = 0; t < K; ++t) {
    int64_t rest = t, off = 0, pitch = 1, phase = 0, phase_pitch = 1;
    for (size_t i = n; i-- > 0;) {
      const int64_t kd = rest % g.kernel[i] * g.dilations[i];
      rest /= g.kernel[i];
      off += kd / g.strides[i] * pitch;
      phase += kd % g.strides[i] * phase_pitch;
      pitch *= pl.extent[i];
      phase_pitch *= g.strides[i];
    }
    pl.tap_offset[size_t(t)] = phase * pl.phase_size + off;
    pl.used[size_t(phase)] = 1;
  }
  for (int64_t p = 0; p < P; ++p) {
    int64_t rest = p, v = 0, pitch = 1;
    for (size_t i = n; i-- > 0;) {
      v += rest % g.iter[i] * pitch;
      rest /= g.iter[i];
      pitch *= pl.extent[i];
    }
    pl.virt[size_t(p)] = v;
  }
  // Phase ph's element u holds bound coordinate s*u + ph - pad_begin in each dim.
  pl.rows.resize(size_t(phases * rows));
  const int64_t s = pl.stride, B = g.bound[n - 1];
  for (int64_t ph = 0; ph < phases; ++ph)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t prest = ph, rrest = r, b = 0, pitch = 1;
      const int64_t ph_last = prest % g.strides[n - 1];
      prest /= g.strides[n - 1];
      bool inside = true;
      for (size_t i = n - 1; i-- > 0;) {
        const int64_t c = g.strides[i] * (rrest % pl.extent[i]) + prest % g.strides[i] - g.pad_begin[i];
        rrest /= pl.extent[i];
        prest /= g.strides[i];
        inside = inside && c >= 0 && c < g.bound[i];
        b += c * pitch;
        pitch *= g.bound[i];
      }
      // Along the row: bound coordinate s*u + ph_last - pad_begin inside [0, B).
      const int64_t off = ph_last - g.pad_begin[n - 1];
      const int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
      const int64_t hi = B - 1 - off < 0 ? 0 : std::min(last, (B - 1 - off) / s + 1);
      if (inside && lo < hi) pl.rows[size_t(ph * rows + r)] = {b * B, lo, hi, off + lo * s};
    }
  return pl;
}

// dst [size] (a channel's phase planes) <- the bound grid src [bound], zero-padded (and cropped
// where the windows do not reach).
template <class T>
ONNXDP_CPU_CLONES void pad_plane(const Plane& pl, const T* src, T* dst) {
  const int64_t last = pl.extent.back(), rows = int64_t(pl.rows.size()) * pl.phase_size / pl.size, s = pl.stride;
  for (int64_t ph = 0; ph < pl.size / pl.phase_size; ++ph) {
    if (!pl.used[size_t(ph)]) continue;  // no tap reads it
    T* plane = dst + ph * pl.phase_size;
    for (int64_t r = 0; r < rows; ++r) {
      const PlaneRow& row = pl.rows[size_t(ph * rows + r)];
      T* d = plane + r * last;
      if (row.bound < 0) {
        std::fill(d, d + last, T(0));
        continue;
      }
      std::fill(d, d + row.lo, T(0));
      const T* from = src + row.bound + row.first;
      if (s == 1)
        std::copy(from, from + (row.hi - row.lo), d + row.lo);
      else if (s == 2)  // a constant stride vectorizes (as im2col's)
        for (int64_t u = 0; u < row.hi - row.lo; ++u) d[row.lo + u] = from[u * 2];
      else
        for (int64_t u = 0; u < row.hi - row.lo; ++u) d[row.lo + u] = from[u * s];
      std::fill(d + row.hi, d + last, T(0));
    }
    std::fill(plane + rows * last, plane + pl.phase_size, T(0));
  }
}

// The adjoint: dst [bound] += a channel's phase planes src over the bound grid.
template <class T>
ONNXDP_CPU_CLONES void crop_plane_add(const Plane& pl, const T* src, T* dst) {
  const int64_t last = pl.extent.back(), rows = int64_t(pl.rows.size()) * pl.phase_size / pl.size, s = pl.stride;
  for (int64_t ph = 0; ph < pl.size / pl.phase_size; ++ph)
    for (int64_t r = 0; r < rows && pl.used[size_t(ph)]; ++r) {  // (no tap writes an unused phase)
      const PlaneRow& row = pl.rows[size_t(ph * rows + r)];
      if (row.bound < 0) continue;
      const T* from = src + ph * pl.phase_size + r * last + row.lo;
      T* d = dst + row.bound + row.first;
      for (int64_t u = 0; u < row.hi - row.lo; ++u) d[u * s] += from[u];
    }
}

// col [channels*K, R] of a chunk from padded planes xp [images, channels, size]: row c*K + t is
// tap t's view of channel c, virtual rows [q0, q1) of each image.
template <class T>
void plane_im2col(const Plane& pl, const Chunk& ck, const T* xp, int64_t channels, T* col) {
  const int64_t K = int64_t(pl.tap_offset.size()), len = (ck.q1 - ck.q0) * pl.L, R = ck.images * len;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t t = 0; t < K; ++t)
      for (int64_t b = 0; b < ck.images; ++b) {
        const T* src = xp + (b * channels + c) * pl.size + pl.tap_offset[size_t(t)] + ck.q0 * pl.L;
        std::copy(src, src + len, col + (c * K + t) * R + b * len);
      }
}

// The adjoint: padded planes yp [images, channels, size] += col [channels*K, R].
template <class T>
ONNXDP_CPU_CLONES void plane_col2im_add(const Plane& pl, const Chunk& ck, const T* col, int64_t channels, T* yp) {
  const int64_t K = int64_t(pl.tap_offset.size()), len = (ck.q1 - ck.q0) * pl.L, R = ck.images * len;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t t = 0; t < K; ++t)
      for (int64_t b = 0; b < ck.images; ++b) {
        T* dst = yp + (b * channels + c) * pl.size + pl.tap_offset[size_t(t)] + ck.q0 * pl.L;
        const T* src = col + (c * K + t) * R + b * len;
        for (int64_t j = 0; j < len; ++j) dst[j] += src[j];
      }
}

// dst [channels, R] <- a chunk of src [images, channels (image_stride apart), P] at its virtual
// positions, zero at the dropped ones.
template <class T>
void to_virtual(const Plane& pl, const Chunk& ck, const T* src, int64_t image_stride, int64_t channels, T* dst) {
  const int64_t len = (ck.q1 - ck.q0) * pl.L, R = ck.images * len, P = int64_t(pl.virt.size());
  const int64_t per_row = P / pl.Q, p0 = ck.q0 * per_row, p1 = ck.q1 * per_row, v0 = ck.q0 * pl.L;
  std::fill(dst, dst + channels * R, T(0));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t b = 0; b < ck.images; ++b) {
      const T* s = src + b * image_stride + c * P;
      T* d = dst + c * R + b * len;
      for (int64_t p = p0; p < p1; p += pl.width)  // a row of positions: contiguous on both sides
        std::copy(s + p, s + p + pl.width, d + (pl.virt[size_t(p)] - v0));
    }
}

// y [Mg, P] (one image's channels, `P` apart) <- yt [virtual positions of the chunk's rows, Mg]
// at the kept positions, plus bias [Mg] (or nothing): channel by channel, row by row of the
// iterated grid, whose positions are contiguous on both sides (no per-position lookup).
template <class T>
ONNXDP_CPU_CLONES void plane_output(const Plane& pl, const Chunk& ck, const T* yt, int64_t Mg, const T* bias, T* y,
                                    int64_t P) {
  const int64_t per_row = P / pl.Q, v0 = ck.q0 * pl.L, w = pl.width;
  for (int64_t m = 0; m < Mg; ++m) {
    const T add = bias ? bias[m] : T(0);
    T* ym = y + m * P;
    for (int64_t p = ck.q0 * per_row; p < ck.q1 * per_row; p += w) {
      const T* src = yt + (pl.virt[size_t(p)] - v0) * Mg + m;
      for (int64_t j = 0; j < w; ++j) ym[p + j] = src[j * Mg] + add;
    }
  }
}

// The plane paths of the three kernels (see conv_forward & co. below for the shapes).
// The padded planes of a task's `count` images from n0, group gi's Cg channels of x [N, Cin, S],
// into xp [count, Cg, pl.size] (forward and filter gradient read the same).
template <class T>
void pad_task_planes(const Plane& pl, const T* x, int64_t n0, int64_t count, int64_t gi, int64_t Cg, int64_t Cin,
                     int64_t S, T* xp) {
  for (int64_t b = 0; b < count; ++b)
    for (int64_t c = 0; c < Cg; ++c)
      pad_plane(pl, x + ((n0 + b) * Cin + gi * Cg + c) * S, xp + (b * Cg + c) * pl.size);
}

template <class T>
void plane_forward(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* w, const T* bias, T* y) {
  const Plane pl = make_plane(g);
  const int64_t K = g.kernel_size(), P = g.iter_size(), S = g.bound_size(), Cg = ch.in, Mg = ch.out;
  const int64_t CK = Cg * K, Cin = ch.groups * Cg, Cout = ch.groups * Mg;
  const Chunking cut = chunking(pl.Q, pl.L, ch.images, ch.groups, CK, false);
  split_rows(cut.tasks, cut.tasks > 1, [&](int, int64_t lo, int64_t hi) {
    T* col = scratch<T>(0, CK * cut.max_columns + Mg * cut.max_columns);
    T* yt = col + CK * cut.max_columns;
    T* xp = scratch<T>(1, cut.images_per_task * Cg * pl.size);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t gi = task % ch.groups, n0 = task / ch.groups * cut.images_per_task;
      const int64_t count = std::min(cut.images_per_task, ch.images - n0);
      pad_task_planes(pl, x, n0, count, gi, Cg, Cin, S, xp);
      for_each_chunk(cut, ch.images, ch.groups, task, [&](int64_t, const Chunk& ck) {
        const int64_t len = (ck.q1 - ck.q0) * pl.L, R = ck.images * len;
        plane_im2col(pl, ck, xp + (ck.n0 - n0) * Cg * pl.size, Cg, col);
        // y^T [R, Mg] = col^T x W_g^T, then the kept positions into y
        blas_gemm(true, true, R, Mg, CK, T(1), col, R, w + gi * Mg * CK, CK, T(0), yt, Mg);
        for (int64_t b = 0; b < ck.images; ++b)
          plane_output(pl, ck, yt + b * len * Mg, Mg, bias ? bias + gi * Mg : nullptr,
                       y + ((ck.n0 + b) * Cout + gi * Mg) * P, P);
      });
    }
  });
}

template <class T>
void plane_transpose(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* w, const T* bias, T* y) {
  const Plane pl = make_plane(g);
  const int64_t K = g.kernel_size(), P = g.iter_size(), S = g.bound_size(), Cg = ch.in, Mg = ch.out;
  const int64_t MK = Mg * K, Cin = ch.groups * Cg, Cout = ch.groups * Mg;
  const Chunking cut = chunking(pl.Q, pl.L, ch.images, ch.groups, MK, false);
  split_rows(cut.tasks, cut.tasks > 1, [&](int, int64_t lo, int64_t hi) {
    T* col = scratch<T>(0, MK * cut.max_columns + Cg * cut.max_columns);
    T* xc = col + MK * cut.max_columns;
    T* yp = scratch<T>(1, cut.images_per_task * Mg * pl.size);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t gi = task % ch.groups, n0 = task / ch.groups * cut.images_per_task;
      const int64_t count = std::min(cut.images_per_task, ch.images - n0);
      std::fill(yp, yp + count * Mg * pl.size, T(0));
      for_each_chunk(cut, ch.images, ch.groups, task, [&](int64_t, const Chunk& ck) {
        const int64_t R = ck.images * (ck.q1 - ck.q0) * pl.L;
        to_virtual(pl, ck, x + (ck.n0 * Cin + gi * Cg) * P, Cin * P, Cg, xc);
        // col [Mg*K, R] = W_g^T [Mg*K, Cg] x x_g [Cg, R]
        blas_gemm(true, false, MK, R, Cg, T(1), w + gi * Cg * MK, MK, xc, R, T(0), col, R);
        plane_col2im_add(pl, ck, col, Mg, yp + (ck.n0 - n0) * Mg * pl.size);
      });
      for (int64_t b = 0; b < count; ++b)
        for (int64_t m = 0; m < Mg; ++m) {
          T* ym = y + ((n0 + b) * Cout + gi * Mg + m) * S;
          std::fill(ym, ym + S, bias ? bias[gi * Mg + m] : T(0));
          crop_plane_add(pl, yp + (b * Mg + m) * pl.size, ym);
        }
    }
  });
}

template <class T>
void plane_filter_grad(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* dy, T* dw) {
  const Plane pl = make_plane(g);
  const int64_t K = g.kernel_size(), P = g.iter_size(), S = g.bound_size(), Cg = ch.in, Mg = ch.out;
  const int64_t CK = Cg * K, Cin = ch.groups * Cg, Cout = ch.groups * Mg, wsize = Cout * CK;
  const Chunking cut = chunking(pl.Q, pl.L, ch.images, ch.groups, CK, false);
  const int threads = int(std::min<int64_t>(in_thread_share() ? 1 : cpu_threads(), std::max<int64_t>(cut.tasks, 1)));
  std::vector<T> partial(size_t(threads) * size_t(wsize), T(0));
  split_rows(cut.tasks, threads > 1, [&](int tid, int64_t lo, int64_t hi) {
    T* acc = partial.data() + size_t(tid) * size_t(wsize);
    T* col = scratch<T>(0, CK * cut.max_columns + Mg * cut.max_columns);
    T* dyc = col + CK * cut.max_columns;
    T* xp = scratch<T>(1, cut.images_per_task * Cg * pl.size);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t gi = task % ch.groups, n0 = task / ch.groups * cut.images_per_task;
      const int64_t count = std::min(cut.images_per_task, ch.images - n0);
      pad_task_planes(pl, x, n0, count, gi, Cg, Cin, S, xp);
      for_each_chunk(cut, ch.images, ch.groups, task, [&](int64_t, const Chunk& ck) {
        const int64_t R = ck.images * (ck.q1 - ck.q0) * pl.L;
        plane_im2col(pl, ck, xp + (ck.n0 - n0) * Cg * pl.size, Cg, col);
        to_virtual(pl, ck, dy + (ck.n0 * Cout + gi * Mg) * P, Cout * P, Mg, dyc);
        // dW_g^T [CK, Mg] += col x dy_g^T (the dropped positions' dy are zero)
        blas_gemm(false, true, CK, Mg, R, T(1), col, R, dyc, R, T(1), acc + gi * CK * Mg, Mg);
      });
    }
  });
  transpose_partials(partial, threads, ch.groups, CK, Mg, dw);
}

// A side's tensor as plain: itself, or a plain copy of a blocked one made in `copy`.
const float* plain_view(bool blocked, const float* t, int64_t N, int64_t C, int64_t S, std::vector<float>& copy) {
  if (!blocked) return t;
  copy.resize(size_t(N * C * S));
  blocked_to_plain(t, copy.data(), N, C, S);
  return copy.data();
}

ConvChannels plain_channels(ConvChannels ch) {
  ch.in_blocked = ch.out_blocked = false;
  return ch;
}

// A convolution from x [N, Cx, Sx] into y [N, Cy, Sy] (the in and out sides) with either blocked,
// where oneDNN does not run it: run(plain channels, x, y) on plain copies.
template <class Run>
void on_plain_copies(const ConvChannels& ch, const float* x, int64_t Cx, int64_t Sx, float* y, int64_t Cy, int64_t Sy,
                     const Run& run) {
  std::vector<float> xc, yc(ch.out_blocked ? static_cast<size_t>(ch.images * Cy * Sy) : 0);
  float* yp = ch.out_blocked ? yc.data() : y;
  run(plain_channels(ch), plain_view(ch.in_blocked, x, ch.images, Cx, Sx, xc), yp);
  if (ch.out_blocked) plain_to_blocked(yp, y, ch.images, Cy, Sy);
}

}  // namespace

template <class T>
void conv_forward(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* w, const T* bias, T* y,
                  ValueTag x_tag) {
  if (g.iter_size() == 0 || ch.images == 0 || ch.groups * ch.out == 0) return;
  // Own loops are asked before tap_runs, which costs more than a small plane's window (3 % of the
  // cnn's 1 -> 8 filter gradient).
  [[maybe_unused]] bool small = false;
  if constexpr (std::is_same_v<T, float>) {
    if (depthwise_takes(g, ch, ConvPass::forward)) return depthwise_conv_forward(g, ch, x, w, bias, y);
    small = small_conv_takes(g, ch, ConvPass::forward);
    if (small && !ch.in_blocked && !ch.out_blocked) return small_conv_forward(g, ch, x, w, bias, y);
  }
  const Runs r = tap_runs(g);
  const int64_t P = r.Q * r.L, S = r.bound_size, K = r.K, Cin = ch.groups * ch.in, Cout = ch.groups * ch.out;
  if constexpr (std::is_same_v<T, float>) {
    if (!small && dnnl_conv_forward(g, ch, x, w, bias, y, x_tag)) return;
    if (ch.in_blocked || ch.out_blocked)  // blocked tensors oneDNN does not run (or the small-plane loops take)
      return on_plain_copies(ch, x, Cin, S, y, Cout, P, [&](const ConvChannels& pc, const float* xp, float* yp) {
        conv_forward<float>(g, pc, xp, w, bias, yp);
      });
  }
  if (ch.in == 1 && ch.out <= kDirectMaxChannels) {  // depthwise: out channels per group each see one input channel
    parallel_for(ch.images * ch.groups, ch.images * ch.groups > 1, [&](int64_t task) {
      const int64_t n = task / ch.groups, gi = task % ch.groups;
      depthwise_forward(r, ch.out, x + (n * Cin + gi) * S, w + gi * ch.out * K, bias ? bias + gi * ch.out : nullptr,
                        y + (n * Cout + gi * ch.out) * P);
    });
    return;
  }
  const int64_t CK = ch.in * K, Mg = ch.out;
  const bool direct = is_direct(g);
  if (!direct && plane_windows(g)) return plane_forward(g, ch, x, w, bias, y);
  const Chunking cut = chunking(r.Q, r.L, ch.images, ch.groups, CK, direct);
  split_rows(cut.tasks, cut.tasks > 1, [&](int, int64_t lo, int64_t hi) {
    T* col = scratch<T>(0, CK * cut.max_columns);
    T* yt = scratch<T>(1, Mg * cut.max_columns);
    for (int64_t task = lo; task < hi; ++task)
      for_each_chunk(cut, ch.images, ch.groups, task, [&](int64_t gi, const Chunk& ck) {
        const int64_t len = (ck.q1 - ck.q0) * r.L, R = ck.images * len;
        const T* xg = x + (ck.n0 * Cin + gi * ch.in) * S;
        const T* a = col;  // col [CK, R], row length lda
        int64_t lda = R;
        if (direct && ck.images == 1) {
          a = xg + ck.q0 * r.L;
          lda = P;
        } else {
          im2col(r, ck, xg, Cin * S, ch.in, col);
        }
        const T* wg = w + gi * Mg * CK;  // [Mg, CK]
        if (ck.images == 1 && Mg >= kWideOutput) {  // y_g [Mg, R] = W_g x col, in place
          T* yg = y + (ck.n0 * Cout + gi * Mg) * P + ck.q0 * r.L;
          blas_gemm(false, false, Mg, R, CK, T(1), wg, CK, a, lda, T(0), yg, P);
          if (bias)
            for (int64_t m = 0; m < Mg; ++m)
              for (int64_t j = 0; j < len; ++j) yg[m * P + j] += bias[gi * Mg + m];
          return;
        }
        if (CK < kNarrowWindow) {  // y_g [Mg, R] = W_g x col, then each image's rows into y
          blas_gemm(false, false, Mg, R, CK, T(1), wg, CK, a, lda, T(0), yt, R);
          for (int64_t b = 0; b < ck.images; ++b)
            for (int64_t m = 0; m < Mg; ++m) {
              T* ym = y + ((ck.n0 + b) * Cout + gi * Mg + m) * P + ck.q0 * r.L;
              const T* src = yt + m * R + b * len;
              const T add = bias ? bias[gi * Mg + m] : T(0);
              for (int64_t j = 0; j < len; ++j) ym[j] = src[j] + add;
            }
          return;
        }
        // y^T [R, Mg] = col^T x W_g^T
        blas_gemm(true, true, R, Mg, CK, T(1), a, lda, wg, CK, T(0), yt, Mg);
        for (int64_t b = 0; b < ck.images; ++b)
          for (int64_t m = 0; m < Mg; ++m) {
            T* ym = y + ((ck.n0 + b) * Cout + gi * Mg + m) * P + ck.q0 * r.L;
            const T* src = yt + b * len * Mg + m;
            const T add = bias ? bias[gi * Mg + m] : T(0);
            for (int64_t j = 0; j < len; ++j) ym[j] = src[j * Mg] + add;
          }
      });
  });
}

template <class T>
void conv_transpose(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* w, const T* bias, T* y,
                    ValueTag x_tag) {
  if (g.bound_size() == 0 || ch.images == 0 || ch.groups * ch.out == 0) return;
  [[maybe_unused]] bool small = false;
  if constexpr (std::is_same_v<T, float>) {  // (before tap_runs, as in conv_forward)
    if (g.iter_size() > 0 && depthwise_takes(g, ch, ConvPass::transpose))
      return depthwise_conv_transpose(g, ch, x, w, bias, y);
    small = g.iter_size() > 0 && small_conv_takes(g, ch, ConvPass::transpose);
    if (small && !ch.in_blocked && !ch.out_blocked) return small_conv_transpose(g, ch, x, w, bias, y);
  }
  const Runs r = tap_runs(g);
  const int64_t P = r.Q * r.L, S = r.bound_size, K = r.K, Cin = ch.groups * ch.in, Cout = ch.groups * ch.out;
  if constexpr (std::is_same_v<T, float>) {
    if (!small && P > 0 && dnnl_conv_transpose(g, ch, x, w, bias, y, x_tag)) return;
    if (ch.in_blocked || ch.out_blocked)  // blocked tensors oneDNN does not run (or the small-plane loops take)
      return on_plain_copies(ch, x, Cin, P, y, Cout, S, [&](const ConvChannels& pc, const float* xp, float* yp) {
        conv_transpose<float>(g, pc, xp, w, bias, yp);
      });
  }
  if (P == 0) {  // no input positions: the bias alone
    for (int64_t i = 0; i < ch.images * Cout; ++i) std::fill(y + i * S, y + (i + 1) * S, bias ? bias[i % Cout] : T(0));
    return;
  }
  if (ch.out == 1 && ch.in <= kDirectMaxChannels) {  // depthwise (Conv's input gradient of a depthwise Conv): one output channel per group
    parallel_for(ch.images * ch.groups, ch.images * ch.groups > 1, [&](int64_t task) {
      const int64_t n = task / ch.groups, gi = task % ch.groups;
      depthwise_transpose(r, ch.in, x + (n * Cin + gi * ch.in) * P, P, w + gi * ch.in * K, bias ? bias[gi] : T(0),
                          y + (n * Cout + gi) * S);
    });
    return;
  }
  const int64_t MK = ch.out * K, Cg = ch.in;
  const bool direct = is_direct(g);
  if (!direct && plane_windows(g)) return plane_transpose(g, ch, x, w, bias, y);
  const Chunking cut = chunking(r.Q, r.L, ch.images, ch.groups, MK, direct);
  split_rows(cut.tasks, cut.tasks > 1, [&](int, int64_t lo, int64_t hi) {
    T* col = scratch<T>(0, MK * cut.max_columns);
    T* xc = scratch<T>(1, Cg * cut.max_columns);
    for (int64_t task = lo; task < hi; ++task) {
      // The task's images start as the bias: chunks of rows of one image add to overlapping outputs.
      const int64_t gi = task % ch.groups, n0 = task / ch.groups * cut.images_per_task;
      for (int64_t n = n0; n < std::min(ch.images, n0 + cut.images_per_task); ++n)
        for (int64_t m = 0; m < ch.out; ++m) {
          T* ym = y + (n * Cout + gi * ch.out + m) * S;
          std::fill(ym, ym + S, bias ? bias[gi * ch.out + m] : T(0));
        }
      for_each_chunk(cut, ch.images, ch.groups, task, [&](int64_t, const Chunk& ck) {
        const int64_t R = ck.images * (ck.q1 - ck.q0) * r.L;
        const T* xg = x + (ck.n0 * Cin + gi * Cg) * P;
        T* yg = y + (ck.n0 * Cout + gi * ch.out) * S;
        const T* wg = w + gi * Cg * MK;  // [Cg, Mg*K]
        const T* a = xc;           // x_g [Cg, R], row length lda
        int64_t lda = R;
        if (ck.images == 1) {
          a = xg + ck.q0 * r.L;
          lda = P;
        } else {
          gather_columns(ck, r.L, P, xg, Cin * P, Cg, xc);
        }
        if (direct && ck.images == 1) {  // y_g += W_g^T x x_g, in place
          blas_gemm(true, false, ch.out, R, Cg, T(1), wg, MK, a, lda, T(1), yg + ck.q0 * r.L, S);
          return;
        }
        // col [Mg*K, R] = W_g^T x x_g
        blas_gemm(true, false, MK, R, Cg, T(1), wg, MK, a, lda, T(0), col, R);
        col2im_add(r, ck, col, Cout * S, ch.out, yg);
      });
    }
  });
}

template <class T>
void conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const T* x, const T* dy, T* dw, ValueTag x_tag,
                      ValueTag dy_tag) {
  const int64_t wsize = ch.groups * ch.out * ch.in * g.kernel_size();
  if (wsize == 0) return;
  std::fill(dw, dw + wsize, T(0));
  if (g.iter_size() == 0 || ch.images == 0) return;
  [[maybe_unused]] bool small = false;
  if constexpr (std::is_same_v<T, float>) {  // (before tap_runs, as in conv_forward)
    if (depthwise_takes(g, ch, ConvPass::filter_grad)) return depthwise_conv_filter_grad(g, ch, x, dy, dw);
    small = small_conv_takes(g, ch, ConvPass::filter_grad);
    if (small && !ch.in_blocked && !ch.out_blocked) return small_conv_filter_grad(g, ch, x, dy, dw);
  }
  const Runs r = tap_runs(g);
  const int64_t P = r.Q * r.L, S = r.bound_size, K = r.K, Cin = ch.groups * ch.in, Cout = ch.groups * ch.out;
  const int64_t CK = ch.in * K, Mg = ch.out;
  if constexpr (std::is_same_v<T, float>) {
    if (!small && dnnl_conv_filter_grad(g, ch, x, dy, dw, x_tag, dy_tag)) return;
    // Blocked tensors oneDNN does not run (or the small-plane loops take): plain copies.
    if (ch.in_blocked || ch.out_blocked) {
      std::vector<float> xc, dyc;
      return conv_filter_grad<float>(g, plain_channels(ch), plain_view(ch.in_blocked, x, ch.images, Cin, S, xc),
                                     plain_view(ch.out_blocked, dy, ch.images, Cout, P, dyc), dw);
    }
  }
  if (ch.in == 1 && ch.out <= kDirectMaxChannels) {  // depthwise: each output channel's taps over its one input channel
    const std::optional<DepthwisePlanes> planes =
        g.kernel.size() <= 2 ? std::optional<DepthwisePlanes>(DepthwisePlanes(g, sizeof(T))) : std::nullopt;
    parallel_for(Cout, Cout > 1, [&](int64_t oc) {
      const int64_t gi = oc / Mg;
      if (!planes)
        return depthwise_filter_grad(r, ch.images, x + gi * S, Cin * S, dy + oc * P, Cout * P, dw + oc * K);
      const DepthwisePlanes& p = *planes;
      depthwise_filter_grad_planes(p, ch.images, x + gi * S, Cin * S, dy + oc * P, Cout * P, dw + oc * K,
                                   scratch<T>(0, p.buffer_size()), scratch<double>(1, p.acc_size()));
    });
    return;
  }
  const bool direct = is_direct(g);
  if (!direct && plane_windows(g)) return plane_filter_grad(g, ch, x, dy, dw);
  const Chunking cut = chunking(r.Q, r.L, ch.images, ch.groups, CK, direct);
  // Each thread sums its tasks into its own dW^T [G, CK, Mg]; the sums are added in thread order
  // at the end (deterministic for a given thread count).
  const int threads = int(std::min<int64_t>(in_thread_share() ? 1 : cpu_threads(), std::max<int64_t>(cut.tasks, 1)));
  std::vector<T> partial(size_t(threads) * size_t(wsize), T(0));
  split_rows(cut.tasks, threads > 1, [&](int tid, int64_t lo, int64_t hi) {
    T* acc = partial.data() + size_t(tid) * size_t(wsize);
    T* col = scratch<T>(0, CK * cut.max_columns);
    T* dyc = scratch<T>(1, Mg * cut.max_columns);
    for (int64_t task = lo; task < hi; ++task)
      for_each_chunk(cut, ch.images, ch.groups, task, [&](int64_t gi, const Chunk& ck) {
        const int64_t R = ck.images * (ck.q1 - ck.q0) * r.L;
        const T* xg = x + (ck.n0 * Cin + gi * ch.in) * S;
        const T* dyg = dy + (ck.n0 * Cout + gi * Mg) * P;
        const T* a = col;  // col [CK, R]
        int64_t lda = R;
        if (direct && ck.images == 1) {
          a = xg + ck.q0 * r.L;
          lda = P;
        } else {
          im2col(r, ck, xg, Cin * S, ch.in, col);
        }
        const T* b = dyc;  // dy_g [Mg, R]
        int64_t ldb = R;
        if (ck.images == 1) {
          b = dyg + ck.q0 * r.L;
          ldb = P;
        } else {
          gather_columns(ck, r.L, P, dyg, Cout * P, Mg, dyc);
        }
        // dW_g^T [CK, Mg] += col x dy_g^T
        blas_gemm(false, true, CK, Mg, R, T(1), a, lda, b, ldb, T(1), acc + gi * CK * Mg, Mg);
      });
  });
  transpose_partials(partial, threads, ch.groups, CK, Mg, dw);
}

template void conv_forward<float>(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*, float*,
                                  ValueTag);
template void conv_forward<double>(const ConvWindows&, const ConvChannels&, const double*, const double*, const double*,
                                   double*, ValueTag);
template void conv_transpose<float>(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*,
                                    float*, ValueTag);
template void conv_transpose<double>(const ConvWindows&, const ConvChannels&, const double*, const double*,
                                     const double*, double*, ValueTag);
template void conv_filter_grad<float>(const ConvWindows&, const ConvChannels&, const float*, const float*, float*, ValueTag,
                                      ValueTag);
template void conv_filter_grad<double>(const ConvWindows&, const ConvChannels&, const double*, const double*, double*,
                                       ValueTag, ValueTag);

}  // namespace onnxdp
