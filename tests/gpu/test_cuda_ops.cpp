// CUDA kernels run through a one-node Plan on the device against the same Plan on the CPU.
//
// The reductions and Softmax / LogSoftmax (exec/cuda/reduce.*): ReduceSum / ReduceMean /
// ReduceMax over every kind of axes (all, leading, trailing, middle, split, negative, keepdims,
// noop_with_empty_axes, an empty dim, few outputs over thousands of elements: the split into
// shares), Softmax / LogSoftmax and their Grads on each axis with large values and NaN, on f32
// and f64, the reductions also on f16 and bf16; along the last dim also rows longer than a warp.
// Both accumulate in double (the CUDA Softmax family along the last dim in its lanes' order, the
// rest in the CPU's order per output): agreement within 1e-6 relative (f32) / 1e-12 (f64); 16-bit
// results are rounded once from the double sum on both sides: equal.
// The copy ops (Transpose, Expand, Reshape, Flatten, Squeeze, Unsqueeze), 16-bit floats included:
// bit-identical.
//
// The cases are the backend harness's families "reduce" and "copy ops" (tests/backend/
// backend_ops.h), run by tests/backend/test_backend_ops.cpp on every device backend present: the
// emulated device (the kernels' loop bodies run on the host: the node to launch mapping and the
// loops, not the device) and cuda:0 where there is a GPU. Integer reductions stay on the CPU.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/backend/backend_ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "exec/cuda/elementwise.h"
#include "exec/cuda/reduce.h"
#include "exec/device_backend.h"
#include "exec/plan.h"

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

struct Case {
  Op op;
  Shape shape;
  std::vector<int64_t> axes;  // ReduceX: empty = no axes input; the Softmax family: {axis}
  bool has_axes = false;
  int64_t keepdims = 1, noop = 0;
};

bool softmax_family(Op op) {
  return op == Op::Softmax || op == Op::LogSoftmax || op == Op::SoftmaxGrad || op == Op::LogSoftmaxGrad;
}
bool softmax_grad(Op op) { return op == Op::SoftmaxGrad || op == Op::LogSoftmaxGrad; }

Tensor input_of(const Shape& shape, DType t, std::mt19937& rng) {
  Tensor x(t, shape);
  std::uniform_real_distribution<double> u(-4, 4);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = u(rng);
    if (i == 5) v = 1000.0;  // Softmax must subtract the max
    if (i == 17) v = NAN;    // NaN propagates (max: NaN wins)
    if (x.numel() > 1000 && i == x.numel() - 3) v = NAN;  // also from a split reduction's last share
    if (t == DType::f32) x.as<float>()[i] = float(v);
    else if (t == DType::f16) x.as<uint16_t>()[i] = f32_to_f16(float(v));
    else if (t == DType::bf16) x.as<uint16_t>()[i] = f32_to_bf16(float(v));
    else if (t == DType::i64) x.as<int64_t>()[i] = int64_t(i) * 7 - 20;
    else x.as<double>()[i] = v;
  }
  return x;
}

bool close(double a, double b, double rtol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= rtol * std::abs(b) + rtol * 1e-1;
}

// float32: the reductions sum in double on both sides (1e-6); the Softmax family also takes exp,
// the device's expf against the host's (each within a few float32 steps), and its gradients
// subtract nearly equal terms: the fp32 tolerance, 1e-5 relative. float64: 1e-12.
// 16-bit: sums in double, one rounding, on both sides: the same value.
std::string reduce_compare(const Compared& m) {
  const DType t = m.cpu.dtype();
  const double rtol = t == DType::f64 ? 1e-12 : softmax_family(m.c.op) ? 1e-5 : 1e-6;
  return mismatches(m, [&](int64_t, double x, double y) {
    if (t == DType::f16 || t == DType::bf16) return x == y || (std::isnan(x) && std::isnan(y));
    if (t == DType::i64) return x == y;
    return close(y, x, rtol);
  });
}

// Input x; the Grads take (dy, x), x standing for the forward's output y.
OpCase op_case(const Case& c, DType t) {
  OpCase o{.op = c.op, .compare = reduce_compare};
  if (softmax_grad(c.op)) o.inputs.push_back(fed("dy", t, c.shape));
  o.inputs.push_back(fed("x", t, c.shape));
  if (softmax_family(c.op)) {
    o.attrs["axis"] = Attr(c.axes.at(0));
  } else {
    o.attrs["keepdims"] = Attr(c.keepdims);
    o.attrs["noop_with_empty_axes"] = Attr(c.noop);
    if (c.has_axes) o.inputs.push_back(fixed("axes", ints(c.axes)));
  }
  o.fill = [](const OpCase& oc, size_t k, std::mt19937& rng) { return input_of(oc.inputs[k].shape, oc.inputs[k].dtype, rng); };
  return o;
}

std::vector<OpCase> reduce_cases() {
  std::vector<Case> cs;
  for (Op op : {Op::ReduceSum, Op::ReduceMean, Op::ReduceMax, Op::ReduceMin}) {
    for (int64_t keep : {0, 1}) {
      cs.push_back({op, {4, 5, 6}, {}, false, keep, 0});         // all dims
      cs.push_back({op, {4, 5, 6}, {0}, true, keep, 0});         // leading
      cs.push_back({op, {4, 5, 6}, {-1}, true, keep, 0});        // trailing, negative
      cs.push_back({op, {4, 5, 6}, {1}, true, keep, 0});         // middle
      cs.push_back({op, {4, 5, 6}, {0, 2}, true, keep, 0});      // split
      cs.push_back({op, {2, 3, 1, 5}, {1, 2}, true, keep, 0});   // with a size-1 dim
      cs.push_back({op, {300, 7}, {0}, true, keep, 0});          // many rows per output (bias gradient)
      cs.push_back({op, {0, 3}, {0}, true, keep, 0});            // an empty reduced dim
      cs.push_back({op, {3000, 7}, {0}, true, keep, 0});         // split: 7 outputs over 3000 rows
      cs.push_back({op, {2, 1500, 5}, {0, 1}, true, keep, 0});   // split over two dims
      cs.push_back({op, {4, 1201}, {1}, true, keep, 0});         // split, a short last share
    }
    cs.push_back({op, {3, 4}, {}, true, 1, 1});  // noop_with_empty_axes: the identity
  }
  for (Op op : {Op::Softmax, Op::LogSoftmax, Op::SoftmaxGrad, Op::LogSoftmaxGrad}) {
    for (int64_t axis : {-1, 0, 1, 2}) cs.push_back({op, {4, 5, 6}, {axis}, false, 1, 0});
    // Along the last dim a warp shares a row: rows longer than its 32 lanes, of uneven length, one
    // element long; and a row with no NaN (rows 1.. of [3, 200]).
    cs.push_back({op, {3, 200}, {-1}, false, 1, 0});
    cs.push_back({op, {2, 3, 70}, {2}, false, 1, 0});
    cs.push_back({op, {5, 1}, {1}, false, 1, 0});
    cs.push_back({op, {40, 33}, {0}, false, 1, 0});  // and a column per thread, many rows long
  }
  std::vector<OpCase> out;
  for (const Case& c : cs)
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16})
      if (!softmax_family(c.op) || t == DType::f32 || t == DType::f64) out.push_back(op_case(c, t));  // 16-bit: reductions only
  // Integer inputs stay on the CPU.
  OpCase integer = op_case(Case{Op::ReduceSum, {3, 4}, {1}, true, 1, 0}, DType::i64);
  integer.label = "integers stay on the CPU";
  integer.expect = Expect::host;
  out.push_back(integer);
  return out;
}

// One-node graphs of the copy ops: input x (its dtype and shape) and constant i64 inputs;
// distinct values in x: any misplaced element shows. Compared bytes for bytes.
OpCase copy_case(Op op, DType t, Shape shape, std::vector<std::vector<int64_t>> consts, std::map<std::string, Attr> attrs) {
  OpCase o{.op = op, .inputs = {fed("x", t, std::move(shape))}, .attrs = std::move(attrs)};
  for (size_t k = 0; k < consts.size(); ++k) o.inputs.push_back(fixed("c" + std::to_string(k), ints(consts[k])));
  o.fill = [](const OpCase& oc, size_t, std::mt19937&) {
    const CaseInput& in = oc.inputs[0];
    Tensor x(in.dtype, in.shape);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (in.dtype == DType::f32) x.as<float>()[i] = float(i) * 0.5f - 3.f;
      else if (in.dtype == DType::f64) x.as<double>()[i] = double(i) * 0.25 - 7.0;
      else if (in.dtype == DType::bf16 || in.dtype == DType::f16) x.as<uint16_t>()[i] = uint16_t(0x3c00 + i * 3);
      else x.as<int64_t>()[i] = i * 7 - 100;
    }
    return x;
  };
  o.compare = [](const Compared& m) {
    return std::memcmp(m.cpu.data(), m.dev.data(), m.cpu.nbytes()) == 0 ? std::string() : std::string("bytes differ");
  };
  return o;
}

std::vector<OpCase> copy_cases() {
  std::vector<OpCase> cs;
  for (DType t : {DType::f32, DType::i64, DType::f64, DType::bf16, DType::f16}) {
    cs.push_back(copy_case(Op::Transpose, t, {2, 3, 4}, {}, {{"perm", Attr(std::vector<int64_t>{2, 0, 1})}}));
    cs.push_back(copy_case(Op::Transpose, t, {2, 3, 4}, {}, {{"perm", Attr(std::vector<int64_t>{1, 0, 2})}}));
    cs.push_back(copy_case(Op::Transpose, t, {2, 3, 4, 5}, {}, {}));  // default: reversed
    cs.push_back(copy_case(Op::Transpose, t, {33, 65}, {}, {}));
    cs.push_back(copy_case(Op::Expand, t, {3, 1}, {{2, 3, 4}}, {}));
    cs.push_back(copy_case(Op::Expand, t, {1, 4}, {{3, 1}}, {}));
    cs.push_back(copy_case(Op::Reshape, t, {2, 3, 4}, {{6, -1}}, {}));
    cs.push_back(copy_case(Op::Flatten, t, {2, 3, 4}, {}, {{"axis", Attr(int64_t(2))}}));
    cs.push_back(copy_case(Op::Unsqueeze, t, {2, 3}, {{0, 3}}, {}));
    cs.push_back(copy_case(Op::Squeeze, t, {2, 1, 3}, {{1}}, {}));
  }
  return cs;
}

const bool registered = register_cases("reduce", reduce_cases) && register_cases("copy ops", copy_cases);

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda reduce: few outputs over many elements are split into shares, within the scratch") {
    CHECK(cuda::reduce_parts(7, 3000, size_t(1) << 20) == 11);   // shares of ~256
    CHECK(cuda::reduce_parts(4, 1201, size_t(1) << 20) == 4);
    CHECK(cuda::reduce_parts(7, 300, size_t(1) << 20) == 1);     // few elements: a thread each
    CHECK(cuda::reduce_parts(100000, 3000, size_t(1) << 20) == 1);  // many outputs: a thread each
    CHECK(cuda::reduce_parts(1000, 1 << 20, 4000) == 4);         // as many as the scratch holds
    CHECK(cuda::reduce_parts(7, 1 << 30, size_t(1) << 20) == 1024);
    CHECK(cuda::reduce_parts(7, 3000, 0) == 1);
  }
}
#endif
