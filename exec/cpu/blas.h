// The CPU backend's one way into BLAS: every matrix product (MatMul, Gemm, the fused products,
// Conv, ConvGradFilter) is a blas_gemm call.
//
// BLAS runs on one thread, always; onnxdp threads a large product itself, splitting C into blocks
// of rows (or of columns, when C is wider than tall), one BLAS call per block, among the calling
// thread's team (exec/cpu/threads.h). Inside a share of the team's work (a batched product's batch
// loop, ConvGradFilter's loop over images) a call runs whole on the thread that makes it.
//
// Why not OpenBLAS's own threads: in Debian's pthreads build they keep spinning for a while after
// every threaded call, holding cores that the threads of the next kernels (elementwise ops, the
// batched products' loop) then wait for. Measured on 2 cores: 64 products of [128, 32] x
// [32, 128], two threads each calling one-thread BLAS, ran at 16 GFLOP/s (no faster than
// one thread) after a threaded call and at 32 GFLOP/s without one; large products split here run
// as fast as OpenBLAS's threading (65-74 GFLOP/s on gpt_small's Linear shapes).
//
// OpenBLAS's work buffers: a small product runs at half speed or less on a buffer that no larger
// product has used yet. Measured on this machine (OpenBLAS 0.3.21, Zen kernels, one thread):
// [256, 64] x [64, 128] at 16 GFLOP/s and [256, 64]^T x [256, 128] at 10.5, both 33-36 once one
// [128, 512] x [512, 512] product has run on the same buffer; the pages past a small product's
// packed panels, which only a larger product touches, are the likely cause. So blas_prepare runs
// that product once on each buffer the threads will use.
#pragma once
#include <cstdint>

namespace onnxdp {

// Products of fewer multiply-adds than this run on one thread: 2^19 (1 MFLOP: 6-30 us on one
// thread here, by the day's CPU), where splitting gains little more than handing a share to an
// awake helper costs (parallel_min_elements(), exec/cpu/clones.h).
int64_t blas_split_min_work();

// Whether a float product of `work` multiply-adds runs on oneDNN (its sgemm, or its matmul for a
// product with a bias) rather than OpenBLAS, oneDNN built and on: from 2^16 up, and on a CPU
// without AVX-512 below 2^24 only (exec/cpu/blas.cpp says why).
bool dnnl_runs_product(int64_t work);

// C [m, n] = alpha * op(A) [m, k] x op(B) [k, n] + beta * C, row-major; op(X) is X, or X stored
// transposed with ta / tb; lda, ldb, ldc: the row lengths of A, B and C as stored. beta == 0: C
// is not read. k == 0: C = beta * C. Dims and row lengths past BLAS's int range fail.
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// C [m, n] = A [m, k] x op(B) + bias [n] along C's rows (a Linear layer's forward), split among
// the team as blas_gemm. Float products of 2^16 multiply-adds or more run as oneDNN's matmul with
// the bias added in its kernel (exec/cpu/onednn.h); others set C's rows to the bias and add the
// product onto them (BLAS with beta 1). Either way the sum is rounded once.
void blas_gemm_bias(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    const float* bias, float* c, int64_t ldc);
void blas_gemm_bias(bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                    int64_t ldb, const double* bias, double* c, int64_t ldc);

// Sets BLAS to one thread and readies `concurrent` of its work buffers (see above): call it from
// outside any parallel region with the most products that will run at once in this process (its
// replicas x their threads). Products call it themselves on first use with their own thread
// count; readying more buffers later costs one product per thread, about 2 ms.
void blas_prepare(int concurrent);

}  // namespace onnxdp
