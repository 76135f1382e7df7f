// blas_gemm (exec/cpu/blas.h): products split into row or column blocks among the thread team equal
// the definition, for every transpose pair, alpha / beta, a C that is a block of a wider matrix,
// block edges that are not multiples of the alignment, 1 to 3 threads, and inside a share of
// the thread team's work, float through oneDNN's sgemm and OpenBLAS's; and after blas_prepare has readied BLAS's buffers.
// blas_gemm_bias likewise, on oneDNN's matmul and on BLAS. The operands are small integers, so every sum is exact and the check is equality.
#include <doctest/doctest.h>
#include <cblas.h>

#include <random>
#include <vector>

#include "exec/cpu/blas.h"
#include "exec/cpu/clones.h"
#include "exec/cpu/onednn.h"
#include "exec/cpu/threads.h"

using namespace onnxdp;

namespace {

struct Dims {
  int64_t m, n, k;
};

// C = alpha op(A) op(B) + beta C by the definition, in double; C [m, n] with row length ldc.
template <class T>
void reference(bool ta, bool tb, Dims d, double alpha, const std::vector<T>& a, int64_t lda, const std::vector<T>& b,
               int64_t ldb, double beta, std::vector<T>& c, int64_t ldc) {
  for (int64_t i = 0; i < d.m; ++i)
    for (int64_t j = 0; j < d.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < d.k; ++p)
        acc += double(ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]) *
               double(tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]);
      T& y = c[size_t(i * ldc + j)];
      y = T(alpha * acc + (beta == 0 ? 0.0 : beta * double(y)));
    }
}

template <class T>
int64_t mismatches(Dims d, bool ta, bool tb, double alpha, double beta, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(-4, 4);
  const int64_t lda = (ta ? d.m : d.k) + 3, ldb = (tb ? d.k : d.n) + 5, ldc = d.n + 7;  // padded rows
  std::vector<T> a(size_t((ta ? d.k : d.m) * lda)), b(size_t((tb ? d.n : d.k) * ldb)), c(size_t(d.m * ldc));
  for (T& v : a) v = T(u(rng));
  for (T& v : b) v = T(u(rng));
  for (T& v : c) v = T(u(rng));
  std::vector<T> want = c;
  reference(ta, tb, d, alpha, a, lda, b, ldb, beta, want, ldc);
  blas_gemm(ta, tb, d.m, d.n, d.k, T(alpha), a.data(), lda, b.data(), ldb, T(beta), c.data(), ldc);
  int64_t bad = 0;
  for (size_t i = 0; i < c.size(); ++i) bad += c[i] != want[i];  // the padding too: left as it was
  return bad;
}

}  // namespace

TEST_CASE("blas_gemm: split by rows and by columns among 1-3 threads equals the definition") {
  std::mt19937 rng(11);
  const int before = cpu_threads();
  const bool dnnl_before = dnnl_enabled();
  // Above the split threshold: tall (split by rows), wide (by columns), and uneven edges; the
  // last, on one thread with A transposed and beta 0, is computed as its transpose and copied
  // into C (exec/cpu/blas.cpp, transposed_product).
  const Dims dims[] = {{300, 140, 120}, {80, 602, 100}, {1000, 17, 264}, {33, 1000, 136}, {1100, 130, 120}};
  for (Dims d : dims) REQUIRE(d.m * d.n * d.k >= blas_split_min_work());
  for (int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    for (Dims d : dims)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (double beta : {0.0, 1.0}) {
            CAPTURE(threads);
            CAPTURE(d.m);
            CAPTURE(d.n);
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(beta);
            for (bool dnnl : {true, false}) {  // float through oneDNN's sgemm (where built) and OpenBLAS's
              CAPTURE(dnnl);
              set_dnnl_enabled(dnnl);
              CHECK(mismatches<float>(d, ta, tb, 2.0, beta, rng) == 0);
            }
            set_dnnl_enabled(dnnl_before);
            CHECK(mismatches<double>(d, ta, tb, 1.0, beta, rng) == 0);
          }
  }
  set_cpu_threads(before);
  CHECK(openblas_get_num_threads() == 1);  // BLAS itself stays on one thread
}

TEST_CASE("blas_gemm_bias: the product plus a bias along C's rows equals the definition, on oneDNN and BLAS") {
  std::mt19937 rng(14);
  std::uniform_int_distribution<int> u(-4, 4);
  const int before = cpu_threads();
  const bool dnnl_before = dnnl_enabled();
  // Tall (split by rows), wide (by columns), uneven edges, one too small to split or to go to
  // oneDNN, and k = 0 (C is the bias).
  const Dims dims[] = {{300, 140, 120}, {80, 602, 100}, {1000, 17, 264}, {7, 9, 5}, {40, 30, 0}};
  for (int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    for (Dims d : dims)
      for (bool tb : {false, true})
        for (auto [dnnl, pad] : {std::pair{true, 3}, {true, 0}, {false, 3}}) {  // the same shape unpadded
          CAPTURE(threads);
          CAPTURE(d.m);
          CAPTURE(d.n);
          CAPTURE(d.k);
          CAPTURE(tb);
          CAPTURE(dnnl);
          set_dnnl_enabled(dnnl);
          CAPTURE(pad);
          const int64_t lda = d.k + pad, ldb = (tb ? d.k : d.n) + 2 * pad, ldc = d.n + 3 * pad;  // padded rows
          std::vector<float> a(size_t(d.m * lda)), b(size_t((tb ? d.n : d.k) * ldb)), bias(size_t(d.n)),
              c(size_t(d.m * ldc));
          for (auto* v : {&a, &b, &bias, &c})
            for (float& x : *v) x = float(u(rng));
          std::vector<float> want = c;
          for (int64_t i = 0; i < d.m; ++i)
            for (int64_t j = 0; j < d.n; ++j) want[size_t(i * ldc + j)] = bias[size_t(j)];
          reference(false, tb, d, 1.0, a, lda, b, ldb, 1.0, want, ldc);
          const int64_t ran = dnnl_bias_products();
          blas_gemm_bias(tb, d.m, d.n, d.k, a.data(), lda, b.data(), ldb, bias.data(), c.data(), ldc);
          CHECK(c == want);  // the padding too: left as it was
          // oneDNN ran it where built and on, for the products large enough (and, without AVX-512,
          // small enough: none of these reaches 2^24).
          const bool large = d.k > 0 && d.m * d.n * d.k >= (int64_t(1) << 16);
          CHECK(dnnl_runs_product(d.m * d.n * d.k) == (dnnl && dnnl_built() && large));
          CHECK((dnnl_bias_products() > ran) == (dnnl && dnnl_built() && large));
          std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end()), biasd(bias.begin(), bias.end()),
              cd(c.size(), 0.0), wantd(want.begin(), want.end());
          blas_gemm_bias(tb, d.m, d.n, d.k, ad.data(), lda, bd.data(), ldb, biasd.data(), cd.data(), ldc);
          for (size_t i = 0; i < cd.size(); ++i)  // the padding is not written: compare the rows' n values
            if (int64_t(i) % ldc < d.n) CHECK(cd[i] == wantd[i]);
        }
  }
  set_dnnl_enabled(dnnl_before);
  set_cpu_threads(before);
}

TEST_CASE("blas_gemm: inside a share of the team's work each call runs whole on its thread") {
  std::mt19937 rng(12);
  std::vector<int64_t> bad(4, -1);
  std::vector<std::mt19937> rngs;
  for (int t = 0; t < 4; ++t) rngs.emplace_back(rng());
  const int before = cpu_threads();
  set_cpu_threads(2);
  REQUIRE(int64_t(300) * 140 * 120 >= blas_split_min_work());  // would split outside a share
  parallel_for(4, true, [&](int64_t t) {
    REQUIRE(in_thread_share());
    bad[size_t(t)] = mismatches<float>({300, 140, 120}, t % 2 == 1, t >= 2, 1.0, 1.0, rngs[size_t(t)]);
  });
  set_cpu_threads(before);
  for (int64_t b : bad) CHECK(b == 0);
}

TEST_CASE("blas_gemm: k = 0 scales C by beta, and empty products leave C alone") {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  blas_gemm(false, false, 2, 3, 0, 1.f, nullptr, 0, nullptr, 3, 0.5f, c.data(), 3);
  CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3});
  blas_gemm(false, false, 2, 3, 0, 1.f, nullptr, 0, nullptr, 3, 0.f, c.data(), 3);
  CHECK(c == std::vector<float>(6, 0.f));
  c.assign(6, 7.f);
  blas_gemm(false, false, 0, 3, 4, 1.f, nullptr, 4, nullptr, 3, 0.f, c.data(), 3);
  CHECK(c == std::vector<float>(6, 7.f));
}

TEST_CASE("blas_prepare: readying buffers keeps BLAS on one thread and products as they were") {
  std::mt19937 rng(13);
  blas_prepare(3);
  blas_prepare(2);  // fewer than already readied: nothing to do
  CHECK(openblas_get_num_threads() == 1);
  CHECK(mismatches<float>({150, 70, 60}, false, true, 1.0, 0.0, rng) == 0);
  CHECK(mismatches<float>({64, 128, 256}, true, false, 1.0, 1.0, rng) == 0);
}
