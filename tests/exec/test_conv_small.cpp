// Which convolutions the small-plane loops take (exec/cpu/conv_small.h): on an AVX-512 CPU the
// sample cnn's first layer (forward and filter gradient, 8 outputs) and its second layer's input
// gradient (8 outputs on 4x4 images); never a shape with 16 or more output channels, more than
// kSmallPlaneVectors vectors of positions, or groups. Their values are the engine tests'
// (tests/ops/conv_reference.h: the "small planes" cases).
#include <doctest/doctest.h>

#include "exec/cpu/conv_small.h"

using namespace onnxdp;

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

TEST_CASE("small planes: the loops take the cnn's 1 -> 8 window and 8 -> 16 input gradient, oneDNN the rest") {
  const ConvWindows g8 = square(8, 8, 3, 1, 1), g4 = square(4, 4, 3, 1, 1);
  const bool cpu = avx512();
  CHECK(small_conv_takes(g8, {256, 1, 1, 8}, ConvPass::forward) == cpu);
  CHECK(small_conv_takes(g8, {256, 1, 1, 8}, ConvPass::filter_grad) == cpu);
  CHECK(small_conv_takes(g4, {256, 1, 16, 8}, ConvPass::transpose) == cpu);  // 8 -> 16's input gradient
  // 16 output channels: oneDNN's vector of channels is full.
  CHECK_FALSE(small_conv_takes(g4, {256, 1, 8, 16}, ConvPass::forward));
  CHECK_FALSE(small_conv_takes(g4, {256, 1, 8, 16}, ConvPass::filter_grad));
  CHECK_FALSE(small_conv_takes(square(8, 8, 3, 1, 1), {32, 1, 64, 64}, ConvPass::forward));
  // Planes of more than kSmallPlaneVectors vectors (9x9 = 81 positions), groups.
  CHECK_FALSE(small_conv_takes(square(9, 9, 3, 1, 1), {4, 1, 1, 8}, ConvPass::forward));
  CHECK_FALSE(small_conv_takes(g8, {4, 2, 1, 4}, ConvPass::forward));
  // A view that spans more than two source vectors: a 1x1 window at stride 2 on 8x8 (the one
  // output vector reads positions 0 to 54 of the input's four).
  CHECK_FALSE(small_conv_takes(square(8, 4, 1, 2, 0), {4, 1, 1, 8}, ConvPass::forward));
  CHECK(small_conv_takes(square(8, 4, 3, 2, 1), {4, 1, 16, 8}, ConvPass::transpose) == cpu);
}
