// Which convolutions the small-plane loops take (exec/cpu/conv_small.h): on an AVX-512 CPU the
// sample cnn's first layer (forward and filter gradient, 8 outputs) and its second layer's three
// passes (8 -> 16 on 4x4 images); never another shape with 16 or more output channels, more than
// kSmallPlaneVectors vectors of positions, or groups. Their values are the engine tests'
// (tests/ops/conv_reference.h: the "small planes" cases); below, that they read nothing past their
// tensors.
#include <doctest/doctest.h>

#include <vector>

#include "exec/cpu/conv_small.h"
#include "tests/exec/guarded.h"

using namespace onnxdp;
using onnxdp::test::Guarded;
using onnxdp::test::ramp;

namespace {

ConvWindows square(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  ConvWindows g;
  g.iter = {out, out};
  g.bound = {in, in};
  g.kernel = {k, k};
  g.strides = {stride, stride};
  g.dilations = {1, 1};
  g.pad_begin = {pad, pad};
  return g;
}

bool avx512() { return __builtin_cpu_supports("avx512f"); }

}  // namespace

TEST_CASE("small planes: the loops take the cnn's two windows, oneDNN the rest") {
  const ConvWindows g8 = square(8, 8, 3, 1, 1), g4 = square(4, 4, 3, 1, 1);
  const bool cpu = avx512();
  CHECK(small_conv_takes(g8, {256, 1, 1, 8}, ConvPass::forward) == cpu);
  CHECK(small_conv_takes(g8, {256, 1, 1, 8}, ConvPass::filter_grad) == cpu);
  CHECK(small_conv_takes(g4, {256, 1, 16, 8}, ConvPass::transpose) == cpu);  // 8 -> 16's input gradient
  // 16 output channels: oneDNN's vector of channels is full; but the forward pass and filter
  // gradient over output planes of exactly one vector from at most kSmallPlaneWideInputs channels
  // (the cnn's 8 -> 16).
  CHECK(small_conv_takes(g4, {256, 1, 8, 16}, ConvPass::forward) == cpu);
  CHECK(small_conv_takes(g4, {256, 1, 8, 16}, ConvPass::filter_grad) == cpu);
  CHECK_FALSE(small_conv_takes(g4, {256, 1, 16, 16}, ConvPass::filter_grad));  // 16 inputs
  CHECK_FALSE(small_conv_takes(g8, {256, 1, 8, 16}, ConvPass::filter_grad));   // 8x8: four vectors
  CHECK_FALSE(small_conv_takes(square(3, 3, 3, 1, 1), {256, 1, 8, 16}, ConvPass::forward));  // 9 of 16 lanes
  CHECK_FALSE(small_conv_takes(g4, {256, 1, 8, 17}, ConvPass::filter_grad));
  CHECK_FALSE(small_conv_takes(square(8, 8, 3, 1, 1), {32, 1, 64, 64}, ConvPass::forward));
  // Planes of more than kSmallPlaneVectors vectors (9x9 = 81 positions), groups.
  CHECK_FALSE(small_conv_takes(square(9, 9, 3, 1, 1), {4, 1, 1, 8}, ConvPass::forward));
  CHECK_FALSE(small_conv_takes(g8, {4, 2, 1, 4}, ConvPass::forward));
  // A view that spans more than two source vectors: a 1x1 window at stride 2 on 8x8 (the one
  // output vector reads positions 0 to 54 of the input's four).
  CHECK_FALSE(small_conv_takes(square(8, 4, 1, 2, 0), {4, 1, 1, 8}, ConvPass::forward));
  CHECK(small_conv_takes(square(8, 4, 3, 2, 1), {4, 1, 16, 8}, ConvPass::transpose) == cpu);
}

// The loops read x in place where the views are runs (masked loads) or its planes whole vectors:
// not one float past x's end, which AddressSanitizer does not check in masked loads. The forward
// pass and the filter gradient run on tensors that end at a page that cannot be read, and give
// what they give on ordinary buffers. 70 images: several of the filter gradient's chunks.
TEST_CASE("small planes: no read past x's or dy's end") {
  if (!avx512()) return;  // the loops are AVX-512 only
  struct Shape {
    int64_t in, out, stride;
  };
  // 7x7 at unit stride (runs; planes of 49 positions), 5x5 -> 3x3 at stride 2 (views from two
  // vectors; planes of 25 and 9).
  int forwards = 0;
  for (const Shape& s : {Shape{7, 7, 1}, Shape{5, 3, 2}}) {
    const ConvWindows g = square(s.in, s.out, 3, s.stride, 1);
    const int64_t N = 70, C = 2, M = 8;
    const ConvChannels ch{N, 1, C, M};
    CAPTURE(s.in);
    REQUIRE(small_conv_takes(g, ch, ConvPass::filter_grad));
    const std::vector<float> x = ramp(N * C * s.in * s.in, 0.01f), dy = ramp(N * M * s.out * s.out, 0.02f);
    const std::vector<float> w = ramp(M * C * 9, 0.03f);
    const Guarded gx(x), gdy(dy);
    std::vector<float> dw(w.size()), dw_guarded(w.size());
    small_conv_filter_grad(g, ch, x.data(), dy.data(), dw.data());
    small_conv_filter_grad(g, ch, gx.data, gdy.data, dw_guarded.data());
    CHECK(dw == dw_guarded);
    if (small_conv_takes(g, ch, ConvPass::forward)) {
      std::vector<float> y(dy.size()), y_guarded(dy.size());
      small_conv_forward(g, ch, x.data(), w.data(), nullptr, y.data());
      small_conv_forward(g, ch, gx.data, w.data(), nullptr, y_guarded.data());
      CHECK(y == y_guarded);
      ++forwards;
    }
  }
  CHECK(forwards >= 1);  // the 7x7 forward at least
}
