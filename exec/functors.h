// Elementwise math, written once (DESIGN.md convention 6): small functor structs whose
// operator() compiles for the host and, under nvcc, for the device, so the CPU kernels and a CUDA
// backend run the same arithmetic and the CPU tests cover both.
//
// Conventions: functors are stateless unless they carry an attribute (LeakyRelu's alpha, Clip's
// bounds); operator() is a template over the element type T, and float math goes through the
// overloads in fn::m (expf for float, exp for double ...) so that float stays float on both sides.
// Integer arithmetic follows C++ (and numpy): wrap-around, division truncating toward zero.
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "exec/float_math.h"

#if defined(__CUDACC__)
#define ONNXDP_HD __host__ __device__
#else
#define ONNXDP_HD
#endif

namespace onnxdp::fn {

// Float math by overload; double versions for f64. (std:: overloads are not all device-callable.)
namespace m {
// float exp, erf and tanh: on the host, exec/float_math.h's straight-line versions, always inlined,
// so elementwise loops vectorize (exp within 1 float32 step of the exact value, erf within 8, tanh
// within 2); on the device, CUDA's own.
ONNXDP_HD ONNXDP_FM_INLINE float exp(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return fm::exp_f32(x);
#endif
}
ONNXDP_HD inline double exp(double x) { return ::exp(x); }
ONNXDP_HD inline float log(float x) { return ::logf(x); }
ONNXDP_HD inline double log(double x) { return ::log(x); }
ONNXDP_HD inline float expm1(float x) { return ::expm1f(x); }
ONNXDP_HD inline double expm1(double x) { return ::expm1(x); }
ONNXDP_HD inline float log1p(float x) { return ::log1pf(x); }
ONNXDP_HD inline double log1p(double x) { return ::log1p(x); }
ONNXDP_HD inline float sqrt(float x) { return ::sqrtf(x); }
ONNXDP_HD inline double sqrt(double x) { return ::sqrt(x); }
ONNXDP_HD ONNXDP_FM_INLINE float tanh(float x) {
#if defined(__CUDA_ARCH__)
  return ::tanhf(x);
#else
  return fm::tanh_f32(x);
#endif
}
ONNXDP_HD inline double tanh(double x) { return ::tanh(x); }
ONNXDP_HD ONNXDP_FM_INLINE float erf(float x) {
#if defined(__CUDA_ARCH__)
  return ::erff(x);
#else
  return fm::erf_f32(x);
#endif
}
ONNXDP_HD inline double erf(double x) { return ::erf(x); }
ONNXDP_HD inline float sin(float x) { return ::sinf(x); }
ONNXDP_HD inline double sin(double x) { return ::sin(x); }
ONNXDP_HD inline float cos(float x) { return ::cosf(x); }
ONNXDP_HD inline double cos(double x) { return ::cos(x); }
ONNXDP_HD inline float fmod(float x, float y) { return ::fmodf(x, y); }
ONNXDP_HD inline double fmod(double x, double y) { return ::fmod(x, y); }
ONNXDP_HD inline float pow(float x, float y) { return ::powf(x, y); }
ONNXDP_HD inline double pow(double x, double y) { return ::pow(x, y); }
}  // namespace m

// ---- binary arithmetic ------------------------------------------------------------------------

// Signed integers wrap as two's complement (numpy's results) without C++'s undefined overflow: the
// sum, difference or product is taken in the unsigned type of the same width, then converted back
// (modular since C++20). Other types: the plain operation.
template <class T, bool = std::is_integral_v<T> && std::is_signed_v<T>> struct WrapType { using U = T; };
template <class T> struct WrapType<T, true> { using U = std::make_unsigned_t<T>; };
template <class T> struct Wrap {
  using U = typename WrapType<T>::U;
  static ONNXDP_HD T add(T a, T b) { return T(U(a) + U(b)); }
  static ONNXDP_HD T sub(T a, T b) { return T(U(a) - U(b)); }
  static ONNXDP_HD T mul(T a, T b) { return T(U(a) * U(b)); }
};

struct Add {
  template <class T> ONNXDP_HD T operator()(T a, T b) const { return Wrap<T>::add(a, b); }
};
struct Sub {
  template <class T> ONNXDP_HD T operator()(T a, T b) const { return Wrap<T>::sub(a, b); }
};
struct Mul {
  template <class T> ONNXDP_HD T operator()(T a, T b) const { return Wrap<T>::mul(a, b); }
};
// Integer division truncates toward zero (C++, ONNX's test_div_int32_trunc). Division by zero and
// the one overflowing case (lowest / -1) give 0 instead of trapping.
struct Div {
  template <class T> ONNXDP_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return Wrap<T>::sub(T(0), a);
    }
    return T(a / b);
  }
};
// Pow: the base's type is the result's type; the exponent may be of another type (ONNX Pow-12+).
// Integer base with integer exponent is exact (square and multiply); any float is involved: pow in
// double, then cast to the base's type.
struct Pow {
  template <class T, class E> ONNXDP_HD T operator()(T a, E b) const {
    if constexpr (std::is_integral_v<T> && std::is_integral_v<E>) {
      if (b < E(0)) {  // integer a^-n: only |a| == 1 stays non-zero
        if (a == T(1)) return T(1);
        if constexpr (std::is_signed_v<T>)
          if (a == T(-1)) return (b % 2 == 0) ? T(1) : T(-1);
        return T(0);
      }
      T r = T(1), base = a;
      for (uint64_t e = uint64_t(b); e; e >>= 1) {
        if (e & 1) r = Wrap<T>::mul(r, base);
        base = Wrap<T>::mul(base, base);
      }
      return r;
    } else if constexpr (std::is_same_v<T, float> && std::is_same_v<E, float>) {
      return m::pow(a, b);
    } else {
      return T(m::pow(double(a), double(b)));
    }
  }
};
// Mod, fmod = 1: C's fmod, the sign of the dividend (floats need it); fmod = 0 (integers only):
// the sign of the divisor, as Python's % and numpy's mod. An integer division by zero gives 0.
struct Mod {
  bool fmod = false;
  template <class T> ONNXDP_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return m::fmod(a, b);
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return T(0);  // lowest % -1 overflows in C++
      T r = T(a % b);
      if constexpr (std::is_signed_v<T>)
        if (!fmod && r != T(0) && ((r < T(0)) != (b < T(0)))) r = T(r + b);
      return r;
    }
  }
};
// Min / Max propagate NaN like numpy's minimum / maximum (and ONNX's reference).
struct Min {
  template <class T> ONNXDP_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b < a ? b : a;
  }
};
struct Max {
  template <class T> ONNXDP_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b > a ? b : a;
  }
};

// ---- unary math -------------------------------------------------------------------------------

struct Identity {
  template <class T> ONNXDP_HD T operator()(T x) const { return x; }
};
struct Sqrt {
  template <class T> ONNXDP_HD T operator()(T x) const { return m::sqrt(x); }
};
struct Exp {
  template <class T> ONNXDP_HD T operator()(T x) const { return m::exp(x); }
};
struct Log {
  template <class T> ONNXDP_HD T operator()(T x) const { return m::log(x); }
};
struct Neg {
  template <class T> ONNXDP_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return Wrap<T>::sub(T(0), x);  // lowest wraps to itself
    else return T(-x);                                                   // -0.0 for 0.0
  }
};
struct Abs {
  template <class T> ONNXDP_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? Wrap<T>::sub(T(0), x) : x;
  }
};
struct Reciprocal {
  template <class T> ONNXDP_HD T operator()(T x) const { return T(1) / x; }
};
struct Relu {
  // NaN stays NaN (as ONNX's max(0, x) and torch.relu): the missing value is not a 0.
  template <class T> ONNXDP_HD T operator()(T x) const { return x > T(0) || x != x ? x : T(0); }
};
struct LeakyRelu {
  float alpha = 0.01f;
  template <class T> ONNXDP_HD T operator()(T x) const { return x >= T(0) ? x : T(alpha) * x; }
};
// 1 / (1 + e^-x), evaluated so that no exp overflows: for x < 0, e^x / (1 + e^x). One exp and one
// division either way, e = e^-|x| (a NaN x passed as it is) and the numerator selected, so that a
// vector loop computes one of each, not both sides' (the same values as the two branches).
struct Sigmoid {
  template <class T> ONNXDP_HD T operator()(T x) const {
    const T e = m::exp(x < T(0) || x != x ? x : -x);
    return (x >= T(0) ? T(1) : e) / (T(1) + e);
  }
};
struct Tanh {
  template <class T> ONNXDP_HD T operator()(T x) const { return m::tanh(x); }
};
struct Erf {
  template <class T> ONNXDP_HD T operator()(T x) const { return m::erf(x); }
};
// Gelu, approximate = "none": x/2 (1 + erf(x / sqrt 2)).
struct Gelu {
  template <class T> ONNXDP_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + m::erf(x * T(0.70710678118654752440)));
  }
};
// Gelu, approximate = "tanh": x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <class T> ONNXDP_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + m::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
  }
};
// Gelu's gradient dy * Gelu'(x), as PyTorch's gelu_backward: exact, dy (Phi(x) + x phi(x)) with
// Phi(x) = (1 + erf(x / sqrt 2)) / 2 and phi(x) = e^(-x^2/2) / sqrt(2 pi).
struct GeluGrad {
  template <class T> ONNXDP_HD T operator()(T dy, T x) const {
    const T cdf = T(0.5) * (T(1) + m::erf(x * T(0.70710678118654752440)));
    const T pdf = m::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
    return dy * (cdf + x * pdf);
  }
};
// Relu's gradient from its output y, as PyTorch's threshold_backward: y <= 0 ? 0 : dy. A NaN y
// (from a NaN x) fails the test and passes dy; a NaN dy passes where y > 0.
struct ReluGrad {
  template <class T> ONNXDP_HD T operator()(T dy, T y) const { return y <= T(0) ? T(0) : dy; }
};
// Clip's gradient: dy where lo <= x <= hi, else 0 (x < lo and x > hi false for a NaN x: dy), as
// Where (x < lo, 0, Where (x > hi, 0, dy)) gives it.
template <class T>
struct ClipGrad {
  T lo, hi;
  ONNXDP_HD T operator()(T dy, T x) const { return x < lo || x > hi ? T(0) : dy; }
};
// tanh form: with u = sqrt(2/pi) (x + 0.044715 x^3), t = tanh(u),
// d/dx [x/2 (1 + t)] = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
struct GeluTanhGrad {
  template <class T> ONNXDP_HD T operator()(T dy, T x) const {
    const T b = T(0.79788456080286535588), k = T(0.044715);
    const T t = m::tanh(b * (x + k * x * x * x));
    const T right = T(0.5) * x * (T(1) - t * t) * b * (T(1) + T(3) * k * x * x);
    return dy * (T(0.5) * (T(1) + t) + right);
  }
};
// log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
struct Softplus {
  template <class T> ONNXDP_HD T operator()(T x) const {
    T ax = x < T(0) ? -x : x;
    return (x > T(0) ? x : T(0)) + m::log1p(m::exp(-ax));
  }
};
struct Sin {
  template <class T> ONNXDP_HD T operator()(T x) const { return m::sin(x); }
};
struct Cos {
  template <class T> ONNXDP_HD T operator()(T x) const { return m::cos(x); }
};
// max(0, min(1, alpha x + beta)) (ONNX; PyTorch's hardsigmoid exports as alpha 1/6, beta 1/2).
struct HardSigmoid {
  float alpha = 0.2f, beta = 0.5f;
  template <class T> ONNXDP_HD T operator()(T x) const {
    const T y = T(alpha) * x + T(beta);
    return y < T(0) ? T(0) : y > T(1) ? T(1) : y;
  }
};
// x * min(max(x + 3, 0), 6) / 6, in PyTorch's order (ONNX's x * HardSigmoid(x; 1/6, 1/2) rounds
// differently in the last bit).
struct HardSwish {
  template <class T> ONNXDP_HD T operator()(T x) const {
    T c = x + T(3);
    c = c < T(0) ? T(0) : c > T(6) ? T(6) : c;
    return x * c / T(6);
  }
};
// x for x > 0, alpha (e^x - 1) below (PyTorch's elu, with expm1).
struct Elu {
  float alpha = 1.0f;
  template <class T> ONNXDP_HD T operator()(T x) const { return x > T(0) ? x : T(alpha) * m::expm1(x); }
};
// gamma * Elu(x; alpha).
struct Selu {
  float alpha = 1.67326319217681884765625f, gamma = 1.05070102214813232421875f;
  template <class T> ONNXDP_HD T operator()(T x) const {
    return x > T(0) ? T(gamma) * x : T(gamma) * (T(alpha) * m::expm1(x));
  }
};
// max(0, x) + min(0, alpha (e^(x / alpha) - 1)).
struct Celu {
  float alpha = 1.0f;
  template <class T> ONNXDP_HD T operator()(T x) const { return x > T(0) ? x : T(alpha) * m::expm1(x / T(alpha)); }
};
// x tanh(softplus(x)).
struct Mish {
  template <class T> ONNXDP_HD T operator()(T x) const { return x * m::tanh(Softplus{}(x)); }
};
// x / (1 + |x|) (ONNX's Softsign, PyTorch's softsign; +-inf give NaN in both).
struct Softsign {
  template <class T> ONNXDP_HD T operator()(T x) const { return x / (T(1) + (x < T(0) ? T(-x) : x)); }
};
// -1, 0 or 1 (NaN stays NaN, as numpy's sign).
struct Sign {
  template <class T> ONNXDP_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x > T(0) ? T(1) : T(0);
    else return x > T(0) ? T(1) : x < T(0) ? T(-1) : x == T(0) ? T(0) : x;
  }
};
// PRelu(x, slope): x for x >= 0, slope x below.
struct PRelu {
  template <class T> ONNXDP_HD T operator()(T x, T slope) const { return x < T(0) ? T(slope * x) : x; }
};
// Clip to [lo, hi] (ONNX: min(max(x, lo), hi), so hi wins when lo > hi). NaN passes through.
template <class T>
struct Clip {
  T lo, hi;
  ONNXDP_HD T operator()(T x) const {
    if (x < lo) x = lo;
    if (x > hi) x = hi;
    return x;
  }
};

// ---- comparisons and logic (bool results) -----------------------------------------------------

struct Equal {
  template <class T> ONNXDP_HD bool operator()(T a, T b) const { return a == b; }
};
struct Less {
  template <class T> ONNXDP_HD bool operator()(T a, T b) const { return a < b; }
};
struct Greater {
  template <class T> ONNXDP_HD bool operator()(T a, T b) const { return a > b; }
};
struct LessOrEqual {
  template <class T> ONNXDP_HD bool operator()(T a, T b) const { return a <= b; }
};
struct GreaterOrEqual {
  template <class T> ONNXDP_HD bool operator()(T a, T b) const { return a >= b; }
};
struct Not {
  ONNXDP_HD bool operator()(bool x) const { return !x; }
};
// IsNaN: x != x holds for NaN only. IsInf: +inf when `positive`, -inf when `negative` (ONNX's
// detect_positive / detect_negative).
struct IsNaN {
  template <class T> ONNXDP_HD bool operator()(T x) const { return x != x; }
};
struct IsInf {
  bool negative = true, positive = true;
  template <class T> ONNXDP_HD bool operator()(T x) const {
    return (positive && x == T(INFINITY)) || (negative && x == -T(INFINITY));
  }
};
struct And {
  ONNXDP_HD bool operator()(bool a, bool b) const { return a && b; }
};
struct Or {
  ONNXDP_HD bool operator()(bool a, bool b) const { return a || b; }
};
struct Xor {
  ONNXDP_HD bool operator()(bool a, bool b) const { return a != b; }
};
// Where: cond ? x : y.
struct Select {
  template <class T> ONNXDP_HD T operator()(bool cond, T x, T y) const { return cond ? x : y; }
};

}  // namespace onnxdp::fn
