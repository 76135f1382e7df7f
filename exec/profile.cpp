#include "exec/profile.h"

#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "exec/cpu/blas.h"
#include "exec/cpu/threads.h"

namespace onnxdp {

namespace {
int64_t numel_of(const TensorRef& t) { return t.present() ? t.numel : 0; }

// 2 x multiply-adds of the GEMM-shaped ops, from the shapes the kernel ran with.
double gemm_flops(const Node& n, const KernelCtx& c) {
  switch (n.op) {
    case Op::MatMul:
    case Op::FusedMatMul: {  // out [..., M, N], reduction dim K = last dim of a
      const TensorRef& a = c.in(0);
      const int64_t k = a.rank() >= 1 ? a.dim(a.rank() - 1) : 1;
      return 2.0 * double(numel_of(c.out(0))) * double(k);
    }
    case Op::Gemm:
    case Op::FusedGemm: {  // out [M, N], K from A (transA swaps it)
      const TensorRef& a = c.in(0);
      const int64_t k = n.i("transA") ? a.dim(0) : a.dim(1);
      return 2.0 * double(numel_of(c.out(0))) * double(k);
    }
    case Op::Conv: {  // each output element: C/group x kernel multiply-adds
      const TensorRef& w = c.in(1);
      return 2.0 * double(numel_of(c.out(0))) * double(w.numel / w.dim(0));
    }
    case Op::ConvTranspose: {  // each input element: W's M/group x kernel multiply-adds (Conv's input gradient)
      const TensorRef& w = c.in(1);
      return 2.0 * double(numel_of(c.in(0))) * double(w.numel / w.dim(0));
    }
    case Op::ConvGradFilter: {  // dW [M, C/g, k...]: each element sums over N x output positions
      const TensorRef& dy = c.in(1);
      const double positions = double(dy.numel) / double(dy.dim(1));
      return 2.0 * double(numel_of(c.out(0))) * positions;
    }
    default:
      return 0;
  }
}
}  // namespace

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void Profile::add(const Node& n, const KernelCtx& c, double seconds, double cpu_seconds) {
  OpProfile& p = ops[n.op];
  p.seconds += seconds;
  // Once a call was not timed on one thread, the op's CPU time says nothing: it stays < 0.
  p.cpu_seconds = cpu_seconds < 0 || p.cpu_seconds < 0 ? -1.0 : p.cpu_seconds + cpu_seconds;
  p.calls += 1;
  p.flops += gemm_flops(n, c);
}

std::string Profile::table(int64_t steps, int max_rows) const {
  std::vector<std::pair<Op, OpProfile>> rows(ops.begin(), ops.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [op, p] : rows) total += p.seconds;
  const double per = 1.0 / double(std::max<int64_t>(1, steps));
  bool by_cpu = false;  // some op's GFLOP/s come from CPU time: the table says so
  for (const auto& [op, p] : rows) by_cpu = by_cpu || (p.flops > 0 && p.cpu_seconds > 0);
  std::string s = fmt::format("  {:<28} {:>10} {:>7} {:>10} {:>9}\n", "op", "ms/step", "%", "calls/step",
                              by_cpu ? "GFLOP/s*" : "GFLOP/s");
  int shown = 0;
  double rest = 0;
  for (const auto& [op, p] : rows) {
    if (shown++ >= max_rows) {
      rest += p.seconds;
      continue;
    }
    const double timed = p.cpu_seconds > 0 ? p.cpu_seconds : p.seconds;
    s += fmt::format("  {:<28} {:>10.3f} {:>6.1f}% {:>10.1f} {:>9}\n", op_name(op), 1e3 * p.seconds * per,
                     total > 0 ? 100 * p.seconds / total : 0.0, double(p.calls) * per,
                     p.flops > 0 && timed > 0 ? fmt::format("{:.1f}", p.flops / timed * 1e-9) : std::string());
  }
  if (rest > 0) s += fmt::format("  {:<28} {:>10.3f} {:>6.1f}%\n", "(other ops)", 1e3 * rest * per, 100 * rest / total);
  s += fmt::format("  {:<28} {:>10.3f}\n", "kernels in all", 1e3 * total * per);
  if (by_cpu) s += "  (* from the thread's CPU time: one thread per replica, time others had the core left out)\n";
  return s;
}

double blas_sgemm_gflops(int n) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n, 0.f);
  double best = 0;
  const bool by_cpu = cpu_threads() == 1;  // as the ops' figures are
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    blas_gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    double s = by_cpu ? thread_cpu_seconds() - c0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * double(n) * n * n / s * 1e-9);
  }
  return best;
}

}  // namespace onnxdp
