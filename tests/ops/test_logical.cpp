// Logical ops: shape rules and CPU kernels. Expected values from numpy (the expression beside
// each) or by hand.
#include <doctest/doctest.h>

#include <map>

#include "exec/kernel.h"
#include "tests/ops/op_test_util.h"

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
Tensor boolean(Shape s, const std::vector<bool>& v) {
  Tensor t(DType::boolean, std::move(s));
  REQUIRE(size_t(t.numel()) == v.size());
  for (size_t i = 0; i < v.size(); ++i) t.as<bool>()[i] = v[i];
  return t;
}

// Runs one node of `op` on `ins` through its shape rule and CPU kernel; returns output 0.
Tensor run(Op op, const std::vector<const Tensor*>& ins) {
  Graph g;
  std::vector<ValueId> ids;
  for (size_t k = 0; k < ins.size(); ++k) {
    Value v;
    v.name = "in" + std::to_string(k);
    v.dtype = ins[k]->dtype();
    v.shape = ins[k]->shape();
    v.kind = ValueKind::constant;
    v.data = *ins[k];
    ids.push_back(g.add_value(std::move(v)));
  }
  int ni = g.add_node(op, "n", ids, {"y"});
  return run_node(g, g.nodes[size_t(ni)], ins)[0];
}

std::vector<int> bools(const Tensor& t) {
  REQUIRE(t.dtype() == DType::boolean);
  std::vector<int> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(t.as<bool>()[i] ? 1 : 0);
  return r;
}

}  // namespace

TEST_CASE("logical: Equal, Less, Greater broadcast and give bool") {
  // a = [[1,2,3],[4,5,6]], b = [2,5,3]: (a == b), (a < b), (a > b)
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({3}, {2, 5, 3});
  Tensor eq = run(Op::Equal, {&a, &b});
  CHECK(eq.shape() == Shape{2, 3});
  CHECK(bools(eq) == std::vector<int>{0, 0, 1, 0, 1, 0});
  CHECK(bools(run(Op::Less, {&a, &b})) == std::vector<int>{1, 1, 0, 0, 0, 0});
  CHECK(bools(run(Op::Greater, {&a, &b})) == std::vector<int>{0, 0, 0, 1, 0, 1});

  Tensor i = make<int64_t>(DType::i64, {3}, {-1, 0, 7}), j = make<int64_t>(DType::i64, {}, {0});
  CHECK(bools(run(Op::Less, {&i, &j})) == std::vector<int>{1, 0, 0});
  Tensor p = boolean({2}, {true, false}), q = boolean({2, 1}, {true, false});
  CHECK(bools(run(Op::Equal, {&p, &q})) == std::vector<int>{1, 0, 0, 1});  // by hand

  CHECK_THROWS_WITH_AS(run(Op::Less, {&p, &p}), doctest::Contains("bool"), Error);
  CHECK_THROWS_WITH_AS(run(Op::Equal, {&a, &i}), doctest::Contains("different dtypes"), Error);
  Tensor c = f32({2}, {1, 2});
  CHECK_THROWS_WITH_AS(run(Op::Greater, {&a, &c}), doctest::Contains("do not broadcast"), Error);
}

TEST_CASE("logical: LessOrEqual and GreaterOrEqual are false against NaN, unlike Not(Greater) / Not(Less)") {
  Tensor a = f32({4}, {1, 2, 3, NAN}), b = f32({4}, {2, 2, 2, 0});
  CHECK(bools(run(Op::LessOrEqual, {&a, &b})) == std::vector<int>{1, 1, 0, 0});
  CHECK(bools(run(Op::GreaterOrEqual, {&a, &b})) == std::vector<int>{0, 1, 1, 0});
  Tensor i = make<int64_t>(DType::i64, {3}, {-1, 0, 7}), j = make<int64_t>(DType::i64, {}, {0});
  CHECK(bools(run(Op::GreaterOrEqual, {&i, &j})) == std::vector<int>{0, 1, 1});
  Tensor p = boolean({2}, {true, false});
  CHECK_THROWS_WITH_AS(run(Op::LessOrEqual, {&p, &p}), doctest::Contains("bool"), Error);
}

TEST_CASE("logical: And, Or, Xor broadcast their truth tables, numbers are refused") {
  Tensor p = boolean({2, 1}, {true, false}), q = boolean({2}, {true, false});
  CHECK(bools(run(Op::And, {&p, &q})) == std::vector<int>{1, 0, 0, 0});
  CHECK(bools(run(Op::Or, {&p, &q})) == std::vector<int>{1, 1, 1, 0});
  CHECK(bools(run(Op::Xor, {&p, &q})) == std::vector<int>{0, 1, 1, 0});
  Tensor f = f32({2}, {1, 0});
  CHECK_THROWS_WITH_AS(run(Op::And, {&p, &f}), doctest::Contains("input 1 is f32; And takes bool"), Error);
}

TEST_CASE("logical: Not") {
  Tensor p = boolean({2, 2}, {true, false, false, true});
  CHECK(bools(run(Op::Not, {&p})) == std::vector<int>{0, 1, 1, 0});
  Tensor f = f32({1}, {1});
  CHECK_THROWS_WITH_AS(run(Op::Not, {&f}), doctest::Contains("bool"), Error);
}

TEST_CASE("logical: Where broadcasts its three inputs") {
  // np.where([[True],[False]], [[1,2,3]], -1) (int64) -> [2, 3]
  Tensor c = boolean({2, 1}, {true, false});
  Tensor x = make<int64_t>(DType::i64, {1, 3}, {1, 2, 3}), y = make<int64_t>(DType::i64, {}, {-1});
  Tensor r = run(Op::Where, {&c, &x, &y});
  CHECK(r.dtype() == DType::i64);
  REQUIRE(r.shape() == Shape{2, 3});
  CHECK(std::vector<int64_t>(r.as<int64_t>(), r.as<int64_t>() + 6) == std::vector<int64_t>{1, 2, 3, -1, -1, -1});

  // np.where([True,False,True], [[1.5],[2.5]], [[10,20,30],[40,50,60]])
  Tensor c2 = boolean({3}, {true, false, true});
  Tensor x2 = f32({2, 1}, {1.5f, 2.5f}), y2 = f32({2, 3}, {10, 20, 30, 40, 50, 60});
  Tensor r2 = run(Op::Where, {&c2, &x2, &y2});
  REQUIRE(r2.shape() == Shape{2, 3});
  CHECK(std::vector<float>(r2.as<float>(), r2.as<float>() + 6) == std::vector<float>{1.5f, 20, 1.5f, 2.5f, 50, 2.5f});

  Tensor notbool = f32({3}, {1, 0, 1});
  CHECK_THROWS_WITH_AS(run(Op::Where, {&notbool, &x2, &y2}), doctest::Contains("bool"), Error);
  CHECK_THROWS_WITH_AS(run(Op::Where, {&c, &x, &y2}), doctest::Contains("different dtypes"), Error);
}

TEST_CASE("logical: IsNaN and IsInf (each sign, or neither) on f32, f64 and f16") {
  // by hand: x = [1, NaN, +inf, -inf, -0.0, 3.4e38]
  const std::vector<double> x{1, NAN, INFINITY, -INFINITY, -0.0, 3.4e38};
  for (DType t : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(t));
    Tensor v = optest::make(t, {2, 3}, x);
    optest::check(optest::run_op(Op::IsNaN, {v})[0], DType::boolean, {2, 3}, {0, 1, 0, 0, 0, 0});
    optest::check(optest::run_op(Op::IsInf, {v})[0], DType::boolean, {2, 3}, {0, 0, 1, 1, 0, 0});
    optest::check(optest::run_op(Op::IsInf, {v}, {{"detect_negative", Attr(int64_t(0))}})[0], DType::boolean, {2, 3},
                  {0, 0, 1, 0, 0, 0});
    optest::check(optest::run_op(Op::IsInf, {v}, {{"detect_positive", Attr(int64_t(0))}})[0], DType::boolean, {2, 3},
                  {0, 0, 0, 1, 0, 0});
    optest::check(optest::run_op(Op::IsInf, {v}, {{"detect_negative", Attr(int64_t(0))}, {"detect_positive", Attr(int64_t(0))}})[0],
                  DType::boolean, {2, 3}, {0, 0, 0, 0, 0, 0});
  }
  // f16 bits: 1.0, NaN, +inf, -inf, 65504 (the largest finite)
  Tensor h(DType::f16, {5});
  const uint16_t bits[] = {0x3C00, 0x7E00, 0x7C00, 0xFC00, 0x7BFF};
  for (int i = 0; i < 5; ++i) h.as<uint16_t>()[i] = bits[i];
  optest::check(optest::run_op(Op::IsNaN, {h})[0], DType::boolean, {5}, {0, 1, 0, 0, 0});
  optest::check(optest::run_op(Op::IsInf, {h})[0], DType::boolean, {5}, {0, 0, 1, 1, 0});
  CHECK(optest::error_of([] { optest::run_op(Op::IsNaN, {Tensor::from_i64({1, 2})}); }).find("takes floats") !=
        std::string::npos);
  // through the importer: IsNaN-9 and IsInf-10 (their first versions) take the same form
  optest::check(optest::run_onnx(9, "IsNaN", {optest::make(DType::f32, {2}, {NAN, 0})})[0], DType::boolean, {2}, {1, 0});
  optest::check(optest::run_onnx(10, "IsInf", {optest::make(DType::f32, {2}, {-INFINITY, 0})},
                                 {optest::attr_i("detect_negative", 0)})[0],
                DType::boolean, {2}, {0, 0});
}

TEST_CASE("ONNX node tests of IsNaN and IsInf") { optest::check_node_tests({"IsNaN", "IsInf"}, 6); }
