// Math ops: shape rules, CPU kernels and import normalisation. Expected values come from numpy /
// PyTorch (the expression that made them is written beside each), or are worked by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "exec/cpu/broadcast.h"
#include "exec/functors.h"
#include "exec/kernel.h"
#include "exec/plan.h"
#include "tests/ops/op_test_util.h"
#include "compile/compile.h"

using namespace onnxdp;

namespace {

template <class T>
Tensor make(DType dt, Shape s, const std::vector<T>& v) {
  Tensor t(dt, std::move(s));
  REQUIRE(size_t(t.numel()) == v.size());
  for (size_t i = 0; i < v.size(); ++i) t.as<T>()[i] = v[i];
  return t;
}
Tensor f32(Shape s, const std::vector<float>& v) { return make<float>(DType::f32, std::move(s), v); }

// Runs one node of `op` on `ins` (nullptr: an absent optional input) through its shape rule and
// CPU kernel; returns output 0.
Tensor run(Op op, const std::vector<const Tensor*>& ins, std::map<std::string, Attr> attrs = {}) {
  Graph g;
  std::vector<ValueId> ids;
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!ins[k]) {
      ids.push_back(kNoValue);
      continue;
    }
    Value v;
    v.name = "in" + std::to_string(k);
    v.dtype = ins[k]->dtype();
    v.shape = ins[k]->shape();
    v.kind = ValueKind::constant;
    v.data = *ins[k];
    ids.push_back(g.add_value(std::move(v)));
  }
  int ni = g.add_node(op, "n", ids, {"y"}, std::move(attrs));
  return run_node(g, g.nodes[size_t(ni)], ins)[0];
}

template <class T>
std::vector<T> vals(const Tensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.numel());
}

// Float output close to `want` (NaN matches NaN).
void check_close(const Tensor& t, const Shape& shape, const std::vector<double>& want, double rtol = 1e-5,
                 double atol = 1e-6) {
  REQUIRE(t.shape() == shape);
  REQUIRE(size_t(t.numel()) == want.size());
  std::vector<double> got = t.to_f64();
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
    else CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
  }
}

const std::vector<float> kX = {-3.0f, -1.5f, -0.25f, 0.0f, 0.5f, 2.0f, 10.0f, -20.0f};

}  // namespace

// ---- the broadcast driver ---------------------------------------------------------------------

namespace {

// The element of an input of shape `in` that output element i of shape `out` reads (numpy: a
// coordinate is 0 where the input's dim is 1 or missing).
int64_t naive_offset(const Shape& in, const Shape& out, int64_t i) {
  const int r = int(out.size());
  int64_t rest = i, off = 0, mul = 1;
  for (int d = r - 1; d >= 0; --d) {
    const int64_t coord = rest % out[size_t(d)];
    rest /= out[size_t(d)];
    const int di = d - (r - int(in.size()));
    if (di >= 0) {
      off += (in[size_t(di)] == 1 ? 0 : coord) * mul;
      mul *= in[size_t(di)];
    }
  }
  return off;
}

TensorRef ref_of(Tensor& t) { return TensorRef{t.data(), t.dtype(), &t.shape(), t.numel()}; }

// a * 10000 + b * 100 + c, exact in float for a, b, c in [0, 100): tells which element each read.
struct Digits {
  float operator()(float a, float b, float c) const { return a * 10000 + b * 100 + c; }
};

}  // namespace

TEST_CASE("math: broadcast_map matches naive numpy indexing on random shapes, 2 and 3 inputs") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 1000; ++trial) {
    int r = int(rng() % 5);
    Shape out(static_cast<size_t>(r));
    for (auto& d : out) d = 1 + int64_t(rng() % 4);
    auto operand = [&] {
      size_t ra = rng() % (size_t(r) + 1);
      Shape s(out.end() - ra, out.end());
      for (auto& d : s)
        if (rng() % 2) d = 1;
      return s;
    };
    Tensor a(DType::f32, operand()), b(DType::f32, operand()), c(DType::f32, operand()), y(DType::f32, out);
    for (Tensor* t : {&a, &b, &c})
      for (int64_t i = 0; i < t->numel(); ++i) t->as<float>()[i] = float(rng() % 100);
    CAPTURE(shape_str(a.shape()));
    CAPTURE(shape_str(b.shape()));
    TensorRef ra = ref_of(a), rb = ref_of(b), rc = ref_of(c), ry = ref_of(y);
    if (trial % 2 == 0) {
      broadcast_map<float, float, float>(ry, fn::Sub{}, ra, rb);
      for (int64_t i = 0; i < y.numel(); ++i)
        REQUIRE(y.as<float>()[i] ==
                a.as<float>()[naive_offset(a.shape(), out, i)] - b.as<float>()[naive_offset(b.shape(), out, i)]);
    } else {
      CAPTURE(shape_str(c.shape()));
      broadcast_map<float, float, float, float>(ry, Digits{}, ra, rb, rc);
      for (int64_t i = 0; i < y.numel(); ++i)
        REQUIRE(y.as<float>()[i] == Digits{}(a.as<float>()[naive_offset(a.shape(), out, i)],
                                             b.as<float>()[naive_offset(b.shape(), out, i)],
                                             c.as<float>()[naive_offset(c.shape(), out, i)]));
    }
  }
}

TEST_CASE("math: broadcast_map splits large broadcasts over threads correctly") {
  // [3, 1] + [70000] -> [3, 70000]: y[i, j] = (i + 1) + j.
  Tensor a = f32({3, 1}, {1, 2, 3});
  Tensor b(DType::f32, {70000});
  for (int j = 0; j < 70000; ++j) b.as<float>()[j] = float(j);
  Tensor y = run(Op::Add, {&a, &b});
  REQUIRE(y.shape() == Shape{3, 70000});
  int bad = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 70000; ++j) bad += y.as<float>()[i * 70000 + j] != float(i + 1 + j);
  CHECK(bad == 0);
  // Three inputs, an attention mask's way ([1, T, T] against [B, T, T], a scalar): runs of the
  // merged inner dims, chunked, split over threads.
  Tensor m(DType::f32, {1, 50, 40}), s = f32({}, {7}), x(DType::f32, {70, 50, 40}), z(DType::f32, {70, 50, 40});
  REQUIRE(z.numel() > parallel_min_elements());
  for (int64_t i = 0; i < m.numel(); ++i) m.as<float>()[i] = float(i % 97);
  for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = float(i % 89);
  TensorRef rm = ref_of(m), rs = ref_of(s), rx = ref_of(x), rz = ref_of(z);
  broadcast_map<float, float, float, float>(rz, Digits{}, rm, rs, rx);
  bad = 0;
  for (int64_t i = 0; i < z.numel(); ++i) bad += z.as<float>()[i] != Digits{}(float(i % 2000 % 97), 7, float(i % 89));
  CHECK(bad == 0);
}

// ---- binary arithmetic ------------------------------------------------------------------------

TEST_CASE("math: Add, Sub, Mul, Div broadcast like numpy") {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({3}, {10, 20, 30});
  check_close(run(Op::Add, {&a, &b}), {2, 3}, {11, 22, 33, 14, 25, 36});  // a + b

  // np.arange(6).reshape(2,1,3) - [[1],[2],[3],[4]] -> [2, 4, 3]
  Tensor x = f32({2, 1, 3}, {0, 1, 2, 3, 4, 5}), y = f32({4, 1}, {1, 2, 3, 4});
  check_close(run(Op::Sub, {&x, &y}), {2, 4, 3},
              {-1, 0, 1, -2, -1, 0, -3, -2, -1, -4, -3, -2, 2, 3, 4, 1, 2, 3, 0, 1, 2, -1, 0, 1});

  Tensor s = f32({}, {0.5f});
  check_close(run(Op::Mul, {&s, &a}), {2, 3}, {0.5, 1, 1.5, 2, 2.5, 3});
  check_close(run(Op::Div, {&a, &s}), {2, 3}, {2, 4, 6, 8, 10, 12});

  // Integer division truncates toward zero (ONNX test_div_int32_trunc; np.trunc(a / b)).
  Tensor n = make<int32_t>(DType::i32, {4}, {7, -7, 7, -7}), d = make<int32_t>(DType::i32, {4}, {2, 2, -2, -2});
  Tensor q = run(Op::Div, {&n, &d});
  CHECK(q.dtype() == DType::i32);
  CHECK(vals<int32_t>(q) == std::vector<int32_t>{3, -3, -3, 3});

  // int8 wraps like numpy: 100 + 100 = -56.
  Tensor i8 = make<int8_t>(DType::i8, {1}, {100});
  CHECK(vals<int8_t>(run(Op::Add, {&i8, &i8})) == std::vector<int8_t>{-56});
}

TEST_CASE("math: elementwise ops on f16 and bf16 compute in float") {
  // By hand: [1, 2.5, -3] + [0.5] = [1.5, 3, -2.5]; max([1, 2.5, -3], 0.5) = [1, 2.5, 0.5]; all exact in f16.
  for (DType t : {DType::f16, DType::bf16}) {
    auto half = [&](Shape s, std::vector<float> v) {
      Tensor r(t, std::move(s));
      for (size_t i = 0; i < v.size(); ++i)
        r.as<uint16_t>()[i] = t == DType::f16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      return r;
    };
    auto floats = [&](const Tensor& r) {
      REQUIRE(r.dtype() == t);
      std::vector<float> v;
      for (int64_t i = 0; i < r.numel(); ++i)
        v.push_back(t == DType::f16 ? f16_to_f32(r.as<uint16_t>()[i]) : bf16_to_f32(r.as<uint16_t>()[i]));
      return v;
    };
    Tensor a = half({3}, {1, 2.5f, -3}), b = half({1}, {0.5f});
    CHECK(floats(run(Op::Add, {&a, &b})) == std::vector<float>{1.5f, 3, -2.5f});
    CHECK(floats(run(Op::Max, {&a, &b})) == std::vector<float>{1, 2.5f, 0.5f});
    CHECK(floats(run(Op::Relu, {&a})) == std::vector<float>{1, 2.5f, 0});
  }
}

TEST_CASE("math: MatMul and Gemm on f16 and bf16 sum in float and round once") {
  // [1, e, e] . [1, 1, 1] with e half a unit in the last place of 1: stepwise rounding would give
  // 1 + e -> 1 (ties to even) twice, one rounding of the float sum gives 1 + 2e exactly.
  for (DType t : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(t));
    const float e = t == DType::f16 ? std::ldexp(1.0f, -11) : std::ldexp(1.0f, -8);
    auto half = [&](Shape s, std::vector<float> v) {
      Tensor r(t, std::move(s));
      for (size_t i = 0; i < v.size(); ++i) r.as<uint16_t>()[i] = t == DType::f16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      return r;
    };
    auto first = [&](const Tensor& r) {
      REQUIRE(r.dtype() == t);
      return t == DType::f16 ? f16_to_f32(r.as<uint16_t>()[0]) : bf16_to_f32(r.as<uint16_t>()[0]);
    };
    Tensor a = half({1, 3}, {1, e, e}), b = half({3, 1}, {1, 1, 1}), c = half({1}, {0.5f});
    CHECK(first(run(Op::MatMul, {&a, &b})) == 1 + 2 * e);
    // Gemm: 2 * (1 + 2e) + 0.5 in float, then one rounding to t.
    const float want = t == DType::f16 ? f16_to_f32(f32_to_f16(2.5f + 4 * e)) : bf16_to_f32(f32_to_bf16(2.5f + 4 * e));
    CHECK(first(run(Op::Gemm, {&a, &b, &c}, {{"alpha", Attr(2.0f)}})) == want);
  }
}

TEST_CASE("math: binary shape rules reject mismatched shapes and dtypes") {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({4}, {1, 2, 3, 4});
  CHECK_THROWS_WITH_AS(run(Op::Add, {&a, &b}), doctest::Contains("do not broadcast"), Error);
  Tensor i = make<int64_t>(DType::i64, {3}, {1, 2, 3});
  CHECK_THROWS_WITH_AS(run(Op::Mul, {&a, &i}), doctest::Contains("different dtypes"), Error);
  Tensor h(DType::f16, {3}), u(DType::u8, {3});
  CHECK_THROWS_WITH_AS(run(Op::MatMul, {&u, &u}), doctest::Contains("u8"), Error);
  CHECK_THROWS_WITH_AS(run(Op::Softmax, {&h}), doctest::Contains("f16"), Error);
  Tensor bo(DType::boolean, {3});
  CHECK_THROWS_AS(run(Op::Sub, {&bo, &bo}), Error);
}

TEST_CASE("math: Pow: broadcast, and base / exponent of different dtypes") {
  // np.power([[1.5,2,3],[0.5,-2,4]], [2,0.5,-1]) (f32)
  Tensor a = f32({2, 3}, {1.5f, 2, 3, 0.5f, -2, 4}), e = f32({3}, {2, 0.5f, -1});
  check_close(run(Op::Pow, {&a, &e}), {2, 3}, {2.25, 1.4142135381698608, 0.3333333432674408, 0.25, NAN, 0.25});

  // int32 base, f32 exponent -> int32 (ONNX test_pow_types_int32_float32).
  Tensor bi = make<int32_t>(DType::i32, {3}, {1, 2, 3});
  Tensor ef = f32({3}, {4, 5, 6});
  Tensor r = run(Op::Pow, {&bi, &ef});
  CHECK(r.dtype() == DType::i32);
  CHECK(vals<int32_t>(r) == std::vector<int32_t>{1, 32, 729});

  // f32 base, i64 exponent: np.power([1.5,-2,3], [3,3,-2]) -> f32
  Tensor bf = f32({3}, {1.5f, -2, 3});
  Tensor ei = make<int64_t>(DType::i64, {3}, {3, 3, -2});
  Tensor r2 = run(Op::Pow, {&bf, &ei});
  CHECK(r2.dtype() == DType::f32);
  check_close(r2, {3}, {3.375, -8.0, 0.1111111119389534});

  // i64 ** i64 exact: np.power([3,-2,5], [4,3,0])
  Tensor b64 = make<int64_t>(DType::i64, {3}, {3, -2, 5}), e64 = make<int64_t>(DType::i64, {3}, {4, 3, 0});
  CHECK(vals<int64_t>(run(Op::Pow, {&b64, &e64})) == std::vector<int64_t>{81, -8, 1});
}

TEST_CASE("math: Pow with one exponent of 2 or 1 (x * x, x): pow's values at every kind of float") {
  // Bit for bit (NaN as NaN): the exponent as f32, as i64, and as [1, 1] (raising the output's rank).
  auto same = [](const Tensor& t, const Shape& shape, const std::vector<float>& want) {
    CHECK(t.shape() == shape);
    REQUIRE(size_t(t.numel()) == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      const float g = t.as<float>()[i];
      CHECK(((std::isnan(g) && std::isnan(want[i])) || std::memcmp(&g, &want[i], sizeof g) == 0));
    }
  };
  // np.power(np.float32([1.5, -3, -0.0, inf, -inf, nan, 1e20, 1e-30, 3.4028235e38]), np.float32(2))
  // = [2.25, 9, 0, inf, inf, nan, inf, 0, inf]: overflow to inf and underflow to 0 as pow's.
  const std::vector<float> x = {1.5f, -3, -0.0f, INFINITY, -INFINITY, NAN, 1e20f, 1e-30f, 3.4028235e38f};
  const std::vector<float> sq = {2.25f, 9, 0, INFINITY, INFINITY, NAN, INFINITY, 0, INFINITY};
  Tensor a = f32({9}, x);
  Tensor two = f32({}, {2}), one = f32({}, {1}), two_i = make<int64_t>(DType::i64, {}, {2});
  Tensor two_11 = f32({1, 1}, {2}), one_i = make<int64_t>(DType::i64, {1}, {1});
  same(run(Op::Pow, {&a, &two}), {9}, sq);
  same(run(Op::Pow, {&a, &two_i}), {9}, sq);
  same(run(Op::Pow, {&a, &two_11}), {1, 9}, sq);
  same(run(Op::Pow, {&a, &one}), {9}, x);  // np.power(x, 1.0) is x, -0.0 included
  same(run(Op::Pow, {&a, &one_i}), {9}, x);
  // f64: np.power([1.5, -1e200, 1e-200, 3.0000000000000004], 2.0) = [2.25, inf, 0, 9.000000000000004]
  Tensor d = make<double>(DType::f64, {4}, {1.5, -1e200, 1e-200, 3.0000000000000004});
  Tensor two_d = make<double>(DType::f64, {}, {2});
  CHECK(vals<double>(run(Op::Pow, {&d, &two_d})) == std::vector<double>{2.25, INFINITY, 0.0, 9.000000000000004});
  // Other exponents still go through pow: np.power(np.float32([1.5, 4]), np.float32(3)) and 0.5.
  Tensor three = f32({}, {3}), half = f32({}, {0.5f}), b = f32({2}, {1.5f, 4});
  check_close(run(Op::Pow, {&b, &three}), {2}, {3.375, 64});
  check_close(run(Op::Pow, {&b, &half}), {2}, {1.2247448713915890, 2});
}

TEST_CASE("math: Min and Max: variadic with broadcasting, NaN propagates") {
  // np.maximum(np.maximum([[1,5,3]], [[4],[2]]), [3]) and likewise np.minimum
  Tensor a = f32({1, 3}, {1, 5, 3}), b = f32({2, 1}, {4, 2}), c = f32({1}, {3});
  check_close(run(Op::Max, {&a, &b, &c}), {2, 3}, {4, 5, 4, 3, 5, 3});
  check_close(run(Op::Min, {&a, &b, &c}), {2, 3}, {1, 3, 3, 1, 2, 2});
  check_close(run(Op::Max, {&a}), {1, 3}, {1, 5, 3});  // one input: a copy

  Tensor n = f32({2}, {NAN, 1}), m = f32({2}, {0, NAN});
  check_close(run(Op::Max, {&n, &m}), {2}, {NAN, NAN});  // np.maximum propagates NaN
  check_close(run(Op::Min, {&n, &m}), {2}, {NAN, NAN});

  Tensor i = make<int32_t>(DType::i32, {3}, {-5, 7, 0}), j = make<int32_t>(DType::i32, {3}, {2, 2, 2});
  CHECK(vals<int32_t>(run(Op::Max, {&i, &j})) == std::vector<int32_t>{2, 7, 2});
}

// ---- unary ------------------------------------------------------------------------------------

TEST_CASE("math: unary float ops match torch") {
  Tensor x = f32({8}, kX);
  // torch.sigmoid(x), torch.tanh, torch.erf, torch.exp (x = [-3,-1.5,-0.25,0,0.5,2,10,-20])
  check_close(run(Op::Sigmoid, {&x}), {8},
              {0.04742587357759476, 0.18242552876472473, 0.43782350420951843, 0.5, 0.622459352016449,
               0.8807970285415649, 0.9999545812606812, 2.06115369216775e-09});
  check_close(run(Op::Tanh, {&x}), {8},
              {-0.9950547814369202, -0.9051482677459717, -0.24491865932941437, 0.0, 0.46211716532707214,
               0.9640275835990906, 1.0, -1.0});
  check_close(run(Op::Erf, {&x}), {8},
              {-0.9999778866767883, -0.9661051630973816, -0.27632638812065125, 0.0, 0.5204998850822449,
               0.9953222870826721, 1.0, -1.0});
  check_close(run(Op::Exp, {&x}), {8},
              {0.049787066876888275, 0.22313016653060913, 0.7788007855415344, 1.0, 1.6487212181091309,
               7.389056205749512, 22026.46484375, 2.06115369216775e-09});
  // torch.nn.functional.gelu(x) and gelu(x, approximate='tanh')
  check_close(run(Op::Gelu, {&x}), {8},
              {-0.004050225019454956, -0.10021086037158966, -0.10032341629266739, 0.0, 0.3457312285900116,
               1.9544997215270996, 10.0, -0.0});
  check_close(run(Op::Gelu, {&x}, {{"approximate", Attr(std::string("tanh"))}}), {8},
              {-0.0036374330520629883, -0.10042843222618103, -0.10032464563846588, 0.0, 0.3457140028476715,
               1.9545977115631104, 10.0, -0.0});
  // F.softplus(x), F.leaky_relu(x, 0.1)
  check_close(run(Op::Softplus, {&x}), {8},
              {0.04858735203742981, 0.20141328871250153, 0.575939416885376, 0.6931471824645996,
               0.9740769863128662, 2.1269280910491943, 10.000045776367188, 2.06115369216775e-09});
  check_close(run(Op::LeakyRelu, {&x}, {{"alpha", Attr(0.1f)}}), {8},
              {-0.30000001192092896, -0.15000000596046448, -0.02500000037252903, 0.0, 0.5, 2.0, 10.0, -2.0});
  check_close(run(Op::LeakyRelu, {&x}), {8}, {-0.03, -0.015, -0.0025, 0, 0.5, 2, 10, -0.2});  // alpha 0.01
  check_close(run(Op::Relu, {&x}), {8}, {0, 0, 0, 0, 0.5, 2, 10, 0});
  check_close(run(Op::Neg, {&x}), {8}, {3, 1.5, 0.25, 0, -0.5, -2, -10, 20});
  // torch.sin, torch.cos, F.hardsigmoid (ONNX alpha 1/6, beta 1/2), F.hardswish
  check_close(run(Op::Sin, {&x}), {8},
              {-0.14112000167369843, -0.9974949955940247, -0.24740396440029144, 0.0, 0.4794255495071411,
               0.9092974066734314, -0.5440211296081543, -0.9129452705383301});
  check_close(run(Op::Cos, {&x}), {8},
              {-0.9899924993515015, 0.07073719799518585, 0.9689124226570129, 1.0, 0.8775825500488281,
               -0.416146844625473, -0.83907151222229, 0.4080820679664612});
  check_close(run(Op::HardSigmoid, {&x}, {{"alpha", Attr(float(1.0 / 6.0))}, {"beta", Attr(0.5f)}}), {8},
              {0.0, 0.25, 0.4583333432674408, 0.5, 0.5833333134651184, 0.8333333134651184, 1.0, 0.0});
  check_close(run(Op::HardSwish, {&x}), {8},
              {-0.0, -0.375, -0.1145833358168602, 0.0, 0.2916666567325592, 1.6666666269302368, 10.0, -0.0});
  // F.elu, F.elu(alpha 0.5), F.selu, F.celu(alpha 2), F.mish, torch.sign, F.prelu(slope 0.25)
  check_close(run(Op::Elu, {&x}), {8},
              {-0.9502129554748535, -0.7768698334693909, -0.22119921445846558, 0.0, 0.5, 2.0, 10.0, -1.0});
  check_close(run(Op::Elu, {&x}, {{"alpha", Attr(0.5f)}}), {8},
              {-0.47510647773742676, -0.38843491673469543, -0.11059960722923279, 0.0, 0.5, 2.0, 10.0, -0.5});
  check_close(run(Op::Selu, {&x}), {8},
              {-1.6705687046051025, -1.3658143281936646, -0.38889017701148987, 0.0, 0.5253505110740662,
               2.1014020442962646, 10.507010459899902, -1.7580993175506592});
  check_close(run(Op::Celu, {&x}, {{"alpha", Attr(2.0f)}}), {8},
              {-1.5537396669387817, -1.0552668571472168, -0.2350061982870102, 0.0, 0.5, 2.0, 10.0,
               -1.9999091625213623});
  check_close(run(Op::Mish, {&x}), {8},
              {-0.14564746618270874, -0.2980997562408447, -0.12992696464061737, 0.0, 0.37524524331092834,
               1.9439589977264404, 10.0, -4.1223074731533416e-08});
  check_close(run(Op::Sign, {&x}), {8}, {-1, -1, -1, 0, 1, 1, 1, -1});
  // numpy, float32: x / (1 + np.abs(x))
  check_close(run(Op::Softsign, {&x}), {8},
              {-0.75, -0.6000000238418579, -0.20000000298023224, 0.0, 0.3333333432674408, 0.6666666865348816,
               0.9090909361839294, -0.9523809552192688});
  Tensor slope = f32({1}, {0.25f});
  check_close(run(Op::PRelu, {&x, &slope}), {8}, {-0.75, -0.375, -0.0625, 0.0, 0.5, 2.0, 10.0, -5.0});
  // ONNX's defaults alpha 0.2, beta 0.5: np.clip(0.2 x + 0.5, 0, 1)
  check_close(run(Op::HardSigmoid, {&x}), {8}, {0.0, 0.2, 0.45, 0.5, 0.6, 0.9, 1.0, 0.0});
  check_close(run(Op::Abs, {&x}), {8}, {3, 1.5, 0.25, 0, 0.5, 2, 10, 20});

  // np.sqrt, np.log, np.reciprocal of [0.25, 1, 2, 9, 1e-3] (f32)
  Tensor p = f32({5}, {0.25f, 1, 2, 9, 1e-3f});
  check_close(run(Op::Sqrt, {&p}), {5}, {0.5, 1.0, 1.4142135381698608, 3.0, 0.03162277862429619});
  check_close(run(Op::Log, {&p}), {5}, {-1.3862943649291992, 0.0, 0.6931471824645996, 2.1972246170043945,
                                        -6.907755374908447});
  check_close(run(Op::Reciprocal, {&p}), {5}, {4.0, 1.0, 0.5, 0.1111111119389534, 999.9999389648438});
}

TEST_CASE("math: Mod: integers take the divisor's sign (fmod=0) or the dividend's (fmod=1), floats need fmod=1") {
  // np.mod and np.fmod of [-4, 7, 5, 4, -7, 8] by [2, -3, 8, -2, 3, 5] (ONNX's mixed-sign cases)
  Tensor a = make<int64_t>(DType::i64, {6}, {-4, 7, 5, 4, -7, 8}), b = make<int64_t>(DType::i64, {6}, {2, -3, 8, -2, 3, 5});
  CHECK(run(Op::Mod, {&a, &b}).to_i64() == std::vector<int64_t>{0, -2, 5, 0, 2, 3});
  CHECK(run(Op::Mod, {&a, &b}, {{"fmod", Attr(int64_t(1))}}).to_i64() == std::vector<int64_t>{0, 1, 5, 0, -1, 3});
  // Division by zero and lowest % -1 give 0 instead of trapping.
  Tensor c = make<int32_t>(DType::i32, {2}, {7, std::numeric_limits<int32_t>::min()});
  Tensor d = make<int32_t>(DType::i32, {2}, {0, -1});
  CHECK(run(Op::Mod, {&c, &d}).to_i64() == std::vector<int64_t>{0, 0});
  // np.fmod (f32), broadcast against a scalar too
  Tensor x = f32({6}, {-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f}), y = f32({6}, {2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f});
  const std::map<std::string, Attr> fmod = {{"fmod", Attr(int64_t(1))}};
  check_close(run(Op::Mod, {&x, &y}, fmod), {6},
              {-0.10000038146972656, 0.39999961853027344, 5.0, 0.10000038146972656, -0.39999961853027344, 3.0});
  Tensor three = f32({}, {3.0f});
  check_close(run(Op::Mod, {&x, &three}, fmod), {6}, {-1.3, 1.2, 2.0, 1.3, -1.2, 2.0}, 1e-5, 1e-6);
  CHECK_THROWS_WITH_AS(run(Op::Mod, {&x, &y}), doctest::Contains("needs fmod=1"), Error);
}

TEST_CASE("math: CumSum along an axis, exclusive and reversed (np.cumsum)") {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor one = make<int64_t>(DType::i64, {}, {1}), zero = make<int32_t>(DType::i32, {1}, {0});
  auto cum = [&](Tensor* axis, int64_t exclusive, int64_t reverse) {
    return run(Op::CumSum, {&x, axis}, {{"exclusive", Attr(exclusive)}, {"reverse", Attr(reverse)}});
  };
  check_close(cum(&one, 0, 0), {2, 3}, {1, 3, 6, 4, 9, 15});
  check_close(cum(&one, 0, 1), {2, 3}, {6, 5, 3, 15, 11, 6});
  check_close(cum(&zero, 1, 0), {2, 3}, {0, 0, 0, 1, 2, 3});
  check_close(cum(&one, 1, 1), {2, 3}, {5, 3, 0, 11, 6, 0});
  Tensor i = make<int64_t>(DType::i64, {4}, {int64_t(1) << 60, 1, -1, 2});
  CHECK(run(Op::CumSum, {&i, &zero}).to_i64() ==
        std::vector<int64_t>{int64_t(1) << 60, (int64_t(1) << 60) + 1, int64_t(1) << 60, (int64_t(1) << 60) + 2});
}

TEST_CASE("math: sigmoid and softplus do not overflow at large |x|") {
  Tensor x = f32({4}, {-1000, -100, 100, 1000});
  check_close(run(Op::Sigmoid, {&x}), {4}, {0, 3.7200759760208356e-44, 1, 1}, 1e-5, 1e-30);
  check_close(run(Op::Softplus, {&x}), {4}, {0, 3.7200759760208356e-44, 100, 1000}, 1e-6, 1e-30);
}

TEST_CASE("math: unary ops on f64 and integers") {
  Tensor d = make<double>(DType::f64, {3}, {-1, 0, 2});
  Tensor e = run(Op::Exp, {&d});
  CHECK(e.dtype() == DType::f64);
  check_close(e, {3}, {0.36787944117144233, 1.0, 7.38905609893065}, 1e-14, 0);  // np.exp (f64)
  Tensor i = make<int64_t>(DType::i64, {3}, {-4, 0, 5});
  CHECK(vals<int64_t>(run(Op::Relu, {&i})) == std::vector<int64_t>{0, 0, 5});
  CHECK(vals<int64_t>(run(Op::Abs, {&i})) == std::vector<int64_t>{4, 0, 5});
  CHECK(vals<int64_t>(run(Op::Neg, {&i})) == std::vector<int64_t>{4, 0, -5});
  CHECK_THROWS_WITH_AS(run(Op::Sqrt, {&i}), doctest::Contains("i64"), Error);
  CHECK_THROWS_WITH_AS(run(Op::Gelu, {&d}, {{"approximate", Attr(std::string("erf"))}}),
                       doctest::Contains("approximate"), Error);
}

TEST_CASE("math: Clip: both bounds, one bound, integers, min > max") {
  Tensor x = f32({6}, {-3, -1, 0, 2, 5, 9});
  Tensor lo = f32({}, {-1}), hi = f32({}, {4}), hi2 = f32({}, {2});
  check_close(run(Op::Clip, {&x, &lo, &hi}), {6}, {-1, -1, 0, 2, 4, 4});   // np.clip(x, -1, 4)
  check_close(run(Op::Clip, {&x, nullptr, &hi2}), {6}, {-3, -1, 0, 2, 2, 2});  // np.minimum(x, 2)
  check_close(run(Op::Clip, {&x}), {6}, {-3, -1, 0, 2, 5, 9});
  // min > max: every element becomes max (ONNX: min(max(x, lo), hi)); by hand.
  Tensor lo5 = f32({}, {5}), hi1 = f32({}, {1});
  check_close(run(Op::Clip, {&x, &lo5, &hi1}), {6}, {1, 1, 1, 1, 1, 1});

  Tensor i8 = make<int8_t>(DType::i8, {5}, {-100, -5, 0, 7, 100});
  Tensor l8 = make<int8_t>(DType::i8, {}, {-10}), h8 = make<int8_t>(DType::i8, {}, {10});
  CHECK(vals<int8_t>(run(Op::Clip, {&i8, &l8, &h8})) == std::vector<int8_t>{-10, -5, 0, 7, 10});

  Tensor bad = f32({2}, {0, 1});
  CHECK_THROWS_WITH_AS(run(Op::Clip, {&x, &bad}), doctest::Contains("scalar"), Error);
}

// ---- softmax ----------------------------------------------------------------------------------

namespace {
// (np.arange(24).reshape(2,3,4) * 0.37 - 4) ** 2 / 7, f32
const std::vector<float> kSm = {
    2.2857143878936768f,   1.88241446018219f,    1.518228530883789f,   1.1931570768356323f, 0.9071999788284302f,
    0.6603571772575378f,   0.45262855291366577f, 0.2840142250061035f,  0.15451428294181824f, 0.0641285851597786f,
    0.012857139110565186f, 0.0007000034092925489f, 0.027657149359583855f, 0.09372855722904205f, 0.19891439378261566f,
    0.34321436285972595f,  0.5266286134719849f,  0.7491570711135864f,  1.0107998847961426f, 1.311557412147522f,
    1.6514285802841187f,   2.030414342880249f,   2.448514699935913f,   2.905728816986084f};
}  // namespace

TEST_CASE("math: Softmax and LogSoftmax along an axis (opset-13 semantics)") {
  Tensor x = f32({2, 3, 4}, kSm);
  // torch.softmax(x, 1)
  check_close(run(Op::Softmax, {&x}, {{"axis", Attr(int64_t(1))}}), {2, 3, 4},
              {0.7295823097229004, 0.68637615442276,    0.6383837461471558,  0.5860482454299927,  0.18382012844085693,
               0.20222248136997223, 0.21993666887283325, 0.2361009120941162,  0.08659759908914566, 0.11140140891075134,
               0.14167961478233337, 0.17785081267356873, 0.12954694032669067, 0.10140245407819748, 0.07851699739694595,
               0.06023383513092995, 0.21336722373962402, 0.19529785215854645, 0.17683210968971252, 0.15863046050071716,
               0.6570858955383301,  0.7032997012138367,  0.7446509003639221,  0.7811356782913208});
  // torch.log_softmax(x, -1) (the default axis)
  check_close(run(Op::LogSoftmax, {&x}), {2, 3, 4},
              {-0.9032654762268066, -1.3065654039382935, -1.6707513332366943, -1.995822787284851,
               -1.0825563669204712, -1.3293991088867188, -1.5371277332305908, -1.7057421207427979,
               -1.2916892766952515, -1.3820749521255493, -1.4333463907241821, -1.44550359249115,
               -1.5317189693450928, -1.465647578239441,  -1.360461711883545,  -1.2161617279052734,
               -1.8024210929870605, -1.579892635345459,  -1.3182498216629028, -1.0174922943115234,
               -2.1023340225219727, -1.7233482599258423, -1.3052479028701782, -0.8480337858200073});
  CHECK_THROWS_WITH_AS(run(Op::Softmax, {&x}, {{"axis", Attr(int64_t(3))}}), doctest::Contains("out of range"),
                       Error);
}

TEST_CASE("math: Softmax is stable for large inputs") {
  Tensor x = f32({2, 3}, {1000, 1001, 1002, -1000, 0, 3});
  // torch.softmax / torch.log_softmax along -1
  check_close(run(Op::Softmax, {&x}), {2, 3},
              {0.09003057330846786, 0.2447284758090973, 0.6652409434318542, 0.0, 0.04742587357759476,
               0.9525741338729858});
  check_close(run(Op::LogSoftmax, {&x}), {2, 3},
              {-2.4076058864593506, -1.4076058864593506, -0.40760594606399536, -1003.048583984375,
               -3.0485873222351074, -0.04858732968568802});
}

// ---- matrix products --------------------------------------------------------------------------

TEST_CASE("math: MatMul: batched with broadcast batch dims") {
  // A = np.arange(12).reshape(2,1,2,3) - 5; B = np.arange(18).reshape(3,3,2) % 7 - 2; A @ B -> [2,3,2,2]
  Tensor a = f32({2, 1, 2, 3}, {-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6});
  Tensor b = f32({3, 3, 2}, {-2, -1, 0, 1, 2, 3, 4, -2, -1, 0, 1, 2, 3, 4, -2, -1, 0, 1});
  check_close(run(Op::MatMul, {&a, &b}), {2, 3, 2, 2},
              {4, -8, 4, 1, -19, 4, -7, 4, -7, -19, -4, -7, 4, 10, 4, 19, 5, 4, 17, 4, -1, 5, 2, 17});
  // np.arange(12).reshape(2,2,3) * 0.5 @ [[1,2],[3,-1],[0.5,4]] (the one-GEMM path)
  Tensor a3 = f32({2, 2, 3}, {0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f, 5, 5.5f});
  Tensor w = f32({3, 2}, {1, 2, 3, -1, 0.5f, 4});
  check_close(run(Op::MatMul, {&a3, &w}), {2, 2, 2}, {2.0, 3.5, 8.75, 11.0, 15.5, 18.5, 22.25, 26.0});
}

TEST_CASE("math: MatMul: 1-D operands per numpy") {
  Tensor v = f32({3}, {1, -2, 3});
  Tensor b = f32({3, 3, 2}, {-2, -1, 0, 1, 2, 3, 4, -2, -1, 0, 1, 2, 3, 4, -2, -1, 0, 1});
  // np.matmul(v, B) -> [3, 2]
  check_close(run(Op::MatMul, {&v, &b}), {3, 2}, {4, 6, 9, 4, 7, 9});
  // np.matmul(B.transpose(0,2,1), v) -> [3, 2]
  Tensor bt = f32({3, 2, 3}, {-2, 0, 2, -1, 1, 3, 4, -1, 1, -2, 0, 2, 3, -2, 0, 4, -1, 1});
  check_close(run(Op::MatMul, {&bt, &v}), {3, 2}, {4, 6, 9, 4, 7, 9});
  check_close(run(Op::MatMul, {&v, &v}), {}, {14});  // 1-D x 1-D -> scalar
  Tensor bad = f32({2, 2}, {1, 2, 3, 4});
  CHECK_THROWS_WITH_AS(run(Op::MatMul, {&v, &bad}), doctest::Contains("inner dims"), Error);
}

TEST_CASE("math: MatMul on f64 and i64") {
  // [[1.5,2],[3,4],[5,6]] @ [[1,-1,0.25],[2,0,1]]
  Tensor a = make<double>(DType::f64, {3, 2}, {1.5, 2, 3, 4, 5, 6});
  Tensor b = make<double>(DType::f64, {2, 3}, {1, -1, 0.25, 2, 0, 1});
  Tensor y = run(Op::MatMul, {&a, &b});
  CHECK(y.dtype() == DType::f64);
  check_close(y, {3, 3}, {5.5, -1.5, 2.375, 11.0, -3.0, 4.75, 17.0, -5.0, 7.25}, 1e-15, 0);
  // (np.arange(12).reshape(2,2,3) - 4) @ [[1,2],[3,4],[5,-6]] (int64)
  Tensor ai = make<int64_t>(DType::i64, {2, 2, 3}, {-4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7});
  Tensor bi = make<int64_t>(DType::i64, {3, 2}, {1, 2, 3, 4, 5, -6});
  CHECK(vals<int64_t>(run(Op::MatMul, {&ai, &bi})) == std::vector<int64_t>{-23, -8, 4, -8, 31, -8, 58, -8});
}

TEST_CASE("math: Gemm: trans flags, alpha, beta, broadcast C") {
  Tensor as = f32({3, 2}, {1, 4, 2, 5, 3, 6});                      // A' = as.T [2, 3]
  Tensor bs = f32({4, 3}, {1, 2, 0.5f, 0, 1, 0.5f, -1, 0, 1, 2, -1, 1});  // B' = bs.T [3, 4]
  Tensor col = f32({2, 1}, {1, -2});
  std::map<std::string, Attr> tt = {{"transA", Attr(int64_t(1))}, {"transB", Attr(int64_t(1))}};
  auto with = [&](std::map<std::string, Attr> m, std::map<std::string, Attr> extra) {
    for (auto& [k, v] : extra) m[k] = v;
    return m;
  };
  // 0.5 * as.T @ bs.T + 2 * [[1],[-2]]
  check_close(run(Op::Gemm, {&as, &bs, &col}, with(tt, {{"alpha", Attr(0.5f)}, {"beta", Attr(2.0f)}})), {2, 4},
              {5.25, 3.75, 3.0, 3.5, 4.5, 0.0, -3.0, 0.5});
  // as.T @ bs.T + 3 (scalar C)
  Tensor sc = f32({}, {3});
  check_close(run(Op::Gemm, {&as, &bs, &sc}, tt), {2, 4}, {9.5, 6.5, 5.0, 6.0, 20.0, 11.0, 5.0, 12.0});
  // 2 * as.T @ bs.T, no C
  check_close(run(Op::Gemm, {&as, &bs}, with(tt, {{"alpha", Attr(2.0f)}})), {2, 4},
              {13.0, 7.0, 4.0, 6.0, 34.0, 16.0, 4.0, 18.0});
  // No trans: [[1,2,3],[4,5,6]] @ [[1,0,-1,2],[2,1,0,-1],[0.5,0.5,1,1]] + [1,-1,2,0.5]
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = f32({3, 4}, {1, 0, -1, 2, 2, 1, 0, -1, 0.5f, 0.5f, 1, 1});
  Tensor row = f32({4}, {1, -1, 2, 0.5f});
  check_close(run(Op::Gemm, {&a, &b, &row}), {2, 4}, {7.5, 2.5, 4.0, 3.5, 18.0, 7.0, 4.0, 9.5});
  // Only transA: as is [3, 2] -> A' [2, 3], with b [3, 4]: by hand row 0 = [1,2,3] @ b = [6.5, 3.5, 2, 3]
  Tensor y = run(Op::Gemm, {&as, &b}, {{"transA", Attr(int64_t(1))}});
  check_close(y, {2, 4}, {6.5, 3.5, 2.0, 3.0, 17.0, 8.0, 2.0, 9.0});

  Tensor badc = f32({3}, {1, 2, 3});
  CHECK_THROWS_WITH_AS(run(Op::Gemm, {&a, &b, &badc}), doctest::Contains("does not broadcast"), Error);
  CHECK_THROWS_WITH_AS(run(Op::Gemm, {&a, &a}), doctest::Contains("inner dims"), Error);
}

TEST_CASE("math: FusedGemm is Gemm then Relu, its activation must be Relu") {
  Tensor as = f32({3, 2}, {1, 4, 2, 5, 3, 6});
  Tensor bs = f32({4, 3}, {1, 2, 0.5f, 0, 1, 0.5f, -1, 0, 1, 2, -1, 1});
  Tensor col = f32({2, 1}, {1, -2});
  std::map<std::string, Attr> attrs = {{"transA", Attr(int64_t(1))}, {"transB", Attr(int64_t(1))},
                                       {"alpha", Attr(0.5f)}, {"beta", Attr(2.0f)}};
  // The Gemm case above (5.25, 3.75, 3, 3.5, 4.5, 0, -3, 0.5) with its negative set to 0.
  check_close(run(Op::FusedGemm, {&as, &bs, &col}, attrs), {2, 4}, {5.25, 3.75, 3.0, 3.5, 4.5, 0.0, 0.0, 0.5});
  // No C: -(x) for a product of negatives.
  Tensor a = f32({1, 2}, {1, -1}), b = f32({2, 2}, {-2, 3, 1, 4});  // [1,-1] @ [[-2,3],[1,4]] = [-3, -1]
  check_close(run(Op::FusedGemm, {&a, &b}), {1, 2}, {0.0, 0.0});
  attrs["activation"] = Attr(std::string("Tanh"));
  CHECK_THROWS_WITH(run(Op::FusedGemm, {&as, &bs, &col}, attrs), doctest::Contains("not one FusedGemm has"));
}

TEST_CASE("math: FusedMatMul is alpha times MatMul, + bias along the rows, then Relu when asked") {
  // [[[1, -1], [2, 0.5]]] @ [[1, 0, -2], [3, 1, 1]] = [[-2, -1, -3], [3.5, 0.5, -3.5]]
  Tensor a = f32({1, 2, 2}, {1, -1, 2, 0.5f}), b = f32({2, 3}, {1, 0, -2, 3, 1, 1}), bias = f32({3}, {1, 0.25f, 4});
  check_close(run(Op::FusedMatMul, {&a, &b, &bias}), {1, 2, 3}, {-1, -0.75, 1, 4.5, 0.75, 0.5});
  check_close(run(Op::FusedMatMul, {&a, &b, &bias}, {{"activation", Attr(std::string("Relu"))}}), {1, 2, 3},
              {0, 0, 1, 4.5, 0.75, 0.5});
  check_close(run(Op::FusedMatMul, {&a, &b}, {{"activation", Attr(std::string("Relu"))}}), {1, 2, 3},
              {0, 0, 0, 3.5, 0.5, 0});
  // alpha scales the product, not the bias: 0.5 * [[-2, -1, -3], [3.5, 0.5, -3.5]] + bias, then Relu
  check_close(run(Op::FusedMatMul, {&a, &b, &bias}, {{"alpha", Attr(0.5f)}}), {1, 2, 3},
              {0, -0.25, 2.5, 2.75, 0.5, 2.25});
  check_close(run(Op::FusedMatMul, {&a, &b}, {{"alpha", Attr(-2.0f)}, {"activation", Attr(std::string("Relu"))}}),
              {1, 2, 3}, {4, 2, 6, 0, 0, 7});
  Tensor wrong = f32({1, 3}, {1, 2, 3});
  CHECK_THROWS_WITH(run(Op::FusedMatMul, {&a, &b, &wrong}), doctest::Contains("the bias has shape"));
  CHECK_THROWS_WITH(run(Op::FusedMatMul, {&a, &b}, {{"activation", Attr(std::string("Gelu"))}}),
                    doctest::Contains("not one FusedMatMul has"));
}

TEST_CASE("math: FusedMatMul with transA / transB reads that operand's last two dims swapped, batched and broadcast") {
  // Logical A [.., M, K] and B [.., K, N]; the expected product by plain double loops; the node gets
  // each operand stored as is or with its last two dims swapped, and the flag that says so.
  struct Dims {
    Shape a, b;
  };
  auto swapped = [](const Tensor& t) {
    Shape s = t.shape();
    const int64_t r = s[s.size() - 2], c = s.back();
    std::swap(s[s.size() - 2], s[s.size() - 1]);
    Tensor o(DType::f32, s);
    for (int64_t m = 0; m < t.numel() / (r * c); ++m)
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) o.as<float>()[m * r * c + j * r + i] = t.as<float>()[m * r * c + i * c + j];
    return o;
  };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Dims& d : {Dims{{2, 3, 4, 5}, {2, 3, 5, 6}}, Dims{{4, 5}, {2, 3, 5, 6}}, Dims{{2, 1, 4, 5}, {3, 5, 6}},
                        Dims{{2, 3, 4, 5}, {5, 6}}, Dims{{3, 4, 5}, {1, 5, 6}}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        CAPTURE(shape_str(d.a));
        CAPTURE(shape_str(d.b));
        CAPTURE(ta);
        CAPTURE(tb);
        Tensor a(DType::f32, d.a), b(DType::f32, d.b), bias(DType::f32, {d.b.back()});
        for (Tensor* t : {&a, &b, &bias})
          for (int64_t i = 0; i < t->numel(); ++i) t->as<float>()[i] = u(rng);
        const int64_t M = d.a[d.a.size() - 2], K = d.a.back(), N = d.b.back();
        const Shape batch = broadcast_shapes(Shape(d.a.begin(), d.a.end() - 2), Shape(d.b.begin(), d.b.end() - 2));
        const std::vector<int64_t> sa = broadcast_strides(Shape(d.a.begin(), d.a.end() - 2), batch),
                                   sb = broadcast_strides(Shape(d.b.begin(), d.b.end() - 2), batch);
        Shape out_shape = batch;
        out_shape.push_back(M);
        out_shape.push_back(N);
        std::vector<double> want;
        for (int64_t p = 0; p < shape_numel(batch); ++p) {
          int64_t rest = p, oa = 0, ob = 0;
          for (size_t k = batch.size(); k-- > 0;) {
            oa += (rest % batch[k]) * sa[k];
            ob += (rest % batch[k]) * sb[k];
            rest /= batch[k];
          }
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = bias.as<float>()[j];
              for (int64_t k = 0; k < K; ++k)
                s += double(a.as<float>()[oa * M * K + i * K + k]) * double(b.as<float>()[ob * K * N + k * N + j]);
              want.push_back(std::max(s, 0.0));
            }
        }
        const Tensor as = ta ? swapped(a) : a, bs = tb ? swapped(b) : b;
        check_close(run(Op::FusedMatMul, {&as, &bs, &bias},
                        {{"transA", Attr(int64_t(ta))}, {"transB", Attr(int64_t(tb))},
                         {"activation", Attr(std::string("Relu"))}}),
                    out_shape, want);
      }
  Tensor a(DType::f32, {2, 4, 5}), b(DType::f32, {2, 4, 6});
  CHECK_THROWS_WITH(run(Op::FusedMatMul, {&a, &b}), doctest::Contains("do not multiply"));
  CHECK_NOTHROW(run(Op::FusedMatMul, {&a, &b}, {{"transA", Attr(int64_t(1))}}));
}

TEST_CASE("math: FusedMatMul's bias rows under the product: large and small, batched, f32 and f64") {
  // A [3, 70, 90] @ B [90, 130] + bias [130] (f32 and f64; 210 x 130 x 90 is large enough that the
  // product and the bias rows are split over the threads), A [3, 70, 90] @ B [3, 90, 130] (one
  // product per batch), and the same at [64, 8] @ [8, 64] per batch (products smaller than one
  // BLAS register panel's depth); expected by plain double loops.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (DType dt : {DType::f32, DType::f64})
    for (int shape = 0; shape < 3; ++shape) {
      const bool batched_b = shape > 0;
      CAPTURE(dtype_name(dt));
      CAPTURE(shape);
      const int64_t B = 3, M = shape < 2 ? 70 : 64, K = shape < 2 ? 90 : 8, N = shape < 2 ? 130 : 64;
      Tensor a(dt, {B, M, K}), b(dt, batched_b ? Shape{B, K, N} : Shape{K, N}), bias(dt, {N});
      for (Tensor* t : {&a, &b, &bias})
        for (int64_t i = 0; i < t->numel(); ++i) {
          if (dt == DType::f32) t->as<float>()[i] = float(u(rng));
          else t->as<double>()[i] = u(rng);
        }
      const std::vector<double> av = a.to_f64(), bv = b.to_f64(), cv = bias.to_f64();
      std::vector<double> want;
      for (int64_t p = 0; p < B; ++p)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = cv[size_t(j)];
            for (int64_t k = 0; k < K; ++k)
              s += av[size_t((p * M + i) * K + k)] * bv[size_t((batched_b ? p * K * N : 0) + k * N + j)];
            want.push_back(s);
          }
      const double tol = dt == DType::f32 ? 1e-4 : 1e-12;  // K = 90 float products: a few 1e-6 apart
      check_close(run(Op::FusedMatMul, {&a, &b, &bias}), {B, M, N}, want, tol, tol);
      std::vector<double> relu = want;
      for (double& v : relu) v = std::max(v, 0.0);
      check_close(run(Op::FusedMatMul, {&a, &b, &bias}, {{"activation", Attr(std::string("Relu"))}}), {B, M, N},
                  relu, tol, tol);
    }
}

// ---- import normalisation ---------------------------------------------------------------------

namespace {

// A one-node model: graph inputs x_k (f32, the given shapes), output "y".
onnx::ModelProto one_node_model(int opset, const std::string& op, const std::vector<Shape>& in_shapes,
                                const std::function<void(onnx::NodeProto&)>& fill = {}) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("the_" + op);
  for (size_t k = 0; k < in_shapes.size(); ++k) {
    std::string name = std::string("x").append(std::to_string(k));
    n->add_input(name);
    auto* vi = g->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : in_shapes[k]) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  n->add_output("y");
  g->add_output()->set_name("y");
  if (fill) fill(*n);
  return m;
}

void float_attr(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void int_attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

}  // namespace

TEST_CASE("math: import: Clip-6 min/max attributes become inputs") {
  auto m = one_node_model(10, "Clip", {{6}}, [](onnx::NodeProto& n) {
    float_attr(n, "min", -1);
    float_attr(n, "max", 4);
  });
  Graph g = load_graph(m, ".");
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].inputs.size() == 3);
  CHECK(g.nodes[0].attrs.empty());
  Plan p(g);
  auto out = p.run({{"x0", f32({6}, {-3, -1, 0, 2, 5, 9})}});
  check_close(out.at("y"), {6}, {-1, -1, 0, 2, 4, 4});  // np.clip(x, -1, 4)

  auto only_max = one_node_model(7, "Clip", {{3}}, [](onnx::NodeProto& n) { float_attr(n, "max", 0); });
  Plan p2(load_graph(only_max, "."));
  check_close(p2.run({{"x0", f32({3}, {-2, 1, 3})}}).at("y"), {3}, {-2, 0, 0});
}

TEST_CASE("math: import: Softmax below opset 13 keeps a last-axis softmax as it is") {
  // Default axis 1 on a 2-D input, and axis = rank - 1 on a 3-D input: both the last axis.
  auto m = one_node_model(11, "Softmax", {{2, 3}});
  Graph g = load_graph(m, ".");
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].i("axis") == -1);
  auto m3 = one_node_model(11, "LogSoftmax", {{2, 3, 4}}, [](onnx::NodeProto& n) { int_attr(n, "axis", 2); });
  Graph g3 = load_graph(m3, ".");
  REQUIRE(g3.nodes.size() == 1);
  CHECK(g3.nodes[0].op == Op::LogSoftmax);
  CHECK(g3.nodes[0].i("axis") == -1);
}

TEST_CASE("math: import: Softmax below opset 13 flattens at axis (Flatten, Softmax, Reshape)") {
  // Softmax-11, default axis 1, on [2, 3, 4]: softmax over the last 12 of each [2, 12] row:
  // torch.softmax(x.reshape(2, 12), -1).reshape(2, 3, 4)
  auto m = one_node_model(11, "Softmax", {{2, 3, 4}});
  Graph g = load_graph(m, ".");
  std::vector<Op> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op);
  CHECK(ops == std::vector<Op>{Op::Flatten, Op::Softmax, Op::Reshape});
  Plan p(g);
  check_close(p.run({{"x0", f32({2, 3, 4}, kSm)}}).at("y"), {2, 3, 4},
              {0.274469792842865,    0.1833764761686325,  0.12740300595760345, 0.09204558283090591,
               0.06915337592363358,  0.0540270060300827,  0.04389302805066109, 0.03708234801888466,
               0.032578129321336746, 0.029762685298919678, 0.02827516943216324, 0.027933504432439804,
               0.017815368250012398, 0.01903221383690834, 0.02114320918917656, 0.024425281211733818,
               0.02934238314628601,  0.036655426025390625, 0.04761769250035286, 0.06432586908340454,
               0.09036283195018768,  0.13200223445892334, 0.20052103698253632, 0.3167564868927002});
}

// ---- Einsum (a composite: Transpose / Reshape / MatMul / ReduceSum) ---------------------------

namespace {
// Operand k of the Einsum tests: ((3 i + k + 1) % 7) - 3 for element i (small integers: exact).
Tensor einsum_operand(Shape s, int k, DType t = DType::f32) {
  Tensor x(t, s);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = double((3 * i + k + 1) % 7 - 3);
    if (t == DType::f64) x.as<double>()[i] = v;
    else x.as<float>()[i] = float(v);
  }
  return x;
}
std::vector<Tensor> einsum_operands(const std::vector<Shape>& shapes, DType t = DType::f32) {
  std::vector<Tensor> r;
  for (size_t k = 0; k < shapes.size(); ++k) r.push_back(einsum_operand(shapes[k], int(k), t));
  return r;
}
Tensor einsum(const std::string& eq, const std::vector<Shape>& shapes, DType t = DType::f32) {
  return optest::run_onnx(12, "Einsum", einsum_operands(shapes, t), {optest::attr_s("equation", eq)})[0];
}
}  // namespace

TEST_CASE("math: Einsum equals numpy.einsum on the exporters' equations, implicit output, ellipsis, 3 operands") {
  // Expected: numpy.einsum(eq, *ops) with op k = ((np.arange(n) * 3 + k + 1) % 7 - 3).reshape(shape)
  struct Case {
    std::string eq;
    std::vector<Shape> in;
    Shape out;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"bhid,bhjd->bhij", {{1, 2, 2, 3}, {1, 2, 3, 3}}, {1, 2, 2, 3}, {10, -5, -13, 8, -9, -5, -9, -7, 9, -3, -3, -3}},
      {"bhij,bhjd->bhid", {{1, 2, 2, 3}, {1, 2, 3, 2}}, {1, 2, 2, 2}, {9, -3, -3, 3, 3, -1, -6, -6}},
      {"bij,bjk->bik", {{2, 2, 3}, {2, 3, 2}}, {2, 2, 2}, {9, -3, -3, 3, 3, -1, -6, -6}},
      {"ij->ji", {{2, 3}}, {3, 2}, {-2, 0, 1, 3, -3, -1}},
      {"bi,bi->b", {{2, 3}, {2, 3}}, {2}, {10, -9}},
      {"...ij,...jk->...ik", {{2, 2, 3}, {1, 3, 2}}, {2, 2, 2}, {9, -3, -3, 3, -1, 2, -6, -6}},
      {"i,j->ij", {{2}, {3}}, {2, 3}, {2, -4, 4, -1, 2, -2}},
      {"ij,jk", {{2, 3}, {3, 2}}, {2, 2}, {9, -3, -3, 3}},
      {"ba", {{2, 3}}, {3, 2}, {-2, 0, 1, 3, -3, -1}},
      {"ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 2}}, {2, 2}, {3, 21, -3, -3}},
      {"ij->", {{2, 3}}, {}, {-2}},
      {"ij,jk->i", {{2, 3}, {3, 2}}, {2}, {6, 0}},
      {"...i,...i->...", {{2, 2, 3}, {2, 3}}, {2, 2}, {10, -9, -8, -3}},
      {"i...j,j->i...", {{2, 2, 2, 3}, {3}}, {2, 2, 2}, {10, 8, -8, -3, 9, -7, -9, 10}},
      {"...ij->...ji", {{2, 2, 3}}, {2, 3, 2}, {-2, 0, 1, 3, -3, -1, 2, -3, -2, 0, 1, 3}},
      // diagonals: a letter repeated within an operand
      {"ii->i", {{3, 3}}, {3}, {-2, 3, 1}},
      {"ii", {{3, 3}}, {}, {2}},
      {"...ii->...i", {{2, 3, 3}}, {2, 3}, {-2, 3, 1, -3, 2, 0}},
      {"iij,j->i", {{2, 2, 3}, {3}}, {2}, {10, -3}},
      {"ijji->ij", {{2, 3, 3, 2}}, {2, 3}, {-2, 1, -3, -1, 2, -2}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.eq);
    optest::check(einsum(c.eq, c.in), DType::f32, c.out, c.want);
  }
  optest::check(einsum(" bi , bi -> b ", {{2, 3}, {2, 3}}, DType::f64), DType::f64, {2}, {10, -9});  // spaces, f64
}

TEST_CASE("math: Einsum refuses a dropped ellipsis and bad equations, naming the node and the equation") {
  auto err = [](const std::string& eq, const std::vector<Shape>& shapes) {
    return optest::error_of([&] { einsum(eq, shapes); });
  };
  std::string e = err("ij->ii", {{3, 3}});
  CHECK(e.find("test_node") != std::string::npos);
  CHECK(e.find("'ij->ii'") != std::string::npos);
  CHECK(e.find("repeats in the output") != std::string::npos);
  CHECK(err("ii->i", {{3, 4}}).find("test_node/diagonal") != std::string::npos);  // the two sizes differ
  CHECK(err("ij,jk->ik", {{2, 3}}).find("2 operands, the node has 1 inputs") != std::string::npos);
  CHECK(err("ij->ik", {{2, 3}}).find("'k' is in no operand") != std::string::npos);
  CHECK(err("...ij->ij", {{2, 2, 3}}).find("the output does not") != std::string::npos);
  CHECK(err("i1->i", {{2, 3}}).find("not a letter") != std::string::npos);
  CHECK(err("ij,jk->ik", {{2, 3}, {4, 2}}).find("test_node") != std::string::npos);  // sizes of j differ
  // an ellipsis after a letter that broadcasts partly ([6, 1] against [6]) is refused at load
  CHECK(err("i...,i...->i...", {{2, 6, 1}, {2, 6}}).find("test_node/ellipsis_check") != std::string::npos);
}

TEST_CASE("math: Einsum lowers attention's equations to a MatMul (and a Transpose), every size helper folded") {
  auto ops_after_load = [](const std::string& eq, const std::vector<Shape>& shapes) {
    std::vector<Tensor> ins;
    for (const Shape& s : shapes) ins.emplace_back(DType::f32, s);
    Graph g = load_graph(optest::one_node_model(12, "Einsum", ins, {optest::attr_s("equation", eq)}, 1), "", {});
    std::vector<std::string> ops;
    for (const Node& n : g.nodes) ops.push_back(op_name(n.op));
    return ops;
  };
  using S = std::vector<std::string>;
  CHECK(ops_after_load("bhij,bhjd->bhid", {{2, 4, 8, 8}, {2, 4, 8, 16}}) == S{"MatMul"});
  CHECK(ops_after_load("bhid,bhjd->bhij", {{2, 4, 8, 16}, {2, 4, 8, 16}}) == S{"Transpose", "MatMul"});
  CHECK(ops_after_load("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}) == S{"MatMul"});
  CHECK(ops_after_load("ij->ji", {{2, 3}}) == S{"Transpose"});
  // two letters contracted: each operand viewed as a matrix around the MatMul
  CHECK(ops_after_load("bij,bij->b", {{2, 3, 4}, {2, 3, 4}}) == S{"Reshape", "Reshape", "MatMul", "Reshape"});
}

TEST_CASE("ONNX node tests of Einsum") { optest::check_node_tests({"Einsum"}, 6); }

TEST_CASE("ONNX node tests of Softsign") { optest::check_node_tests({"Softsign"}, 2); }
