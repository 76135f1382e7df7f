// Float depthwise windows by AVX-512 loops (see exec/cpu/conv_depthwise.h).
#include "exec/cpu/conv_depthwise.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "exec/cpu/avx512.h"
#include "exec/cpu/clones.h"  // split_rows
#include "exec/cpu/scratch.h"
#include "graph/passes/block_channels.h"

namespace onnxdp {

#ifndef ONNXDP_AVX512_LOOPS

bool depthwise_takes(const ConvWindows&, const ConvChannels&, ConvPass) { return false; }
bool depthwise_blocked_loops() { return false; }
void depthwise_conv_forward(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*,
                            float*) {}
void depthwise_conv_transpose(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*,
                              float*) {}
void depthwise_conv_filter_grad(const ConvWindows&, const ConvChannels&, const float*, const float*, float*) {}

#else

namespace {

constexpr int64_t V = 16;           // floats a vector
constexpr int kMaxTileRows = 14;    // the forward tile's output rows (ConvNeXt's 56, 28 and 14 are multiples)
constexpr int64_t kMaxKernelCols = 16;
// Rows narrower than this leave too much of a vector empty (ConvNeXt's 7x7 planes: 7 of 16 lanes);
// oneDNN's blocked kernels fill theirs with channels. 14 columns ran 1.8x oneDNN's speed forward.
constexpr int64_t kMinOutputCols = 12;
constexpr int64_t kMin3RowFilterCols = 28;  // 3-row filter gradients: see depthwise_takes

int64_t vectors(int64_t n) { return (n + V - 1) / V; }
__mmask16 lanes_before(int64_t n) { return n >= V ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// A plane's window as a correlation: out (oh, ow) = sum over i < KH, j < KW of
// pad (oh + i, ow + j) x w (i, j), where pad (r, u) is src (r - ph, u - pw) inside the source
// plane and zero outside. `pad` is a buffer of `rows` x `pitch` floats: the source lands in it,
// the rest stays zero, and every load of a tile (or of the filter gradient) falls inside it.
struct Plane {
  int64_t SH, SW, OH, OW, KH, KW, ph, pw;
  int64_t rows, pitch;
  Plane(int64_t SH_, int64_t SW_, int64_t OH_, int64_t OW_, int64_t KH_, int64_t KW_, int64_t ph_, int64_t pw_)
      : SH(SH_), SW(SW_), OH(OH_), OW(OW_), KH(KH_), KW(KW_), ph(ph_), pw(pw_),
        rows(OH_ + kMaxTileRows + KH_ - 1), pitch(vectors(vectors(OW_) * V + KW_ - 1) * V) {}
  int64_t size() const { return rows * pitch; }
};

// n floats from src to dst, inline (a call to memcpy per row of 56 floats took 13 % of the time).
ONNXDP_AVX512 inline void copy_row(const float* src, float* dst, int64_t n) {
  int64_t k = 0;
  for (; k + V <= n; k += V) _mm512_storeu_ps(dst + k, _mm512_loadu_ps(src + k));
  if (k < n) _mm512_mask_storeu_ps(dst + k, lanes_before(n - k), _mm512_maskz_loadu_ps(lanes_before(n - k), src + k));
}

// The source plane's rows into the padded buffer (whose padding is zero and stays so).
ONNXDP_AVX512 inline void fill(const Plane& p, const float* src, float* pad) {
  const int64_t n = std::min(p.SH, p.rows - p.ph), cols = std::min(p.SW, p.pitch - p.pw);
  for (int64_t i = 0; i < n; ++i) copy_row(src + i * p.SW, pad + (i + p.ph) * p.pitch + p.pw, cols);
}

// Part k of `parts` of the cache lines of [at, at + n floats) towards L1.
ONNXDP_AVX512 inline void prefetch_part(const float* at, int64_t n, int64_t k, int64_t parts) {
  const int64_t per = (n + parts * V - 1) / (parts * V) * V;
  for (int64_t i = k * per; i < std::min(n, (k + 1) * per); i += V)
    _mm_prefetch(reinterpret_cast<const char*>(at + i), _MM_HINT_T0);
}

// Cache lines of a few ranges fetched towards L2 a few at a time, spread over the work that runs
// meanwhile. The filter gradient fetched a column group's share of the next chunk's planes in one
// burst: the loop stalled at those prefetches (a fifth of its time on 56x56 planes), and the copies
// still waited for their lines. Fed a few lines every turn of the sums: 8 x 96 planes of 56x56
// at 70-72 GFLOP/s against 63-68 (alternating runs). The forward's tiles ran slower fed so
// (82 against 83.5 on 56x56) and fetch the next plane a tile's share at a time (forward_plane).
struct LineFeed {
  static constexpr int kMaxRanges = 32;  // 2 a chunk's image; past 16 images (planes of 4 rows or
                                         // fewer) the rest are not fetched
  const float* at[kMaxRanges];
  int64_t floats[kMaxRanges];
  int n = 0, i = 0;
  int64_t next = 0;            // range i's next float to fetch
  int64_t lines = 0, per = 0;  // lines in all, lines a feed
  void add(const float* p, int64_t count) {
    if (n == kMaxRanges || count <= 0) return;
    at[n] = p, floats[n++] = count;
    lines += (count + V - 1) / V;
  }
  // Every line fetched by about half of `feeds` calls of feed().
  void spread(int64_t feeds) { per = (2 * lines + feeds - 1) / std::max<int64_t>(1, feeds); }
  void feed() {
    for (int64_t q = per; q > 0 && i < n; --q) {
      _mm_prefetch(reinterpret_cast<const char*>(at[i] + next), _MM_HINT_T1);
      next += V;
      if (next >= floats[i]) ++i, next = 0;
    }
  }
};

// ---- forward ----------------------------------------------------------------------------------

// Output rows [0, rows) (rows <= R) of one vector of columns (the lanes in `mask`): `pad` points at
// the tile's first padded row and column, `w` [KH, KW] the channel's weights. Paired: the vector
// holds two row blocks' last columns, at most 8 (a 56-column row's last vector holds 8): lanes 0-7
// are rows [0, R) of the columns at `pad`, lanes 8-15 the same columns of rows [R, 2R) (`mask`'s
// low 8 lanes say which columns), so the block pair's last columns take one tile, not two half-empty
// ones: 8 x 96 planes of 56x56 (7x7) at 115-123 GFLOP/s against 110-114, one plane of 8
// channels in L2 138-141 against 128 (bench/results/2026-12-07-depthwise-fetch.md).
template <int KH, int R, bool Paired = false>
ONNXDP_AVX512 inline void forward_tile(const float* pad, int64_t pitch, int64_t KW, const float* w, float bias,
                                       int64_t rows, __mmask16 mask, float* out, int64_t OW) {
  __m512 acc[R];
#pragma GCC unroll 16
  for (int o = 0; o < R; ++o) acc[o] = _mm512_set1_ps(bias);
  for (int64_t j = 0; j < KW; ++j) {
    __m512 wv[KH];
#pragma GCC unroll 8
    for (int i = 0; i < KH; ++i) wv[i] = _mm512_set1_ps(w[i * KW + j]);
    const float* row = pad + j;
#pragma GCC unroll 32
    for (int r = 0; r < R + KH - 1; ++r) {
      __m512 xv = Paired ? _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(row))),
                                                               _mm256_castps_pd(_mm256_loadu_ps(row + R * pitch)), 1))
                         : _mm512_loadu_ps(row);
      __asm__("" : "+v"(xv));  // one load for the row's KH multiply-adds (GCC may fold it into each)
      // The next row one add further: GCC otherwise keeps every row's address in a register of
      // its own, and with 20 rows moves them in and out of vector registers.
      row += pitch;
      __asm__("" : "+r"(row));
#pragma GCC unroll 8
      for (int i = 0; i < KH; ++i)
        if (r - i >= 0 && r - i < R) acc[r - i] = _mm512_fmadd_ps(xv, wv[i], acc[r - i]);
    }
  }
#pragma GCC unroll 16
  for (int o = 0; o < R; ++o)
    if (o < rows) {
      _mm512_mask_storeu_ps(out + o * OW, Paired ? __mmask16(mask & 0xFF) : mask, acc[o]);
      if (Paired) _mm512_mask_storeu_ps(out + (R + o) * OW - V / 2, __mmask16((mask & 0xFF) << 8), acc[o]);
    }
}

// The next plane (`next`, or nullptr) is fetched towards L1 while this one is computed, an even
// share of its lines before each tile, so that the plane's fill finds it there. On the Intel VM
// of bench/results/2026-12-07-depthwise-fetch.md (48 KB L1), 8 x 96 planes of 56x56 (7x7) ran at
// 121-134 GFLOP/s against 108-114 with the earlier fetches (the next plane towards L2 a block's
// share at a time, from planes of two blocks on, and each block's output lines fetched for
// writing as it started: on this machine the latter alone cost 5-10 %; on the AMD VM of
// 2026-12-06-depthwise-loops.md it had gained 10 %), 5x5 on 28x28 105-116 against 90-106, 3x3 on
// 112x112 43 against 36, 7x7 on 14x14 level.
template <int KH>
ONNXDP_AVX512 void forward_plane(const Plane& p, const float* pad, const float* w, float bias, float* out,
                                 const float* next) {
  const int64_t nv = vectors(p.OW), tiles = nv * ((p.OH + kMaxTileRows - 1) / kMaxTileRows);
  // Rows whose last vector holds at most 8 columns take it for two row blocks at once.
  const bool pair_tails = p.OW - (nv - 1) * V <= V / 2;
  int64_t tile = 0;
  bool tail_done = false;  // this block's last columns went with the block above
  for (int64_t h0 = 0; h0 < p.OH;) {
    const int64_t left = p.OH - h0;
    const int R = left > 8 ? kMaxTileRows : left > 4 ? 8 : 4;
    for (int64_t v = 0; v < nv; ++v) {
      if (next) prefetch_part(next, p.SH * p.SW, tile++, tiles);
      const float* at = pad + h0 * p.pitch + v * V;
      float* o = out + h0 * p.OW + v * V;
      const int64_t rows = std::min<int64_t>(left, R);
      const __mmask16 mask = lanes_before(p.OW - v * V);
      if (pair_tails && v == nv - 1 && (tail_done || left >= 2 * kMaxTileRows)) {
        if (!tail_done) forward_tile<KH, kMaxTileRows, true>(at, p.pitch, p.KW, w, bias, rows, mask, o, p.OW);
        tail_done = !tail_done;
      } else if (R == kMaxTileRows)
        forward_tile<KH, kMaxTileRows>(at, p.pitch, p.KW, w, bias, rows, mask, o, p.OW);
      else if (R == 8)
        forward_tile<KH, 8>(at, p.pitch, p.KW, w, bias, rows, mask, o, p.OW);
      else
        forward_tile<KH, 4>(at, p.pitch, p.KW, w, bias, rows, mask, o, p.OW);
    }
    h0 += std::min<int64_t>(left, R);
  }
}

// Planes [lo, hi) of src [planes, SH * SW] (plane t is channel t % C) -> out [planes, OH * OW],
// with w [C, KH * KW] and bias [C] or nullptr.
template <int KH>
ONNXDP_AVX512 void forward_planes(const Plane& p, int64_t C, const float* src, const float* w, const float* bias,
                                  float* out, int64_t lo, int64_t hi) {
  float* pad = scratch<float>(0, p.size());
  std::fill(pad, pad + p.size(), 0.f);
  const int64_t K = p.KH * p.KW;
  for (int64_t t = lo; t < hi; ++t) {
    const int64_t c = t % C;
    fill(p, src + t * p.SH * p.SW, pad);
    forward_plane<KH>(p, pad, w + c * K, bias ? bias[c] : 0.f, out + t * p.OH * p.OW,
                      t + 1 < hi ? src + (t + 1) * p.SH * p.SW : nullptr);
  }
}

void run_forward(const Plane& p, const ConvChannels& ch, const float* src, const float* w, const float* bias,
                 float* out) {
  const int64_t C = ch.groups, planes = ch.images * C;
  const int64_t work = planes * p.OH * p.OW * p.KH * p.KW;
  split_rows(planes, work > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    if (p.KH == 3) forward_planes<3>(p, C, src, w, bias, out, lo, hi);
    if (p.KH == 5) forward_planes<5>(p, C, src, w, bias, out, lo, hi);
    if (p.KH == 7) forward_planes<7>(p, C, src, w, bias, out, lo, hi);
  });
}

// ---- filter gradient --------------------------------------------------------------------------

// Kernel columns the filter gradient sums at once: KH x BJ sums and KH x BJ vectors of x in
// registers, and a dy vector (at most 31 of the 32; 7-row windows take 2 columns, 5-row ones 3,
// 3-row ones 5).
// Fewer passes over the plane ran faster: 5x5 windows on 28x28 at 59 GFLOP/s in groups of 3
// columns against 45 in groups of 2.
constexpr int max_columns(int KH) { return KH == 3 ? 5 : KH == 5 ? 3 : 2; }

// One turn of filter_columns: dy rows h + u, u < rows (<= KH), each meeting the KH x rows in
// registers while x row h + u + KH - 1 comes in (in slot (u + KH - 1) mod KH). Checked: the
// incoming row may lie outside x's plane (then zero) and the turn may stop short of KH rows.
template <int KH, int BJ, bool Direct, bool Checked>
ONNXDP_AVX512 __attribute__((always_inline)) inline void filter_turn(__m512 (&acc)[KH][BJ], __m512 (&xr)[KH][BJ],
                                                                     const __mmask16 (&xm)[BJ], __mmask16 mask,
                                                                     const float*& x_at, const float*& d_at, int64_t& r,
                                                                     const Plane& p, int64_t dp, int64_t rows) {
#pragma GCC unroll 8
  for (int u = 0; u < KH; ++u) {
    if (Checked && u == rows) break;  // a short last turn (5x5 on 28x28: 58.5 against 56 GFLOP/s)
    const bool inside = !Checked || (r >= p.ph && r < p.ph + p.SH);
#pragma GCC unroll 8
    for (int b = 0; b < BJ; ++b)
      xr[(u + KH - 1) % KH][b] = inside ? _mm512_maskz_loadu_ps(xm[b], x_at + b) : _mm512_setzero_ps();
    // dy in place: its lanes past the row are the next row's (the copy's are zero).
    __m512 d = Direct ? _mm512_maskz_loadu_ps(mask, d_at) : _mm512_loadu_ps(d_at);
    __asm__("" : "+v"(d));  // one load for the KH x BJ multiply-adds
#pragma GCC unroll 8
    for (int i = 0; i < KH; ++i)
#pragma GCC unroll 8
      for (int b = 0; b < BJ; ++b) acc[i][b] = _mm512_fmadd_ps(xr[(u + i) % KH][b], d, acc[i][b]);
    // The next rows one add further (as in forward_tile).
    ++r, x_at += p.SW, d_at += dp;
    __asm__("" : "+r"(x_at), "+r"(d_at));
  }
}

// A chunk of m images' terms of dw (i, j0 + b), i < KH, b < BJ, added to sums [KH * KW, V]
// (double lanes): image k's plane of x at x + k * xs (read in place: padded row r is source row
// r - ph, zero outside the plane; its columns likewise, as masked-off lanes), its dy rows (pitch
// dp) at dy + k * ds: a copy with zero lanes past each row, or (Direct) dy itself, those lanes
// masked. One vector of columns at a time, dy row h meets padded x rows h + i. The loop over h turns KH
// rows at a time (the last turn stops at dy's last row), so the KH x rows in registers rotate
// (slot (row - h0) mod KH) and each is loaded once, not KH times, and only dy's own rows are
// visited (a loop over x's rows with dy's in registers also visited the KH - 1 rows of padding
// above and below dy: a third of the multiply-adds on 14-row planes). Each lane sums at most
// kDepthwiseChunkTerms terms in float (rows of one image, or the chunk's whole images where
// they are small), then adds them in double.
template <int KH, int BJ, bool Direct>
ONNXDP_AVX512 void filter_columns(const Plane& p, const float* x, int64_t xs, const float* dy, int64_t ds,
                                  int64_t dp, int64_t m, int64_t j0, double* sums, LineFeed& feed) {
  const int64_t nv = vectors(p.OW);
  constexpr int64_t per = kDepthwiseChunkTerms / KH * KH;  // rows a chunk, whole turns
  for (int64_t v = 0; v < nv; ++v) {
    // dy's lanes within the row; x's within the row and inside the source row (its padding reads
    // as zero, and x's lanes past the output row are cleared: dy's are zero there, but 0 x
    // infinity is NaN).
    const __mmask16 mask = lanes_before(p.OW - v * V);
    __mmask16 xm[BJ];
    for (int b = 0; b < BJ; ++b) {
      const int64_t start = v * V + j0 + b - p.pw, lo = std::max<int64_t>(0, -start), hi = std::min(V, p.SW - start);
      xm[b] = hi > lo ? __mmask16(mask & lanes_before(hi) & ~lanes_before(lo)) : __mmask16(0);
    }
    for (int64_t h0 = 0; h0 < p.OH; h0 += per) {
      __m512 acc[KH][BJ], xr[KH][BJ];
#pragma GCC unroll 8
      for (int i = 0; i < KH; ++i)
#pragma GCC unroll 8
        for (int b = 0; b < BJ; ++b) acc[i][b] = _mm512_setzero_ps();
      for (int64_t img = 0; img < m; ++img) {
        // Padded row r of x is source row r - ph (zero outside the plane), read in place.
        const float* xi = x + img * xs + v * V + j0 - p.pw;
        int64_t r = h0;
        const float* x_at = xi + (r - p.ph) * p.SW;
#pragma GCC unroll 8
        for (int k = 0; k + 1 < KH; ++k, ++r, x_at += p.SW)
#pragma GCC unroll 8
          for (int b = 0; b < BJ; ++b)
            xr[k][b] = r >= p.ph && r < p.ph + p.SH ? _mm512_maskz_loadu_ps(xm[b], x_at + b) : _mm512_setzero_ps();
        const float* d_at = dy + img * ds + h0 * dp + v * V;
        const int64_t h_end = std::min(p.OH, h0 + per);
        for (int64_t h = h0; h < h_end; h += KH) {
          feed.feed();
          // A whole turn whose incoming x rows all lie inside the plane needs no checks (most
          // turns; the checks' compares and branches had outnumbered the multiply-adds there).
          if (h + KH <= h_end && r >= p.ph && r + KH <= p.ph + p.SH)
            filter_turn<KH, BJ, Direct, false>(acc, xr, xm, mask, x_at, d_at, r, p, dp, KH);
          else
            filter_turn<KH, BJ, Direct, true>(acc, xr, xm, mask, x_at, d_at, r, p, dp, h_end - h);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < KH; ++i)
#pragma GCC unroll 8
        for (int b = 0; b < BJ; ++b) {
          double* s = sums + (i * p.KW + j0 + b) * V;
          const __m512 a = acc[i][b];
          const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
          const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
          _mm512_storeu_pd(s, _mm512_add_pd(_mm512_loadu_pd(s), lo));
          _mm512_storeu_pd(s + V / 2, _mm512_add_pd(_mm512_loadu_pd(s + V / 2), hi));
        }
    }
  }
}

template <int KH, int BJ, bool Direct>
ONNXDP_AVX512 void filter_group(int64_t bj, const Plane& p, const float* x, int64_t xs, const float* dy,
                                int64_t ds, int64_t dp, int64_t m, int64_t j0, double* sums, LineFeed& feed) {
  if (bj == BJ) return filter_columns<KH, BJ, Direct>(p, x, xs, dy, ds, dp, m, j0, sums, feed);
  if constexpr (BJ > 1) filter_group<KH, BJ - 1, Direct>(bj, p, x, xs, dy, ds, dp, m, j0, sums, feed);
}

// Channels [lo, hi): dw [C, KH * KW] from x [N, C, SH * SW] and dy [N, C, OH * OW].
template <int KH>
ONNXDP_AVX512 void filter_channels(const Plane& p, int64_t N, int64_t C, const float* x, const float* dy, float* dw,
                                   int64_t lo, int64_t hi) {
  // dy's rows at a pitch of whole vectors (aligned loads: each is read once a column group).
  const int64_t dp = vectors(p.OW) * V, K = KH * p.KW, ds = p.OH * dp;
  // Images a chunk: small planes' sums go to double after several images (a 14x14 plane's 14 rows
  // alone left the conversions and the rotation's start a third of the work).
  const int64_t m = std::max<int64_t>(1, kDepthwiseChunkTerms / p.OH);
  // The kernel's columns in groups of at most max_columns(KH), as even as they go. With one group
  // dy is read once, in place; with several each reads it again, from the copy (in place, with
  // a line-split load each time, 7x7 on 14x14 ran at 57 GFLOP/s against 66).
  const int64_t groups = (p.KW + max_columns(KH) - 1) / max_columns(KH);
  float* dpad = groups > 1 ? scratch<float>(1, m * ds) : nullptr;
  if (dpad) std::fill(dpad, dpad + m * ds, 0.f);
  std::vector<double> sums(size_t(K * V));
  for (int64_t c = lo; c < hi; ++c) {
    std::fill(sums.begin(), sums.end(), 0.0);
    for (int64_t n0 = 0; n0 < N; n0 += m) {
      const int64_t count = std::min(m, N - n0);
      if (groups > 1)
        for (int64_t k = 0; k < count; ++k) {
          const float* d = dy + ((n0 + k) * C + c) * p.OH * p.OW;
          for (int64_t h = 0; h < p.OH; ++h) copy_row(d + h * p.OW, dpad + k * ds + h * dp, p.OW);
        }
      // The next chunk's planes (this channel's next images, or the next channel's first) are
      // fetched towards L2 while this one is summed, a few lines every turn of the sums (LineFeed).
      const int64_t next_n = n0 + count < N ? n0 + count : 0, next_c = n0 + count < N ? c : c + 1;
      const int64_t next_count = next_c < hi ? std::min(m, N - next_n) : 0;
      LineFeed feed;
      for (int64_t k = 0; k < next_count; ++k) {
        feed.add(x + ((next_n + k) * C + next_c) * p.SH * p.SW, p.SH * p.SW);
        feed.add(dy + ((next_n + k) * C + next_c) * p.OH * p.OW, p.OH * p.OW);
      }
      feed.spread(groups * vectors(p.OW) * count * ((p.OH + KH - 1) / KH));
      const float* xc = x + (n0 * C + c) * p.SH * p.SW;  // image n0's plane; the chunk's C planes apart
      for (int64_t g = 0, j0 = 0; g < groups; ++g) {
        const int64_t bj = p.KW / groups + (g < p.KW % groups ? 1 : 0);
        if (groups > 1)
          filter_group<KH, max_columns(KH), false>(bj, p, xc, C * p.SH * p.SW, dpad, ds, dp, count, j0,
                                                   sums.data(), feed);
        else
          filter_group<KH, max_columns(KH), true>(bj, p, xc, C * p.SH * p.SW, dy + (n0 * C + c) * p.OH * p.OW,
                                                  C * p.OH * p.OW, p.OW, count, j0, sums.data(), feed);
        j0 += bj;
      }
    }
    // The lanes' totals, added pairwise (lane l + w into lane l, w = 8, 4, 2, 1) in vectors: as
    // scalars these adds took an eighth of the time on 14x14 planes (60 against 65 GFLOP/s).
    for (int64_t t = 0; t < K; ++t) {
      const double* a = sums.data() + t * V;
      const __m512d s8 = _mm512_add_pd(_mm512_loadu_pd(a), _mm512_loadu_pd(a + V / 2));
      const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
      const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
      dw[c * K + t] = float(_mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2))));
    }
  }
}

// ---- the channel-blocked layout ---------------------------------------------------------------

// x [N, C / 16, H, W, 16] (exec/cpu/blocked.h): a position's 16 channels are one vector, and a
// depthwise window multiplies whole vectors, every lane a channel of its own. No lane is empty,
// every load is of whole lines (where the tensor's start is aligned), and the plane's borders are
// loop bounds, not a padded copy.
struct BlockedPlane {
  int64_t SH, SW, OH, OW, KH, KW, ph, pw;
  // Conv's window: from x's plane (bound) to y's (iter).
  static BlockedPlane forward(const ConvWindows& g) {
    return {g.bound[0], g.bound[1], g.iter[0], g.iter[1], g.kernel[0], g.kernel[1], g.pad_begin[0], g.pad_begin[1]};
  }
};

// Weights [C, K] (channel c's tap t at c * K + t) -> [C / 16, K, 16]; turned: tap K - 1 - t.
std::vector<float> block_weights(const float* w, int64_t C, int64_t K, bool turned) {
  std::vector<float> b(size_t(C * K));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < K; ++t) b[size_t(((c / V) * K + t) * V + c % V)] = w[c * K + (turned ? K - 1 - t : t)];
  return b;
}

// One kernel row's taps into P outputs of a row: acc[p] += x (q0 + p + j) w (j), j < KW, x being
// the input row (W vectors), zero outside it. Each input vector is loaded once and meets the KW
// outputs it reaches (KW multiply-adds a load), the row's KW weight vectors held in registers.
template <int KW, int P>
ONNXDP_AVX512 __attribute__((always_inline)) inline void blocked_row_taps(const float* x, int64_t W, int64_t q0,
                                                                          const float* w, __m512 (&acc)[P]) {
  __m512 wv[KW];
#pragma GCC unroll 8
  for (int j = 0; j < KW; ++j) wv[j] = _mm512_loadu_ps(w + j * V);
#pragma GCC unroll 32
  for (int q = 0; q < P + KW - 1; ++q) {
    const int64_t c = q0 + q;
    if (c < 0 || c >= W) continue;
    __m512 xv = _mm512_loadu_ps(x + c * V);
    __asm__("" : "+v"(xv));  // one load for the KW multiply-adds
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j)
      if (q - j >= 0 && q - j < P) acc[q - j] = _mm512_fmadd_ps(xv, wv[j], acc[q - j]);
  }
}

// Outputs (oh, ow0 + q), q < n <= P, of one channel block's plane: bias + sum over i < KH, j < KW
// of x (oh + i - ph, ow0 + q + j - pw) w (i, j).
template <int KW, int P>
ONNXDP_AVX512 inline void blocked_forward_tile(const BlockedPlane& p, const float* x, const float* w, __m512 bias,
                                               float* y, int64_t oh, int64_t ow0, int64_t n) {
  __m512 acc[P];
#pragma GCC unroll 16
  for (int q = 0; q < P; ++q) acc[q] = bias;
  for (int64_t i = 0; i < p.KH; ++i)
    if (const int64_t ih = oh + i - p.ph; ih >= 0 && ih < p.SH)
      blocked_row_taps<KW, P>(x + ih * p.SW * V, p.SW, ow0 - p.pw, w + i * KW * V, acc);
  float* out = y + (oh * p.OW + ow0) * V;
#pragma GCC unroll 16
  for (int q = 0; q < P; ++q)
    if (q < n) _mm512_storeu_ps(out + q * V, acc[q]);
}

// One channel block's plane, each row in tiles of 14 outputs (14 sums, KW weights and the input
// vector: at most 22 registers), its last columns in a tile of 8 or 4 (a 7-column row in one of 8,
// not half of one of 14).
template <int KW>
ONNXDP_AVX512 void blocked_forward_plane(const BlockedPlane& p, const float* x, const float* w, const float* b,
                                         float* y) {
  const __m512 bias = b ? _mm512_loadu_ps(b) : _mm512_setzero_ps();
  for (int64_t oh = 0; oh < p.OH; ++oh)
    for (int64_t ow0 = 0; ow0 < p.OW;) {
      const int64_t left = p.OW - ow0;
      if (left >= 14) blocked_forward_tile<KW, 14>(p, x, w, bias, y, oh, ow0, 14), ow0 += 14;
      else if (left > 4) blocked_forward_tile<KW, 8>(p, x, w, bias, y, oh, ow0, std::min<int64_t>(left, 8)), ow0 += 8;
      else blocked_forward_tile<KW, 4>(p, x, w, bias, y, oh, ow0, left), ow0 += 4;
    }
}

// Blocked x [N, C, SH, SW] -> blocked y [N, C, OH, OW] with blocked weights wb [C / 16, K, 16].
void run_blocked_forward(const BlockedPlane& p, const ConvChannels& ch, const float* x, const float* wb,
                         const float* bias, float* y) {
  const int64_t CB = ch.groups / V, K = p.KH * p.KW, planes = ch.images * CB;
  split_rows(planes, planes * p.OH * p.OW * V * K > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t cb = t % CB;
      const float* b = bias ? bias + cb * V : nullptr;
      const float* xp = x + t * p.SH * p.SW * V;
      float* yp = y + t * p.OH * p.OW * V;
      const float* wp = wb + cb * K * V;
      if (p.KW == 3) blocked_forward_plane<3>(p, xp, wp, b, yp);
      if (p.KW == 5) blocked_forward_plane<5>(p, xp, wp, b, yp);
      if (p.KW == 7) blocked_forward_plane<7>(p, xp, wp, b, yp);
    }
  });
}

// Kernel rows a pass of the filter gradient sums at once (Rows x KW sums in registers, two dy
// vectors, an x vector): a 3-row window's all in one pass over the planes, 5 columns 3 rows (3 + 2),
// 7 columns 2 (2 + 2 + 2 + 1). More rows a pass ran slower on this machine (5x5 on 28x28 with all
// five: 77-89 GFLOP/s against 100-124; 7x7 with three: 85-89 against 102-120 on 14x14).
constexpr int max_rows(int KW) { return KW == 3 ? 8 : KW == 5 ? 3 : 2; }

// Outputs [ow0, ow1) of dy's row d against Rows rows of x (x[r]; a row outside the plane is a row
// of zeros): acc[r][j] += x_r (ow + j - pw) dy (ow). Checked: some taps fall outside x's row (its
// ends), one output at a time (two at a time there, each load checked, ran no faster). Else two
// at a time: each x vector loaded once meets both dy vectors (KW + 1 loads for 2 KW multiply-adds
// a row).
template <int KW, int Rows, bool Checked>
ONNXDP_AVX512 __attribute__((always_inline)) inline void blocked_filter_segment(
    __m512 (&acc)[Rows][KW], const float* const (&x)[Rows], const float* d, int64_t ow0, int64_t ow1, int64_t pw,
    int64_t W) {
  int64_t ow = ow0;
  if (!Checked)
    for (; ow + 2 <= ow1; ow += 2) {
      __m512 d0 = _mm512_loadu_ps(d + ow * V), d1 = _mm512_loadu_ps(d + (ow + 1) * V);
      __asm__("" : "+v"(d0), "+v"(d1));
#pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int q = 0; q <= KW; ++q) {
          __m512 xv = _mm512_loadu_ps(x[r] + (ow + q - pw) * V);
          __asm__("" : "+v"(xv));
          if (q < KW) acc[r][q] = _mm512_fmadd_ps(xv, d0, acc[r][q]);
          if (q >= 1) acc[r][q - 1] = _mm512_fmadd_ps(xv, d1, acc[r][q - 1]);
        }
    }
  for (; ow < ow1; ++ow) {
    __m512 dv = _mm512_loadu_ps(d + ow * V);
    __asm__("" : "+v"(dv));
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) {
      const int64_t c = ow + j - pw;
      if (Checked && (c < 0 || c >= W)) continue;
#pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r) acc[r][j] = _mm512_fmadd_ps(_mm512_loadu_ps(x[r] + c * V), dv, acc[r][j]);
    }
  }
}

// The float sums acc[r][j] added to sums (r * KW + j) [16] (double), and cleared.
template <int KW, int Rows>
ONNXDP_AVX512 inline void blocked_flush(__m512 (&acc)[Rows][KW], double* sums) {
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) {
      double* s = sums + (r * KW + j) * V;
      const __m512 a = acc[r][j];
      _mm512_storeu_pd(s, _mm512_add_pd(_mm512_loadu_pd(s), _mm512_cvtps_pd(_mm512_castps512_ps256(a))));
      const __m256 up = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
      _mm512_storeu_pd(s + V / 2, _mm512_add_pd(_mm512_loadu_pd(s + V / 2), _mm512_cvtps_pd(up)));
      acc[r][j] = _mm512_setzero_ps();
    }
}

// The blocked filter gradient's float sums: each lane sums at most this many terms in float (whole
// rows of dy where they are short, or parts of one), then adds them in double, in order. 256 as
// the small-plane loops' chunks (exec/cpu/conv_small.h); 64 ran 5-15 % slower here (5x5 on 28x28
// 91-108 against 108-112 GFLOP/s, 7x7 on 56x56 110-121 against 119-128).
constexpr int64_t kBlockedChunkTerms = 256;

// Kernel rows [i0, i0 + Rows) of one channel block's dw, from one image's planes xp and dp, added
// to sums [K, 16] (double) in chunks of kBlockedChunkTerms terms.
template <int KW, int Rows>
ONNXDP_AVX512 void blocked_filter_rows(const BlockedPlane& p, const float* xp, const float* dp, const float* zeros,
                                       int64_t i0, int64_t oh0, int64_t oh1, double* sums) {
  // The columns whose taps all fall inside x's row.
  const int64_t lo = std::min(p.OW, p.pw), hi = std::max(lo, std::min(p.OW, p.SW - KW + 1 + p.pw));
  __m512 acc[Rows][KW];
  int64_t terms = 0;
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const int64_t ih = oh + i0 - p.ph;
    if (ih + Rows <= 0 || ih >= p.SH) continue;  // every row outside the plane
    const float* xr[Rows];
    for (int r = 0; r < Rows; ++r) xr[r] = ih + r >= 0 && ih + r < p.SH ? xp + (ih + r) * p.SW * V : zeros;
    const float* d = dp + oh * p.OW * V;
    for (int64_t s0 = 0; s0 < p.OW; s0 += kBlockedChunkTerms) {
      const int64_t s1 = std::min(p.OW, s0 + kBlockedChunkTerms), a = std::clamp(lo, s0, s1),
                    b = std::clamp(hi, s0, s1);
      if (terms + (s1 - s0) > kBlockedChunkTerms) blocked_flush<KW, Rows>(acc, sums + i0 * KW * V), terms = 0;
      blocked_filter_segment<KW, Rows, true>(acc, xr, d, s0, a, p.pw, p.SW);
      blocked_filter_segment<KW, Rows, false>(acc, xr, d, a, b, p.pw, p.SW);
      blocked_filter_segment<KW, Rows, true>(acc, xr, d, b, s1, p.pw, p.SW);
      terms += s1 - s0;
    }
  }
  blocked_flush<KW, Rows>(acc, sums + i0 * KW * V);
}

// Kernel rows [i0, i0 + rows) by the instance of blocked_filter_rows with Rows = rows.
template <int KW, int Rows = max_rows(KW)>
ONNXDP_AVX512 void blocked_filter_pass(int64_t rows, const BlockedPlane& p, const float* xp, const float* dp,
                                       const float* zeros, int64_t i0, int64_t oh0, int64_t oh1, double* sums) {
  if (rows == Rows) return blocked_filter_rows<KW, Rows>(p, xp, dp, zeros, i0, oh0, oh1, sums);
  if constexpr (Rows > 1) blocked_filter_pass<KW, Rows - 1>(rows, p, xp, dp, zeros, i0, oh0, oh1, sums);
}

// One channel block's dw, image by image, band by band (the planes' rows stay in cache across the
// passes).
template <int KW>
ONNXDP_AVX512 void blocked_filter_block(const BlockedPlane& p, int64_t N, int64_t CB, int64_t cb, const float* x,
                                        const float* dy, const float* zeros, double* sums) {
  // Bands of dy rows whose lines and the x rows they meet fit 32 KB (of L1's 48), each band's
  // passes one after another: 5x5 on 28x28 (bands of 7 rows) 98-100 -> 102-110 GFLOP/s, the rest
  // level. Where fewer than 4 rows fit (7x7 on 56x56), the passes take whole planes.
  const int64_t fit = (32 * 1024 / 64 - (p.KH - 1) * p.SW) / (p.SW + p.OW);
  const int64_t band = fit >= 4 ? fit : p.OH;
  for (int64_t n = 0; n < N; ++n) {
    const float* xp = x + (n * CB + cb) * p.SH * p.SW * V;
    const float* dp = dy + (n * CB + cb) * p.OH * p.OW * V;
    for (int64_t oh0 = 0; oh0 < p.OH; oh0 += band)
      for (int64_t i0 = 0; i0 < p.KH; i0 += max_rows(KW))
        blocked_filter_pass<KW>(std::min<int64_t>(max_rows(KW), p.KH - i0), p, xp, dp, zeros, i0, oh0,
                                std::min(p.OH, oh0 + band), sums);
  }
}

// dw [C, K] from blocked x and dy; a channel block's sums on one thread, so dw is the same on any
// number of threads.
void run_blocked_filter_grad(const BlockedPlane& p, const ConvChannels& ch, const float* x, const float* dy,
                             float* dw) {
  const int64_t CB = ch.groups / V, K = p.KH * p.KW;
  split_rows(CB, ch.images * ch.groups * p.OH * p.OW * K > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    std::vector<float> zeros(size_t(p.SW * V), 0.f);
    std::vector<double> sums(size_t(K * V));
    for (int64_t cb = lo; cb < hi; ++cb) {
      std::fill(sums.begin(), sums.end(), 0.0);
      if (p.KW == 3) blocked_filter_block<3>(p, ch.images, CB, cb, x, dy, zeros.data(), sums.data());
      if (p.KW == 5) blocked_filter_block<5>(p, ch.images, CB, cb, x, dy, zeros.data(), sums.data());
      if (p.KW == 7) blocked_filter_block<7>(p, ch.images, CB, cb, x, dy, zeros.data(), sums.data());
      for (int64_t t = 0; t < K; ++t)
        for (int64_t l = 0; l < V; ++l) dw[(cb * V + l) * K + t] = float(sums[size_t(t * V + l)]);
    }
  });
}

}  // namespace

bool depthwise_blocked_loops() { return cpu_has_avx512(); }

bool depthwise_takes(const ConvWindows& g, const ConvChannels& ch, ConvPass pass) {
  if (!cpu_has_avx512() || ch.in != 1 || ch.out != 1 || ch.groups < 1 || ch.images < 1 || g.iter.size() != 2 ||
      g.iter[0] < 1 || g.iter[1] < 1 || g.bound[0] < 1 || g.bound[1] < 1)
    return false;
  if (ch.in_blocked || ch.out_blocked)
    return ch.in_blocked && ch.out_blocked && ch.groups % V == 0 &&
           blocked_depthwise_window(g.kernel, g.strides, g.dilations, g.pad_begin);
  for (size_t d = 0; d < 2; ++d)
    if (g.strides[d] != 1 || g.dilations[d] != 1 || g.pad_begin[d] < 0 || g.pad_begin[d] >= g.kernel[d] ||
        g.iter[d] < 1 || g.bound[d] < 1)
      return false;
  const int64_t KH = g.kernel[0], KW = g.kernel[1];
  const int64_t out_cols = pass == ConvPass::transpose ? g.bound[1] : g.iter[1];
  // 3-row windows' filter gradients on planes narrower than 28 columns stay with oneDNN: with 9
  // multiply-adds a dy vector (against 25 to 49), the copies and each image's start weigh more;
  // 14x14 ran at 27 GFLOP/s here against oneDNN's 46. From 28 columns these loops ran level with
  // oneDNN or ahead: 42 against 47 on 28x28 (level in a step), 40 against 27 on 32x32, 40 against
  // 14 on 56x56, 48 against 28 on 112x112 (bench/results/2026-12-06-depthwise-loops.md).
  if (pass == ConvPass::filter_grad && KH == 3 && out_cols < kMin3RowFilterCols) return false;
  return (KH == 3 || KH == 5 || KH == 7) && KW >= 1 && KW <= kMaxKernelCols && out_cols >= kMinOutputCols;
}

void depthwise_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                            const float* bias, float* y) {
  if (ch.in_blocked) {
    const BlockedPlane p = BlockedPlane::forward(g);
    return run_blocked_forward(p, ch, x, block_weights(w, ch.groups, p.KH * p.KW, false).data(), bias, y);
  }
  const Plane p(g.bound[0], g.bound[1], g.iter[0], g.iter[1], g.kernel[0], g.kernel[1], g.pad_begin[0], g.pad_begin[1]);
  run_forward(p, ch, x, w, bias, y);
}

// ConvTranspose (and Conv's input gradient): y (b) = sum over taps k of x (b + pad - k) w (k) in
// each dim, a correlation of x padded by K - 1 - pad with the kernel turned around.
void depthwise_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                              const float* bias, float* y) {
  const int64_t KH = g.kernel[0], KW = g.kernel[1], K = KH * KW;
  if (ch.in_blocked) {
    const BlockedPlane p{g.iter[0], g.iter[1], g.bound[0], g.bound[1], KH, KW, KH - 1 - g.pad_begin[0],
                         KW - 1 - g.pad_begin[1]};
    return run_blocked_forward(p, ch, x, block_weights(w, ch.groups, K, true).data(), bias, y);
  }
  const Plane p(g.iter[0], g.iter[1], g.bound[0], g.bound[1], KH, KW, KH - 1 - g.pad_begin[0], KW - 1 - g.pad_begin[1]);
  std::vector<float> turned(size_t(ch.groups * K));
  for (int64_t c = 0; c < ch.groups; ++c)
    for (int64_t t = 0; t < K; ++t) turned[size_t(c * K + t)] = w[c * K + (K - 1 - t)];
  run_forward(p, ch, x, turned.data(), bias, y);
}

void depthwise_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy,
                                float* dw) {
  if (ch.in_blocked) return run_blocked_filter_grad(BlockedPlane::forward(g), ch, x, dy, dw);
  const Plane p(g.bound[0], g.bound[1], g.iter[0], g.iter[1], g.kernel[0], g.kernel[1], g.pad_begin[0], g.pad_begin[1]);
  const int64_t C = ch.groups, work = ch.images * C * p.OH * p.OW * p.KH * p.KW;
  split_rows(C, work > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    if (p.KH == 3) filter_channels<3>(p, ch.images, C, x, dy, dw, lo, hi);
    if (p.KH == 5) filter_channels<5>(p, ch.images, C, x, dy, dw, lo, hi);
    if (p.KH == 7) filter_channels<7>(p, ch.images, C, x, dy, dw, lo, hi);
  });
}

#endif

}  // namespace onnxdp
