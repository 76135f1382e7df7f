// Non-finite inputs propagate, as ONNX's reference and PyTorch compute every op: a NaN in is a
// NaN out (Relu used to map it to 0, and MaxPool to skip it), so that the trainer's
// non-finite-loss stop sees it instead of a silently finite result.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tests/ops/op_test_util.h"

using namespace onnxdp;
using optest::make;
using optest::run_op;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("non-finite: NaN passes through the activations, Max / Min, Clip and the softmax of its row") {
  const Tensor x = make(DType::f32, {4}, {-1.0, kNaN, 2.0, 0.0});
  for (Op op : {Op::Relu, Op::LeakyRelu, Op::Sigmoid, Op::Tanh, Op::Elu, Op::Selu, Op::Celu, Op::Softplus, Op::Mish,
                Op::HardSigmoid, Op::HardSwish, Op::Softsign, Op::Gelu, Op::Abs, Op::Neg, Op::Sign, Op::Exp}) {
    CAPTURE(op_name(op));
    const Tensor y = run_op(op, {x})[0];
    CHECK(std::isnan(y.as<float>()[1]));
    CHECK(!std::isnan(y.as<float>()[2]));
  }
  // Relu of the finite elements as before (numpy: np.maximum(x, 0)).
  const Tensor relu = run_op(Op::Relu, {x})[0];
  CHECK(relu.as<float>()[0] == 0.0f);
  CHECK(relu.as<float>()[2] == 2.0f);
  // Max / Min of a NaN and a number, in either order (np.maximum / np.minimum: NaN).
  const Tensor one = make(DType::f32, {4}, {1, 1, 1, 1});
  for (Op op : {Op::Max, Op::Min}) {
    CHECK(std::isnan(run_op(op, {x, one})[0].as<float>()[1]));
    CHECK(std::isnan(run_op(op, {one, x})[0].as<float>()[1]));
  }
  CHECK(std::isnan(run_op(Op::Clip, {x, make(DType::f32, {}, {0}), make(DType::f32, {}, {1})})[0].as<float>()[1]));
  // Softmax: a NaN in a row makes the row NaN (torch.softmax), the other row stays finite.
  const Tensor rows = make(DType::f32, {2, 3}, {1, kNaN, 2, 1, 2, 3});
  const Tensor s = run_op(Op::Softmax, {rows}, {{"axis", Attr(int64_t(-1))}})[0];
  for (int i = 0; i < 3; ++i) CHECK(std::isnan(s.as<float>()[i]));
  for (int i = 3; i < 6; ++i) CHECK(std::isfinite(s.as<float>()[i]));
}

// Unpadded windows without Indices take the branch-free loops (exec/cpu/pool.cpp max_pool_flat,
// exec/cpu/grad.cpp max_pool_grad_flat), whose max instruction lets a NaN lose: the NaN rule
// must hold there too, per plane. Expected values by hand with torch.max_pool2d's rule (a NaN in
// the window is the maximum, the first one; otherwise the first largest).
TEST_CASE("non-finite: MaxPool and MaxPoolGrad over unpadded windows without Indices take NaN as the maximum") {
  // x [1, 2, 2, 4], 2x2 windows, stride 2. Channel 0: windows {1, NaN, 3, 2} (NaN second) and
  // {NaN, 9, 5, 9} (NaN first, then a tie of 9s); channel 1 finite: {4, 6, 6, 1} -> 6 (the first),
  // {0, -2, 8, 8} -> 8 (the first).
  const Tensor x = make(DType::f32, {1, 2, 2, 4}, {1, kNaN, kNaN, 9, 3, 2, 5, 9,  //
                                                   4, 6, 0, -2, 6, 1, 8, 8});
  const std::map<std::string, Attr> a = {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                         {"strides", std::vector<int64_t>{2, 2}}};
  const Tensor y = run_op(Op::MaxPool, {x}, a)[0];
  CHECK(std::isnan(y.as<float>()[0]));
  CHECK(std::isnan(y.as<float>()[1]));
  CHECK(y.as<float>()[2] == 6.0f);
  CHECK(y.as<float>()[3] == 8.0f);
  // dy [1, 2, 1, 2] = 10, 20, 30, 40 lands on each window's choice: flat x offsets 1, 2 (the
  // NaNs), 9 (the first 6), 14 (the first 8).
  const Tensor dx = run_op(Op::MaxPoolGrad, {x, make(DType::f32, {1, 2, 1, 2}, {10, 20, 30, 40})}, a)[0];
  std::vector<float> want(16, 0.0f);
  want[1] = 10, want[2] = 20, want[9] = 30, want[14] = 40;
  for (int i = 0; i < 16; ++i) {
    CAPTURE(i);
    CHECK(dx.as<float>()[i] == want[size_t(i)]);
  }
}

TEST_CASE("non-finite: MaxPool takes a NaN in its window as the maximum, its gradient goes there, ReduceMax too") {
  // One 1x1x2x2 window: 1, NaN, 3, 2 -> NaN at flat index 1 (torch.max_pool2d: NaN, index 1).
  const Tensor x = make(DType::f32, {1, 1, 2, 2}, {1, kNaN, 3, 2});
  const std::map<std::string, Attr> a = {{"kernel_shape", std::vector<int64_t>{2, 2}}};
  const auto y = run_op(Op::MaxPool, {x}, a, 2);
  CHECK(std::isnan(y[0].as<float>()[0]));
  CHECK(y[1].as<int64_t>()[0] == 1);
  // A NaN first in the window stays the maximum.
  const auto y2 = run_op(Op::MaxPool, {make(DType::f32, {1, 1, 2, 2}, {kNaN, 5, 3, 2})}, a, 2);
  CHECK(std::isnan(y2[0].as<float>()[0]));
  CHECK(y2[1].as<int64_t>()[0] == 0);
  // The gradient flows to the NaN's position, as the forward chose it.
  const Tensor dx = run_op(Op::MaxPoolGrad, {x, make(DType::f32, {1, 1, 1, 1}, {7})}, a)[0];
  CHECK(dx.as<float>()[0] == 0.0f);
  CHECK(dx.as<float>()[1] == 7.0f);
  CHECK(dx.as<float>()[2] == 0.0f);
  // ReduceMax / ReduceMin of a row holding NaN: NaN (np.max).
  const Tensor r = make(DType::f32, {2, 2}, {1, kNaN, 3, 4});
  for (Op op : {Op::ReduceMax, Op::ReduceMin}) {
    const Tensor m = run_op(op, {r, make(DType::i64, {1}, {1})}, {{"keepdims", Attr(int64_t(0))}})[0];
    CHECK(std::isnan(m.as<float>()[0]));
    CHECK(std::isfinite(m.as<float>()[1]));
  }
}
