// The CUDA elementwise kernels against the CPU kernels (the reference, DESIGN.md convention 5):
// every elementwise op, on each dtype it has a CUDA kernel for, on same-shape, broadcast, scalar,
// empty, multi-block and high-rank shapes, with NaN and infinities among the float inputs. Floats
// match within rtol 1e-5 (fp32) / 1e-12 (fp64), integers and bools exactly.
//
// Suite "gpu" (CTest label gpu: gpu.cuda_kernels) runs the kernels on the GPU; without one each
// case prints "no GPU: <reason>" and returns, and gpu.cuda_kernels reports Skipped. Suite "cuda"
// runs the same cases through cuda::emulate_node (the CUDA path's dispatch, broadcast layout, index
// math and functors with its element loop on the host), which needs no GPU and proves nothing
// about the device code itself.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/gpu/cuda_test_util.h"

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/elementwise.h"
#include "exec/kernel.h"

using namespace onnxdp;
using onnxdp::test::have_gpu;

namespace {

enum class Domain { any, positive, small_int_exponent };

// Random contents of dtype t; floats get NaN, +inf and -inf in their first elements (domain any).
Tensor random_tensor(DType t, const Shape& s, Domain dom, std::mt19937& rng) {
  Tensor x(t, s);
  std::uniform_real_distribution<double> real(dom == Domain::positive ? 0.1 : -3.0, 3.0);
  std::uniform_int_distribution<int> ints(dom == Domain::small_int_exponent ? 0 : -20,
                                          dom == Domain::small_int_exponent ? 4 : 20);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::f32: x.as<float>()[i] = float(real(rng)); break;
      case DType::f64: x.as<double>()[i] = real(rng); break;
      case DType::i32: x.as<int32_t>()[i] = ints(rng); break;
      case DType::i64: x.as<int64_t>()[i] = ints(rng); break;
      case DType::boolean: x.as<bool>()[i] = rng() % 2; break;
      case DType::f16:
      case DType::bf16: x.as<uint16_t>()[i] = uint16_t(rng()); break;
      default: FAIL("no generator for " << dtype_name(t));
    }
  }
  if (dom == Domain::any && n >= 8 && (t == DType::f32 || t == DType::f64)) {
    const double special[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; ++k) {
      if (t == DType::f32) x.as<float>()[k * 3] = float(special[k]);
      else x.as<double>()[k * 3] = special[k];
    }
  }
  return x;
}

// Element i of a float / int / bool tensor as double; 16-bit storage as its bits.
double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.as<float>()[i];
    case DType::f64: return t.as<double>()[i];
    case DType::i32: return t.as<int32_t>()[i];
    case DType::i64: return double(t.as<int64_t>()[i]);
    case DType::boolean: return t.as<bool>()[i];
    case DType::f16:
    case DType::bf16: return t.as<uint16_t>()[i];
    default: return NAN;
  }
}

// Mismatching elements (first few described in `why`).
int64_t compare(const Tensor& cpu, const Tensor& gpu, std::string& why) {
  REQUIRE(cpu.dtype() == gpu.dtype());
  REQUIRE(cpu.shape() == gpu.shape());
  const bool f32 = cpu.dtype() == DType::f32, f64 = cpu.dtype() == DType::f64;
  const double rtol = f32 ? 1e-5 : 1e-12, atol = f32 ? 1e-6 : 1e-13;
  int64_t bad = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double a = element(cpu, i), b = element(gpu, i);
    bool ok;
    if (std::isnan(a) || std::isnan(b)) ok = std::isnan(a) && std::isnan(b);
    else if (f32 || f64) ok = a == b || std::abs(a - b) <= atol + rtol * std::abs(a);
    else ok = a == b;
    if (!ok && bad++ < 3) why += " [" + std::to_string(i) + "] cpu " + std::to_string(a) + " cuda " + std::to_string(b);
  }
  return bad;
}

struct Case {
  Op op;
  std::vector<DType> types;   // one per input
  std::vector<Shape> shapes;  // one per input
  Domain domain = Domain::any;
  std::map<std::string, Attr> attrs = {};
};

// Where the CUDA path runs: on the GPU, or its element loop on the host (cuda::emulate_node).
enum class Backend { gpu, emulation };
Backend g_backend = Backend::gpu;

// Builds the node, runs the CPU kernel and the CUDA path (g_backend), compares output 0. Returns
// false (and records a check failure) on a mismatch.
bool run_case(const Case& c, std::mt19937& rng) {
  Graph g;
  std::vector<Tensor> data;
  data.reserve(c.types.size());
  std::vector<ValueId> ids;
  for (size_t k = 0; k < c.types.size(); ++k) {
    Domain dom = c.domain;
    if (c.op == Op::Pow && k == 1) dom = dtype_is_integer(c.types[k]) ? Domain::small_int_exponent : Domain::any;
    data.push_back(random_tensor(c.types[k], c.shapes[k], dom, rng));
    Value v;
    v.name = "in" + std::to_string(k);
    v.dtype = c.types[k];
    v.shape = c.shapes[k];
    v.kind = ValueKind::input;
    ids.push_back(g.add_value(std::move(v)));
  }
  if (c.op == Op::Clip && data.size() == 3) {  // lo <= hi, inside the data's range
    if (c.types[0] == DType::f32) data[1].as<float>()[0] = -1.0f, data[2].as<float>()[0] = 1.5f;
    if (c.types[0] == DType::f64) data[1].as<double>()[0] = -1.0, data[2].as<double>()[0] = 1.5;
    if (c.types[0] == DType::i32) data[1].as<int32_t>()[0] = -5, data[2].as<int32_t>()[0] = 7;
    if (c.types[0] == DType::i64) data[1].as<int64_t>()[0] = -5, data[2].as<int64_t>()[0] = 7;
  }
  int ni = g.add_node(c.op, "n", ids, {"y"}, c.attrs);
  const Node& n = g.nodes[size_t(ni)];
  std::vector<const Tensor*> ins;
  for (const Tensor& t : data) ins.push_back(&t);

  std::string what = std::string(op_name(c.op)) + "(";
  for (size_t k = 0; k < c.types.size(); ++k)
    what += (k ? ", " : "") + std::string(dtype_name(c.types[k])) + shape_str(c.shapes[k]);
  what += ")";
  for (const auto& [name, attr] : c.attrs) what += " " + name;
  INFO(what);
  REQUIRE(cuda::elementwise_runs(g, n));
  Tensor cpu = onnxdp::run_node(g, n, ins)[0];
  Tensor gpu = g_backend == Backend::gpu ? cuda::run_node(g, n, ins)[0] : cuda::emulate_node(g, n, ins)[0];
  std::string why;
  int64_t bad = compare(cpu, gpu, why);
  INFO("mismatches: " << bad << why);
  CHECK(bad == 0);
  return bad == 0;
}

// The shapes every op is run on, as (input shapes) for arity 1, 2 and 3.
std::vector<std::vector<Shape>> shape_sets(int arity) {
  switch (arity) {
    case 1:
      return {{{4, 5, 6}}, {{}}, {{0, 3}}, {{3, 70001}}};
    case 2:
      return {{{4, 5, 6}, {4, 5, 6}},           // same shape
              {{4, 1, 6}, {5, 1}},              // both broadcast
              {{}, {4, 5, 6}},                  // scalar
              {{0, 3}, {1, 3}},                 // empty
              {{3, 1}, {70001}},                // more than one block in flight
              {{2, 1, 3, 1, 2, 1, 2}, {1, 2, 1, 3, 1, 2, 1}}};  // rank 7, nothing merges
    default:
      return {{{4, 5, 6}, {4, 5, 6}, {4, 5, 6}}, {{4, 1, 6}, {5, 1}, {}}, {{2, 1, 3, 1, 2}, {1, 2, 1, 3, 1}, {2, 1, 1, 1, 2}}};
  }
}

const std::vector<DType> kNumbers = {DType::f32, DType::f64, DType::i32, DType::i64};
const std::vector<DType> kFloats = {DType::f32, DType::f64};

// Runs op on every shape set of its arity, all inputs of dtype t (Pow: exponent of t1).
int run_all_shapes(Op op, int arity, DType t, std::mt19937& rng, Domain dom = Domain::any,
                   std::map<std::string, Attr> attrs = {}, DType t1 = DType::f32, bool pow = false) {
  int n = 0;
  for (const auto& shapes : shape_sets(arity)) {
    Case c{op, std::vector<DType>(size_t(arity), t), shapes, dom, attrs};
    if (pow) c.types[1] = t1;
    n += run_case(c, rng);
  }
  return n;
}

void report(const char* what, int cases) {
  const std::string where = g_backend == Backend::gpu ? "on GPU" : "host emulation";
  MESSAGE("cuda elementwise " << where << ": " << std::string(what) << ": " << cases << " cases match the CPU kernel");
}

}  // namespace

TEST_SUITE("cuda") {

// Asks the kernel table, not the GPU.
TEST_CASE("cuda elementwise: every elementwise op has a kernel for f32 and f64") {
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Pow, Op::Min, Op::Max, Op::Sqrt, Op::Exp, Op::Log, Op::Neg,
                Op::Abs, Op::Reciprocal, Op::Relu, Op::LeakyRelu, Op::Sigmoid, Op::Tanh, Op::Erf, Op::Gelu,
                Op::Softplus, Op::Sin, Op::Cos, Op::HardSigmoid, Op::HardSwish, Op::Elu, Op::Selu, Op::Celu, Op::Mish,
                Op::Softsign,
                Op::Sign, Op::PRelu, Op::Mod, Op::Clip, Op::Identity,
                Op::Equal, Op::Less, Op::Greater, Op::LessOrEqual, Op::GreaterOrEqual, Op::IsNaN, Op::IsInf}) {
    for (DType t : kFloats) {
      INFO(op_name(op) << " " << dtype_name(t));
      CHECK(cuda::is_elementwise(op));
      Graph g;
      auto input = [&](std::string name) {
        Value v;
        v.name = std::move(name);
        v.dtype = t;
        v.shape = {2};
        v.kind = ValueKind::input;
        return g.add_value(std::move(v));
      };
      ValueId a = input("a"), b = input("b");
      std::vector<ValueId> ins{a};
      if (op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div || op == Op::Pow || op == Op::Min ||
          op == Op::Max || op == Op::Mod || op == Op::PRelu || op == Op::Equal || op == Op::Less || op == Op::Greater ||
          op == Op::LessOrEqual || op == Op::GreaterOrEqual)
        ins.push_back(b);
      std::map<std::string, Attr> attrs;
      if (op == Op::Mod) attrs["fmod"] = Attr(int64_t(1));  // floats need C's fmod
      int ni = g.add_node(op, "n", ins, {"y"}, attrs);
      CHECK(cuda::elementwise_runs(g, g.nodes[size_t(ni)]));
    }
  }
  CHECK(cuda::is_elementwise(Op::Not));
  CHECK(cuda::is_elementwise(Op::And));
  CHECK(cuda::is_elementwise(Op::Or));
  CHECK(cuda::is_elementwise(Op::Xor));
  CHECK(cuda::is_elementwise(Op::Where));
  CHECK_FALSE(cuda::is_elementwise(Op::MatMul));
}

}  // TEST_SUITE("cuda")

namespace {

void binary_arithmetic() {
  std::mt19937 rng(1);
  int n = 0;
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Min, Op::Max})
    for (DType t : kNumbers) n += run_all_shapes(op, 2, t, rng);
  // Min / Max: one and three inputs (variadic).
  for (Op op : {Op::Min, Op::Max})
    for (DType t : kNumbers) {
      n += run_all_shapes(op, 1, t, rng);
      n += run_all_shapes(op, 3, t, rng);
    }
  // PRelu: the slope broadcasts to x (the shape sets whose first shape is the output's).
  for (DType t : kNumbers)
    for (const auto& shapes : shape_sets(2))
      if (shapes[0].size() >= shapes[1].size() && broadcast_shapes(shapes[0], shapes[1]) == shapes[0])
        n += run_case(Case{Op::PRelu, {t, t}, shapes}, rng);
  // Mod: integers with the divisor's sign and with the dividend's; floats with fmod=1 only.
  for (DType t : kNumbers)
    for (int64_t f : {0, 1})
      if (f == 1 || !dtype_is_float(t)) n += run_all_shapes(Op::Mod, 2, t, rng, Domain::any, {{"fmod", Attr(f)}});
  report("binary arithmetic", n);
}

void pow_cases() {
  std::mt19937 rng(2);
  int n = 0;
  for (DType t : kFloats)
    for (DType e : kNumbers) n += run_all_shapes(Op::Pow, 2, t, rng, Domain::positive, {}, e, true);
  report("Pow", n);
}

void unary() {
  std::mt19937 rng(3);
  int n = 0;
  for (Op op : {Op::Neg, Op::Abs, Op::Relu, Op::Identity, Op::Sign})
    for (DType t : kNumbers) n += run_all_shapes(op, 1, t, rng);
  for (Op op : {Op::Exp, Op::Reciprocal, Op::Sigmoid, Op::Tanh, Op::Erf, Op::Softplus, Op::Sin, Op::Cos,
                Op::HardSwish, Op::Elu, Op::Selu, Op::Mish, Op::Softsign})
    for (DType t : kFloats) n += run_all_shapes(op, 1, t, rng);
  for (Op op : {Op::Sqrt, Op::Log})  // the CPU and CUDA agree on NaN for x < 0 too, but keep it real
    for (DType t : kFloats) n += run_all_shapes(op, 1, t, rng, Domain::positive);
  for (DType t : kFloats) {
    n += run_all_shapes(Op::LeakyRelu, 1, t, rng, Domain::any, {{"alpha", Attr(0.2f)}});
    n += run_all_shapes(Op::HardSigmoid, 1, t, rng, Domain::any, {{"alpha", Attr(0.3f)}, {"beta", Attr(0.4f)}});
    n += run_all_shapes(Op::Celu, 1, t, rng, Domain::any, {{"alpha", Attr(2.0f)}});
    n += run_all_shapes(Op::Gelu, 1, t, rng);
    n += run_all_shapes(Op::Gelu, 1, t, rng, Domain::any, {{"approximate", Attr(std::string("tanh"))}});
  }
  report("unary", n);
}

void clip_cases() {
  std::mt19937 rng(4);
  int n = 0;
  for (DType t : kNumbers) {
    for (const auto& shapes : shape_sets(1)) {
      n += run_case(Case{Op::Clip, {t}, shapes}, rng);
      n += run_case(Case{Op::Clip, {t, t, t}, {shapes[0], {}, {}}}, rng);
    }
  }
  report("Clip", n);
}

void logical() {
  std::mt19937 rng(5);
  int n = 0;
  for (Op op : {Op::Equal, Op::Less, Op::Greater, Op::LessOrEqual, Op::GreaterOrEqual})
    for (DType t : kNumbers) n += run_all_shapes(op, 2, t, rng);
  n += run_all_shapes(Op::Equal, 2, DType::boolean, rng);  // the orderings take numbers only
  n += run_all_shapes(Op::Not, 1, DType::boolean, rng);
  for (Op op : {Op::And, Op::Or, Op::Xor}) n += run_all_shapes(op, 2, DType::boolean, rng);
  // IsNaN / IsInf on floats (NaN, +inf, -inf among the inputs), IsInf for each sign and neither.
  for (DType t : kFloats) {
    n += run_all_shapes(Op::IsNaN, 1, t, rng);
    n += run_all_shapes(Op::IsInf, 1, t, rng);
    for (auto [neg, pos] : {std::pair<int64_t, int64_t>{0, 1}, {1, 0}, {0, 0}})
      n += run_all_shapes(Op::IsInf, 1, t, rng, Domain::any, {{"detect_negative", Attr(neg)}, {"detect_positive", Attr(pos)}});
  }
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean, DType::f16, DType::bf16})
    for (const auto& shapes : shape_sets(3)) n += run_case(Case{Op::Where, {DType::boolean, t, t}, shapes}, rng);
  report("comparisons, IsNaN, IsInf and Where", n);
}

}  // namespace

// The CUDA path's dispatch, layout, index math and functors, its element loop run on the host.
TEST_SUITE("cuda") {

TEST_CASE("cuda elementwise host emulation: binary arithmetic (Add Sub Mul Div Min Max Mod) equals the CPU") {
  g_backend = Backend::emulation;
  binary_arithmetic();
}
TEST_CASE("cuda elementwise host emulation: Pow equals the CPU") {
  g_backend = Backend::emulation;
  pow_cases();
}
TEST_CASE("cuda elementwise host emulation: unary ops equal the CPU") {
  g_backend = Backend::emulation;
  unary();
}
TEST_CASE("cuda elementwise host emulation: Clip equals the CPU") {
  g_backend = Backend::emulation;
  clip_cases();
}
TEST_CASE("cuda elementwise host emulation: comparisons, And, Or, Xor, Not, IsNaN, IsInf and Where equal the CPU") {
  g_backend = Backend::emulation;
  logical();
}

}  // TEST_SUITE("cuda")

// The kernels on the GPU; without one each case says "no GPU: <reason>" and returns.
TEST_SUITE("gpu") {

TEST_CASE("cuda elementwise on GPU: binary arithmetic (Add Sub Mul Div Min Max Mod) equals the CPU") {
  if (!have_gpu()) return;
  g_backend = Backend::gpu;
  binary_arithmetic();
}
TEST_CASE("cuda elementwise on GPU: Pow (base f32/f64, exponent f32/f64/i32/i64) equals the CPU") {
  if (!have_gpu()) return;
  g_backend = Backend::gpu;
  pow_cases();
}
TEST_CASE("cuda elementwise on GPU: unary ops equal the CPU") {
  if (!have_gpu()) return;
  g_backend = Backend::gpu;
  unary();
}
TEST_CASE("cuda elementwise on GPU: Clip with both, one and no bounds equals the CPU") {
  if (!have_gpu()) return;
  g_backend = Backend::gpu;
  clip_cases();
}
TEST_CASE("cuda elementwise on GPU: comparisons, And, Or, Xor, Not, IsNaN, IsInf and Where equal the CPU") {
  if (!have_gpu()) return;
  g_backend = Backend::gpu;
  logical();
}

}  // TEST_SUITE("gpu")

#endif  // ONNXDP_HAVE_CUDA
