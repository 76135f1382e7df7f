// The cuBLAS MatMul / Gemm path (exec/cuda/gemm.h) against the CPU kernels (the reference,
// DESIGN.md convention 5): MatMul 2-D, N-D x 2-D (rows flattened into one GEMM), equal batch dims,
// one side's batch broadcast (stride 0), 1-D operands, sizes 1 / 7 / 33 / 65 and larger, empty M,
// N, K and batch; Gemm with every transA / transB pair, alpha / beta (0 included), C absent, [],
// [1], [1, 1], [N], [1, N], [M, 1], [M, N] (a bias, [N] / [1, N] with beta 1, through cuBLASLt's
// bias epilogue), and empty dims (K = 0: beta * C or zeros).
//
// Tolerance. fp32 sums in different orders (OpenBLAS on the CPU, cuBLAS or the emulation's
// sequential loop) differ by rounding only: for any order, a K-term dot product is within
// gamma_K = K u / (1 - K u) of the exact value relative to the sum of the terms' magnitudes (Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5), u = 2^-24; alpha's product and
// beta * C's add are two more roundings. Both results are then within about (K + 2) u * mag of the
// exact value, mag = |alpha| sum |a||b| + |beta| |c|, computed by the CPU kernel itself on the
// absolute inputs. The check is |cuda - cpu| <= (2K + 8) u * mag per element: that bound with
// margin, tight enough to catch any wrong index, stride or transpose (which moves a result by about
// mag itself), and exact for K = 0. With TF32 (--tf32) each input is first rounded to 10 mantissa
// bits (relative error up to 2^-11 each, 2^-10 per product): the check adds 2^-10 * mag, and asks
// that some element be off by more than the fp32 bound (the rounding did happen).
//
// The cases are the backend harness's family "gemm" (tests/backend/backend_ops.h), run by
// tests/backend/test_backend_ops.cpp: a one-node Plan on the CPU and on every device backend
// present, the device writing into memory of all-ones bytes (NaN), so an element the path does not
// write (or reads when beta is 0) shows. On the emulated device gemm_emulate (gemm_call's
// arguments through host loops with cuBLAS's column-major semantics) shows the argument mapping
// is right, not that cuBLAS or the device runs; on cuda:0 cuBLAS runs.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/backend/backend_ops.h"
#include "tests/gpu/cuda_test_util.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/cuda/elementwise.h"
#include "exec/cuda/gemm.h"
#include "exec/kernel.h"

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

using Attrs = std::map<std::string, Attr>;

// A one-node graph op(inputs in0..) -> y0; inputs of dtype t.
struct OneNode {
  Graph g;
  const Node& n() const { return g.nodes[0]; }
};

OpCase spec(Op op, const std::vector<Shape>& shapes, const Attrs& attrs, DType t = DType::f32) {
  OpCase c{.op = op, .attrs = attrs};
  for (size_t k = 0; k < shapes.size(); ++k) c.inputs.push_back(fed("in" + std::to_string(k), t, shapes[k]));
  return c;
}

OneNode one_node(Op op, const std::vector<Shape>& shapes, const Attrs& attrs, DType t = DType::f32) {
  return OneNode{one_node_graph(spec(op, shapes, attrs, t))};
}

double g_worst_fp32 = 0;  // the largest error of the cases compared since reset, in units of the fp32 bound

float decode(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::f16) return f16_to_f32(t.as<uint16_t>()[i]);
  if (t.dtype() == DType::bf16) return bf16_to_f32(t.as<uint16_t>()[i]);
  return t.as<float>()[i];
}

// |device - cpu| <= (2K + 8) u mag per element (+ 2^-10 mag with TF32, + one unit in the last
// place of a 16-bit type, relative to the CPU's value), mag the CPU kernel's result on the absolute
// inputs (in f32) and attributes; never NaN.
std::string gemm_compare(const Compared& m) {
  const OpCase& c = m.c;
  OpCase abs_case = spec(c.op, {}, c.attrs);
  for (auto& [name, a] : abs_case.attrs)
    if (float* f = std::get_if<float>(&a)) *f = std::abs(*f);
  std::map<std::string, Tensor> abs_feed;
  for (const CaseInput& in : c.inputs) {
    const Tensor& x = m.feed.at(in.name);
    Tensor a(DType::f32, x.shape());
    for (int64_t i = 0; i < a.numel(); ++i) a.as<float>()[i] = std::abs(decode(x, i));
    abs_case.inputs.push_back(fed(in.name, DType::f32, x.shape()));
    abs_feed[in.name] = std::move(a);
  }
  const Tensor mag = run_on_cpu(abs_case, abs_feed).at("y0");

  const Shape& a = c.inputs[0].shape;
  const auto transA = c.attrs.find("transA");
  const bool ta = transA != c.attrs.end() && std::get<int64_t>(transA->second);
  int64_t K;
  if (c.op == Op::MatMul) K = a.back();
  else if (c.op == Op::FusedMatMul) K = ta ? a[a.size() - 2] : a.back();
  else K = ta ? a[0] : a[1];
  const double fp32_tol = double(2 * K + 8) * std::ldexp(1.0, -24);
  const double tol = fp32_tol + (c.tf32 ? std::ldexp(1.0, -10) : 0.0);
  const DType t = m.cpu.dtype();
  const double ulp = t == DType::f16 ? std::ldexp(1.0, -10) : t == DType::bf16 ? std::ldexp(1.0, -7) : 0.0;
  // A 16-bit Gemm with a bias C of [N] (a Linear layer: cuBLASLt's bias epilogue): on the H200
  // (2026-12-04) the device's result was up to 3 units of the result off where the product and
  // the bias cancel (bf16 [33, 65] x [17, 65]^T + [17]: 0.0410 against the CPU's 0.0417), as if the
  // product were rounded to the 16-bit type before the bias is added. So this case allows that
  // second rounding too: one unit of the product, want - beta * C[j]. Not yet run on a GPU with
  // this bound.
  const Tensor* bias = ulp > 0 && c.op == Op::Gemm && c.inputs.size() == 3 && c.inputs[2].shape.size() == 1
                           ? &m.feed.at(c.inputs[2].name)
                           : nullptr;
  const auto beta_attr = c.attrs.find("beta");
  const double beta = beta_attr == c.attrs.end() ? 1.0 : std::get<float>(beta_attr->second);
  int64_t bad = 0;
  std::string why;
  for (int64_t i = 0; i < m.cpu.numel(); ++i) {
    const double want = decode(m.cpu, i), have = decode(m.dev, i), mg = mag.as<float>()[i];
    const double product = bias ? want - beta * decode(*bias, i % bias->numel()) : 0.0;
    const bool ok = !std::isnan(have) && std::abs(have - want) <= tol * mg + ulp * (std::abs(want) + std::abs(product));
    if (mg > 0 && t == DType::f32) g_worst_fp32 = std::max(g_worst_fp32, std::abs(have - want) / (fp32_tol * mg));
    if (!ok && bad++ < 3)
      why += " [" + std::to_string(i) + "] cpu " + std::to_string(want) + " device " + std::to_string(have);
  }
  return bad ? std::to_string(bad) + " of " + std::to_string(m.cpu.numel()) + " elements off:" + why : "";
}

// Inputs uniform in [-1, 1] (in the input's dtype).
Tensor uniform(const OpCase& c, size_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const CaseInput& in = c.inputs[k];
  Tensor x(in.dtype, in.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = u(rng);
    if (in.dtype == DType::f16) x.as<uint16_t>()[i] = f32_to_f16(v);
    else if (in.dtype == DType::bf16) x.as<uint16_t>()[i] = f32_to_bf16(v);
    else x.as<float>()[i] = v;
  }
  return x;
}

struct Case {
  Op op;
  std::vector<Shape> shapes;  // A, B and, for Gemm with C, C
  Attrs attrs = {};
};

// The harness case of c on dtype t.
OpCase op_case(const Case& c, DType t = DType::f32, bool tf32 = false) {
  OpCase o = spec(c.op, c.shapes, c.attrs, t);
  o.compare = gemm_compare;
  o.fill = uniform;
  o.poison_outputs = true;
  o.tf32 = tf32;
  return o;
}

Case matmul(Shape a, Shape b) { return Case{Op::MatMul, {std::move(a), std::move(b)}}; }

void matmul_2d(std::vector<OpCase>& cs) {
  for (int64_t m : {1, 7, 33, 65})
    for (int64_t k : {1, 7, 33, 65})
      for (int64_t nn : {1, 7, 33, 65}) cs.push_back(op_case(matmul({m, k}, {k, nn})));
  cs.push_back(op_case(matmul({130, 257}, {257, 129})));  // more than one tile every way
}

void matmul_batched(std::vector<OpCase>& cs) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      // N-D x 2-D: rows flattened into one GEMM
      {{2, 5, 33}, {33, 7}},
      {{3, 1, 7}, {7, 65}},
      {{2, 3, 7, 9}, {9, 5}},
      {{2, 3, 7, 9}, {1, 1, 9, 5}},  // B's batch dims all 1
      // equal batch dims: strided batched
      {{4, 7, 33}, {4, 33, 5}},
      {{2, 3, 7, 9}, {2, 3, 9, 5}},
      {{3, 7, 9}, {1, 3, 9, 5}},  // equal after dropping leading 1s
      {{8, 64, 96}, {8, 96, 80}},
      // one side's batch dims all 1: stride 0
      {{1, 7, 9}, {4, 9, 5}},
      {{7, 9}, {3, 9, 5}},
      {{1, 1, 7, 9}, {2, 3, 9, 5}},
      {{7, 65}, {2, 3, 65, 33}},
  };
  for (const auto& [a, b] : cases) cs.push_back(op_case(matmul(a, b)));
}

void matmul_vectors(std::vector<OpCase>& cs) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{9}, {9}},         {{65}, {65}},        {{9}, {9, 5}},       {{7, 9}, {9}},
      {{9}, {3, 9, 5}},   {{3, 7, 9}, {9}},    {{65}, {2, 65, 33}}, {{1}, {1, 7}},
  };
  for (const auto& [a, b] : cases) cs.push_back(op_case(matmul(a, b)));
}

void matmul_empty(std::vector<OpCase>& cs) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{0, 9}, {9, 5}},       {{7, 9}, {9, 0}},       {{7, 0}, {0, 5}},        // M, N, K = 0
      {{0, 7, 9}, {0, 9, 5}}, {{3, 7, 0}, {3, 0, 5}}, {{2, 0, 9}, {9, 5}},     // batch 0, K 0 batched
      {{0}, {0}},             {{0}, {0, 5}},          {{1, 7, 0}, {4, 0, 5}},  // 1-D K 0, broadcast K 0
  };
  for (const auto& [a, b] : cases) cs.push_back(op_case(matmul(a, b)));
}

// Gemm of op(A) [m, k] x op(B) [k, n] (A, B stored transposed when ta, tb); C of shape *c, none
// when c is null.
Case gemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha, float beta, const Shape* c) {
  Case cs{Op::Gemm, {ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}}};
  if (c) cs.shapes.push_back(*c);
  cs.attrs = {{"transA", Attr(int64_t(ta))}, {"transB", Attr(int64_t(tb))}, {"alpha", Attr(alpha)},
              {"beta", Attr(beta)}};
  return cs;
}

// The C shapes for [m, n]; the first entry (empty optional) is "no C".
std::vector<std::vector<Shape>> c_shapes(int64_t m, int64_t n) {
  return {{}, {Shape{}}, {Shape{1}}, {Shape{1, 1}}, {Shape{n}}, {Shape{1, n}}, {Shape{m, 1}}, {Shape{m, n}}};
}

void gemm_all(std::vector<OpCase>& cs) {
  struct Mnk {
    int64_t m, n, k;
  };
  for (Mnk d : {Mnk{7, 5, 33}, Mnk{1, 65, 1}, Mnk{33, 1, 7}, Mnk{65, 33, 65}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, -2.0f}, std::pair{-1.5f, 0.0f}})
          for (const auto& c : c_shapes(d.m, d.n))
            cs.push_back(op_case(gemm(d.m, d.n, d.k, ta, tb, alpha, beta, c.empty() ? nullptr : &c[0])));
  // alpha 0: beta * C; a larger product
  const Shape c_row{1, 7}, c_full{33, 7}, c_big{1, 129};
  cs.push_back(op_case(gemm(33, 7, 9, false, true, 0.0f, 0.25f, &c_row)));
  cs.push_back(op_case(gemm(33, 7, 9, true, false, 0.0f, 0.25f, &c_full)));
  cs.push_back(op_case(gemm(130, 129, 257, true, false, 1.0f, 1.0f, &c_big)));
}

void gemm_empty(std::vector<OpCase>& cs) {
  struct Mnk {
    int64_t m, n, k;
  };
  for (Mnk d : {Mnk{0, 5, 7}, Mnk{7, 0, 5}, Mnk{7, 5, 0}, Mnk{0, 0, 0}, Mnk{1, 33, 0}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.5f, 1.0f, 0.0f})
          for (const auto& c : c_shapes(d.m, d.n))
            cs.push_back(op_case(gemm(d.m, d.n, d.k, ta, tb, 2.0f, beta, c.empty() ? nullptr : &c[0])));
}

// FusedGemm (Gemm + Relu, one cuBLASLt call with the bias and Relu epilogues, RELU after a
// broadcast C, the elementwise Relu after a K = 0 fill) against the CPU's Gemm + Relu.
void fused_all(std::vector<OpCase>& cs) {
  struct Mnk {
    int64_t m, n, k;
  };
  for (Mnk d : {Mnk{7, 5, 33}, Mnk{33, 1, 7}, Mnk{65, 33, 65}, Mnk{7, 5, 0}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, -2.0f}})
          for (const auto& c : c_shapes(d.m, d.n)) {
            Case g = gemm(d.m, d.n, d.k, ta, tb, alpha, beta, c.empty() ? nullptr : &c[0]);
            g.op = Op::FusedGemm;
            cs.push_back(op_case(g));
          }
}

// FusedMatMul (MatMul with B [K, N] + bias [N] + Relu: the bias / Relu epilogues over A's rows as
// one GEMM; the broadcast bias and the elementwise Relu after a K = 0 fill) against the CPU's
// MatMul + Add + Relu.
void fused_matmul_all(std::vector<OpCase>& cs) {
  for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{
           {{7, 33}, {33, 5}}, {{2, 5, 33}, {33, 7}}, {{2, 3, 7, 9}, {9, 65}}, {{3, 1, 7}, {7, 1}}, {{4, 7, 0}, {0, 5}}})
    for (bool bias : {true, false})
      for (const char* act : {"", "Relu"}) {
        if (!bias && !*act) continue;  // that is a MatMul
        Case g{Op::FusedMatMul, {a, b}, {{"activation", Attr(std::string(act))}}};
        if (bias) g.shapes.push_back(Shape{b[1]});
        cs.push_back(op_case(g));
      }
  // Operands stored transposed (transA: A [.., K, M], transB: B [.., N, K]) as op T with their own
  // leading dims: batched both sides (attention's products and their gradients), one side
  // broadcast, B without batch (A's batches then cannot be one matrix's rows when transposed).
  for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{{2, 3, 33, 7}, {2, 3, 33, 9}},
                                                                 {{33, 7}, {2, 3, 33, 9}},
                                                                 {{1, 33, 7}, {3, 33, 9}},
                                                                 {{2, 3, 33, 7}, {33, 9}},
                                                                 {{1, 7}, {1, 5}}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (bool bias : {false, true}) {
          // a and b are written for transA = 1, transB = 0 ([.., K, M] and [.., K, N]).
          Shape as = a, bs = b;
          if (!ta) std::swap(as[as.size() - 1], as[as.size() - 2]);
          if (tb) std::swap(bs[bs.size() - 1], bs[bs.size() - 2]);
          // alpha (a folded scale, graph/passes/fold_scales.h) on half of them: the product's, not the bias's.
          Case g{Op::FusedMatMul,
                 {as, bs},
                 {{"transA", Attr(int64_t(ta))}, {"transB", Attr(int64_t(tb))}, {"alpha", Attr(ta == tb ? 1.0f : -0.75f)}}};
          if (bias) g.shapes.push_back(Shape{b.back()});
          cs.push_back(op_case(g));
        }
}

// MatMul / Gemm on f16 and bf16 (cublasGemmEx, fp32 sums, one rounding) against the CPU kernel
// (float sums, one rounding): the float sums differ by the fp32 bound, so the results agree
// within that plus one unit in the last place of the 16-bit type (and, with a bias, a second
// rounding: gemm_compare).
void half_cases(std::vector<OpCase>& cs) {
  for (DType t : {DType::f16, DType::bf16})
    for (const Case& c : {matmul({33, 65}, {65, 17}), matmul({3, 7, 33}, {3, 33, 9}), matmul({7, 65}, {2, 65, 5}),
                          Case{Op::Gemm, {{65, 33}, {17, 65}, {17}}, {{"transA", Attr(int64_t(1))}, {"transB", Attr(int64_t(1))},
                                                                      {"alpha", Attr(0.5f)}, {"beta", Attr(2.0f)}}},
                          Case{Op::Gemm, {{33, 65}, {17, 65}, {17}}, {{"transB", Attr(int64_t(1))}}}})  // a Linear: bias epilogue
      cs.push_back(op_case(c, t));
}

std::vector<OpCase> gemm_cases() {
  std::vector<OpCase> cs;
  for (auto add : {matmul_2d, matmul_batched, matmul_vectors, matmul_empty, gemm_all, gemm_empty, fused_all,
                   fused_matmul_all, half_cases})
    add(cs);
  return cs;
}

const bool registered = register_cases("gemm", gemm_cases);

// TF32 on the larger cases of each kind: each within the TF32 bound, and beyond the fp32 one on
// some (TF32 in effect). CUBLAS_COMPUTE_32F_FAST_TF32 lets cuBLAS use TF32, it does not make it:
// on an H200 it kept fp32 for the small batched product (2026-12-04, worst 0.008 of the fp32 bound).
int tf32_cases(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  g_worst_fp32 = 0;
  int n = 0;
  for (const Case& c : {matmul({65, 130}, {130, 33}), matmul({4, 7, 65}, {4, 65, 9}),
                        Case{Op::Gemm, {{65, 33}, {17, 65}, {17}}, {{"transA", Attr(int64_t(1))}, {"transB", Attr(int64_t(1))},
                                                                    {"alpha", Attr(0.5f)}, {"beta", Attr(2.0f)}}}})
    n += run_case(op_case(c, DType::f32, true), dev, kind == DeviceKind::cuda) == Outcome::match;
  CHECK(g_worst_fp32 > 1.0);  // the inputs were rounded
  return n;
}

}  // namespace

TEST_SUITE("cuda") {

// The argument mapping itself, on cases whose cuBLAS arguments are worked out by hand.
TEST_CASE("cuda gemm: gemm_call maps row-major MatMul / Gemm to column-major cuBLAS arguments") {
  auto call = [](Op op, std::vector<Shape> shapes, Attrs attrs = {}) {
    OneNode o = one_node(op, shapes, attrs);
    const DType f = DType::f32;
    return cuda::gemm_call(o.n(), f, shapes[0], f, shapes[1], shapes.size() > 2 ? &f : nullptr,
                           shapes.size() > 2 ? &shapes[2] : nullptr);
  };
  using K = cuda::GemmCall::Kind;

  // [2, 5, 33] x [33, 7]: Yᵀ [7, 10] = Bᵀ [7, 33] Aᵀ [33, 10], one GEMM.
  cuda::GemmCall c = call(Op::MatMul, {{2, 5, 33}, {33, 7}});
  REQUIRE(c.ok);
  CHECK(c.kind == K::gemm);
  CHECK(c.batch_count == 1);
  CHECK((c.m == 7 && c.n == 10 && c.k == 33));
  CHECK((c.lda == 7 && c.ldb == 33 && c.ldc == 7));
  CHECK((!c.trans_a && !c.trans_b && c.alpha == 1 && c.beta == 0 && !c.broadcast_c));
  CHECK((c.y_rows == 10 && c.y_cols == 7));

  // A's batch 1 against B's batch 4: strided batched, A (cuBLAS's B) with stride 0.
  c = call(Op::MatMul, {{1, 7, 9}, {4, 9, 5}});
  REQUIRE(c.ok);
  CHECK(c.batch_count == 4);
  CHECK((c.m == 5 && c.n == 7 && c.k == 9));
  CHECK((c.stride_a == 45 && c.stride_b == 0 && c.stride_c == 35));

  // Equal batch dims: both strided.
  c = call(Op::MatMul, {{2, 3, 7, 9}, {2, 3, 9, 5}});
  REQUIRE(c.ok);
  CHECK(c.batch_count == 6);
  CHECK((c.stride_a == 45 && c.stride_b == 63 && c.stride_c == 35));

  // 1-D B: [K] is [K, 1], so N = 1 and every ld is at least 1.
  c = call(Op::MatMul, {{3, 7, 9}, {9}});
  REQUIRE(c.ok);
  CHECK((c.batch_count == 1 && c.m == 1 && c.n == 21 && c.k == 9 && c.lda == 1 && c.ldb == 9 && c.ldc == 1));

  // K = 0: zeros, no GEMM. M = 0: nothing.
  CHECK(call(Op::MatMul, {{7, 0}, {0, 5}}).kind == K::fill);
  CHECK(call(Op::MatMul, {{0, 9}, {9, 5}}).kind == K::nothing);

  // Gemm transA, transB: A [9, 7], B [5, 9] -> Y [7, 5]; cuBLAS's A = B stored [5, 9] (ld 9, op T),
  // its B = A stored [9, 7] (ld 7, op T).
  c = call(Op::Gemm, {{9, 7}, {5, 9}}, {{"transA", Attr(int64_t(1))}, {"transB", Attr(int64_t(1))}});
  REQUIRE(c.ok);
  CHECK((c.trans_a && c.trans_b && c.m == 5 && c.n == 7 && c.k == 9));
  CHECK((c.lda == 9 && c.ldb == 7 && c.ldc == 5));

  // transA only: A [9, 7] (ld 7, op T), B [9, 5] (ld 5, op N).
  c = call(Op::Gemm, {{9, 7}, {9, 5}}, {{"transA", Attr(int64_t(1))}});
  REQUIRE(c.ok);
  CHECK((!c.trans_a && c.trans_b && c.lda == 5 && c.ldb == 7));

  // C [N]: broadcast down the rows; [M, 1]: along each row; [M, N]: as is; scalar: everywhere.
  c = call(Op::Gemm, {{7, 9}, {9, 5}, {5}}, {{"alpha", Attr(0.5f)}, {"beta", Attr(2.0f)}});
  REQUIRE(c.ok);
  CHECK((c.broadcast_c && c.c_row_stride == 0 && c.c_col_stride == 1 && c.alpha == 0.5f && c.beta == 2.0f));
  c = call(Op::Gemm, {{7, 9}, {9, 5}, {7, 1}});
  CHECK((c.broadcast_c && c.c_row_stride == 1 && c.c_col_stride == 0 && c.beta == 1.0f));
  c = call(Op::Gemm, {{7, 9}, {9, 5}, {7, 5}});
  CHECK((c.broadcast_c && c.c_row_stride == 5 && c.c_col_stride == 1));
  c = call(Op::Gemm, {{7, 9}, {9, 5}, {}});
  CHECK((c.broadcast_c && c.c_row_stride == 0 && c.c_col_stride == 0));
  // A bias ([N] or [1, N] with beta 1): cuBLASLt's bias epilogue, no broadcast copy, beta 0; C of
  // other shapes, or another beta, keep the copy.
  for (const Shape& bias : {Shape{5}, Shape{1, 5}}) {
    c = call(Op::Gemm, {{7, 9}, {5, 9}, bias}, {{"transB", Attr(int64_t(1))}, {"alpha", Attr(0.5f)}});
    CHECK((c.ok && c.epilogue == cuda::GemmCall::Epilogue::bias && !c.broadcast_c && c.beta == 0 && c.alpha == 0.5f));
  }
  c = call(Op::Gemm, {{7, 9}, {9, 1}, {}});  // N = 1: a scalar C is the bias of the one column
  CHECK((c.ok && c.epilogue == cuda::GemmCall::Epilogue::bias && !c.broadcast_c));
  for (const Shape& other : {Shape{7, 1}, Shape{7, 5}, Shape{}}) {
    c = call(Op::Gemm, {{7, 9}, {9, 5}, other});
    CHECK((c.ok && c.epilogue == cuda::GemmCall::Epilogue::none && c.broadcast_c && c.beta == 1));
  }
  c = call(Op::Gemm, {{7, 9}, {9, 5}, {5}}, {{"beta", Attr(0.5f)}});
  CHECK((c.ok && c.epilogue == cuda::GemmCall::Epilogue::none && c.broadcast_c));
  // FusedGemm: the Relu flag on top of what Gemm's call would be.
  c = call(Op::FusedGemm, {{7, 9}, {5, 9}, {5}}, {{"transB", Attr(int64_t(1))}});
  CHECK((c.ok && c.relu && c.epilogue == cuda::GemmCall::Epilogue::bias && !c.broadcast_c));
  c = call(Op::FusedGemm, {{7, 9}, {9, 5}, {7, 5}}, {{"beta", Attr(0.5f)}});
  CHECK((c.ok && c.relu && c.epilogue == cuda::GemmCall::Epilogue::none && c.broadcast_c && c.beta == 0.5f));
  c = call(Op::Gemm, {{7, 9}, {9, 5}});
  CHECK((c.ok && !c.relu));
  // FusedMatMul: A's rows one GEMM, the bias [N] as the epilogue.
  c = call(Op::FusedMatMul, {{2, 5, 9}, {9, 7}, {7}}, {{"activation", Attr(std::string("Relu"))}});
  CHECK((c.ok && c.relu && c.epilogue == cuda::GemmCall::Epilogue::bias && c.m == 7 && c.n == 10 && c.k == 9));
  c = call(Op::FusedMatMul, {{2, 5, 9}, {2, 7, 9}}, {{"transB", Attr(int64_t(1))}, {"alpha", Attr(0.25f)}});
  CHECK((c.ok && c.alpha == 0.25f && c.beta == 0));
  c = call(Op::Gemm, {{7, 0}, {0, 5}, {5}});  // K = 0 is a fill, never an epilogue
  CHECK((c.ok && c.kind == K::fill && c.epilogue == cuda::GemmCall::Epilogue::none && c.broadcast_c));
  // beta 0, or no C: Y is overwritten.
  c = call(Op::Gemm, {{7, 9}, {9, 5}, {7, 5}}, {{"beta", Attr(0.0f)}});
  CHECK((c.ok && !c.broadcast_c && c.beta == 0));
  c = call(Op::Gemm, {{7, 9}, {9, 5}});
  CHECK((c.ok && !c.broadcast_c && c.beta == 0));
  // K = 0 with C: beta * C.
  c = call(Op::Gemm, {{7, 0}, {0, 5}, {5}}, {{"beta", Attr(0.5f)}});
  CHECK((c.ok && c.kind == K::fill && c.broadcast_c && c.beta == 0.5f));
}

// What gemm_runs refuses, the caller runs on the CPU kernel.
TEST_CASE("cuda gemm: gemm_runs refuses dtypes other than f32 / f16 / bf16, K = 0 and FusedGemm on 16-bit floats, and batch broadcasting in both directions") {
  for (DType t : {DType::f16, DType::bf16}) {
    INFO(dtype_name(t));
    OneNode mm = one_node(Op::MatMul, {{2, 3, 4}, {4, 5}}, {}, t);
    CHECK(cuda::gemm_runs(mm.g, mm.n()));
    OneNode k0 = one_node(Op::MatMul, {{3, 0}, {0, 5}}, {}, t);
    CHECK_FALSE(cuda::gemm_runs(k0.g, k0.n()));
    OneNode fused = one_node(Op::FusedGemm, {{3, 4}, {4, 5}, {5}}, {}, t);  // its Relu is float32's
    CHECK_FALSE(cuda::gemm_runs(fused.g, fused.n()));
  }
  for (DType t : {DType::f64, DType::i32, DType::i64}) {
    INFO(dtype_name(t));
    OneNode mm = one_node(Op::MatMul, {{3, 4}, {4, 5}}, {}, t);
    CHECK_FALSE(cuda::gemm_runs(mm.g, mm.n()));
    OneNode ge = one_node(Op::Gemm, {{3, 4}, {4, 5}, {5}}, {}, t);
    CHECK_FALSE(cuda::gemm_runs(ge.g, ge.n()));
  }
  const std::vector<std::pair<Shape, Shape>> mixed = {
      {{2, 1, 7, 9}, {1, 3, 9, 5}}, {{1, 3, 7, 9}, {2, 3, 9, 5}}, {{2, 3, 7, 9}, {2, 1, 9, 5}}};
  for (const auto& [a, b] : mixed) {
    INFO(shape_str(a) << " x " << shape_str(b));
    OneNode o = one_node(Op::MatMul, {a, b}, {});
    CHECK_FALSE(cuda::gemm_runs(o.g, o.n()));
    // Running it anyway is an error naming the node, not a wrong answer.
    Tensor ta(DType::f32, a), tb(DType::f32, b), y(DType::f32, o.g.value(o.n().outputs[0]).shape);
    const std::vector<TensorRef> ins{{ta.data(), DType::f32, &ta.shape(), ta.numel()},
                                     {tb.data(), DType::f32, &tb.shape(), tb.numel()}};
    CHECK_THROWS_WITH_AS(cuda::gemm_emulate(o.n(), ins, TensorRef{y.data(), DType::f32, &y.shape(), y.numel()}),
                         doctest::Contains("no cuBLAS kernel"), Error);
  }
  // Other ops are not this kernel's.
  OneNode add = one_node(Op::Add, {{3}, {3}}, {});
  CHECK_FALSE(cuda::gemm_runs(add.g, add.n()));
  // What it takes: f32 MatMul and Gemm.
  OneNode mm = one_node(Op::MatMul, {{2, 3, 4}, {4, 5}}, {});
  CHECK(cuda::gemm_runs(mm.g, mm.n()));
  OneNode ge = one_node(Op::Gemm, {{3, 4}, {4, 5}, {1, 5}}, {});
  CHECK(cuda::gemm_runs(ge.g, ge.n()));
  OneNode fused = one_node(Op::FusedGemm, {{3, 4}, {4, 5}, {1, 5}}, {});
  CHECK(cuda::gemm_runs(fused.g, fused.n()));
}

TEST_CASE("cuda gemm: to_tf32 keeps 10 mantissa bits, to nearest with ties away from zero") {
  const float one = 1.0f, ulp10 = std::ldexp(1.0f, -10);
  CHECK(cuda::to_tf32(one) == one);
  CHECK(cuda::to_tf32(one + std::ldexp(1.0f, -12)) == one);           // below half: down
  CHECK(cuda::to_tf32(one + std::ldexp(1.0f, -11)) == one + ulp10);   // a tie: away from zero
  CHECK(cuda::to_tf32(-(one + std::ldexp(1.0f, -11))) == -(one + ulp10));
  CHECK(cuda::to_tf32(one + 3 * std::ldexp(1.0f, -12)) == one + ulp10);
  CHECK(cuda::to_tf32(3.0f) == 3.0f);
  CHECK(std::isinf(cuda::to_tf32(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(cuda::to_tf32(std::numeric_limits<float>::quiet_NaN())));
}

// (TF32 is "tensor float" in the count lines: tests/gpu/run-all.sh adds up lines of letters.)
TEST_CASE("cuda gemm (emulated): TF32 products within 2^-10 of the CPU's fp32, not fp32-exact") {
  MESSAGE("cuda gemm tensor float emulated: " << tf32_cases(DeviceKind::cuda_emulated) << " cases match the CPU kernels");
}

}  // TEST_SUITE("cuda")

// cuBLAS on the GPU; without one the case says "no GPU: <reason>" and returns.
TEST_SUITE("gpu") {

TEST_CASE("cuda gemm on GPU: TF32 products within 2^-10 of the CPU's fp32, not fp32-exact") {
  if (!have_gpu()) return;
  MESSAGE("cuda gemm tensor float on GPU: " << tf32_cases(DeviceKind::cuda) << " cases match the CPU kernels");
}

}  // TEST_SUITE("gpu")

#endif  // ONNXDP_HAVE_CUDA
