// Float convolutions over small planes by AVX-512 loops (see exec/cpu/conv_small.h).
#include "exec/cpu/conv_small.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "exec/cpu/avx512.h"
#include "exec/cpu/clones.h"  // split_rows
#include "exec/cpu/scratch.h"

namespace onnxdp {

#ifndef ONNXDP_AVX512_LOOPS

bool small_conv_takes(const ConvWindows&, const ConvChannels&, ConvPass) { return false; }
void small_conv_forward(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*, float*) {}
void small_conv_transpose(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*, float*) {}
void small_conv_filter_grad(const ConvWindows&, const ConvChannels&, const float*, const float*, float*) {}

#else

namespace {

constexpr int64_t V = 16;  // floats a vector
// The filter gradient's chunks: each lane sums at most this many terms in float. A chunk ends in a
// double sum of every tile's lanes (24 to a tile of 8 x 3): with 64 terms, a fifth of the cnn's
// 8 -> 16 filter gradient on 4x4 images (1.2x as fast with 256).
constexpr int64_t kChunkTerms = 256;

// Output vector v's view of tap t: lane l is source position a * V + idx[l] (idx 0-15 in vector
// a, 16-31 in vector b = a + 1), or zero where its bit in mask is clear (padding). Where the lanes
// read a run of the plane (lane l position start + l, as at unit strides between planes of one
// size), `start` says where.
struct Pick {
  alignas(64) int32_t idx[V];
  int32_t a, b, start;
  uint16_t mask;
};

struct Views {
  int64_t K = 0, src_size = 0, dst_size = 0, src_vectors = 0, dst_vectors = 0;
  std::vector<Pick> picks;  // [K, dst_vectors]
  // Every view a run: one masked load each instead of a permute of two vectors (which cost about
  // 1.4 multiply-adds' time here), and planes read where they are.
  bool runs = true;
};

int64_t vectors(int64_t n) { return (n + V - 1) / V; }

// source(p, t): the source position that output position p meets through tap t, or -1. None when
// a plane is larger than kSmallPlaneVectors or a view spans more than two source vectors.
template <class Source>
std::optional<Views> make_views(int64_t K, int64_t src_size, int64_t dst_size, const Source& source) {
  Views s;
  s.K = K, s.src_size = src_size, s.dst_size = dst_size;
  s.src_vectors = vectors(src_size), s.dst_vectors = vectors(dst_size);
  if (K == 0 || s.src_vectors == 0 || s.dst_vectors == 0 || s.src_vectors > kSmallPlaneVectors ||
      s.dst_vectors > kSmallPlaneVectors)
    return std::nullopt;
  s.picks.resize(size_t(K * s.dst_vectors));
  for (int64_t t = 0; t < K; ++t)
    for (int64_t v = 0; v < s.dst_vectors; ++v) {
      int64_t src[V], lo = src_size, hi = -1;
      for (int64_t l = 0; l < V; ++l) {
        const int64_t p = v * V + l;
        src[l] = p < dst_size ? source(p, t) : -1;
        if (src[l] >= 0) lo = std::min(lo, src[l]), hi = std::max(hi, src[l]);
      }
      Pick& pk = s.picks[size_t(t * s.dst_vectors + v)];
      pk = Pick{};
      if (hi < 0) continue;  // all padding: mask 0
      pk.a = int32_t(lo / V);
      if (hi - pk.a * V >= 2 * V) return std::nullopt;
      pk.b = int32_t(std::min<int64_t>(pk.a + 1, s.src_vectors - 1));  // b's lanes are read only when it exists
      for (int64_t l = 0; l < V; ++l)
        if (src[l] >= 0) pk.idx[l] = int32_t(src[l] - pk.a * V), pk.mask = uint16_t(pk.mask | (1u << l));
      pk.start = int32_t(src[std::countr_zero(unsigned(pk.mask))] - std::countr_zero(unsigned(pk.mask)));
      for (int64_t l = 0; l < V; ++l) s.runs = s.runs && (src[l] < 0 || src[l] == pk.start + l);
    }
  return s;
}

// Conv: output positions over the iterated grid, sources in the bound grid (row-major, the last
// dim fastest), as ConvWindows defines them.
std::optional<Views> forward_views(const ConvWindows& g) {
  const size_t D = g.iter.size();
  return make_views(g.kernel_size(), g.bound_size(), g.iter_size(), [&](int64_t p, int64_t t) -> int64_t {
    int64_t s = 0, scale = 1;
    for (size_t d = D; d-- > 0;) {
      const int64_t o = p % g.iter[d], k = t % g.kernel[d];
      p /= g.iter[d], t /= g.kernel[d];
      const int64_t b = o * g.strides[d] - g.pad_begin[d] + k * g.dilations[d];
      if (b < 0 || b >= g.bound[d]) return -1;
      s += b * scale, scale *= g.bound[d];
    }
    return s;
  });
}

// ConvTranspose: output positions over the bound grid, each the sum of the iterated positions
// whose taps land on it.
std::optional<Views> transpose_views(const ConvWindows& g) {
  const size_t D = g.iter.size();
  return make_views(g.kernel_size(), g.iter_size(), g.bound_size(), [&](int64_t p, int64_t t) -> int64_t {
    int64_t s = 0, scale = 1;
    for (size_t d = D; d-- > 0;) {
      const int64_t b = p % g.bound[d], k = t % g.kernel[d];
      p /= g.bound[d], t /= g.kernel[d];
      const int64_t at = b + g.pad_begin[d] - k * g.dilations[d];
      if (at < 0 || at % g.strides[d] != 0 || at / g.strides[d] >= g.iter[d]) return -1;
      s += at / g.strides[d] * scale, scale *= g.iter[d];
    }
    return s;
  });
}

// The source planes as the loops read them: whole vectors. A plane of a multiple of V positions is
// read where it is; others are copied into `copy` ([channels, src_vectors * V], the tails zero),
// so no load passes the tensor's end.
struct Planes {
  const float* at;
  int64_t pitch;  // between channels
};
Planes whole_vectors(const Views& s, const float* src, int64_t channels, float* copy) {
  if (s.src_size % V == 0) return {src, s.src_size};
  const int64_t pitch = s.src_vectors * V;
  for (int64_t c = 0; c < channels; ++c) {
    std::memcpy(copy + c * pitch, src + c * s.src_size, size_t(s.src_size) * sizeof(float));
    std::fill(copy + c * pitch + s.src_size, copy + (c + 1) * pitch, 0.f);
  }
  return {copy, pitch};
}

// Tap view pk of a plane: a masked load of its run (the lanes outside the mask are neither read
// nor can they fault, wherever they point), or a permute of two whole vectors.
template <bool Runs>
ONNXDP_AVX512 inline __m512 view(const Pick& pk, const float* plane) {
  if constexpr (Runs) return _mm512_maskz_loadu_ps(__mmask16(pk.mask), plane + pk.start);
  return _mm512_maskz_permutex2var_ps(__mmask16(pk.mask), _mm512_loadu_ps(plane + pk.a * V),
                                      _mm512_loadu_si512(pk.idx), _mm512_loadu_ps(plane + pk.b * V));
}

// y [n, M, P] rows m0.. m0 + BM, vectors v0.. v0 + BV of images [n0, n1) = W x the taps' views
// of the image's C planes (+ bias), W tap-major ([C * K, M]: a tap's BM weights side by side, one
// address register for all of them; with W [M, C * K] each row took one, and the loop ran out of
// them: the cnn's 1 -> 8 forward 112-122 -> 117-130 GFLOP/s, its 8 -> 16 input gradient 149-163 ->
// 161-175; bench/results/2026-12-07-row-figure.md). A tap's BV views are made once, then serve BM
// output channels.
template <int BM, int BV, bool Runs>
ONNXDP_AVX512 inline void forward_tile(const Pick* picks, int64_t K, int64_t nv, int64_t C, int64_t M, Planes src,
                                       int64_t x_image, const float* W, const float* bias, int64_t m0, int64_t v0,
                                       float* y, int64_t y_image, int64_t P, int64_t n0, int64_t n1) {
  const float* wm = W + m0;
  for (int64_t n = n0; n < n1; ++n) {
    __m512 acc[BM][BV];
#pragma GCC unroll 8
    for (int i = 0; i < BM; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < BV; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < C; ++c) {
      const float* plane = src.at + n * x_image + c * src.pitch;
      for (int64_t t = 0; t < K; ++t) {
        __m512 x[BV];
#pragma GCC unroll 4
        for (int j = 0; j < BV; ++j) x[j] = view<Runs>(picks[t * nv + v0 + j], plane);
        const float* wk = wm + (c * K + t) * M;
#pragma GCC unroll 8
        for (int i = 0; i < BM; ++i) {
          const __m512 w = _mm512_set1_ps(wk[i]);
#pragma GCC unroll 4
          for (int j = 0; j < BV; ++j) acc[i][j] = _mm512_fmadd_ps(w, x[j], acc[i][j]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < BM; ++i) {
      const __m512 b = _mm512_set1_ps(bias ? bias[m0 + i] : 0.f);
#pragma GCC unroll 4
      for (int j = 0; j < BV; ++j) {
        const __m512 out = bias ? _mm512_add_ps(acc[i][j], b) : acc[i][j];
        const int64_t p0 = (v0 + j) * V;
        float* at = y + n * y_image + (m0 + i) * P + p0;
        if (p0 + V <= P)
          _mm512_storeu_ps(at, out);
        else
          _mm512_mask_storeu_ps(at, __mmask16((1u << (P - p0)) - 1), out);
      }
    }
  }
}

// As forward_tile where the views are runs of planes read in place: one vector v of BN images
// [n0, n0 + BN) at a time, so each tap's pick is read once for BN views, and each broadcast weight
// serves BN of them. Taken where a plane is one vector (forward_tile's tile is then 8 x 1): the
// cnn's 8 -> 16 input gradient on 4x4 images 112-114 -> 156-161 GFLOP/s hot, 98-102 -> 129-140
// in a step. On 8x8 planes (4 vectors, the 1 -> 8 forward) level hot and slower in a step (58-71
// -> 45-47): its views there are as cheap, and the tiles' stores jump between rows. (The
// multiply-adds are spelled out as in forward_tile: through a shared inline helper both ran 3-5 %
// slower.)
template <int BM, int BN>
ONNXDP_AVX512 inline void forward_tile_images(const Pick* picks, int64_t K, int64_t nv, int64_t C, int64_t M,
                                              Planes src, int64_t x_image, const float* W, const float* bias,
                                              int64_t m0, int64_t v, float* y, int64_t y_image, int64_t P,
                                              int64_t n0) {
  const float* wm = W + m0;
  __m512 acc[BM][BN];
#pragma GCC unroll 8
  for (int i = 0; i < BM; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < BN; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    const float* plane = src.at + n0 * x_image + c * src.pitch;
    for (int64_t t = 0; t < K; ++t) {
      const Pick& pk = picks[t * nv + v];
      const __mmask16 mask = __mmask16(pk.mask);
      const float* at = plane + pk.start;
      __m512 x[BN];
#pragma GCC unroll 4
      for (int j = 0; j < BN; ++j) x[j] = _mm512_maskz_loadu_ps(mask, at + j * x_image);
      const float* wk = wm + (c * K + t) * M;
#pragma GCC unroll 8
      for (int i = 0; i < BM; ++i) {
        const __m512 w = _mm512_set1_ps(wk[i]);
#pragma GCC unroll 4
        for (int j = 0; j < BN; ++j) acc[i][j] = _mm512_fmadd_ps(w, x[j], acc[i][j]);
      }
    }
  }
  const int64_t p0 = v * V;
  const __mmask16 keep = p0 + V <= P ? __mmask16(0xffff) : __mmask16((1u << (P - p0)) - 1);
#pragma GCC unroll 8
  for (int i = 0; i < BM; ++i) {
    const __m512 b = _mm512_set1_ps(bias ? bias[m0 + i] : 0.f);
#pragma GCC unroll 4
    for (int j = 0; j < BN; ++j) {
      const __m512 out = bias ? _mm512_add_ps(acc[i][j], b) : acc[i][j];
      _mm512_mask_storeu_ps(y + (n0 + j) * y_image + (m0 + i) * P + p0, keep, out);
    }
  }
}

template <int BM, bool Runs>
ONNXDP_AVX512 inline void forward_rows(const Views& s, int64_t C, int64_t M, Planes src, int64_t x_image,
                                       const float* W, const float* bias, int64_t m0, float* y, int64_t n0,
                                       int64_t n1) {
  const int64_t nv = s.dst_vectors, P = s.dst_size;
  if (Runs && nv == 1) {
    const Pick* p = s.picks.data();
    int64_t n = n0;
    for (; n + 3 <= n1; n += 3) forward_tile_images<BM, 3>(p, s.K, 1, C, M, src, x_image, W, bias, m0, 0, y, M * P, P, n);
    for (; n < n1; ++n) forward_tile_images<BM, 1>(p, s.K, 1, C, M, src, x_image, W, bias, m0, 0, y, M * P, P, n);
    return;
  }
  int64_t v0 = 0;
  for (; v0 + 2 <= nv; v0 += 2)
    forward_tile<BM, 2, Runs>(s.picks.data(), s.K, nv, C, M, src, x_image, W, bias, m0, v0, y, M * P, P, n0, n1);
  if (v0 < nv)
    forward_tile<BM, 1, Runs>(s.picks.data(), s.K, nv, C, M, src, x_image, W, bias, m0, v0, y, M * P, P, n0, n1);
}

// Images [n0, n1) of src (x_image apart): y [n, M, dst] = W x views of their planes (W tap-major,
// [C * K, M]).
template <bool Runs>
ONNXDP_AVX512 void forward_block(const Views& s, int64_t C, int64_t M, Planes src, int64_t x_image, const float* W,
                                 const float* bias, float* y, int64_t n0, int64_t n1) {
  int64_t m0 = 0;
  for (; m0 + 8 <= M; m0 += 8) forward_rows<8, Runs>(s, C, M, src, x_image, W, bias, m0, y, n0, n1);
  if (M - m0 >= 4) forward_rows<4, Runs>(s, C, M, src, x_image, W, bias, m0, y, n0, n1), m0 += 4;
  if (M - m0 >= 2) forward_rows<2, Runs>(s, C, M, src, x_image, W, bias, m0, y, n0, n1), m0 += 2;
  if (M - m0 >= 1) forward_rows<1, Runs>(s, C, M, src, x_image, W, bias, m0, y, n0, n1);
}

// Images [n0, n1): y [n, M, dst] = W [C * K, M] x views of x [n, C, src] (+ bias). Planes of runs
// are read where they are, the rest one image at a time through whole-vector copies.
ONNXDP_AVX512 void forward_images(const Views& s, int64_t C, int64_t M, const float* x, const float* W,
                                  const float* bias, float* y, int64_t n0, int64_t n1) {
  if (s.runs) return forward_block<true>(s, C, M, {x, s.src_size}, C * s.src_size, W, bias, y, n0, n1);
  float* copy = scratch<float>(0, C * s.src_vectors * V);
  for (int64_t n = n0; n < n1; ++n)
    forward_block<false>(s, C, M, whole_vectors(s, x + n * C * s.src_size, C, copy), 0, W, bias,
                         y + n * M * s.dst_size, 0, 1);
}

// W tap-major: [C * K, M].
void run_forward(const Views& s, const ConvChannels& ch, const float* x, const float* W, const float* bias,
                 float* y) {
  const int64_t work = ch.images * ch.out * s.dst_size * ch.in * s.K;
  split_rows(ch.images, work > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    forward_images(s, ch.in, ch.out, x, W, bias, y, lo, hi);
  });
}

// The 16 lanes' sum, in double.
ONNXDP_AVX512 inline double lanes_sum(__m512 a) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
  const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

// acc [i][j] += dy row i (at d, rows `pitch` apart) times view j, i < BM, j < BK. Pitch: the
// rows' pitch known when compiled (dy's rows one vector each: then one address register for all
// of them, not one a row: the cnn's 8 -> 16 filter gradient 121-125 -> 127-135 GFLOP/s).
template <int BM, int BK, int64_t Pitch = 0>
ONNXDP_AVX512 __attribute__((always_inline)) inline void add_products(__m512 (&acc)[BM][BK], const float* d,
                                                                      int64_t row_pitch, const __m512 (&xv)[BK]) {
  const int64_t pitch = Pitch ? Pitch : row_pitch;
#pragma GCC unroll 8
  for (int i = 0; i < BM; ++i) {
    __m512 dv = _mm512_loadu_ps(d + i * pitch);
    // One load for the BK multiply-adds: GCC otherwise folds it into each of them (BK loads,
    // which made the loop wait on loads: 44 against 64 GFLOP/s on the cnn's first layer).
    __asm__("" : "+v"(dv));
#pragma GCC unroll 4
    for (int j = 0; j < BK; ++j) acc[i][j] = _mm512_fmadd_ps(dv, xv[j], acc[i][j]);
  }
}

// A chunk's sums for dw [M, C * K] rows m0.. m0 + BM, columns k0.. k0 + BK, over its images at
// position vector v, views as permutes: dy times the view of x that tap saw, added to sums
// [BM][BK] (float lanes). One loop: with the loop over v inside as well, GCC stored the sums to
// the stack every pass (each view's index vector takes a register).
template <int BM, int BK>
ONNXDP_AVX512 inline void filter_tile(const Pick* picks, int64_t K, int64_t nv, int64_t v, int64_t images, Planes x,
                                      int64_t x_image, Planes dy, int64_t dy_image, int64_t m0, int64_t k0,
                                      __m512* sums) {
  __m512 acc[BM][BK];
#pragma GCC unroll 8
  for (int i = 0; i < BM; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < BK; ++j) acc[i][j] = sums[i * BK + j];
  __m512i idx[BK];
  __mmask16 mask[BK];
  int64_t a[BK], b[BK];  // the two vectors
#pragma GCC unroll 4
  for (int j = 0; j < BK; ++j) {
    const Pick& pk = picks[(k0 + j) % K * nv + v];
    const int64_t plane = (k0 + j) / K * x.pitch;
    mask[j] = __mmask16(pk.mask);
    a[j] = plane + pk.a * V, b[j] = plane + pk.b * V, idx[j] = _mm512_loadu_si512(pk.idx);
  }
  const float* dv = dy.at + m0 * dy.pitch + v * V;
  for (int64_t n = 0; n < images; ++n) {
    const float* xn = x.at + n * x_image;
    const float* dn = dv + n * dy_image;
    __m512 xv[BK];
#pragma GCC unroll 4
    for (int j = 0; j < BK; ++j)
      xv[j] = _mm512_maskz_permutex2var_ps(mask[j], _mm512_loadu_ps(xn + a[j]), idx[j], _mm512_loadu_ps(xn + b[j]));
    add_products<BM, BK>(acc, dn, dy.pitch, xv);
  }
#pragma GCC unroll 8
  for (int i = 0; i < BM; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < BK; ++j) sums[i * BK + j] = acc[i][j];
}

// As filter_tile, views as runs (one masked load each), over all NV position vectors at once:
// each image's vectors one after another, so a chunk's dy streams through once per tile of taps
// (with v outside, each vector's pass walked the chunk's images again, and chunks longer than 16
// images of 8x8 ran slower; the cnn's 1 -> 8 filter gradient: 93-96 -> 121-132 GFLOP/s).
template <int BM, int BK, int NV, int64_t Pitch = 0>
ONNXDP_AVX512 inline void filter_tile_runs(const Pick* picks, int64_t K, int64_t images, Planes x, int64_t x_image,
                                           Planes dy, int64_t dy_image, int64_t m0, int64_t k0, __m512* sums) {
  __m512 acc[BM][BK];
#pragma GCC unroll 8
  for (int i = 0; i < BM; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < BK; ++j) acc[i][j] = _mm512_setzero_ps();
  __mmask16 mask[NV][BK];
  int64_t a[NV][BK];
  for (int v = 0; v < NV; ++v)
    for (int j = 0; j < BK; ++j) {
      const Pick& pk = picks[(k0 + j) % K * NV + v];
      mask[v][j] = __mmask16(pk.mask);
      a[v][j] = (k0 + j) / K * x.pitch + pk.start;
    }
  const float* dv = dy.at + m0 * dy.pitch;
  for (int64_t n = 0; n < images; ++n) {
    const float* xn = x.at + n * x_image;
    const float* dn = dv + n * dy_image;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 xv[BK];
#pragma GCC unroll 4
      for (int j = 0; j < BK; ++j) xv[j] = _mm512_maskz_loadu_ps(mask[v][j], xn + a[v][j]);
      add_products<BM, BK, Pitch>(acc, dn + v * V, dy.pitch, xv);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < BM; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < BK; ++j) sums[i * BK + j] = acc[i][j];
}

// The chunk's sums for dw rows m0.. m0 + BM, columns k0.. k0 + BK, over all its positions, into
// `out` [M, CK] in double.
template <int BM, int BK, bool Runs>
ONNXDP_AVX512 inline void filter_block(const Views& s, int64_t images, Planes x, int64_t x_image, Planes dy,
                                       int64_t dy_image, int64_t m0, int64_t k0, int64_t CK, double* out) {
  __m512 sums[BM * BK];
  if constexpr (Runs) {
    static_assert(kSmallPlaneVectors == 4);
    const Pick* p = s.picks.data();
    switch (s.dst_vectors) {
      case 1:  // one-vector planes: dy's rows are whole vectors side by side
        if (dy.pitch == V) filter_tile_runs<BM, BK, 1, V>(p, s.K, images, x, x_image, dy, dy_image, m0, k0, sums);
        else filter_tile_runs<BM, BK, 1>(p, s.K, images, x, x_image, dy, dy_image, m0, k0, sums);
        break;
      case 2: filter_tile_runs<BM, BK, 2>(p, s.K, images, x, x_image, dy, dy_image, m0, k0, sums); break;
      case 3: filter_tile_runs<BM, BK, 3>(p, s.K, images, x, x_image, dy, dy_image, m0, k0, sums); break;
      default: filter_tile_runs<BM, BK, 4>(p, s.K, images, x, x_image, dy, dy_image, m0, k0, sums); break;
    }
  } else {
    for (int i = 0; i < BM * BK; ++i) sums[i] = _mm512_setzero_ps();
    for (int64_t v = 0; v < s.dst_vectors; ++v)
      filter_tile<BM, BK>(s.picks.data(), s.K, s.dst_vectors, v, images, x, x_image, dy, dy_image, m0, k0, sums);
  }
  for (int i = 0; i < BM; ++i)
    for (int j = 0; j < BK; ++j) out[(m0 + i) * CK + k0 + j] = lanes_sum(sums[i * BK + j]);
}

template <int BM, bool Runs>
ONNXDP_AVX512 inline void filter_rows(const Views& s, int64_t images, Planes x, int64_t x_image, Planes dy,
                                      int64_t dy_image, int64_t m0, int64_t CK, double* out) {
  int64_t k0 = 0;
  for (; k0 + 3 <= CK; k0 += 3) filter_block<BM, 3, Runs>(s, images, x, x_image, dy, dy_image, m0, k0, CK, out);
  for (; k0 < CK; ++k0) filter_block<BM, 1, Runs>(s, images, x, x_image, dy, dy_image, m0, k0, CK, out);
}

template <bool Runs>
ONNXDP_AVX512 void filter_all_rows(const Views& s, int64_t M, int64_t images, Planes x, int64_t x_image, Planes dy,
                                   int64_t dy_image, int64_t CK, double* out) {
  int64_t m0 = 0;
  for (; m0 + 8 <= M; m0 += 8) filter_rows<8, Runs>(s, images, x, x_image, dy, dy_image, m0, CK, out);
  if (M - m0 >= 4) filter_rows<4, Runs>(s, images, x, x_image, dy, dy_image, m0, CK, out), m0 += 4;
  if (M - m0 >= 2) filter_rows<2, Runs>(s, images, x, x_image, dy, dy_image, m0, CK, out), m0 += 2;
  if (M - m0 >= 1) filter_rows<1, Runs>(s, images, x, x_image, dy, dy_image, m0, CK, out);
}

// One chunk of images, output channels m0.. m1: rows m0.. m1 of out [M, C * K] = their sums, in
// double.
ONNXDP_AVX512 void filter_chunk(const Views& s, int64_t C, int64_t M, int64_t m0, int64_t m1, const float* x,
                                const float* dy, int64_t images, double* out) {
  const int64_t CK = C * s.K, xs = s.src_vectors * V, ds = s.dst_vectors * V, rows = m1 - m0;
  float* xc = scratch<float>(0, images * (C * xs + rows * ds));
  float* dc = xc + images * C * xs;
  // Planes of a whole number of vectors are read in place; others through zero-tailed copies
  // (dy's tails meet the views' zeroed lanes, but 0 x infinity is NaN).
  Planes xp{x, s.src_size}, dp{dy + m0 * s.dst_size, s.dst_size};
  int64_t x_image = C * s.src_size, dy_image = M * s.dst_size;
  if (!s.runs && s.src_size % V != 0) {
    for (int64_t n = 0; n < images; ++n) whole_vectors(s, x + n * C * s.src_size, C, xc + n * C * xs);
    xp = {xc, xs}, x_image = C * xs;
  }
  if (s.dst_size % V != 0) {
    for (int64_t n = 0; n < images; ++n)
      for (int64_t r = 0; r < rows; ++r) {
        float* to = dc + (n * rows + r) * ds;
        std::memcpy(to, dy + (n * M + m0 + r) * s.dst_size, size_t(s.dst_size) * sizeof(float));
        std::fill(to + s.dst_size, to + ds, 0.f);
      }
    dp = {dc, ds}, dy_image = rows * ds;
  }
  if (s.runs)
    filter_all_rows<true>(s, rows, images, xp, x_image, dp, dy_image, CK, out + m0 * CK);
  else
    filter_all_rows<false>(s, rows, images, xp, x_image, dp, dy_image, CK, out + m0 * CK);
}

// The views of a window, made once per thread and shape (a step calls the same few shapes again
// and again).
const Views* views_of(const ConvWindows& g, bool transpose) {
  thread_local std::map<std::vector<int64_t>, std::optional<Views>> known;
  std::vector<int64_t> key{int64_t(transpose), int64_t(g.iter.size())};
  for (const std::vector<int64_t>* dims : {&g.iter, &g.bound, &g.kernel, &g.strides, &g.dilations, &g.pad_begin})
    key.insert(key.end(), dims->begin(), dims->end());
  if (known.size() > 64) known.clear();
  auto [it, fresh] = known.try_emplace(std::move(key));
  if (fresh) it->second = transpose ? transpose_views(g) : forward_views(g);
  return it->second ? &*it->second : nullptr;
}

}  // namespace

bool small_conv_takes(const ConvWindows& g, const ConvChannels& ch, ConvPass pass) {
  if (!cpu_has_avx512() || ch.groups != 1 || ch.images <= 0 || ch.in <= 0 || ch.out <= 0 || ch.out > kSmallPlaneOutputs)
    return false;
  const Views* v = views_of(g, pass == ConvPass::transpose);
  if (v == nullptr) return false;
  return ch.out < kSmallPlaneOutputs ||
         (pass != ConvPass::transpose && v->dst_size == V && ch.in <= kSmallPlaneWideInputs);
}

// The weights [out, in, K] tap-major, [in * K, out].
void small_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                        const float* bias, float* y) {
  const Views& s = *views_of(g, false);
  const int64_t CK = ch.in * s.K;
  std::vector<float> wt(size_t(ch.out * CK));
  for (int64_t m = 0; m < ch.out; ++m)
    for (int64_t k = 0; k < CK; ++k) wt[size_t(k * ch.out + m)] = w[m * CK + k];
  run_forward(s, ch, x, wt.data(), bias, y);
}

// Conv's input gradient (and ConvTranspose): the same loops, over views of x in the output's
// grid, with the weights [in, out, K] rearranged tap-major as [in * K, out].
void small_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                          const float* bias, float* y) {
  const Views& s = *views_of(g, true);
  std::vector<float> wt(size_t(ch.out * ch.in * s.K));
  for (int64_t c = 0; c < ch.in; ++c)
    for (int64_t m = 0; m < ch.out; ++m)
      for (int64_t t = 0; t < s.K; ++t) wt[size_t((c * s.K + t) * ch.out + m)] = w[(c * ch.out + m) * s.K + t];
  run_forward(s, ch, x, wt.data(), bias, y);
}

// Chunks of a fixed number of images, their double sums added in chunk order: the same dw on any
// number of threads. A task is one chunk's sums for a tile of 8 output channels (or the rest).
void small_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy,
                            float* dw) {
  const Views& s = *views_of(g, false);
  const int64_t CK = ch.in * s.K, size = ch.out * CK, tiles = (ch.out + 7) / 8;
  const int64_t per = std::max<int64_t>(1, kChunkTerms / s.dst_vectors);
  const int64_t chunks = (ch.images + per - 1) / per;
  std::vector<double> sums(size_t(chunks * size));
  const int64_t work = ch.images * ch.out * s.dst_size * CK;
  split_rows(chunks * tiles, work > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t k = task / tiles, m0 = task % tiles * 8, n0 = k * per;
      filter_chunk(s, ch.in, ch.out, m0, std::min(ch.out, m0 + 8), x + n0 * ch.in * s.src_size,
                   dy + n0 * ch.out * s.dst_size, std::min(per, ch.images - n0), sums.data() + k * size);
    }
  });
  for (int64_t i = 0; i < size; ++i) {
    double total = 0;
    for (int64_t k = 0; k < chunks; ++k) total += sums[size_t(k * size + i)];
    dw[i] = float(total);
  }
}

#endif

}  // namespace onnxdp
