// Where a step's time goes: per op, the kernels' wall time, calls, and for the GEMM-shaped ops
// (MatMul, Gemm, Conv and its gradients) the floating-point work, so the achieved GFLOP/s can be
// set against what BLAS alone reaches on this machine (`onnxdp train --profile`).
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "exec/kernel.h"

namespace onnxdp {

struct OpProfile {
  double seconds = 0;
  // The calling thread's CPU time, where every call of the op ran its kernel on that one thread
  // (one thread per replica): GFLOP/s from it leave out the time another process had the core,
  // which wall time under load counts. < 0: not measured (several threads).
  double cpu_seconds = 0;
  int64_t calls = 0;
  double flops = 0;  // multiply-adds x 2, for the GEMM-shaped ops; 0 for the others
};

struct Profile {
  std::map<Op, OpProfile> ops;
  // The GEMM-shaped ops again, per shape they ran with ("Gemm m1024 n256 k1024 NT +bias",
  // "FusedMatMul 64x m128 n128 k32 NT": batch count, C's rows and columns, the reduction, which
  // operand is stored transposed): where a product runs slower than BLAS alone, and which one.
  std::map<std::string, OpProfile> shapes;
  int64_t runs = 0;  // plan executions (forward/backward passes) recorded
  double after_run_seconds = 0;  // PlanOptions::after_run's work (the fused optimizer on a device)

  // One kernel call of node n (its inputs and outputs as the kernel saw them) that took `seconds`
  // of wall time and `cpu_seconds` of this thread's CPU time (< 0: the kernel used several threads).
  void add(const Node& n, const KernelCtx& c, double seconds, double cpu_seconds = -1);
  // A table of the ops by time, per optimizer step (`steps` of them recorded), heaviest first.
  std::string table(int64_t steps, int max_rows = 15) const;
  // The same for `shapes`: the heaviest shapes first, with their GFLOP/s.
  std::string shape_table(int64_t steps, int max_rows = 40) const;
};

// GFLOP/s of one single-precision GEMM of n x n x n through blas_gemm (split among this thread's
// team, as the kernels' products are), the best of a few runs: the ceiling the
// GEMM-shaped ops of a step can be held against. With one thread timed by this thread's CPU time,
// as the ops' GFLOP/s then are.
double blas_sgemm_gflops(int n = 512);

// This thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();

}  // namespace onnxdp
