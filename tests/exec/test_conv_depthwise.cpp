// Which convolutions the AVX-512 depthwise loops take (exec/cpu/conv_depthwise.h): on an AVX-512
// CPU, ConvNeXt's 7x7 and MobileNet's 3x3 depthwise windows at stride 1 (the 3x3 without its
// filter gradient); never a strided or dilated window, a depth multiplier, blocked tensors, a 1-D
// or 3-D window, or rows of fewer than 12 columns. Their values are the engine tests'
// (tests/ops/conv_reference.h: the "depthwise loops" cases, and the infinity case in
// tests/ops/test_grad.cpp).
#include <doctest/doctest.h>

#include "exec/cpu/conv_depthwise.h"

using namespace onnxdp;

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
  const ConvWindows g7 = square(56, 56, 7, 1, 3), g3 = square(28, 28, 3, 1, 1);
  for (ConvPass pass : {ConvPass::forward, ConvPass::transpose, ConvPass::filter_grad}) {
    CHECK(depthwise_takes(g7, {8, 96, 1, 1}, pass) == cpu);
    // 3x3: forward and input gradient (oneDNN keeps the filter gradient).
    CHECK(depthwise_takes(g3, {8, 64, 1, 1}, pass) == (cpu && pass != ConvPass::filter_grad));
    CHECK(depthwise_takes(square(20, 18, 5, 1, 1), {2, 4, 1, 1}, pass) == cpu);
    // A depth multiplier of 2, a grouped window, blocked tensors.
    CHECK_FALSE(depthwise_takes(g3, {8, 64, 1, 2}, pass));
    CHECK_FALSE(depthwise_takes(g3, {8, 16, 4, 4}, pass));
    CHECK_FALSE(depthwise_takes(g3, {8, 64, 1, 1, true, true}, pass));
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
