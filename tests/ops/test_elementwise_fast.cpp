// Tests of the fast paths of Transpose (exec/cpu/tensor.cpp: memcpy of unchanged inner runs,
// cache-blocked tiles when the last two dims swap) and of the binary elementwise ops
// (exec/cpu/broadcast.h: same shape, a scalar operand, a row or column broadcast in the innermost
// dim). Each is compared bit for bit with a plain reference loop, on several shapes, perms and
// dtypes, on 1 and 2 threads; so are Where, Not, Equal and Greater, whose bools the loops read and
// write as bytes. The transcendental elementwise ops (Gelu, Exp, Erf, ...) equal their
// functors applied one element at a time, and Softmax, LogSoftmax and LayerNormalization equal a
// plain loop of their arithmetic, bit for bit: the kernels' x86-64-v3 clones compute what the
// baseline code does.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu/row_sum.h"
#include "exec/cpu/threads.h"
#include "exec/functors.h"
#include "exec/kernel.h"

#include "tests/ops/op_test_util.h"

using namespace onnxdp;
using namespace onnxdp::optest;

namespace {

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Distinct, non-trivial values (small for the integers, so products do not overflow).
template <class T>
Tensor filled(DType dt, const Shape& s, double seed) {
  Tensor t(dt, s);
  const int64_t n = numel_of(s);
  for (int64_t i = 0; i < n; ++i) {
    double v = std::sin(0.37 * double(i) + seed) * 7.0 + 0.3;
    if constexpr (std::is_floating_point_v<T>) t.as<T>()[i] = T(v / 3.1);
    else t.as<T>()[i] = T(std::lround(v));
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// ---- Transpose --------------------------------------------------------------------------------

template <class T>
Tensor transpose_ref(const Tensor& x, const std::vector<int64_t>& perm) {
  const Shape& s = x.shape();
  const size_t r = s.size();
  Shape os(r);
  for (size_t d = 0; d < r; ++d) os[d] = s[size_t(perm[d])];
  std::vector<int64_t> ist(r, 1);
  for (size_t d = r - 1; d-- > 0;) ist[d] = ist[d + 1] * s[d + 1];
  Tensor out(x.dtype(), os);
  const int64_t n = numel_of(os);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, off = 0;
    for (size_t d = r; d-- > 0;) {
      off += (rest % os[d]) * ist[size_t(perm[d])];
      rest /= os[d];
    }
    out.as<T>()[i] = x.as<T>()[off];
  }
  return out;
}

template <class T>
void check_transpose(DType dt, const Shape& s, const std::vector<int64_t>& perm) {
  INFO("transpose rank " << s.size() << " dims " << s[0] << ".." << s.back() << " perm " << perm[0] << ".."
                         << perm.back() << " dtype " << std::string(dtype_name(dt)));
  Tensor x = filled<T>(dt, s, 0.1);
  Tensor want = transpose_ref<T>(x, perm);
  const int before = cpu_threads();
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    Tensor got = run_op(Op::Transpose, {x}, {{"perm", perm}})[0];
    CHECK(same_bytes(got, want));
  }
  set_cpu_threads(before);
}

// ---- binary ops -------------------------------------------------------------------------------

template <class T>
T apply(Op op, T a, T b) {
  switch (op) {
    case Op::Add: return T(a + b);
    case Op::Sub: return T(a - b);
    case Op::Mul: return T(a * b);
    default: return T(a / b);  // Div: only called with non-zero float divisors here
  }
}

template <class T>
Tensor binary_ref(Op op, const Tensor& a, const Tensor& b, const Shape& os) {
  const size_t r = os.size();
  auto strides = [&](const Shape& s) {  // numpy broadcast strides onto os
    std::vector<int64_t> st(r, 0);
    int64_t acc = 1;
    for (size_t k = 0; k < s.size(); ++k) {
      size_t d = r - 1 - k, sd = s.size() - 1 - k;
      st[d] = s[sd] == 1 ? 0 : acc;
      acc *= s[sd];
    }
    return st;
  };
  const std::vector<int64_t> sa = strides(a.shape()), sb = strides(b.shape());
  Tensor out(a.dtype(), os);
  const int64_t n = numel_of(os);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, oa = 0, ob = 0;
    for (size_t d = r; d-- > 0;) {
      int64_t c = rest % os[d];
      rest /= os[d];
      oa += c * sa[d];
      ob += c * sb[d];
    }
    out.as<T>()[i] = apply(op, a.as<T>()[oa], b.as<T>()[ob]);
  }
  return out;
}

Shape bshape(const Shape& a, const Shape& b) {
  Shape o(std::max(a.size(), b.size()), 1);
  for (size_t k = 0; k < o.size(); ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1, db = k < b.size() ? b[b.size() - 1 - k] : 1;
    o[o.size() - 1 - k] = da == 1 ? db : da;
  }
  return o;
}

template <class T>
void check_binary(DType dt, Op op, const Shape& sa, const Shape& sb) {
  INFO("binary op " << int(op) << " a rank " << sa.size() << " b rank " << sb.size() << " dtype "
                     << std::string(dtype_name(dt)));
  Tensor a = filled<T>(dt, sa, 0.2), b = filled<T>(dt, sb, 1.3);
  Tensor want = binary_ref<T>(op, a, b, bshape(sa, sb));
  const int before = cpu_threads();
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    Tensor got = run_op(op, {a, b}, {}, 1, 2)[0];
    CHECK(same_bytes(got, want));
  }
  set_cpu_threads(before);
}

}  // namespace

TEST_CASE("Transpose fast paths match a plain index loop bit for bit on 1 and 2 threads") {
  using P = std::vector<int64_t>;
  const std::vector<std::pair<Shape, P>> cases = {
      {{8, 128, 8, 32}, {0, 2, 1, 3}},  // attention heads out: inner runs copied whole
      {{8, 8, 128, 32}, {0, 2, 1, 3}},  // and back
      {{8, 8, 128, 32}, {0, 1, 3, 2}},  // K^T: last two swapped, tiled
      {{4, 8, 128, 128}, {0, 1, 3, 2}},
      {{8, 128, 8, 32}, {0, 2, 3, 1}},  // merged dims, unit stride second to last
      {{8, 8, 32, 128}, {0, 3, 1, 2}},
      {{256, 1024}, {1, 0}},            // weight transposes
      {{1024, 256}, {1, 0}},
      {{557, 295}, {1, 0}},             // ragged edge tiles, above the parallel threshold
      {{3, 70, 33}, {0, 2, 1}},         // ragged, small
      {{5, 7}, {1, 0}},
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},  // general strided gather
      {{6, 1, 40, 1, 50}, {0, 4, 2, 3, 1}},
  };
  for (const auto& [s, perm] : cases) {
    check_transpose<float>(DType::f32, s, perm);
    check_transpose<double>(DType::f64, s, perm);
    check_transpose<int64_t>(DType::i64, s, perm);
    check_transpose<uint8_t>(DType::u8, s, perm);
  }
}

TEST_CASE("binary elementwise fast paths match a plain broadcast loop bit for bit on 1 and 2 threads") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{8, 128, 1024}, {8, 128, 1024}},  // same shape
      {{8, 128, 1024}, {}},              // scalar operand, either side
      {{}, {8, 128, 256}},
      {{1}, {8, 128, 256}},
      {{8, 128, 256}, {1, 1}},
      {{256}, {8, 128, 256}},            // row broadcast
      {{8, 128, 768}, {768}},
      {{8, 128, 256}, {128, 256}},
      {{8, 8, 128, 128}, {8, 8, 128, 1}},  // column broadcast
      {{8, 128, 1}, {8, 128, 512}},
      {{6, 1, 40}, {5, 1}},              // both broadcast
      {{3, 7}, {7}},                     // small
      {{64, 128, 7, 7}, {1, 128, 1, 1}},
      {{}, {}},
  };
  for (const auto& [sa, sb] : cases) {
    for (Op op : {Op::Add, Op::Sub, Op::Mul}) {
      check_binary<float>(DType::f32, op, sa, sb);
      check_binary<double>(DType::f64, op, sa, sb);
      check_binary<int64_t>(DType::i64, op, sa, sb);
      check_binary<int32_t>(DType::i32, op, sa, sb);
    }
    check_binary<float>(DType::f32, Op::Div, sa, sb);
  }
}

namespace {

// ---- bool inputs and outputs (Where, Not, Equal, Greater) ---------------------------------------

// The flat index of output element i in an input of shape s broadcast to os.
int64_t offset_in(const Shape& s, const Shape& os, int64_t i) {
  int64_t off = 0, acc = 1;
  for (size_t k = 0; k < os.size(); ++k) {
    const size_t d = os.size() - 1 - k;
    const int64_t c = i % os[d];
    i /= os[d];
    if (k < s.size() && s[s.size() - 1 - k] != 1) off += c * acc;
    if (k < s.size()) acc *= s[s.size() - 1 - k];
  }
  return off;
}

Tensor bools(const Shape& s, int seed) {  // irregular: no run of equal values for a branch to learn
  Tensor t(DType::boolean, s);
  std::mt19937 rng{uint32_t(seed)};
  for (int64_t i = 0; i < numel_of(s); ++i) t.as<bool>()[i] = (rng() & 1u) != 0;
  return t;
}

template <class T>
void check_where(DType dt, const Shape& sc, const Shape& sx, const Shape& sy) {
  INFO("Where cond rank " << sc.size() << " x rank " << sx.size() << " y rank " << sy.size() << " dtype "
                          << std::string(dtype_name(dt)));
  Tensor c = bools(sc, 5), x = dt == DType::boolean ? bools(sx, 6) : filled<T>(dt, sx, 0.4),
         y = dt == DType::boolean ? bools(sy, 7) : filled<T>(dt, sy, 2.1);
  const Shape os = bshape(bshape(sc, sx), sy);
  Tensor want(dt, os);
  for (int64_t i = 0; i < numel_of(os); ++i)
    want.as<T>()[i] = c.as<bool>()[offset_in(sc, os, i)] ? x.as<T>()[offset_in(sx, os, i)] : y.as<T>()[offset_in(sy, os, i)];
  const int before = cpu_threads();
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    CHECK(same_bytes(run_op(Op::Where, {c, x, y}, {}, 1, 2)[0], want));
  }
  set_cpu_threads(before);
}

}  // namespace

TEST_CASE("Where, Not, Equal and Greater read and write bools as bytes on every path, on 1 and 2 threads") {
  // Where's shapes: ReluGrad's (a scalar y), the attention mask's (cond [1, 1, t, t], a scalar x),
  // all the same, a row of conditions, and small ones below the thread threshold.
  const std::vector<std::array<Shape, 3>> where = {
      {Shape{256, 128}, Shape{256, 128}, Shape{}},
      {Shape{1, 1, 128, 128}, Shape{}, Shape{8, 8, 128, 128}},
      {Shape{8, 128, 256}, Shape{8, 128, 256}, Shape{8, 128, 256}},
      {Shape{256}, Shape{300, 256}, Shape{300, 1}},
      {Shape{3, 7}, Shape{7}, Shape{3, 1}},
  };
  for (const auto& [sc, sx, sy] : where) {
    check_where<float>(DType::f32, sc, sx, sy);
    check_where<int64_t>(DType::i64, sc, sx, sy);
    check_where<bool>(DType::boolean, sc, sx, sy);
  }
  const int before = cpu_threads();
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    CAPTURE(threads);
    Tensor a = bools({600, 257}, 8), b = bools({257}, 9), x = filled<float>(DType::f32, {600, 257}, 0.7);
    Tensor not_a = run_op(Op::Not, {a})[0], a_eq_b = run_op(Op::Equal, {a, b})[0];
    Tensor positive = run_op(Op::Greater, {x, Tensor::scalar_f32(0.0f)})[0];
    int64_t bad = 0;
    for (int64_t i = 0; i < 600 * 257; ++i) {
      bad += not_a.as<uint8_t>()[i] != uint8_t(!a.as<bool>()[i]);
      bad += a_eq_b.as<uint8_t>()[i] != uint8_t(a.as<bool>()[i] == b.as<bool>()[i % 257]);
      bad += positive.as<uint8_t>()[i] != uint8_t(x.as<float>()[i] > 0.0f);
    }
    CHECK(bad == 0);
  }
  set_cpu_threads(before);
}

namespace {

// run_op's output against f applied one element at a time in this file's plain loop (built for
// the baseline target), bit for bit.
template <class T, class F>
void check_unary(DType dt, Op op, const F& f, const std::map<std::string, Attr>& attrs = {}) {
  INFO("op " << op_name(op) << " dtype " << std::string(dtype_name(dt)));
  Tensor x = filled<T>(dt, {3, 50021}, 0.4);  // past the threads' split, an odd length
  Tensor want(dt, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) want.as<T>()[i] = f(x.as<T>()[i]);
  CHECK(same_bytes(run_op(op, {x}, attrs)[0], want));
}

}  // namespace

TEST_CASE("elementwise math equals its functor applied element by element, bit for bit") {
  // The kernels' loops run as x86-64-v3 clones where the CPU has AVX2 (exec/cpu/broadcast.h);
  // without fused multiply-adds they compute what the baseline code computes.
  const std::map<std::string, Attr> tanh_form = {{"approximate", Attr(std::string("tanh"))}};
  check_unary<float>(DType::f32, Op::Gelu, fn::Gelu{});
  check_unary<float>(DType::f32, Op::Gelu, fn::GeluTanh{}, tanh_form);
  check_unary<double>(DType::f64, Op::Gelu, fn::Gelu{});
  for (DType dt : {DType::f32, DType::f64}) {
    const auto each = [&](auto t) {
      using T = decltype(t);
      check_unary<T>(dt, Op::Exp, fn::Exp{});
      check_unary<T>(dt, Op::Erf, fn::Erf{});
      check_unary<T>(dt, Op::Sigmoid, fn::Sigmoid{});
      check_unary<T>(dt, Op::Tanh, fn::Tanh{});
      check_unary<T>(dt, Op::Softplus, fn::Softplus{});
    };
    if (dt == DType::f32) each(0.f);
    else each(0.0);
  }
  // GeluGrad (dy, x), both forms.
  Tensor x = filled<float>(DType::f32, {3, 50021}, 0.4), dy = filled<float>(DType::f32, {3, 50021}, 1.1);
  for (const char* form : {"none", "tanh"}) {
    INFO("GeluGrad " << form);
    Tensor want(DType::f32, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i)
      want.as<float>()[i] = std::string(form) == "tanh" ? fn::GeluTanhGrad{}(dy.as<float>()[i], x.as<float>()[i])
                                                        : fn::GeluGrad{}(dy.as<float>()[i], x.as<float>()[i]);
    CHECK(same_bytes(run_op(Op::GeluGrad, {dy, x}, {{"approximate", Attr(std::string(form))}}, 1, 2)[0], want));
  }
}

namespace {

// Softmax and LogSoftmax over rows of n, and their gradients, against the plain loop; rows of 16
// or fewer take the forward kernel's padded short-row path (exec/cpu/math.cpp), the forward
// checked with -inf (a masked score) and +inf among them too.
template <class T>
void check_softmax_rows(DType dt, int64_t n) {
  INFO("dtype " << std::string(dtype_name(dt)) << ", rows of " << n);
  Tensor x = filled<T>(dt, {64, n}, 0.9);
  const int64_t rows = x.shape()[0];
  if (n <= 16) {
    const T inf = std::numeric_limits<T>::infinity();
    x.as<T>()[1 * n] = -inf;                                     // row 1: a masked first score
    x.as<T>()[2 * n + n - 1] = -inf;                             // row 2: a masked last one
    for (int64_t j = 0; j < n; ++j) x.as<T>()[3 * n + j] = -inf;  // row 3: all masked (NaN)
    x.as<T>()[4 * n + n / 2] = inf;                              // row 4: +inf (NaN where it is)
  }
  for (bool log : {false, true}) {
    INFO((log ? "LogSoftmax" : "Softmax"));
    Tensor want(dt, x.shape());
    std::vector<T> e(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x.as<T>() + r * n;
      T* yr = want.as<T>() + r * n;
      T mx = xr[0];
      for (int64_t j = 1; j < n; ++j) mx = std::max(mx, xr[j]);
      for (int64_t j = 0; j < n; ++j) e[size_t(j)] = fn::m::exp(T(xr[j] - mx));
      const double sum = row_sum(n, [&](int64_t j) { return double(e[size_t(j)]); });
      const T ls = T(std::log(sum)), inv = T(1.0 / sum);
      for (int64_t j = 0; j < n; ++j) yr[j] = log ? T((xr[j] - mx) - ls) : T(e[size_t(j)] * inv);
    }
    CHECK(same_bytes(run_op(log ? Op::LogSoftmax : Op::Softmax, {x}, {{"axis", Attr(int64_t(1))}})[0], want));
  }
  // Their gradients: s = row_sum of dy * y (SoftmaxGrad) or of dy (LogSoftmaxGrad), rounded to T.
  const Tensor dy = filled<T>(dt, {rows, n}, 2.3), y = filled<T>(dt, {rows, n}, 0.4);
  for (bool log : {false, true}) {
    INFO((log ? "LogSoftmaxGrad" : "SoftmaxGrad"));
    Tensor want(dt, x.shape());
    for (int64_t r = 0; r < rows; ++r) {
      const T *g = dy.as<T>() + r * n, *v = y.as<T>() + r * n;
      const T s = T(row_sum(n, [&](int64_t j) { return log ? double(g[j]) : double(g[j]) * double(v[j]); }));
      for (int64_t j = 0; j < n; ++j)
        want.as<T>()[r * n + j] = log ? T(g[j] - fn::m::exp(v[j]) * s) : T(v[j] * T(g[j] - s));
    }
    CHECK(same_bytes(
        run_op(log ? Op::LogSoftmaxGrad : Op::SoftmaxGrad, {dy, y}, {{"axis", Attr(int64_t(1))}}, 1, 2)[0], want));
  }
}

template <class T>
void check_rows(DType dt) {
  for (int64_t n : {300, 16, 13, 1}) check_softmax_rows<T>(dt, n);
  INFO("dtype " << std::string(dtype_name(dt)));
  const Tensor x = filled<T>(dt, {64, 300}, 0.9);
  const int64_t rows = x.shape()[0], n = x.shape()[1];
  const Tensor scale = filled<T>(dt, {n}, 2.2), bias = filled<T>(dt, {n}, 3.3);
  Tensor want(dt, x.shape());
  const double eps = double(1e-5f);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x.as<T>() + r * n;
    const double m = row_sum_wide(n, [&](int64_t j) { return double(xr[j]); }) / double(n);
    const double ss = row_sum_wide(n, [&](int64_t j) { return (double(xr[j]) - m) * (double(xr[j]) - m); });
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t j = 0; j < n; ++j)
      want.as<T>()[r * n + j] = T((double(xr[j]) - m) * inv * double(scale.as<T>()[j]) + double(bias.as<T>()[j]));
  }
  INFO("LayerNormalization");
  CHECK(same_bytes(
      run_op(Op::LayerNormalization, {x, scale, bias}, {{"axis", Attr(int64_t(1))}, {"epsilon", Attr(1e-5f)}})[0], want));

  // LayerNormalizationGrad, as its three passes spell it: sum(g) and sum(g * xhat) each
  // row_sum_wide's sum over the row (300 columns: 18 blocks of 16 and a tail), dscale and dbias
  // each column's terms added row by row; with g = dy * scale and xhat = (x - mean) * inv.
  const Tensor dy = filled<T>(dt, {rows, n}, 1.7);
  Tensor want_dx(dt, x.shape()), want_ds(dt, {n}), want_db(dt, {n});
  std::vector<double> ds(static_cast<size_t>(n), 0.0), db(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x.as<T>() + r * n, *gr = dy.as<T>() + r * n;
    const T* sc = scale.as<T>();
    const double m = row_sum_wide(n, [&](int64_t j) { return double(xr[j]); }) / double(n);
    const double ss = row_sum_wide(n, [&](int64_t j) { return (double(xr[j]) - m) * (double(xr[j]) - m); });
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    const auto xhat = [&](int64_t j) { return (double(xr[j]) - m) * inv; };
    const double sum_g = row_sum_wide(n, [&](int64_t j) { return double(gr[j]) * double(sc[j]); });
    const double sum_gx = row_sum_wide(n, [&](int64_t j) { return double(gr[j]) * double(sc[j]) * xhat(j); });
    for (int64_t j = 0; j < n; ++j) {
      ds[size_t(j)] += double(gr[j]) * xhat(j);
      db[size_t(j)] += double(gr[j]);
      const double g = double(gr[j]) * double(sc[j]);
      want_dx.as<T>()[r * n + j] = T(inv * (g - sum_g / double(n) - xhat(j) * (sum_gx / double(n))));
    }
  }
  for (int64_t j = 0; j < n; ++j) want_ds.as<T>()[j] = T(ds[size_t(j)]), want_db.as<T>()[j] = T(db[size_t(j)]);
  INFO("LayerNormalizationGrad");
  const std::vector<Tensor> grads =
      run_op(Op::LayerNormalizationGrad, {dy, x, scale}, {{"axis", Attr(int64_t(1))}, {"epsilon", Attr(1e-5f)}}, 3, 3);
  CHECK(same_bytes(grads[0], want_dx));
  CHECK(same_bytes(grads[1], want_ds));
  CHECK(same_bytes(grads[2], want_db));
}

}  // namespace

TEST_CASE("Softmax, LogSoftmax, LayerNormalization and their gradients' rows equal a plain loop of their arithmetic, bit for bit") {
  // Their row loops run as x86-64-v3 clones where the CPU has AVX2 (exec/cpu/clones.h); this loop
  // is built for the baseline only, and spells out the same operations in the same order. float64
  // too: a float result hides most differences in the double arithmetic behind it.
  check_rows<float>(DType::f32);
  check_rows<double>(DType::f64);
}
