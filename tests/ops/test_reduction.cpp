// Tests of the reduction ops (ReduceMean, ReduceSum, ReduceMax, ReduceMin) against numpy values (pasted),
// the axes attribute of older opsets through the importer, and their ONNX node tests.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <set>

#include "exec/kernel.h"
#include "importer/importer.h"

#include "tests/ops/op_test_util.h"

using namespace onnxdp;
using namespace onnxdp::optest;

namespace {
// x = np.arange(24, dtype=np.float32).reshape(2,3,4) * 0.5 - 3; x[1,2,3] = -7.25; x[0,1,1] = 9.5
Tensor sample() {
  return make(DType::f32, {2, 3, 4}, {-3.0, -2.5, -2.0, -1.5, -1.0, 9.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5,
                                      3.0, 3.5,  4.0,  4.5,  5.0,  5.5, 6.0, 6.5, 7.0, 7.5, 8.0, -7.25});
}

// L[i, j] = (7 i + 3 j) % 11 - 5 for i < 1000, j < 300 (exact in f32)
Tensor large() {
  Tensor t(DType::f32, {1000, 300});
  for (int64_t i = 0; i < 1000; ++i)
    for (int64_t j = 0; j < 300; ++j) t.as<float>()[i * 300 + j] = float((i * 7 + j * 3) % 11 - 5);
  return t;
}
}  // namespace

TEST_CASE("ReduceSum / ReduceMean / ReduceMax over axes, keepdims, negative axes") {
  Tensor x = sample();
  // x.sum(axis=1, keepdims=True)
  check(run_op(Op::ReduceSum, {x, ints({1})})[0], DType::f32, {2, 1, 4}, {-3.0, 8.5, 0.0, 1.5, 15.0, 16.5, 18.0, 3.75});
  // x.mean(axis=(0,2))
  check(run_op(Op::ReduceMean, {x, ints({0, -1})}, {{"keepdims", int64_t(0)}})[0], DType::f32, {3}, {0.75, 4.0, 2.78125});
  // x.max(axis=-1, keepdims=True)
  check(run_op(Op::ReduceMax, {x, ints({-1})})[0], DType::f32, {2, 3, 1}, {-1.5, 9.5, 2.5, 4.5, 6.5, 8.0});
  // all axes: x.sum(), x.mean(), x.max()
  check(run_op(Op::ReduceSum, {x})[0], DType::f32, {1, 1, 1}, {60.25});
  check(run_op(Op::ReduceMean, {x}, {{"keepdims", int64_t(0)}})[0], DType::f32, {}, {2.5104167}, 1e-6);
  check(run_op(Op::ReduceMax, {x, Tensor(DType::i64, {0})})[0], DType::f32, {1, 1, 1}, {9.5});
  // x.min(axis=-1, keepdims=True), x.min()
  check(run_op(Op::ReduceMin, {x, ints({-1})})[0], DType::f32, {2, 3, 1}, {-3.0, -1.0, 1.0, 3.0, 5.0, -7.25});
  check(run_op(Op::ReduceMin, {x}, {{"keepdims", int64_t(0)}})[0], DType::f32, {}, {-7.25});
  // x.prod(axis=(0, 2)) (numpy, pasted)
  check(run_op(Op::ReduceProd, {x, ints({0, 2})}, {{"keepdims", int64_t(0)}})[0], DType::f32, {3}, {4252.5, -0.0, -22837.5}, 1e-6);
  // noop_with_empty_axes: the identity
  check(run_op(Op::ReduceSum, {x}, {{"noop_with_empty_axes", int64_t(1)}})[0], DType::f32, {2, 3, 4}, x.to_f64());
  CHECK(error_of([&] { run_op(Op::ReduceSum, {x, ints({1, -2})}); }).find("more than once") != std::string::npos);
  CHECK(error_of([&] { run_op(Op::ReduceSum, {x, ints({3})}); }).find("out of range") != std::string::npos);
  CHECK(error_of([&] { run_op(Op::ReduceSum, {x, ints({0})}, {}, 1, 2); }).find("must be known") != std::string::npos);
}

TEST_CASE("Reductions of integers and bools") {
  // np.mean(np.array([[1,2],[3,5],[-3,-4]], np.int32), axis=1).astype(np.int32)
  Tensor m = make(DType::i32, {3, 2}, {1, 2, 3, 5, -3, -4});
  check(run_op(Op::ReduceMean, {m, ints({1})}, {{"keepdims", int64_t(0)}})[0], DType::i32, {3}, {1, 4, -3});
  check(run_op(Op::ReduceSum, {m, ints({0})})[0], DType::i32, {1, 2}, {1, 3});
  check(run_op(Op::ReduceMax, {m, ints({0})})[0], DType::i32, {1, 2}, {3, 5});
  check(run_op(Op::ReduceMin, {m, ints({0})})[0], DType::i32, {1, 2}, {-3, -4});
  // m.prod(axis=0), keepdims; int64 shape entries, as tf2onnx multiplies [batch, heads]
  check(run_op(Op::ReduceProd, {m, ints({0})})[0], DType::i32, {1, 2}, {-9, -40});
  check(run_op(Op::ReduceProd, {make(DType::i64, {2}, {8, 2}), ints({0})})[0], DType::i64, {1}, {16});
  Tensor b = make(DType::boolean, {3, 2}, {1, 0, 0, 0, 1, 1});
  check(run_op(Op::ReduceMax, {b, ints({1})}, {{"keepdims", int64_t(0)}})[0], DType::boolean, {3}, {1, 0, 1});
  check(run_op(Op::ReduceMin, {b, ints({1})}, {{"keepdims", int64_t(0)}})[0], DType::boolean, {3}, {0, 0, 1});
  CHECK(error_of([&] { run_op(Op::ReduceSum, {b, ints({1})}); }).find("bool") != std::string::npos);
}

TEST_CASE("Reductions over an empty set, and NaN in ReduceMax") {
  Tensor e(DType::f32, {2, 0, 4});
  check(run_op(Op::ReduceSum, {e, ints({1})})[0], DType::f32, {2, 1, 4}, std::vector<double>(8, 0.0));
  check(run_op(Op::ReduceMax, {e, ints({1})})[0], DType::f32, {2, 1, 4}, std::vector<double>(8, -INFINITY));
  check(run_op(Op::ReduceMin, {e, ints({1})})[0], DType::f32, {2, 1, 4}, std::vector<double>(8, INFINITY));
  check(run_op(Op::ReduceProd, {e, ints({1})})[0], DType::f32, {2, 1, 4}, std::vector<double>(8, 1.0));
  check(run_op(Op::ReduceMean, {e, ints({1})})[0], DType::f32, {2, 1, 4}, std::vector<double>(8, NAN));
  CHECK(run_op(Op::ReduceSum, {e, ints({2})})[0].shape() == Shape{2, 0, 1});
  // np.max propagates NaN
  check(run_op(Op::ReduceMax, {make(DType::f32, {2, 3}, {1, NAN, 2, 3, 4, 5}), ints({1})})[0], DType::f32, {2, 1}, {NAN, 5});
  check(run_op(Op::ReduceMin, {make(DType::f32, {2, 3}, {1, NAN, 2, 3, 4, 5}), ints({1})})[0], DType::f32, {2, 1}, {NAN, 3});
}

TEST_CASE("Reductions of large tensors (the paths split over threads)") {
  Tensor l = large();
  // L.sum(dtype=np.float64), L.max()
  check(run_op(Op::ReduceSum, {l})[0], DType::f32, {1, 1}, {-6.0});
  check(run_op(Op::ReduceMax, {l}, {{"keepdims", int64_t(0)}})[0], DType::f32, {}, {5.0});
  // L.sum(axis=0)[[0,1,2,299]]
  Tensor s0 = run_op(Op::ReduceSum, {l, ints({0})}, {{"keepdims", int64_t(0)}})[0];
  REQUIRE(s0.shape() == Shape{300});
  CHECK(s0.as<float>()[0] == 1.0f);
  CHECK(s0.as<float>()[1] == -2.0f);
  CHECK(s0.as<float>()[2] == -5.0f);
  CHECK(s0.as<float>()[299] == -5.0f);
  // L.mean(axis=1)[[0,1,2,999]]
  Tensor m1 = run_op(Op::ReduceMean, {l, ints({1})}, {{"keepdims", int64_t(0)}})[0];
  REQUIRE(m1.shape() == Shape{1000});
  CHECK(m1.as<float>()[0] == doctest::Approx(-0.019999999552965164).epsilon(1e-6));
  CHECK(m1.as<float>()[1] == doctest::Approx(0.013333333656191826).epsilon(1e-6));
  CHECK(m1.as<float>()[2] == doctest::Approx(0.009999999776482582).epsilon(1e-6));
  CHECK(m1.as<float>()[999] == doctest::Approx(-0.013333333656191826).epsilon(1e-6));
  // L3 = ((np.arange(64*50*70).reshape(64,50,70) * 13) % 17 - 8).astype(np.float32)
  Tensor l3(DType::f32, {64, 50, 70});
  for (int64_t i = 0; i < l3.numel(); ++i) l3.as<float>()[i] = float((i * 13) % 17 - 8);
  // L3.sum(axis=(0,2))[[0,1,49]]
  Tensor r = run_op(Op::ReduceSum, {l3, ints({0, 2})}, {{"keepdims", int64_t(0)}})[0];
  CHECK(r.as<float>()[0] == 2.0f);
  CHECK(r.as<float>()[1] == -2.0f);
  CHECK(r.as<float>()[49] == 10.0f);
  // L3.max(axis=1): [0,0], [63,69] and the sum of all
  Tensor mx = run_op(Op::ReduceMax, {l3, ints({1})}, {{"keepdims", int64_t(0)}})[0];
  CHECK(mx.as<float>()[0] == 8.0f);
  CHECK(mx.as<float>()[63 * 70 + 69] == 8.0f);
  double total = 0;
  for (double v : mx.to_f64()) total += v;
  CHECK(total == 35840.0);
  // L3.min(axis=1), L.min(axis=0) (fast path 1: the kept inner dim is contiguous)
  Tensor mn = run_op(Op::ReduceMin, {l3, ints({1})}, {{"keepdims", int64_t(0)}})[0];
  total = 0;
  for (double v : mn.to_f64()) total += v;
  CHECK(total == -35840.0);
  for (double v : run_op(Op::ReduceMin, {l, ints({0})}, {{"keepdims", int64_t(0)}})[0].to_f64()) CHECK(v == -5.0);
}

TEST_CASE("Reductions' axes attribute of older opsets") {
  Tensor x = sample();
  check(run_onnx(11, "ReduceSum", {x}, {attr_ints("axes", {1})})[0], DType::f32, {2, 1, 4},
        {-3.0, 8.5, 0.0, 1.5, 15.0, 16.5, 18.0, 3.75});
  check(run_onnx(13, "ReduceMean", {x}, {attr_ints("axes", {0, 2}), attr_i("keepdims", 0)})[0], DType::f32, {3},
        {0.75, 4.0, 2.78125});
  check(run_onnx(13, "ReduceMax", {x}, {attr_ints("axes", {-1})})[0], DType::f32, {2, 3, 1}, {-1.5, 9.5, 2.5, 4.5, 6.5, 8.0});
  check(run_onnx(18, "ReduceMax", {x, ints({-1})})[0], DType::f32, {2, 3, 1}, {-1.5, 9.5, 2.5, 4.5, 6.5, 8.0});
  check(run_onnx(7, "ReduceMean", {x})[0], DType::f32, {1, 1, 1}, {2.5104167}, 1e-6);
  // opset 18 with the axes attribute is not the opset-18 form: refused
  CHECK(error_of([&] { run_onnx(18, "ReduceMean", {x}, {attr_ints("axes", {1})}); }).find("'axes' is not supported") !=
        std::string::npos);
}

// The composite reductions (graph/op_table.h) through the importer, both axes forms; numpy in float64.
TEST_CASE("ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp import as table ops") {
  Tensor x = sample();
  for (int opset : {13, 18}) {
    CAPTURE(opset);
    auto run = [&](const char* op, std::vector<int64_t> axes, int64_t keepdims) {
      std::vector<Tensor> in{x};
      std::vector<onnx::AttributeProto> attrs{attr_i("keepdims", keepdims)};
      if (opset >= 18) in.push_back(ints(axes));
      else attrs.push_back(attr_ints("axes", axes));
      return run_onnx(opset, op, in, attrs, 1, 1)[0];
    };
    check(run("ReduceSumSquare", {1}, 1), DType::f32, {2, 1, 4}, {11.0, 98.75, 8.0, 8.75, 83.0, 98.75, 116.0, 115.0625});
    check(run("ReduceL1", {-1}, 0), DType::f32, {2, 3}, {9.0, 11.0, 7.0, 15.0, 23.0, 29.75});
    check(run("ReduceL2", {0, 2}, 0), DType::f32, {3}, {8.88819408416748, 15.0, 15.339899063110352}, 1e-6);
    check(run("ReduceLogSumExp", {1}, 0), DType::f32, {2, 4},
          {1.142931580543518, 9.500341415405273, 2.1429316997528076, 2.6429316997528076, 7.1429314613342285,
           7.6429314613342285, 8.142931938171387, 6.626928806304932}, 1e-6);
  }
  // log(sum(|x| + 1)) over axis 2; logsumexp over everything (no axes)
  Tensor p(DType::f32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) p.as<float>()[i] = std::abs(x.as<float>()[i]) + 1;
  check(run_onnx(18, "ReduceLogSum", {p, ints({2})}, {}, 1, 1)[0], DType::f32, {2, 3, 1},
        {2.5649492740631104, 2.70805025100708, 2.397895336151123, 2.944438934326172, 3.295836925506592,
         3.5189805030822754}, 1e-6);
  check(run_onnx(18, "ReduceLogSumExp", {x}, {attr_i("keepdims", 0)})[0], DType::f32, {}, {9.94918441772461}, 1e-6);
  // No exp overflows: logsumexp([1000, 1000]) = 1000 + log 2
  check(run_onnx(18, "ReduceLogSumExp", {make(DType::f32, {2}, {1000, 1000})}, {attr_i("keepdims", 0)})[0], DType::f32,
        {}, {1000.6931471805599}, 1e-6);
}

TEST_CASE("ArgMax and ArgMin: first or last index, keepdims, NaN wins (numpy's argmax / argmin)") {
  Tensor x = make(DType::f32, {3, 4}, {3, 1, 3, 0, 2, 5, 5, -1, NAN, 1, 2, NAN});
  auto arg = [&](Op op, int64_t axis, int64_t keep, int64_t last) {
    return run_op(op, {x}, {{"axis", axis}, {"keepdims", keep}, {"select_last_index", last}})[0];
  };
  // np.argmax(x, 1), np.argmin(x, 1), np.argmax(x, 0), np.argmin(x, 0)
  check(arg(Op::ArgMax, 1, 0, 0), DType::i64, {3}, {0, 1, 0});
  check(arg(Op::ArgMin, 1, 0, 0), DType::i64, {3}, {3, 3, 0});
  check(arg(Op::ArgMax, 0, 1, 0), DType::i64, {1, 4}, {2, 1, 1, 2});
  check(arg(Op::ArgMin, -2, 1, 0), DType::i64, {1, 4}, {2, 0, 2, 2});
  // select_last_index: 3 - np.argmax(x[:, ::-1], 1), and the same for argmin
  check(arg(Op::ArgMax, 1, 1, 1), DType::i64, {3, 1}, {2, 2, 3});
  check(arg(Op::ArgMin, 1, 1, 1), DType::i64, {3, 1}, {3, 3, 3});
  // int64 beyond double's 53 bits compare exactly
  Tensor big = make(DType::i64, {2}, {0, 0});
  big.as<int64_t>()[0] = (int64_t(1) << 60) + 1;
  big.as<int64_t>()[1] = (int64_t(1) << 60);
  check(run_op(Op::ArgMin, {big}, {{"keepdims", int64_t(0)}})[0], DType::i64, {}, {1});
}

TEST_CASE("TopK: largest / smallest along an axis, ties to the lower index, NaN above numbers, k as attribute before opset 10") {
  // x = [[3, 1, 3, 2], [0, 5, 5, 5], [2, -4, 7, 2]]; numpy: i = np.argsort(-x, 1, kind='stable')[:, :2],
  // np.take_along_axis(x, i, 1) (stable: equal values keep the lower index first)
  Tensor x = make(DType::f32, {3, 4}, {3, 1, 3, 2, 0, 5, 5, 5, 2, -4, 7, 2});
  auto top = run_onnx(11, "TopK", {x, ints({2})}, {}, 2);
  check(top[0], DType::f32, {3, 2}, {3, 3, 5, 5, 7, 2});
  check(top[1], DType::i64, {3, 2}, {0, 2, 1, 2, 2, 0});
  // np.argsort(x, 1, kind='stable')[:, :3]
  auto low = run_onnx(11, "TopK", {x, ints({3})}, {attr_i("largest", 0), attr_i("axis", 1)}, 2);
  check(low[0], DType::f32, {3, 3}, {1, 2, 3, 0, 5, 5, -4, 2, 2});
  check(low[1], DType::i64, {3, 3}, {1, 3, 0, 0, 1, 2, 1, 0, 3});
  // np.argsort(-x, 0, kind='stable')[:1]
  auto col = run_onnx(10, "TopK", {x, ints({1})}, {attr_i("axis", 0)}, 2);
  check(col[0], DType::f32, {1, 4}, {3, 5, 7, 5});
  check(col[1], DType::i64, {1, 4}, {0, 1, 2, 1});
  // opset 1 form: k is an attribute
  auto old = run_onnx(9, "TopK", {x}, {attr_i("k", 2)}, 2);
  check(old[1], DType::i64, {3, 2}, {0, 2, 1, 2, 2, 0});
  // int64 data, K = 0
  auto i64 = run_onnx(11, "TopK", {ints({4, -9, 4}), ints({2})}, {attr_i("largest", 0)}, 2);
  check(i64[0], DType::i64, {2}, {-9, 4});
  check(i64[1], DType::i64, {2}, {1, 0});
  check(run_onnx(11, "TopK", {x, ints({0})}, {}, 2)[0], DType::f32, {3, 0}, {});
  // NaN counts as the largest (torch.topk), NaNs by index
  auto nan = run_onnx(11, "TopK", {make(DType::f64, {4}, {1, NAN, 3, NAN}), ints({3})}, {}, 2);
  check(nan[0], DType::f64, {3}, {NAN, NAN, 3});
  check(nan[1], DType::i64, {3}, {1, 3, 2});
  check(run_onnx(11, "TopK", {make(DType::f64, {4}, {1, NAN, 3, NAN}), ints({2})}, {attr_i("largest", 0)}, 2)[1],
        DType::i64, {2}, {0, 2});
  CHECK(error_of([&] { run_onnx(11, "TopK", {x, ints({5})}, {}, 2); }).find("outside [0, 4]") != std::string::npos);
  CHECK(error_of([&] { run_onnx(11, "TopK", {x, ints({2})}, {}, 2, 2); }).find("must be known") != std::string::npos);
  CHECK(error_of([&] { run_onnx(9, "TopK", {x}, {}, 2); }).find("'k'") != std::string::npos);
}

TEST_CASE("ONNX node tests of TopK") { check_node_tests({"TopK"}, 4); }

TEST_CASE("ONNX node tests of the reduction ops") {
  check_node_tests({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceProd"}, 30);
}
