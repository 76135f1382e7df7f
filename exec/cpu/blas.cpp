// blas_gemm (exec/cpu/blas.h): one-thread BLAS calls on blocks of C, split among the thread team.
#include "exec/cpu/blas.h"

#include <cblas.h>
#ifdef ONNXDP_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <latch>
#include <limits>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "exec/cpu/avx512.h"  // cpu_has_avx512
#include "exec/cpu/clones.h"  // parallel_for
#include "exec/cpu/onednn.h"
#include "graph/error.h"

namespace onnxdp {

namespace {

// Blocks of rows or columns are multiples of this (whole register tiles of the BLAS kernels).
constexpr int64_t kBlockAlign = 16;

// Float products of at least this many multiply-adds run on oneDNN's sgemm where it is on
// (exec/cpu/onednn.h); smaller ones on OpenBLAS's. Measured here (one thread, AVX-512 Xeon,
// bench/results/2026-12-05-gemm-engines.md): oneDNN is faster on gpt_small's and tiny_lm's shapes
// from 2^16 up (Linear layers 3-23 %, a head's attention products up to 1.5x); below, OpenBLAS is
// ([16, 16] x [16, 16] took 3x as long on oneDNN). oneDNN compiles a kernel for a shape the first
// time it sees it (up to 20 ms, once per process), which a run's first steps pay.
//
// The exception: A stored transposed with C taller than wide (m > n) and 2^24 multiply-adds or
// more, a Linear layer's weight gradient dY^T X with more outputs than inputs. There oneDNN's
// sgemm trails OpenBLAS's (one thread, operands not in cache: [1024, 1024]^T x [1024, 256] at
// 92-105 GFLOP/s against 113-121; [768, 1024]^T x [1024, 256] at 110 against 125); with m <= n
// the two are level. So such a product (beta 0) is computed as its transpose, C^T = B^T A, wide
// now, on oneDNN, and transposed into C (transposed_product): in gpt_small's steps [1024, 1024]^T
// x [1024, 256] took 19.0-19.3 ms per step against 21.1-21.6 on OpenBLAS (4 calls, same run);
// with beta 1 it stays on OpenBLAS. Smaller such products stay on oneDNN as they are:
// attention's P^T dO per head ([128, 128]^T x [128, 32]) ran at 60 GFLOP/s there against 47 on
// OpenBLAS in gpt_small's steps.
constexpr int64_t kDnnlMinWork = int64_t(1) << 16;
constexpr int64_t kTallTransposedMinWork = int64_t(1) << 24;

// All of the above was measured on AVX-512 CPUs. On an AVX2-only AMD EPYC (Zen 3), one thread:
// gpt_small's products (2^26 multiply-adds and more) ran at 80-87 GFLOP/s on OpenBLAS against
// oneDNN's 40-88 (its A^T B weight gradients, [1024, 256]^T x [1024, 1024] and the tall one through
// transposed_product, at 40; its matmul with a bias at 75-84 against 78-87): the step 390 -> 299-313
// ms on OpenBLAS. tiny_lm's (2^22 and less) the other way: 2.50 ms a step on oneDNN, 2.91 on
// OpenBLAS (bench/results/2026-12-07-avx2.md). So without AVX-512, products of 2^24 multiply-adds
// or more stay on OpenBLAS.
constexpr int64_t kNoAvx512DnnlMaxWork = int64_t(1) << 24;

bool use_dnnl_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  if (ta && !tb && m > n && m * n * k >= kTallTransposedMinWork) return false;
  return dnnl_runs_product(m * n * k);
}

// The product that readies one work buffer, and the most buffers readied in this process so far.
constexpr int kReadyM = 128, kReadyNK = 512;
std::mutex ready_mutex;
int ready_buffers = 0;

void one_thread_blas() {
  // The first product of the process readies the buffers of its own threads, unless the replicas'
  // setup (prepare_cpu_replicas, exec/device.cpp) has readied them all already.
  static const bool once = (blas_prepare(in_thread_share() ? 1 : cpu_threads()), true);
  (void)once;
}

#ifdef ONNXDP_HAVE_DNNL
// C [m, n] = alpha A^T B with A stored [k, m] and m > n (see use_dnnl_sgemm): C^T = B^T A on
// oneDNN into this thread's scratch [n, m], then copied into C transposed by OpenBLAS's omatcopy
// (2.6x as fast as a loop over 32 x 32 tiles on [256, 1024] here: 0.05 against 0.12 ms).
void transposed_product(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float* c,
                        int ldc) {
  thread_local std::vector<float> t;
  t.resize(size_t(n) * size_t(m));
  dnnl_one_thread();
  const dnnl_status_t st = dnnl_sgemm('T', 'N', n, m, k, alpha, b, ldb, a, lda, 0.0f, t.data(), m);
  if (st != dnnl_success) fail("oneDNN's sgemm failed (status {}) on a [{}, {}] x [{}, {}] product", int(st), n, k, k, m);
  cblas_somatcopy(CblasRowMajor, CblasTrans, n, m, 1.0f, t.data(), m, c, ldc);
}
#endif

void call(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
#ifdef ONNXDP_HAVE_DNNL
  if (ta && !tb && m > n && int64_t(m) * n * k >= kTallTransposedMinWork && beta == 0.0f &&
      dnnl_runs_product(int64_t(m) * n * k)) {
    transposed_product(m, n, k, alpha, a, lda, b, ldb, c, ldc);
    return;
  }
  if (use_dnnl_sgemm(ta, tb, m, n, k)) {  // oneDNN's sgemm (exec/cpu/onednn.h), row-major as this call
    dnnl_one_thread();
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (st != dnnl_success) fail("oneDNN's sgemm failed (status {}) on a [{}, {}] x [{}, {}] product", int(st), m, k, k, n);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
}
void call(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
}

void check_int_range(std::initializer_list<int64_t> dims) {
  for (int64_t v : dims)
    if (v > int64_t(std::numeric_limits<int>::max())) fail("a matrix product's dim or row length {} exceeds BLAS's int range", v);
}

// Splits C [m, n] among the team: block(by_rows, lo, hi) computes rows lo..hi of C (by_rows) or
// its columns lo..hi; one block, the whole of C, inside a share or below the split threshold.
template <class Block>
void split_blocks(int64_t m, int64_t n, int64_t k, const Block& block) {
  const bool by_rows = m >= n;
  const int64_t dim = by_rows ? m : n;
  int64_t parts = in_thread_share() ? 1 : std::min<int64_t>(cpu_threads(), dim / kBlockAlign);
  if (m * n * k < blas_split_min_work()) parts = 1;
  if (parts <= 1) return block(true, 0, m);
  const int64_t size = (dim + parts - 1) / parts + kBlockAlign - 1;
  const int64_t step = size - size % kBlockAlign;
  parallel_for(parts, true, [&](int64_t p) {
    const int64_t lo = p * step, hi = std::min(dim, lo + step);
    if (lo < hi) block(by_rows, lo, hi);
  });
}

template <class T>
void gemm_split(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                int64_t ldb, T beta, T* c, int64_t ldc) {
  check_int_range({m, n, k, lda, ldb, ldc});
  if (m <= 0 || n <= 0) return;
  if (k == 0) {  // nothing to multiply (and BLAS rejects lda = 0)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : T(beta * c[i * ldc + j]);
    return;
  }
  one_thread_blas();
  split_blocks(m, n, k, [&](bool by_rows, int64_t lo, int64_t hi) {
    if (by_rows)  // rows lo..hi of op(A) and C
      call(ta, tb, int(hi - lo), int(n), int(k), alpha, ta ? a + lo : a + lo * lda, int(lda), b, int(ldb), beta,
           c + lo * ldc, int(ldc));
    else  // columns lo..hi of op(B) and C
      call(ta, tb, int(m), int(hi - lo), int(k), alpha, a, int(lda), tb ? b + lo * ldb : b + lo, int(ldb), beta,
           c + lo, int(ldc));
  });
}

// C's block [rows, cols] = A's rows x op(B)'s columns + bias: on oneDNN (float, large enough), or
// C's rows set to the bias and BLAS with beta 1.
template <class T>
void bias_block(bool tb, int64_t rows, int64_t cols, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                const T* bias, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (dnnl_runs_product(rows * cols * k) && dnnl_matmul_bias(tb, rows, cols, k, a, lda, b, ldb, bias, c, ldc)) return;
  for (int64_t i = 0; i < rows; ++i) std::copy(bias, bias + cols, c + i * ldc);
  if (k > 0) call(false, tb, int(rows), int(cols), int(k), T(1), a, int(lda), b, int(ldb), T(1), c, int(ldc));
}

template <class T>
void gemm_bias_split(bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                     const T* bias, T* c, int64_t ldc) {
  check_int_range({m, n, k, lda, ldb, ldc});
  if (m <= 0 || n <= 0) return;
  one_thread_blas();
  split_blocks(m, n, k, [&](bool by_rows, int64_t lo, int64_t hi) {
    if (by_rows)
      bias_block(tb, hi - lo, n, k, a + lo * lda, lda, b, ldb, bias, c + lo * ldc, ldc);
    else
      bias_block(tb, m, hi - lo, k, a, lda, tb ? b + lo * ldb : b + lo, ldb, bias + lo, c + lo, ldc);
  });
}

}  // namespace

int64_t blas_split_min_work() {
  return int64_t(1) << 19;
}

void blas_prepare(int concurrent) {
  std::lock_guard<std::mutex> lock(ready_mutex);
  if (ready_buffers == 0) openblas_set_num_threads(1);
  if (concurrent <= ready_buffers) return;
  // One product per thread, all threads at once: OpenBLAS hands a call the first free buffer, so
  // only products that overlap in time reach different buffers. A and B are zeros (the values do
  // not matter), C is each thread's own.
  const std::vector<float> ab(size_t(kReadyNK) * kReadyNK + size_t(kReadyM) * kReadyNK, 0.0f);
  std::vector<float> c(size_t(concurrent) * kReadyM * kReadyNK);
  std::latch start(concurrent);
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrent; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kReadyM, kReadyNK, kReadyNK, 1.0f,
                  ab.data() + size_t(kReadyNK) * kReadyNK, kReadyNK, ab.data(), kReadyNK, 0.0f,
                  c.data() + size_t(t) * kReadyM * kReadyNK, kReadyNK);
    });
  for (std::thread& t : threads) t.join();
  ready_buffers = concurrent;
}

bool dnnl_runs_product(int64_t work) {
#ifdef ONNXDP_AVX512_LOOPS
  static const bool avx512 = cpu_has_avx512();
#else
  const bool avx512 = true;
#endif
  return work >= kDnnlMinWork && (avx512 || work < kNoAvx512DnnlMaxWork) && dnnl_enabled();
}

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_split(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_split(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm_bias(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    const float* bias, float* c, int64_t ldc) {
  gemm_bias_split(tb, m, n, k, a, lda, b, ldb, bias, c, ldc);
}
void blas_gemm_bias(bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                    int64_t ldb, const double* bias, double* c, int64_t ldc) {
  gemm_bias_split(tb, m, n, k, a, lda, b, ldb, bias, c, ldc);
}

}  // namespace onnxdp
