// exec/float_math.h: the vectorizable float32 exp, erf and tanh against double-precision
// std::exp / std::erf / std::tanh, over a sweep of float32 bit patterns (every sign, exponent and
// a spread of mantissas), plus the special values.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "exec/float_math.h"

using namespace onnxdp;

namespace {

// Distance in float32 steps between a and b (0 when equal; +0 and -0 are one point).
int64_t ulps(float a, float b) {
  auto key = [](float v) {
    const int32_t i = std::bit_cast<int32_t>(v);
    return i < 0 ? int64_t(int32_t(0x80000000u) - i) : int64_t(i);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

template <class F, class Ref>
int64_t worst_ulps(F f, Ref ref, float lo, float hi, float* at) {
  int64_t worst = 0;
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 97) {
    const float x = std::bit_cast<float>(uint32_t(bits));
    if (!(x >= lo && x <= hi)) continue;
    const float want = float(ref(double(x)));
    const int64_t e = ulps(f(x), want);
    if (e > worst) {
      worst = e;
      *at = x;
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("exp_f32 is within one float32 step of exp over the whole range, subnormal results included") {
  float at = 0;
  const int64_t worst = worst_ulps([](float v) { return fm::exp_f32(v); }, [](double v) { return std::exp(v); }, -110.0f, 90.0f, &at);
  INFO("worst at x = " << at);
  CHECK(worst <= 1);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(fm::exp_f32(0.0f) == 1.0f);
  CHECK(fm::exp_f32(88.8f) == inf);
  CHECK(fm::exp_f32(inf) == inf);
  CHECK(fm::exp_f32(-inf) == 0.0f);
  CHECK(fm::exp_f32(-120.0f) == 0.0f);
  CHECK(fm::exp_f32(-88.0f) == doctest::Approx(std::exp(-88.0)).epsilon(1e-6));
  CHECK(std::isnan(fm::exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("erf_f32 is within 8 float32 steps of erf for every float32, and odd") {
  float at = 0;
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t worst = worst_ulps([](float v) { return fm::erf_f32(v); }, [](double v) { return std::erf(v); }, -inf, inf, &at);
  INFO("worst at x = " << at);
  CHECK(worst <= 8);
  for (float x : {0.0f, 1e-30f, 0.5f, 0.999999f, 1.0f, 1.5f, 3.9f, 4.0f, 7.0f}) {
    CAPTURE(x);
    CHECK(std::bit_cast<uint32_t>(fm::erf_f32(-x)) == (std::bit_cast<uint32_t>(fm::erf_f32(x)) ^ 0x80000000u));
  }
  CHECK(fm::erf_f32(inf) == 1.0f);
  CHECK(fm::erf_f32(-inf) == -1.0f);
  CHECK(std::signbit(fm::erf_f32(-0.0f)));
  CHECK(std::isnan(fm::erf_f32(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("tanh_f32 is within 2 float32 steps of tanh for every float32, and odd") {
  float at = 0;
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t worst = worst_ulps([](float v) { return fm::tanh_f32(v); }, [](double v) { return std::tanh(v); }, -inf, inf, &at);
  INFO("worst at x = " << at);
  CHECK(worst <= 2);
  // Both sides of the switch at 0.625, and the tiny and saturated ends.
  for (float x : {1e-30f, 1e-6f, 0.1f, 0.6249999f, 0.625f, 0.6250001f, 1.0f, 5.0f, 9.0f, 20.0f, 50.0f}) {
    CAPTURE(x);
    CHECK(ulps(fm::tanh_f32(x), float(std::tanh(double(x)))) <= 2);
    CHECK(std::bit_cast<uint32_t>(fm::tanh_f32(-x)) == (std::bit_cast<uint32_t>(fm::tanh_f32(x)) ^ 0x80000000u));
  }
  CHECK(fm::tanh_f32(inf) == 1.0f);
  CHECK(fm::tanh_f32(-inf) == -1.0f);
  CHECK(fm::tanh_f32(0.0f) == 0.0f);
  CHECK(std::signbit(fm::tanh_f32(-0.0f)));
  CHECK(std::isnan(fm::tanh_f32(std::numeric_limits<float>::quiet_NaN())));
}
