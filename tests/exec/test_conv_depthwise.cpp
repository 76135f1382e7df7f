// Which convolutions the AVX-512 depthwise loops take (exec/cpu/conv_depthwise.h): on an AVX-512
// CPU, ConvNeXt's 7x7 and MobileNet's 3x3 depthwise windows at stride 1 (the 3x3's filter
// gradient on rows of 28 columns or more); never a strided or dilated window, a depth multiplier,
// one side blocked and the other not, a 1-D or 3-D window, or plain rows of fewer than 12 columns.
// The plain loops' values are the engine tests' (tests/ops/conv_reference.h: the "depthwise loops"
// cases, and the infinity case in tests/ops/test_grad.cpp); the blocked loops' are checked below
// against a loop in double. Below too: that they read nothing past their tensors.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "exec/cpu/blocked.h"
#include "exec/cpu/threads.h"

#include "exec/cpu/conv_depthwise.h"
#include "tests/exec/guarded.h"

using namespace onnxdp;
using onnxdp::test::Guarded;
using onnxdp::test::ramp;

namespace {

ConvWindows square(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dilation = 1) {
  ConvWindows g;
  g.iter = {out, out};
  g.bound = {in, in};
  g.kernel = {k, k};
  g.strides = {stride, stride};
  g.dilations = {dilation, dilation};
  g.pad_begin = {pad, pad};
  return g;
}

bool avx512() { return __builtin_cpu_supports("avx512f"); }

}  // namespace

TEST_CASE("depthwise loops: they take ConvNeXt's 7x7 and MobileNet's 3x3 at stride 1, the engine and oneDNN the rest") {
  const bool cpu = avx512();
  const ConvWindows g7 = square(56, 56, 7, 1, 3), g3 = square(20, 20, 3, 1, 1);
  for (ConvPass pass : {ConvPass::forward, ConvPass::transpose, ConvPass::filter_grad}) {
    CHECK(depthwise_takes(g7, {8, 96, 1, 1}, pass) == cpu);
    // 3x3: forward and input gradient; the filter gradient from rows of 28 (oneDNN keeps 20x20's).
    CHECK(depthwise_takes(g3, {8, 64, 1, 1}, pass) == (cpu && pass != ConvPass::filter_grad));
    CHECK(depthwise_takes(square(28, 28, 3, 1, 1), {8, 64, 1, 1}, pass) == cpu);
    CHECK(depthwise_takes(square(112, 112, 3, 1, 1), {8, 32, 1, 1}, pass) == cpu);
    CHECK(depthwise_takes(square(20, 18, 5, 1, 1), {2, 4, 1, 1}, pass) == cpu);
    // A depth multiplier of 2, a grouped window, blocked tensors.
    CHECK_FALSE(depthwise_takes(g3, {8, 64, 1, 2}, pass));
    CHECK_FALSE(depthwise_takes(g3, {8, 16, 4, 4}, pass));
    CHECK_FALSE(depthwise_takes(g3, {8, 64, 1, 1, true, false}, pass));
    CHECK_FALSE(depthwise_takes(g3, {8, 64, 1, 1, false, true}, pass));
    // Blocked on both sides: channels a multiple of 16, 3, 5 or 7 kernel columns, any row length.
    CHECK(depthwise_takes(g3, {8, 64, 1, 1, true, true}, pass) == cpu);
    CHECK(depthwise_takes(square(6, 6, 7, 1, 3), {32, 16, 1, 1, true, true}, pass) == cpu);
    CHECK_FALSE(depthwise_takes(square(6, 6, 7, 1, 3), {32, 24, 1, 1, true, true}, pass));
    CHECK_FALSE(depthwise_takes(square(56, 28, 3, 2, 1), {8, 64, 1, 1, true, true}, pass));
    CHECK_FALSE(depthwise_takes(square(28, 28, 9, 1, 4), {8, 64, 1, 1, true, true}, pass));
    // Strides, dilations, kernels of other heights, padding as wide as the kernel.
    CHECK_FALSE(depthwise_takes(square(56, 28, 3, 2, 1), {8, 64, 1, 1}, pass));
    CHECK_FALSE(depthwise_takes(square(28, 24, 3, 1, 0, 2), {8, 64, 1, 1}, pass));
    CHECK_FALSE(depthwise_takes(square(28, 28, 1, 1, 0), {8, 64, 1, 1}, pass));
    CHECK_FALSE(depthwise_takes(square(28, 28, 9, 1, 4), {8, 64, 1, 1}, pass));
    CHECK_FALSE(depthwise_takes(square(28, 32, 3, 1, 3), {8, 64, 1, 1}, pass));
    // Rows of 14 columns (ConvNeXt's third stage), but not of 11 or 7 (its last stage), nor the
    // zoo's ConvNeXt block (7x7 on 6x6).
    CHECK(depthwise_takes(square(14, 14, 7, 1, 3), {8, 384, 1, 1}, pass) == cpu);
    CHECK_FALSE(depthwise_takes(square(11, 11, 3, 1, 1), {8, 384, 1, 1}, pass));
    CHECK_FALSE(depthwise_takes(square(7, 7, 7, 1, 3), {8, 768, 1, 1}, pass));
    CHECK_FALSE(depthwise_takes(square(6, 6, 7, 1, 3), {32, 16, 1, 1}, pass));
  }
  // A 1-D window.
  ConvWindows g1;
  g1.iter = {40}, g1.bound = {40}, g1.kernel = {3}, g1.strides = {1}, g1.dilations = {1}, g1.pad_begin = {1};
  CHECK_FALSE(depthwise_takes(g1, {8, 64, 1, 1}, ConvPass::forward));
}

// The loops read x and dy in place (their rows' last vectors masked; in the filter gradient x
// always, its padding masked, and dy where the kernel's columns make one group): not one float
// past the tensors' ends, which AddressSanitizer does not check in masked loads. Each pass runs
// on tensors that end at a page that cannot be read, and gives what it gives on ordinary buffers.
TEST_CASE("depthwise loops: no read past x's or dy's end") {
  if (!avx512()) return;  // the loops are AVX-512 only
  struct Window {
    int64_t SH, SW, KH, KW, ph, pw, pw_end;
  };
  // 3x3 on 10x30: rows of a whole and a masked vector; 7x2 on 15x29 with uneven pads.
  for (const Window& s : {Window{10, 30, 3, 3, 1, 1, 1}, Window{15, 29, 7, 2, 3, 0, 1}}) {
    const int64_t N = 2, C = 3, OH = s.SH + 2 * s.ph - s.KH + 1, OW = s.SW + s.pw + s.pw_end - s.KW + 1;
    ConvWindows g;
    g.iter = {OH, OW}, g.bound = {s.SH, s.SW}, g.kernel = {s.KH, s.KW};
    g.strides = {1, 1}, g.dilations = {1, 1}, g.pad_begin = {s.ph, s.pw};
    const ConvChannels ch{N, C, 1, 1};
    CAPTURE(s.KH);
    for (ConvPass pass : {ConvPass::forward, ConvPass::transpose, ConvPass::filter_grad})
      REQUIRE(depthwise_takes(g, ch, pass));
    const std::vector<float> x = ramp(N * C * s.SH * s.SW, 0.01f), dy = ramp(N * C * OH * OW, 0.02f);
    const std::vector<float> w = ramp(C * s.KH * s.KW, 0.03f);
    const Guarded gx(x), gdy(dy);
    std::vector<float> y(dy.size()), y_guarded(dy.size()), dx(x.size()), dx_guarded(x.size());
    std::vector<float> dw(w.size()), dw_guarded(w.size());
    depthwise_conv_forward(g, ch, x.data(), w.data(), nullptr, y.data());
    depthwise_conv_forward(g, ch, gx.data, w.data(), nullptr, y_guarded.data());
    depthwise_conv_transpose(g, ch, dy.data(), w.data(), nullptr, dx.data());
    depthwise_conv_transpose(g, ch, gdy.data, w.data(), nullptr, dx_guarded.data());
    depthwise_conv_filter_grad(g, ch, x.data(), dy.data(), dw.data());
    depthwise_conv_filter_grad(g, ch, gx.data, gdy.data, dw_guarded.data());
    CHECK(y == y_guarded);
    CHECK(dx == dx_guarded);
    CHECK(dw == dw_guarded);
  }
}

namespace {

struct BlockedCase {
  int64_t N, C, SH, SW, KH, KW, ph, pw, pe_h, pe_w;
};

// The three passes of a depthwise window on plain [N, C, H, W] tensors, in double.
struct Naive {
  const BlockedCase& s;
  int64_t OH, OW;
  explicit Naive(const BlockedCase& c)
      : s(c), OH(c.SH + c.ph + c.pe_h - c.KH + 1), OW(c.SW + c.pw + c.pe_w - c.KW + 1) {}
  // f(y index, x index, w index) for every tap inside the plane.
  template <class F>
  void taps(const F& f) const {
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t c = 0; c < s.C; ++c)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow)
            for (int64_t i = 0; i < s.KH; ++i)
              for (int64_t j = 0; j < s.KW; ++j) {
                const int64_t ih = oh + i - s.ph, iw = ow + j - s.pw;
                if (ih >= 0 && ih < s.SH && iw >= 0 && iw < s.SW)
                  f(((n * s.C + c) * OH + oh) * OW + ow, ((n * s.C + c) * s.SH + ih) * s.SW + iw,
                    (c * s.KH + i) * s.KW + j);
              }
  }
};

void check_near(const std::vector<float>& got, const std::vector<double>& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
  CHECK(worst < tolerance);
}

}  // namespace

// The blocked loops (both sides in exec/cpu/blocked.h's layout) against a loop in double, on
// rows of tiles of 14, 8 and 4 outputs (13, 18, 20 and 300 columns), windows mostly padding (7x7 on
// 6x6), one-row kernels, uneven pads and a dy row longer than one float sum's terms (300 > 256), on 1
// and 2 threads, and on tensors that end at a page that cannot be read.
TEST_CASE("depthwise loops, blocked layout: forward, input and filter gradients against a loop in double") {
  if (!avx512()) return;
  const int threads_before = cpu_threads();
  const BlockedCase cases[] = {{2, 32, 9, 13, 3, 3, 1, 1, 1, 1}, {1, 16, 15, 29, 7, 5, 3, 2, 2, 1},
                               {2, 16, 6, 6, 7, 7, 3, 3, 3, 3},  {1, 16, 2, 300, 1, 3, 0, 1, 0, 1},
                               {3, 16, 12, 20, 5, 7, 0, 6, 4, 0}, {1, 16, 5, 18, 3, 3, 1, 1, 1, 1}};
  for (const BlockedCase& s : cases) {
    CAPTURE(s.SH);
    CAPTURE(s.SW);
    CAPTURE(s.KH);
    CAPTURE(s.KW);
    const Naive ref(s);
    ConvWindows g;
    g.iter = {ref.OH, ref.OW}, g.bound = {s.SH, s.SW}, g.kernel = {s.KH, s.KW};
    g.strides = {1, 1}, g.dilations = {1, 1}, g.pad_begin = {s.ph, s.pw};
    const ConvChannels ch{s.N, s.C, 1, 1, true, true};
    for (ConvPass pass : {ConvPass::forward, ConvPass::transpose, ConvPass::filter_grad})
      REQUIRE(depthwise_takes(g, ch, pass));
    const int64_t X = s.N * s.C * s.SH * s.SW, Y = s.N * s.C * ref.OH * ref.OW, S = s.SH * s.SW, P = ref.OH * ref.OW;
    const std::vector<float> x = ramp(X, 0.01f), dy = ramp(Y, 0.02f), w = ramp(s.C * s.KH * s.KW, 0.03f),
                             bias = ramp(s.C, 0.5f);
    std::vector<double> y_want(static_cast<size_t>(Y)), dx_want(static_cast<size_t>(X)), dw_want(w.size());
    for (int64_t i = 0; i < Y; ++i) y_want[size_t(i)] = bias[size_t(i / P % s.C)];
    for (int64_t i = 0; i < X; ++i) dx_want[size_t(i)] = bias[size_t(i / S % s.C)];
    ref.taps([&](int64_t o, int64_t in, int64_t t) {
      y_want[size_t(o)] += double(x[size_t(in)]) * w[size_t(t)];
      dx_want[size_t(in)] += double(dy[size_t(o)]) * w[size_t(t)];
      dw_want[size_t(t)] += double(x[size_t(in)]) * dy[size_t(o)];
    });
    std::vector<float> xb(x.size()), dyb(dy.size());
    plain_to_blocked(x.data(), xb.data(), s.N, s.C, S);
    plain_to_blocked(dy.data(), dyb.data(), s.N, s.C, P);
    const Guarded gx(xb), gdy(dyb);
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      set_cpu_threads(threads);
      std::vector<float> yb(dy.size()), y(dy.size()), dxb(x.size()), dx(x.size()), dw(w.size());
      depthwise_conv_forward(g, ch, gx.data, w.data(), bias.data(), yb.data());
      blocked_to_plain(yb.data(), y.data(), s.N, s.C, P);
      check_near(y, y_want, 1e-5);
      depthwise_conv_transpose(g, ch, gdy.data, w.data(), bias.data(), dxb.data());
      blocked_to_plain(dxb.data(), dx.data(), s.N, s.C, S);
      check_near(dx, dx_want, 1e-5);
      depthwise_conv_filter_grad(g, ch, gx.data, gdy.data, dw.data());
      check_near(dw, dw_want, 1e-5);
    }
  }
  set_cpu_threads(threads_before);
}
