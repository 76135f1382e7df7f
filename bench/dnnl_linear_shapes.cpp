// gpt_small's Linear layers, one thread, operands not in cache (a 256 MB buffer written between
// calls), each variant of a shape run in turn 15 times, minimum and median GFLOP/s:
//  - forward with its bias, Y [1024, n] = X [1024, k] x W^T + b: the bias copied into Y and sgemm
//    with beta 1 (onnxdp before 2026-12-05 18:00), oneDNN's matmul primitive with the bias in its
//    kernel (exec/cpu/onednn.h's dnnl_matmul_bias, onnxdp since), and sgemm with no bias at all
//    (the bound);
//  - weight gradients, dW [m, n] = dY^T [m, 1024] x X [1024, n]: oneDNN's and OpenBLAS's sgemm
//    as they are, and the transpose C^T = X^T dY on oneDNN copied into place by OpenBLAS's
//    omatcopy (exec/cpu/blas.cpp's transposed_product).
// Informational (bench/results/2026-12-05-gemm-engines.md, fourth section); not part of the build:
//   g++ -O2 -std=c++20 bench/dnnl_linear_shapes.cpp -I/usr/include/x86_64-linux-gnu/openblas-pthread \
//     -lopenblas -ldnnl -o /tmp/dnnl_linear_shapes && OMP_NUM_THREADS=1 /tmp/dnnl_linear_shapes
#include <oneapi/dnnl/dnnl.hpp>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<float> junk(size_t(64) << 20);
void evict() {
  for (size_t i = 0; i < junk.size(); i += 16) junk[i] += 1.f;
}

using Variant = std::pair<const char*, std::function<void()>>;

void measure(const char* shape, double flop, const std::vector<Variant>& vs) {
  std::vector<std::vector<double>> t(vs.size());
  for (int r = 0; r < 15; ++r)
    for (size_t v = 0; v < vs.size(); ++v) {
      evict();
      const double a = now();
      vs[v].second();
      t[v].push_back(now() - a);
    }
  std::printf("%s\n", shape);
  for (size_t v = 0; v < vs.size(); ++v) {
    std::sort(t[v].begin(), t[v].end());
    std::printf("  %-30s min %4.0f  median %4.0f GFLOP/s\n", vs[v].first, flop / t[v][0] * 1e-9,
                flop / t[v][t[v].size() / 2] * 1e-9);
  }
}

}  // namespace

int main() {
  openblas_set_num_threads(1);
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  const int tokens = 1024;
  struct Fwd {
    int n, k;
  };
  for (Fwd s : {Fwd{1024, 256}, Fwd{256, 1024}, Fwd{768, 256}, Fwd{256, 256}, Fwd{512, 256}}) {
    const int m = tokens;
    std::vector<float> x(size_t(m) * s.k, 0.5f), w(size_t(s.n) * s.k, 0.25f), y(size_t(m) * s.n), b(size_t(s.n), 0.1f);
    const auto f32 = memory::data_type::f32;
    const memory::desc xd({m, s.k}, f32, {s.k, 1}), wd({s.k, s.n}, f32, {1, s.k}), bd({1, s.n}, f32, {s.n, 1}),
        yd({m, s.n}, f32, {s.n, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(xd, wd, bd, yd), eng);
    dnnl::matmul mm(pd);
    memory xm(xd, eng, x.data()), wm(wd, eng, w.data()), bm(bd, eng, b.data()), ym(yd, eng, y.data());
    char name[96];
    std::snprintf(name, sizeof name, "forward [%d, %d] x [%d, %d]^T + bias", m, s.k, s.n, s.k);
    measure(name, 2.0 * m * s.n * s.k,
            {{"bias copied, sgemm beta 1",
              [&] {
                for (int i = 0; i < m; ++i) std::copy(b.begin(), b.end(), y.begin() + size_t(i) * s.n);
                dnnl_sgemm('N', 'T', m, s.n, s.k, 1.f, x.data(), s.k, w.data(), s.k, 1.f, y.data(), s.n);
              }},
             {"matmul primitive, bias inside",
              [&] {
                mm.execute(st, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}});
                st.wait();
              }},
             {"sgemm, no bias (bound)",
              [&] { dnnl_sgemm('N', 'T', m, s.n, s.k, 1.f, x.data(), s.k, w.data(), s.k, 0.f, y.data(), s.n); }}});
  }
  struct Grad {
    int m, n;
  };
  for (Grad s : {Grad{1024, 256}, Grad{256, 1024}, Grad{768, 256}, Grad{256, 256}, Grad{512, 256}}) {
    const int k = tokens;
    std::vector<float> dy(size_t(k) * s.m, 0.5f), x(size_t(k) * s.n, 0.25f), dw(size_t(s.m) * s.n),
        t(size_t(s.m) * s.n);
    char name[96];
    std::snprintf(name, sizeof name, "weight gradient [%d, %d]^T x [%d, %d]", k, s.m, k, s.n);
    measure(name, 2.0 * s.m * s.n * k,
            {{"oneDNN sgemm TN",
              [&] { dnnl_sgemm('T', 'N', s.m, s.n, k, 1.f, dy.data(), s.m, x.data(), s.n, 0.f, dw.data(), s.n); }},
             {"OpenBLAS sgemm TN",
              [&] {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.m, s.n, k, 1.f, dy.data(), s.m, x.data(), s.n,
                            0.f, dw.data(), s.n);
              }},
             {"oneDNN C^T, omatcopy",
              [&] {
                dnnl_sgemm('T', 'N', s.n, s.m, k, 1.f, x.data(), s.n, dy.data(), s.m, 0.f, t.data(), s.m);
                cblas_somatcopy(CblasRowMajor, CblasTrans, s.n, s.m, 1.f, t.data(), s.m, dw.data(), s.n);
              }}});
  }
}
