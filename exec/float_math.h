// float32 exp, erf and tanh written as straight-line arithmetic (polynomials, selects and bit moves, no
// calls or branches), so that a loop over a tensor vectorizes; the C library's expf / erff are
// calls, one element at a time. They are what fn::m::exp / erf / tanh use for float on the host
// (Softmax, Gelu, GeluGrad, Sigmoid, Exp, Erf, Tanh ...); device code keeps CUDA's own.
//
// Accuracy, checked against double-precision exp / erf over a sweep of float32 inputs
// (tests/exec/test_float_math.cpp): exp within one unit in the last place, subnormal results
// included; erf within 8 units (5e-7 relative), from float32 rounding inside its rational form;
// tanh within 2.
// NaN gives NaN; exp(+-inf) is inf / 0, erf(+-inf) is +-1. Speed, measured on the 2-core CI
// machine over a million normal-range floats: exp 2.6 ns per element (expf 3.9), erf 2.5 (erff 8).
// The coefficients come from scripts/fit-float-math.py.
#pragma once
#include <cstdint>
#include <cstring>

// Always inlined, into every loop that calls them (the x86-64-v3 clones of exec/cpu/clones.h are
// flattened anyway): a call per element keeps a loop scalar. Call them directly; an always_inline
// function cannot be called through a pointer in unoptimized builds.
#define ONNXDP_FM_INLINE __attribute__((always_inline)) inline

namespace onnxdp::fm {

// Bit moves (memcpy, which compilers turn into register moves; also under nvcc's host pass).
ONNXDP_FM_INLINE int32_t bits_of(float v) {
  int32_t i;
  std::memcpy(&i, &v, sizeof i);
  return i;
}
ONNXDP_FM_INLINE float float_of(int32_t i) {
  float v;
  std::memcpy(&v, &i, sizeof v);
  return v;
}

// e^x = 2^n e^r with n = round(x / ln2) and r = x - n ln2 (ln2 in two parts, so n * ln2_hi is
// exact), |r| <= ln2 / 2; e^r by a degree-6 polynomial; 2^n applied as two powers of two, so that
// n from -150 to 128 (subnormal results, overflow to inf) needs no branch.
ONNXDP_FM_INLINE float exp_f32(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);  // beyond: 0 and inf; NaN passes
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: t's low mantissa bits hold round(x / ln2)
  const float t = xc * 1.44269504f + kShift;
  const float n = t - kShift;
  const int32_t ni = bits_of(t) - bits_of(kShift);
  const float r = (xc - n * 0.693145752f) - n * 1.42860677e-06f;
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (0.16666415f + r * (0.041666217f + r * (0.008375129f + r * 0.0013948581f)))));
  const int32_t h = ni >> 1;
  const float s1 = float_of((h + 127) << 23), s2 = float_of((ni - h + 127) << 23);
  return p * s1 * s2;
}

// erf(x) = x P(x^2) / Q(x^2) on |x| <= 4, a rational fit (relative error 2e-9 in float64); beyond
// 4, erf is +-1 in float32. Odd by construction: x^2 is the same for +-x.
ONNXDP_FM_INLINE float erf_f32(float x) {
  const float xc = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);  // NaN passes
  const float t = xc * xc;
  const float p =
      1.1283792f +
      t * (0.18520379f +
           t * (0.054316904f + t * (0.0038496247f + t * (0.00037960568f + t * (4.684677e-06f + t * -1.3201751e-08f)))));
  const float q = 1.0f + t * (0.497466f + t * (0.11395858f + t * (0.015462104f + t * (0.0013075683f + t * 6.310963e-05f))));
  const float r = xc * p / q;
  return r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);
}

// tanh(x) = x + x^3 P(x^2) for |x| < 0.625 (a fit, relative error 4e-9 in float64); beyond,
// 1 - 2 / (e^(2|x|) + 1) with x's sign, where the subtraction loses at most a bit (the quotient is
// below 0.45). e^(2|x|) is inf from |x| ~ 44 on, and tanh then 1. Both sides are computed and one
// is selected, so a loop stays branch-free.
ONNXDP_FM_INLINE float tanh_f32(float x) {
  const float ax = x < 0.0f ? -x : x;  // NaN stays NaN on both sides
  const float t = x * x;
  const float p = -0.3333328f + t * (0.13331443f + t * (-0.053739727f + t * (0.020639123f + t * -0.005705026f)));
  const float near0 = x == 0.0f ? x : x + x * t * p;  // (-0 + a +0 product would lose the sign)
  const float far = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  return ax < 0.625f ? near0 : (x < 0.0f ? -far : far);
}

}  // namespace onnxdp::fm
