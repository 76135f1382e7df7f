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
// Suite "cuda": on the emulated device (the kernels' loop bodies run on the host): checks the node
// to launch mapping and the loops, not the device. Suite "gpu": on cuda:0, skipped without a GPU.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/gpu/cuda_test_util.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include <fmt/format.h>

#include "exec/cuda/elementwise.h"
#include "exec/cuda/reduce.h"
#include "exec/device_backend.h"
#include "exec/plan.h"

using namespace onnxdp;

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

// Input x; the Grads take (dy, x), x standing for the forward's output y.
Graph graph_of(const Case& c, DType t) {
  Graph g;
  std::vector<ValueId> ins;
  for (const char* name : {"dy", "x"}) {
    if (std::string(name) == "dy" && !softmax_grad(c.op)) continue;
    Value x;
    x.name = name;
    x.dtype = t;
    x.shape = c.shape;
    x.kind = ValueKind::input;
    ins.push_back(g.add_value(std::move(x)));
  }
  g.inputs = ins;
  std::map<std::string, Attr> attrs;
  if (softmax_family(c.op)) {
    attrs["axis"] = Attr(c.axes.at(0));
  } else {
    attrs["keepdims"] = Attr(c.keepdims);
    attrs["noop_with_empty_axes"] = Attr(c.noop);
    if (c.has_axes) {
      Value a;
      a.name = "axes";
      a.dtype = DType::i64;
      a.shape = {int64_t(c.axes.size())};
      a.kind = ValueKind::constant;
      a.data = Tensor(DType::i64, a.shape);
      for (size_t k = 0; k < c.axes.size(); ++k) a.data.as<int64_t>()[k] = c.axes[k];
      ins.push_back(g.add_value(std::move(a)));
    }
  }
  int n = g.add_node(c.op, "node", ins, {"y"}, attrs);
  g.outputs = {g.nodes[size_t(n)].outputs[0]};
  verify(g);
  return g;
}

Tensor input_of(const Case& c, DType t, std::mt19937& rng) {
  Tensor x(t, c.shape);
  std::uniform_real_distribution<double> u(-4, 4);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = u(rng);
    if (i == 5) v = 1000.0;  // Softmax must subtract the max
    if (i == 17) v = NAN;    // NaN propagates (max: NaN wins)
    if (x.numel() > 1000 && i == x.numel() - 3) v = NAN;  // also from a split reduction's last share
    if (t == DType::f32) x.as<float>()[i] = float(v);
    else if (t == DType::f16) x.as<uint16_t>()[i] = f32_to_f16(float(v));
    else if (t == DType::bf16) x.as<uint16_t>()[i] = f32_to_bf16(float(v));
    else x.as<double>()[i] = v;
  }
  return x;
}

std::vector<Case> cases() {
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
  return cs;
}

bool close(double a, double b, double rtol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= rtol * std::abs(b) + rtol * 1e-1;
}

// Runs every case on `kind` and the CPU; returns how many ran.
int check_all(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  std::mt19937 rng(42);
  int ran = 0;
  for (const Case& c : cases()) {
    const bool softmax = softmax_family(c.op);
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      if (softmax && (t == DType::f16 || t == DType::bf16)) continue;  // reductions only
      const std::string op = op_name(c.op), dtype = dtype_name(t), axes = shape_str(c.axes);
      CAPTURE(op);
      CAPTURE(shape_str(c.shape));
      CAPTURE(axes);
      CAPTURE(c.keepdims);
      CAPTURE(dtype);
      Plan cpu(graph_of(c, t));
      Plan gpu(graph_of(c, t), PlanOptions{.device = dev});
      CHECK(gpu.host_ops().empty());  // the node runs on the device
      std::map<std::string, Tensor> in{{"x", input_of(c, t, rng)}};
      if (softmax_grad(c.op)) in["dy"] = input_of(c, t, rng);
      Tensor a = cpu.run(in).at("y"), b = gpu.run(in).at("y");
      REQUIRE(a.shape() == b.shape());
      int bad = 0;
      std::string first;  // the first element off, for the report
      const std::vector<double> xs = a.to_f64(), ys = b.to_f64();
      // float32: the reductions sum in double on both sides (1e-6); the Softmax family also takes
      // exp, the device's expf against the host's (each within a few float32 steps), and its
      // gradients subtract nearly equal terms: the fp32 tolerance, 1e-5 relative.
      const double rtol = t == DType::f64 ? 1e-12 : softmax ? 1e-5 : 1e-6;
      for (int64_t i = 0; i < a.numel(); ++i) {
        const double x = xs[size_t(i)], y = ys[size_t(i)];
        // 16-bit: sums in double, one rounding, on both sides: the same value.
        const bool ok = t == DType::f16 || t == DType::bf16 ? x == y || (std::isnan(x) && std::isnan(y)) : close(y, x, rtol);
        if (!ok && first.empty()) first = fmt::format("element {}: CPU {:.9g}, device {:.9g}", i, x, y);
        bad += !ok;
      }
      INFO(first);
      CHECK(bad == 0);
      ++ran;
    }
  }
  return ran;
}

// One-node graphs of the copy ops: input x (its dtype and shape) and constant i64 inputs.
struct CopyCase {
  Op op;
  DType t;
  Shape shape;
  std::vector<std::vector<int64_t>> consts;  // inputs 1.. as i64 constants
  std::map<std::string, Attr> attrs;
};

std::vector<CopyCase> copy_cases() {
  std::vector<CopyCase> cs;
  for (DType t : {DType::f32, DType::i64, DType::f64, DType::bf16, DType::f16}) {
    cs.push_back({Op::Transpose, t, {2, 3, 4}, {}, {{"perm", Attr(std::vector<int64_t>{2, 0, 1})}}});
    cs.push_back({Op::Transpose, t, {2, 3, 4}, {}, {{"perm", Attr(std::vector<int64_t>{1, 0, 2})}}});
    cs.push_back({Op::Transpose, t, {2, 3, 4, 5}, {}, {}});  // default: reversed
    cs.push_back({Op::Transpose, t, {33, 65}, {}, {}});
    cs.push_back({Op::Expand, t, {3, 1}, {{2, 3, 4}}, {}});
    cs.push_back({Op::Expand, t, {1, 4}, {{3, 1}}, {}});
    cs.push_back({Op::Reshape, t, {2, 3, 4}, {{6, -1}}, {}});
    cs.push_back({Op::Flatten, t, {2, 3, 4}, {}, {{"axis", Attr(int64_t(2))}}});
    cs.push_back({Op::Unsqueeze, t, {2, 3}, {{0, 3}}, {}});
    cs.push_back({Op::Squeeze, t, {2, 1, 3}, {{1}}, {}});
  }
  return cs;
}

Graph graph_of(const CopyCase& c) {
  Graph g;
  Value x;
  x.name = "x";
  x.dtype = c.t;
  x.shape = c.shape;
  x.kind = ValueKind::input;
  std::vector<ValueId> ins{g.add_value(std::move(x))};
  g.inputs = ins;
  for (size_t k = 0; k < c.consts.size(); ++k) {
    Value a;
    a.name = "c" + std::to_string(k);
    a.dtype = DType::i64;
    a.shape = {int64_t(c.consts[k].size())};
    a.kind = ValueKind::constant;
    a.data = Tensor(DType::i64, a.shape);
    for (size_t j = 0; j < c.consts[k].size(); ++j) a.data.as<int64_t>()[j] = c.consts[k][j];
    ins.push_back(g.add_value(std::move(a)));
  }
  int n = g.add_node(c.op, "node", ins, {"y"}, c.attrs);
  g.outputs = {g.nodes[size_t(n)].outputs[0]};
  verify(g);
  return g;
}

int check_copies(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  int ran = 0;
  for (const CopyCase& c : copy_cases()) {
    const std::string op = op_name(c.op), dtype = dtype_name(c.t);
    CAPTURE(op);
    CAPTURE(dtype);
    CAPTURE(shape_str(c.shape));
    Plan cpu(graph_of(c));
    Plan gpu(graph_of(c), PlanOptions{.device = dev});
    CHECK(gpu.host_ops().empty());
    Tensor x(c.t, c.shape);
    for (int64_t i = 0; i < x.numel(); ++i) {  // distinct values: any misplaced element shows
      if (c.t == DType::f32) x.as<float>()[i] = float(i) * 0.5f - 3.f;
      else if (c.t == DType::f64) x.as<double>()[i] = double(i) * 0.25 - 7.0;
      else if (c.t == DType::bf16 || c.t == DType::f16) x.as<uint16_t>()[i] = uint16_t(0x3c00 + i * 3);
      else x.as<int64_t>()[i] = i * 7 - 100;
    }
    std::map<std::string, Tensor> in{{"x", x}};
    Tensor a = cpu.run(in).at("y"), b = gpu.run(in).at("y");
    REQUIRE(a.shape() == b.shape());
    CHECK(std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
    ++ran;
  }
  return ran;
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda copy ops (emulated): Transpose, Expand and the reshapes equal the CPU's bytes") {
    const int n = check_copies(DeviceKind::cuda_emulated);
    MESSAGE("cuda copy ops emulated: " << n << " cases match the CPU kernels");
  }

  TEST_CASE("cuda reduce (emulated): reductions and Softmax match the CPU kernels") {
    const int n = check_all(DeviceKind::cuda_emulated);
    MESSAGE("cuda reduce emulated: " << n << " cases match the CPU kernels");
  }

  TEST_CASE("cuda reduce: few outputs over many elements are split into shares, within the scratch") {
    CHECK(cuda::reduce_parts(7, 3000, size_t(1) << 20) == 11);   // shares of ~256
    CHECK(cuda::reduce_parts(4, 1201, size_t(1) << 20) == 4);
    CHECK(cuda::reduce_parts(7, 300, size_t(1) << 20) == 1);     // few elements: a thread each
    CHECK(cuda::reduce_parts(100000, 3000, size_t(1) << 20) == 1);  // many outputs: a thread each
    CHECK(cuda::reduce_parts(1000, 1 << 20, 4000) == 4);         // as many as the scratch holds
    CHECK(cuda::reduce_parts(7, 1 << 30, size_t(1) << 20) == 1024);
    CHECK(cuda::reduce_parts(7, 3000, 0) == 1);
  }

  TEST_CASE("cuda reduce: integer inputs and computed axes stay on the CPU") {
    auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
    Case c{Op::ReduceSum, {3, 4}, {1}, true, 1, 0};
    Plan p(graph_of(c, DType::i64), PlanOptions{.device = dev});
    CHECK(p.host_ops() == "ReduceSum");
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("cuda reduce on GPU: reductions and Softmax match the CPU kernels") {
    if (!test::have_gpu()) return;
    const int n = check_all(DeviceKind::cuda);
    MESSAGE("cuda reduce on GPU: " << n << " cases match the CPU kernels");
  }

  TEST_CASE("cuda copy ops on GPU: Transpose, Expand and the reshapes equal the CPU's bytes") {
    if (!test::have_gpu()) return;
    const int n = check_copies(DeviceKind::cuda);
    MESSAGE("cuda copy ops on GPU: " << n << " cases match the CPU kernels");
  }
}
#endif
