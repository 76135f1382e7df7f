// The CUDA elementwise kernels against the CPU kernels (the reference, DESIGN.md convention 5):
// every elementwise op, on each dtype it has a CUDA kernel for, on same-shape, broadcast, scalar,
// empty, multi-block and high-rank shapes, with NaN and infinities among the float inputs. Floats
// match within rtol 1e-5 (fp32) / 1e-12 (fp64), integers and bools exactly.
//
// The cases are the backend harness's family "elementwise" (tests/backend/backend_ops.h): each a
// one-node Plan on the CPU and on every device backend present (the emulated CUDA device, whose
// element loop runs on the host, and cuda:0 where there is a GPU), run by
// tests/backend/test_backend_ops.cpp. Clip's bounds are constants (the device reads them on the
// host); Identity runs as the Plan's view of its input.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/backend/backend_ops.h"

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/elementwise.h"
#include "exec/kernel.h"

using namespace onnxdp;
using namespace onnxdp::test;

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

// fp32 within 1e-5 relative (1e-6 absolute), fp64 1e-12 (1e-13); integers, bools and the 16-bit
// floats Where moves: exactly.
std::string compare(const Compared& m) {
  if (m.cpu.dtype() == DType::f32) return within(1e-5, 1e-6)(m);
  if (m.cpu.dtype() == DType::f64) return within(1e-12, 1e-13)(m);
  return bytes_equal(m);
}

struct Case {
  Op op;
  std::vector<DType> types;   // one per input
  std::vector<Shape> shapes;  // one per input
  Domain domain = Domain::any;
  std::map<std::string, Attr> attrs = {};
};

// The harness case: inputs in0.. fed with random_tensor (Pow's exponent: small integers when it
// is one); Clip's bounds in0 <= lo <= hi inside the data's range, as constants.
OpCase op_case(const Case& c) {
  OpCase o{.op = c.op, .attrs = c.attrs, .compare = compare};
  for (size_t k = 0; k < c.types.size(); ++k) {
    if (c.op == Op::Clip && k > 0) {
      const bool fl = dtype_is_float(c.types[0]);
      o.inputs.push_back(fixed(k == 1 ? "lo" : "hi", scalar(c.types[k], k == 1 ? (fl ? -1.0 : -5.0) : (fl ? 1.5 : 7.0))));
      continue;
    }
    o.inputs.push_back(fed("in" + std::to_string(k), c.types[k], c.shapes[k]));
  }
  const Domain dom = c.domain;
  o.fill = [dom](const OpCase& oc, size_t k, std::mt19937& rng) {
    const CaseInput& in = oc.inputs[k];
    Domain d = dom;
    if (oc.op == Op::Pow && k == 1) d = dtype_is_integer(in.dtype) ? Domain::small_int_exponent : Domain::any;
    return random_tensor(in.dtype, in.shape, d, rng);
  };
  return o;
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

// Adds op on every shape set of its arity, all inputs of dtype t (Pow: exponent of t1).
void all_shapes(std::vector<OpCase>& cs, Op op, int arity, DType t, Domain dom = Domain::any,
                std::map<std::string, Attr> attrs = {}, DType t1 = DType::f32, bool pow = false) {
  for (const auto& shapes : shape_sets(arity)) {
    Case c{op, std::vector<DType>(size_t(arity), t), shapes, dom, attrs};
    if (pow) c.types[1] = t1;
    cs.push_back(op_case(c));
  }
}

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cs;
  // Binary arithmetic (Add Sub Mul Div Min Max Mod).
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Min, Op::Max})
    for (DType t : kNumbers) all_shapes(cs, op, 2, t);
  // Min / Max: one and three inputs (variadic).
  for (Op op : {Op::Min, Op::Max})
    for (DType t : kNumbers) {
      all_shapes(cs, op, 1, t);
      all_shapes(cs, op, 3, t);
    }
  // PRelu: the slope broadcasts to x (the shape sets whose first shape is the output's).
  for (DType t : kNumbers)
    for (const auto& shapes : shape_sets(2))
      if (shapes[0].size() >= shapes[1].size() && broadcast_shapes(shapes[0], shapes[1]) == shapes[0])
        cs.push_back(op_case(Case{Op::PRelu, {t, t}, shapes}));
  // Mod: integers with the divisor's sign and with the dividend's; floats with fmod=1 only.
  for (DType t : kNumbers)
    for (int64_t f : {0, 1})
      if (f == 1 || !dtype_is_float(t)) all_shapes(cs, Op::Mod, 2, t, Domain::any, {{"fmod", Attr(f)}});
  // Pow: base f32 / f64, exponent f32 / f64 / i32 / i64.
  for (DType t : kFloats)
    for (DType e : kNumbers) all_shapes(cs, Op::Pow, 2, t, Domain::positive, {}, e, true);
  // Unary.
  for (Op op : {Op::Neg, Op::Abs, Op::Relu, Op::Identity, Op::Sign})
    for (DType t : kNumbers) all_shapes(cs, op, 1, t);
  for (Op op : {Op::Exp, Op::Reciprocal, Op::Sigmoid, Op::Tanh, Op::Erf, Op::Softplus, Op::Sin, Op::Cos,
                Op::HardSwish, Op::Elu, Op::Selu, Op::Mish, Op::Softsign})
    for (DType t : kFloats) all_shapes(cs, op, 1, t);
  for (Op op : {Op::Sqrt, Op::Log})  // the CPU and CUDA agree on NaN for x < 0 too, but keep it real
    for (DType t : kFloats) all_shapes(cs, op, 1, t, Domain::positive);
  for (DType t : kFloats) {
    all_shapes(cs, Op::LeakyRelu, 1, t, Domain::any, {{"alpha", Attr(0.2f)}});
    all_shapes(cs, Op::HardSigmoid, 1, t, Domain::any, {{"alpha", Attr(0.3f)}, {"beta", Attr(0.4f)}});
    all_shapes(cs, Op::Celu, 1, t, Domain::any, {{"alpha", Attr(2.0f)}});
    all_shapes(cs, Op::Gelu, 1, t);
    all_shapes(cs, Op::Gelu, 1, t, Domain::any, {{"approximate", Attr(std::string("tanh"))}});
  }
  // Clip with both bounds and with none.
  for (DType t : kNumbers)
    for (const auto& shapes : shape_sets(1)) {
      cs.push_back(op_case(Case{Op::Clip, {t}, shapes}));
      cs.push_back(op_case(Case{Op::Clip, {t, t, t}, {shapes[0], {}, {}}}));
    }
  // Comparisons, And, Or, Xor, Not, IsNaN, IsInf and Where.
  for (Op op : {Op::Equal, Op::Less, Op::Greater, Op::LessOrEqual, Op::GreaterOrEqual})
    for (DType t : kNumbers) all_shapes(cs, op, 2, t);
  all_shapes(cs, Op::Equal, 2, DType::boolean);  // the orderings take numbers only
  all_shapes(cs, Op::Not, 1, DType::boolean);
  for (Op op : {Op::And, Op::Or, Op::Xor}) all_shapes(cs, op, 2, DType::boolean);
  // IsNaN / IsInf on floats (NaN, +inf, -inf among the inputs), IsInf for each sign and neither.
  for (DType t : kFloats) {
    all_shapes(cs, Op::IsNaN, 1, t);
    all_shapes(cs, Op::IsInf, 1, t);
    for (auto [neg, pos] : {std::pair<int64_t, int64_t>{0, 1}, {1, 0}, {0, 0}})
      all_shapes(cs, Op::IsInf, 1, t, Domain::any, {{"detect_negative", Attr(neg)}, {"detect_positive", Attr(pos)}});
  }
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean, DType::f16, DType::bf16})
    for (const auto& shapes : shape_sets(3)) cs.push_back(op_case(Case{Op::Where, {DType::boolean, t, t}, shapes}));
  // GeluGrad (dy, x of dy's shape), both formulas.
  for (DType t : kFloats)
    for (const char* approximate : {"none", "tanh"})
      for (const auto& shape : shape_sets(1))
        cs.push_back(op_case(Case{Op::GeluGrad, {t, t}, {shape[0], shape[0]}, Domain::any,
                                  {{"approximate", Attr(std::string(approximate))}}}));
  // ReluGrad (dy, y of dy's shape): y of either sign, so both branches run.
  for (DType t : kFloats)
    for (const auto& shape : shape_sets(1)) cs.push_back(op_case(Case{Op::ReluGrad, {t, t}, {shape[0], shape[0]}}));
  return cs;
}

const bool registered = register_cases("elementwise", elementwise_cases);

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

#endif  // ONNXDP_HAVE_CUDA
