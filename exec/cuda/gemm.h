// MatMul, Gemm, FusedGemm and FusedMatMul on CUDA through cuBLAS / cuBLASLt, seen from the graph:
// which nodes run there, and running one.
//
//   if (cuda::gemm_runs(g, node)) cuda::gemm_forward(node, inputs, out, cublas_handle, stream);
//
// Row-major tensors on column-major cuBLAS: a row-major [r, c] buffer is the column-major [c, r]
// matrix, its transpose. Y = op(A) op(B) row-major is therefore Yᵀ = op(B)ᵀ op(A)ᵀ column-major:
// cuBLAS's first operand is the node's B and its second the node's A, with m = N, n = M, and each
// operand's leading dimension its row length as stored. gemm_call computes every argument of the
// call (and of the C-into-Y broadcast before it); gemm_forward hands them to cuBLAS, gemm_emulate to
// a host loop with cuBLAS's semantics, so the mapping is tested without a GPU
// (tests/gpu/test_cuda_gemm.cpp).
//
// What runs (f32, and f16 / bf16 through cublasGemmEx with fp32 accumulation and one rounding of
// the result, as the CPU kernel computes them; K = 0 on f16 / bf16 stays on the CPU; the caller
// falls back to the CPU kernel for anything else):
// - MatMul, numpy semantics: 1-D operands ([K] as [1, K] on the left, [K, 1] on the right); B
//   without batch (2-D, 1-D, or batch dims all 1) and A of any batch: one GEMM over A's rows
//   flattened; equal batch dims (after dropping leading 1s), or one side's batch dims all 1:
//   cublasSgemmStridedBatched, the batch-1 side with stride 0. Batch broadcasting in both
//   directions at once (A [2, 1, M, K] x B [1, 3, K, N]) is refused.
// - Gemm: transA / transB as cuBLAS ops, alpha, beta, C of any shape that broadcasts to [M, N]
//   ([], [1], [N], [1, N], [M, 1], [M, N], [1, 1]), copied into Y by the elementwise Identity
//   kernel (exec/cuda/elementwise_launch.h) with stride 0 on its broadcast dims, then beta * Y is
//   added by cuBLAS. No C, or beta = 0: beta is 0 and Y is only written (cuBLAS does not read C
//   when beta is 0).
// - A bias (Gemm's C of [N] or [1, N] with beta = 1, the form a Linear layer exports to) is
//   cuBLASLt's bias epilogue instead: Y = alpha * A B + C in the GEMM's own store, no copy of C into
//   Y before it (Epilogue::bias). FusedGemm (Gemm + Relu, graph/passes/fuse_epilogues.h; float32)
//   adds the Relu to the epilogue (CUBLASLT_EPILOGUE_RELU_BIAS, or RELU after a broadcast C);
//   FusedMatMul (MatMul with either operand stored transposed as op T, + bias [N], + Relu) likewise
//   (batched: the bias by the broadcast copy, the Relu by the caller).
//   Given no cuBLASLt handle, or when cuBLASLt offers no algorithm for the call, the broadcast
//   copy, beta = 1 and the elementwise Relu kernel on Y compute the same values.
// - Empty dims: M, N or batch 0 is nothing to do; K = 0 gives Y = beta * C (the broadcast copy
//   then cublasSscal) or zeros (cudaMemsetAsync), without calling GEMM with k = 0.
// The product uses cublasSgemm / cublasSgemmStridedBatched, i.e. fp32 inputs and accumulation
// unless the handle's math mode allows TF32 (the caller's choice: --tf32, as PyTorch's
// torch.backends.cuda.matmul.allow_tf32): the inputs then enter the products with 10 mantissa
// bits, fp32 accumulation, about 1e-3 relative error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "exec/kernel.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace onnxdp::cuda {

// The cuBLAS calls of one MatMul / Gemm node, in cuBLAS's (column-major) terms.
struct GemmCall {
  bool ok = false;
  std::string why;  // !ok: what is not handled, for the caller's message

  enum class Kind {
    nothing,  // Y has no elements (M, N or the batch is 0)
    fill,     // K = 0: Y = beta * C broadcast (with broadcast_c) or zeros
    gemm,     // broadcast C into Y when broadcast_c, then the GEMM
  };
  Kind kind = Kind::nothing;
  DType type = DType::f32;  // of A, B, C and Y: f32, or f16 / bf16 (cublasGemmEx, fp32 compute)

  // Y (row-major [y_rows, y_cols], y_rows = M times the batch for MatMul) and, with broadcast_c,
  // Y[i, j] = C[i * c_row_stride + j * c_col_stride] written before the GEMM (Gemm with a C and
  // beta != 0). Stride 0 on a dim C broadcasts along.
  int64_t y_rows = 0, y_cols = 0;
  bool broadcast_c = false;
  int64_t c_row_stride = 0, c_col_stride = 0;

  // The GEMM, column-major: Y' = alpha * op_a(A') op_b(B') + beta * Y' for each of batch_count
  // matrices, A' = the node's input 1 (B), B' = the node's input 0 (A), Y' = the output (Yᵀ).
  // A' is m x k after op_a, B' k x n after op_b, Y' m x n with leading dims lda, ldb, ldc, matrix
  // p at offset p * stride_*. batch_count 1: cublasSgemm; more: cublasSgemmStridedBatched.
  bool trans_a = false, trans_b = false;  // CUBLAS_OP_T when set, else CUBLAS_OP_N
  int m = 0, n = 0, k = 0;
  int lda = 1, ldb = 1, ldc = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int batch_count = 1;
  float alpha = 1, beta = 0;

  // bias: cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS, Y'[i, j] = alpha * (op_a(A') op_b(B'))[i, j] +
  // C[i] (C the node's bias, m elements of the GEMM's type), beta 0, one rounding of the fp32 sum;
  // broadcast_c is false then. Only for one GEMM (batch_count 1).
  enum class Epilogue { none, bias };
  Epilogue epilogue = Epilogue::none;
  // FusedGemm: Relu's functor applied to the result (CUBLASLT_EPILOGUE_RELU(_BIAS)); float32 only.
  bool relu = false;
};

// The calls for node n (MatMul, Gemm, FusedGemm or FusedMatMul) on inputs of these dtypes and shapes (c: Gemm's C, nullptr
// when absent). ok false with `why` for what has no cuBLAS kernel here. Shapes are taken as given
// (the shape rule has checked K and the broadcasts); inconsistent ones are refused, not trusted.
GemmCall gemm_call(const Node& n, DType a_type, const Shape& a, DType b_type, const Shape& b, const DType* c_type,
                   const Shape* c);

// Whether node n (MatMul, Gemm, FusedGemm or FusedMatMul) has a cuBLAS kernel for its input dtypes and shapes in g.
bool gemm_runs(const Graph& g, const Node& n);

// cuBLASLt for the epilogues: a cublasLtHandle_t and a device workspace for it, both the caller's
// (the workspace may be the one given to the cuBLAS handle: calls on one stream run in order).
struct LtContext {
  void* handle = nullptr;  // nullptr: no cuBLASLt, epilogues become the broadcast copy
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Runs n on device tensors (TensorRef.data are device pointers; in[2] absent or !present() for a
// Gemm without C). cublas_handle: a cublasHandle_t owned by the caller (its math mode is the
// caller's choice, cuBLASLt calls follow it: TF32 math is CUBLAS_COMPUTE_32F_FAST_TF32); stream: a
// cudaStream_t (nullptr: the default stream). Sets the handle's stream and host pointer mode.
// Throws onnxdp::Error for what gemm_runs refuses and on CUDA errors.
void gemm_forward(const Node& n, const std::vector<TensorRef>& in, const TensorRef& out, void* cublas_handle,
                  void* stream, const LtContext& lt = {});

// Exactly what gemm_forward would compute, on host memory: gemm_call's arguments, the elementwise
// Identity kernel's host emulation for the C broadcast, and plain loops with cublasSscal's and
// cublasSgemmStridedBatched's column-major semantics (fp32 accumulation, Y not read when beta is
// 0), and cuBLASLt's bias epilogue (the bias added to the fp32 sum before its one rounding). tf32: each input element rounded to TF32 (to_tf32) before its product, as a handle in TF32
// math mode does on tensor cores. Evidence for the argument mapping, not for cuBLAS or the device.
void gemm_emulate(const Node& n, const std::vector<TensorRef>& in, const TensorRef& out, bool tf32 = false);

// x with its mantissa rounded to TF32's 10 bits (to nearest, ties away from zero, as cvt.rna.tf32);
// infinities and NaN unchanged.
float to_tf32(float x);

}  // namespace onnxdp::cuda
