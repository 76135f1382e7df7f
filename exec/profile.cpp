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

// A matrix product's dimensions as the kernel ran it: C [batch x] m x n, reduction k, and whether A
// and B were read transposed (FusedMatMul's transA / transB, Gemm's).
struct ProductDims {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool ta = false, tb = false, bias = false;
};

bool product_dims(const Node& n, const KernelCtx& c, ProductDims& d) {
  const bool matmul = n.op == Op::MatMul || n.op == Op::FusedMatMul;
  if (!matmul && n.op != Op::Gemm && n.op != Op::FusedGemm) return false;
  const TensorRef &a = c.in(0), &y = c.out(0);
  if (!a.present() || !y.present() || a.rank() < 1) return false;
  d.ta = n.op != Op::MatMul && n.i("transA") != 0;  // MatMul has no transA / transB
  d.tb = n.op != Op::MatMul && n.i("transB") != 0;
  d.bias = c.inputs.size() > 2 && c.in(2).present();
  if (a.rank() == 1) {
    d.k = a.dim(0);
  } else {
    d.k = d.ta ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
    d.m = d.ta ? a.dim(a.rank() - 1) : a.dim(a.rank() - 2);
  }
  if (!matmul) {
    d.n = y.dim(1);
    return true;
  }
  // MatMul's rank-1 B drops n from the output; its rank-1 A drops m.
  const TensorRef& b = c.in(1);
  d.n = b.rank() >= 2 ? (d.tb ? b.dim(b.rank() - 2) : b.dim(b.rank() - 1)) : 1;
  const int64_t mn = d.m * d.n;
  d.batch = mn > 0 ? y.numel / mn : 0;
  return true;
}

// 2 x multiply-adds of the GEMM-shaped ops, from the shapes the kernel ran with.
double gemm_flops(const Node& n, const KernelCtx& c) {
  ProductDims d;
  if (product_dims(n, c, d)) return 2.0 * double(numel_of(c.out(0))) * double(d.k);
  switch (n.op) {
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

std::string dims_text(const TensorRef& t) {
  std::string s = "[";
  for (int i = 0; i < t.rank(); ++i) s += (i ? "," : "") + std::to_string(t.dim(i));
  return s + "]";
}

// The key of one call in Profile::shapes; empty for the ops that have no GEMM shape.
std::string shape_key(const Node& n, const KernelCtx& c) {
  ProductDims d;
  if (product_dims(n, c, d))
    return fmt::format("{} {}m{} n{} k{} {}{}{}", op_name(n.op), d.batch > 1 ? fmt::format("{}x ", d.batch) : "", d.m,
                       d.n, d.k, d.ta ? 'T' : 'N', d.tb ? 'T' : 'N', d.bias ? " +bias" : "");
  if (n.op == Op::Conv || n.op == Op::ConvTranspose || n.op == Op::ConvGradFilter) {
    const TensorRef& x = n.op == Op::ConvGradFilter ? c.in(0) : c.out(0);
    const TensorRef& w = n.op == Op::ConvGradFilter ? c.out(0) : c.in(1);
    if (!x.present() || !w.present()) return {};
    return fmt::format("{} {} w{}", op_name(n.op), dims_text(n.op == Op::Conv ? c.in(0) : x), dims_text(w));
  }
  return {};
}

void add_call(OpProfile& p, double seconds, double cpu_seconds, double flops) {
  p.seconds += seconds;
  // Once a call was not timed on one thread, the op's CPU time says nothing: it stays < 0.
  p.cpu_seconds = cpu_seconds < 0 || p.cpu_seconds < 0 ? -1.0 : p.cpu_seconds + cpu_seconds;
  p.calls += 1;
  p.flops += flops;
}

// Rows of `rows` heaviest first: name, ms/step, share, calls/step, GFLOP/s.
template <class Key>
std::string rows_table(std::vector<std::pair<Key, OpProfile>> rows, int64_t steps, int max_rows, int width,
                       const char* head, const char* rest_label, const char* total_label,
                       std::string (*name)(const Key&)) {
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [op, p] : rows) total += p.seconds;
  const double per = 1.0 / double(std::max<int64_t>(1, steps));
  bool by_cpu = false;  // some row's GFLOP/s come from CPU time: the table says so
  for (const auto& [op, p] : rows) by_cpu = by_cpu || (p.flops > 0 && p.cpu_seconds > 0);
  std::string s = fmt::format("  {:<{}} {:>10} {:>7} {:>10} {:>9}\n", head, width, "ms/step", "%", "calls/step",
                              by_cpu ? "GFLOP/s*" : "GFLOP/s");
  int shown = 0;
  double rest = 0;
  for (const auto& [key, p] : rows) {
    if (shown++ >= max_rows) {
      rest += p.seconds;
      continue;
    }
    const double timed = p.cpu_seconds > 0 ? p.cpu_seconds : p.seconds;
    s += fmt::format("  {:<{}} {:>10.3f} {:>6.1f}% {:>10.1f} {:>9}\n", name(key), width, 1e3 * p.seconds * per,
                     total > 0 ? 100 * p.seconds / total : 0.0, double(p.calls) * per,
                     p.flops > 0 && timed > 0 ? fmt::format("{:.1f}", p.flops / timed * 1e-9) : std::string());
  }
  if (rest > 0) s += fmt::format("  {:<{}} {:>10.3f} {:>6.1f}%\n", rest_label, width, 1e3 * rest * per, 100 * rest / total);
  s += fmt::format("  {:<{}} {:>10.3f}\n", total_label, width, 1e3 * total * per);
  if (by_cpu) s += "  (* from the thread's CPU time: one thread per replica, time others had the core left out)\n";
  return s;
}
}  // namespace

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void Profile::add(const Node& n, const KernelCtx& c, double seconds, double cpu_seconds) {
  const double flops = gemm_flops(n, c);
  add_call(ops[n.op], seconds, cpu_seconds, flops);
  if (flops > 0) {
    std::string key = shape_key(n, c);
    if (!key.empty()) add_call(shapes[key], seconds, cpu_seconds, flops);
  }
}

std::string Profile::table(int64_t steps, int max_rows) const {
  return rows_table<Op>({ops.begin(), ops.end()}, steps, max_rows, 28, "op", "(other ops)", "kernels in all",
                        [](const Op& op) { return std::string(op_name(op)); });
}

std::string Profile::shape_table(int64_t steps, int max_rows) const {
  return rows_table<std::string>({shapes.begin(), shapes.end()}, steps, max_rows, 44, "GEMM-shaped op by shape", "(other shapes)",
                                 "GEMM-shaped ops in all",
                                 [](const std::string& k) { return k; });
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
