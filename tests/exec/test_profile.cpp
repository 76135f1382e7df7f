// The --profile bookkeeping: every kernel call counted, and the GEMM-shaped ops' floating-point
// work taken from the shapes they ran with (2 x M x N x K for a matrix product).
#include <doctest/doctest.h>

#include "exec/plan.h"
#include "exec/profile.h"
#include "tests/graph/graph_test_util.h"
#include "tests/test_util.h"

using namespace onnxdp;

TEST_CASE("profile: calls, time and the flops of MatMul and Gemm") {
  Graph g;
  auto input = [&](const char* name, Shape s) { return test::add_input(g, name, std::move(s)); };
  ValueId a = input("a", {3, 5, 7}), b = input("b", {7, 4}), c = input("c", {6, 7});
  int mm = g.add_node(Op::MatMul, "mm", {a, b}, {"y"});                                      // [3,5,4], K 7
  int gm = g.add_node(Op::Gemm, "gm", {c, b}, {"z"}, {{"transA", Attr(int64_t(0))}});         // [6,4], K 7
  int ad = g.add_node(Op::Add, "add", {g.nodes[size_t(gm)].outputs[0], g.nodes[size_t(gm)].outputs[0]}, {"w"});
  g.outputs = {g.nodes[size_t(mm)].outputs[0], g.nodes[size_t(ad)].outputs[0]};
  Plan p(g);
  Tensor ta(DType::f32, {3, 5, 7}), tb(DType::f32, {7, 4}), tc(DType::f32, {6, 7});
  Profile prof;
  RunState rs;
  rs.profile = &prof;
  for (int r = 0; r < 3; ++r) p.execute({{"a", ta}, {"b", tb}, {"c", tc}}, rs);
  CHECK(prof.runs == 3);
  REQUIRE(prof.ops.count(Op::MatMul));
  CHECK(prof.ops.at(Op::MatMul).calls == 3);
  CHECK(prof.ops.at(Op::MatMul).flops == doctest::Approx(3 * 2.0 * (3 * 5 * 4) * 7));
  CHECK(prof.ops.at(Op::Gemm).flops == doctest::Approx(3 * 2.0 * (6 * 4) * 7));
  CHECK(prof.ops.at(Op::Add).flops == 0);
  CHECK(prof.ops.at(Op::Add).calls == 3);
  const std::string t = prof.table(3);
  CHECK(test::contains(t, "MatMul"));
  CHECK(test::contains(t, "kernels in all"));
  // GFLOP/s from the thread's CPU time where every call had it (one thread: the time another
  // process held the core is not the kernel's), from wall time once a call had none.
  {
    Profile q;
    KernelCtx ctx{g.nodes[size_t(mm)], {}, {}, rs};
    std::vector<Shape> shapes = {{3, 5, 7}, {7, 4}, {3, 5, 4}};
    ctx.inputs = {TensorRef{ta.data(), DType::f32, &shapes[0], 105}, TensorRef{tb.data(), DType::f32, &shapes[1], 28}};
    Tensor y(DType::f32, {3, 5, 4});
    ctx.outputs = {TensorRef{y.data(), DType::f32, &shapes[2], 60}};
    q.add(g.nodes[size_t(mm)], ctx, 4e-6, 1e-6);  // 840 flops: 840 MFLOP/s by wall, 0.84 GFLOP/s by CPU
    CHECK(test::contains(q.table(1), "GFLOP/s*"));
    CHECK(test::contains(q.table(1), "0.8\n"));
    CHECK(test::contains(q.table(1), "from the thread's CPU time"));
    q.add(g.nodes[size_t(mm)], ctx, 4e-6, -1);  // a call on several threads: wall time for the op
    CHECK(q.ops.at(Op::MatMul).cpu_seconds < 0);
    CHECK(test::contains(q.table(1), "0.2\n"));  // 1680 flops in 8 us
    CHECK(!test::contains(q.table(1), "GFLOP/s*"));
  }
  // Per shape: the same calls again, keyed by the product they ran.
  CHECK(prof.shapes.size() == 2);
  CHECK(prof.shapes.at("MatMul 3x m5 n4 k7 NN").calls == 3);
  CHECK(prof.shapes.at("Gemm m6 n4 k7 NN").flops == doctest::Approx(3 * 2.0 * (6 * 4) * 7));
  CHECK(test::contains(prof.shape_table(3), "MatMul 3x m5 n4 k7 NN"));
  CHECK(test::contains(prof.shape_table(3), "GEMM-shaped ops in all"));
  // No profile pointer: nothing recorded.
  p.execute({{"a", ta}, {"b", tb}, {"c", tc}}, {});
  CHECK(prof.runs == 3);
  CHECK(blas_sgemm_gflops(64) > 0);
}

TEST_CASE("profile: a FusedMatMul reading A transposed reduces over A's rows") {
  Graph g;
  auto input = [&](const char* name, Shape s) { return test::add_input(g, name, std::move(s)); };
  // A stored [K 7, M 5], B [K 7, N 4], bias [4]: Y [5, 4] = Aᵀ B + bias, 2 x 5 x 4 x 7 flops.
  ValueId a = input("a", {7, 5}), b = input("b", {7, 4}), bias = input("bias", {4});
  int mm = g.add_node(Op::FusedMatMul, "fmm", {a, b, bias}, {"y"}, {{"transA", Attr(int64_t(1))}});
  g.outputs = {g.nodes[size_t(mm)].outputs[0]};
  Plan p(g);
  Tensor ta(DType::f32, {7, 5}), tb(DType::f32, {7, 4}), tbias(DType::f32, {4});
  Profile prof;
  RunState rs;
  rs.profile = &prof;
  p.execute({{"a", ta}, {"b", tb}, {"bias", tbias}}, rs);
  CHECK(prof.ops.at(Op::FusedMatMul).flops == doctest::Approx(2.0 * 5 * 4 * 7));
  REQUIRE(prof.shapes.size() == 1);
  CHECK(prof.shapes.begin()->first == "FusedMatMul m5 n4 k7 TN +bias");
}

TEST_CASE("cli: train --profile prints where a step's time goes and BLAS's own GEMM rate") {
  test::TempDir tmp;
  test::CliResult r = test::onnxdp_cli(tmp, "train " + test::q(std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/model.onnx") +
                                                " --steps 4 --profile --output-dir " + test::q(tmp.file("o")));
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(test::contains(r.out, "profile of replica 0 over steps 2..4"));
  CHECK(test::contains(r.out, "Gemm"));
  CHECK(test::contains(r.out, "optimizer (fused, flat)"));
  CHECK(test::contains(r.out, "GEMM-shaped op by shape"));
  CHECK(test::contains(r.out, "BLAS alone on this machine:"));
}
