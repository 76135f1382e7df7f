// MatMul and Gemm on cuBLAS (see gemm.h): gemm_call maps a node's shapes and attributes to cuBLAS
// arguments once; forward() hands them to cuBLAS or, emulating, to host loops with cuBLAS's
// semantics. The C-into-Y broadcast is the elementwise Identity kernel on a rank-2 layout whose
// broadcast dims have stride 0, so device and emulation share that kernel's index math.
#include "exec/cuda/gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "exec/cuda/check.h"
#include "exec/cuda/elementwise.h"
#include "exec/cuda/elementwise_launch.h"
#include "exec/cuda/kernels.h"
#include "exec/functors.h"

namespace onnxdp::cuda {

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

bool fits_int(int64_t v) { return v >= 0 && v <= kIntMax; }

GemmCall refused(std::string why) {
  GemmCall c;
  c.why = std::move(why);
  return c;
}

// The batch dims of MatMul's operands broadcast to `out` (numpy rules); false when they do not.
bool broadcast_batch(const Shape& a, const Shape& b, Shape* out) {
  const size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t d = 0; d < r; ++d) {
    const int64_t da = d < r - a.size() ? 1 : a[d - (r - a.size())];
    const int64_t db = d < r - b.size() ? 1 : b[d - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    (*out)[d] = da == 1 ? db : da;
  }
  return true;
}

bool gemm_type(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// flatten_a: A's batches may be read as one [batch * M, K] matrix when B has no batch (false when
// A is stored transposed, [.., K, M], whose batches are not rows of one matrix).
GemmCall matmul_call(DType a_type, const Shape& a_shape, DType b_type, const Shape& b_shape, bool flatten_a = true) {
  if (a_type != b_type || !gemm_type(a_type))
    return refused(fmt::format("inputs are {} and {}; the cuBLAS kernel takes float32, float16 or bfloat16",
                               dtype_name(a_type), dtype_name(b_type)));
  if (a_shape.empty() || b_shape.empty()) return refused("MatMul of a scalar");
  Shape a = a_shape, b = b_shape;
  if (a.size() == 1) a.insert(a.begin(), 1);  // [K] on the left is [1, K]
  if (b.size() == 1) b.push_back(1);          // [K] on the right is [K, 1]
  const int64_t M = a[a.size() - 2], K = a.back(), Kb = b[b.size() - 2], N = b.back();
  if (K != Kb) return refused(fmt::format("inner dims differ: {} x {}", shape_str(a_shape), shape_str(b_shape)));
  const Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  Shape batch;
  if (!broadcast_batch(a_batch, b_batch, &batch))
    return refused(fmt::format("batch dims of {} and {} do not broadcast", shape_str(a_shape), shape_str(b_shape)));
  const int64_t nbatch = shape_numel(batch), na = shape_numel(a_batch), nb = shape_numel(b_batch);
  for (int64_t v : {M, N, K})
    if (!fits_int(v)) return refused(fmt::format("matrix dim {} is too large for cuBLAS", v));

  GemmCall c;
  c.ok = true;
  c.type = a_type;
  c.y_rows = nbatch * M;
  c.y_cols = N;
  // Yᵀ [N, M] = Bᵀ [N, K] Aᵀ [K, M] column-major: A' = B (ld N), B' = A (ld K), Y' ld N.
  c.m = int(N), c.n = int(M), c.k = int(K);
  c.lda = int(std::max<int64_t>(1, N));
  c.ldb = int(std::max<int64_t>(1, K));
  c.ldc = int(std::max<int64_t>(1, N));
  c.alpha = 1, c.beta = 0;
  if (nbatch == 0 || M == 0 || N == 0) {
    c.kind = GemmCall::Kind::nothing;
    return c;
  }
  if (K == 0) {  // a sum of nothing: zeros
    if (a_type != DType::f32) return refused("K = 0 on 16-bit floats");
    c.kind = GemmCall::Kind::fill;
    return c;
  }
  c.kind = GemmCall::Kind::gemm;
  // B shared by every batch (then A's batch dims are the output's): A's rows flattened, one GEMM.
  if (nb == 1 && flatten_a && fits_int(nbatch * M)) {
    c.n = int(nbatch * M);
    return c;
  }
  // Strided batches: a side is either the whole batch (its batch dims equal the output's, leading
  // 1s aside, so batch p is at p * its matrix size) or one matrix for all (stride 0).
  if ((na != nbatch && na != 1) || (nb != nbatch && nb != 1))
    return refused(fmt::format("batch dims of {} and {} broadcast in a way strided-batched GEMM cannot express",
                               shape_str(a_shape), shape_str(b_shape)));
  if (!fits_int(nbatch)) return refused(fmt::format("batch count {} is too large for cuBLAS", nbatch));
  c.batch_count = int(nbatch);
  c.stride_a = nb == 1 ? 0 : K * N;
  c.stride_b = na == 1 ? 0 : M * K;
  c.stride_c = M * N;
  return c;
}

GemmCall gemm_op_call(const Node& node, DType a_type, const Shape& a, DType b_type, const Shape& b,
                      const DType* c_type, const Shape* c_shape) {
  if (a_type != b_type || (c_shape && *c_type != a_type) || !gemm_type(a_type))
    return refused(fmt::format("inputs are {}, {}{}{}; the cuBLAS kernel takes float32, float16 or bfloat16",
                               dtype_name(a_type), dtype_name(b_type), c_shape ? " and " : "",
                               c_shape ? dtype_name(*c_type) : ""));
  if (a.size() != 2 || b.size() != 2)
    return refused(fmt::format("A and B must be 2-D, they are {} and {}", shape_str(a), shape_str(b)));
  const bool ta = node.i("transA") != 0, tb = node.i("transB") != 0;
  const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
  const int64_t Kb = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
  if (K != Kb) return refused(fmt::format("inner dims differ: A {} and B {}", shape_str(a), shape_str(b)));
  for (int64_t v : {M, N, K})
    if (!fits_int(v)) return refused(fmt::format("matrix dim {} is too large for cuBLAS", v));
  const float alpha = node.f("alpha"), beta = node.f("beta");

  if (K == 0 && a_type != DType::f32) return refused("K = 0 on 16-bit floats");
  const bool relu = node.op == Op::FusedGemm;
  if (relu && a_type != DType::f32) return refused("FusedGemm on 16-bit floats (its Relu runs on float32)");
  GemmCall c;
  c.ok = true;
  c.type = a_type;
  c.relu = relu;
  c.y_rows = M;
  c.y_cols = N;
  if (c_shape) {  // one-way broadcast to [M, N], right-aligned: a dim of 1 has stride 0
    const Shape& cs = *c_shape;
    if (cs.size() > 2) return refused(fmt::format("C {} has more than 2 dims", shape_str(cs)));
    const int64_t rows = cs.size() == 2 ? cs[0] : 1, cols = cs.empty() ? 1 : cs.back();
    if ((rows != M && rows != 1) || (cols != N && cols != 1))
      return refused(fmt::format("C {} does not broadcast to [{}, {}]", shape_str(cs), M, N));
    c.c_row_stride = rows == 1 ? 0 : cols;
    c.c_col_stride = cols == 1 ? 0 : 1;
  }
  c.broadcast_c = c_shape && beta != 0;
  // Yᵀ = op(B)ᵀ op(A)ᵀ column-major: A' = B as stored (ld its row length), transposed iff transB;
  // B' = A likewise with transA.
  c.trans_a = tb, c.trans_b = ta;
  c.m = int(N), c.n = int(M), c.k = int(K);
  c.lda = int(std::max<int64_t>(1, b[1]));
  c.ldb = int(std::max<int64_t>(1, a[1]));
  c.ldc = int(std::max<int64_t>(1, N));
  c.alpha = alpha;
  c.beta = c.broadcast_c ? beta : 0.0f;  // no C (or beta 0): Y is overwritten
  if (M == 0 || N == 0) c.kind = GemmCall::Kind::nothing;
  else if (K == 0) c.kind = GemmCall::Kind::fill;
  else c.kind = GemmCall::Kind::gemm;
  // A bias along Y's rows (one value per column of Y, i.e. per row of the column-major Y'), added
  // once: cuBLASLt's bias epilogue.
  if (c.kind == GemmCall::Kind::gemm && c.broadcast_c && beta == 1 && c.c_row_stride == 0 &&
      (c.c_col_stride == 1 || N == 1)) {
    c.epilogue = GemmCall::Epilogue::bias;
    c.broadcast_c = false;
    c.beta = 0;
  }
  return c;
}

// FusedMatMul: MatMul's call on the operands as the product reads them, each stored one with op T;
// the bias [N] (one value per row of the column-major Y') as the epilogue (or, without cuBLASLt,
// broadcast down Y's rows), the Relu.
GemmCall fused_matmul_call(const Node& node, DType a_type, const Shape& a, DType b_type, const Shape& b,
                           const DType* c_type, const Shape* c_shape) {
  if (a_type != DType::f32) return refused("FusedMatMul on 16-bit floats (its Relu runs on float32)");
  if (a.size() < 2 || b.size() < 2)
    return refused(fmt::format("FusedMatMul takes A and B of 2 or more dims, not {} and {}", shape_str(a),
                               shape_str(b)));
  const bool ta = node.i("transA") != 0, tb = node.i("transB") != 0;
  auto swapped = [](Shape s) {
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    return s;
  };
  const Shape logical_a = ta ? swapped(a) : a, logical_b = tb ? swapped(b) : b;
  GemmCall c = matmul_call(a_type, logical_a, b_type, logical_b, !ta);
  if (!c.ok) return c;
  c.alpha = node.f("alpha");
  // transB: B stored [.., N, K] is the column-major [K, N] matrix, i.e. A' = (stored B) with op T
  // and its row length K as leading dimension, as Gemm's transB; transA likewise makes B' = (stored
  // A) with op T and leading dimension M. The strides between batches stay (M K and K N).
  if (tb) {
    c.trans_a = true;
    c.lda = int(std::max<int64_t>(1, b.back()));
  }
  if (ta) {
    c.trans_b = true;
    c.ldb = int(std::max<int64_t>(1, a.back()));
  }
  const int64_t N = logical_b.back();
  c.relu = node.s("activation") == "Relu";
  if (c_shape) {
    if (*c_type != a_type || *c_shape != Shape{N})
      return refused(fmt::format("the bias is {} {}, expected {} [{}]", dtype_name(*c_type), shape_str(*c_shape),
                                 dtype_name(a_type), N));
    c.c_row_stride = 0, c.c_col_stride = 1;
    if (c.kind == GemmCall::Kind::gemm) c.epilogue = GemmCall::Epilogue::bias;
    else c.broadcast_c = true, c.beta = 1;  // K = 0: Y = the bias broadcast
  }
  return c;
}

// The same values without cuBLASLt: C copied into Y, then beta = 1; the Relu (kept in c.relu)
// is then the caller's, on Y.
GemmCall without_epilogue(GemmCall c) {
  if (c.epilogue == GemmCall::Epilogue::bias) c.broadcast_c = true, c.beta = 1;
  c.epilogue = GemmCall::Epilogue::none;
  return c;
}

// Whether the call is one cuBLASLt call with an epilogue: a bias, a Relu, or both.
bool lt_fits(const GemmCall& c) {
  return c.kind == GemmCall::Kind::gemm && c.batch_count == 1 && (c.epilogue == GemmCall::Epilogue::bias || c.relu);
}

// The elementwise Identity launch that writes C broadcast to Y [y_rows, y_cols].
EwLaunch broadcast_launch(const GemmCall& call, const void* c, void* y) {
  EwLaunch l;
  l.op = EwOp::Identity;
  l.type = call.type == DType::f32 ? EwType::f32 : EwType::u16;  // 16-bit floats: their bits, copied
  l.in[0] = c;
  l.out = y;
  EwLayout& lay = l.layout;
  lay.numel = call.y_rows * call.y_cols;
  const bool full = (call.c_row_stride == call.y_cols || call.y_rows == 1) && (call.c_col_stride == 1 || call.y_cols == 1);
  const bool single = call.c_row_stride == 0 && call.c_col_stride == 0;
  if (full || single) {  // the same layout as Y, or one element: no index math
    lay.contiguous = true;
    lay.rank = 1;
    lay.dims[0] = lay.numel;
    lay.scalar[0] = single && lay.numel != 1;
    return l;
  }
  lay.rank = 2;
  lay.dims[0] = call.y_rows, lay.dims[1] = call.y_cols;
  lay.strides[0][0] = call.c_row_stride, lay.strides[0][1] = call.c_col_stride;
  return l;
}

// cublasSscal: x[i] *= alpha, n elements with unit increment.
void host_sscal(int64_t n, float alpha, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = alpha * x[i];
}

// An element of A, B or Y as float, and back (16-bit floats rounded to nearest even).
float load(DType t, const void* p, int64_t i) {
  if (t == DType::f16) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  if (t == DType::bf16) return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
void store(DType t, void* p, int64_t i, float v) {
  if (t == DType::f16) static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
  else if (t == DType::bf16) static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
  else static_cast<float*>(p)[i] = v;
}

// cublasSgemmStridedBatched (cublasSgemm: batch_count 1), or cublasGemm(StridedBatched)Ex with
// 16-bit A, B, C and CUBLAS_COMPUTE_32F, on host memory, column-major, with cuBLAS's argument
// checks: fp32 accumulation, alpha and beta applied in fp32, one rounding to C's type, C not read
// when beta is 0. bias (Epilogue::bias, m elements): added to alpha * the sum before the rounding,
// as cublasLtMatmul's CUBLASLT_EPILOGUE_BIAS; c.relu: Relu's functor on the result before the
// rounding, as CUBLASLT_EPILOGUE_RELU(_BIAS).
void host_gemm(const GemmCall& c, const void* A, const void* B, void* C, bool tf32, const void* bias) {
  const int ra = c.trans_a ? c.k : c.m, rb = c.trans_b ? c.n : c.k;  // rows of A', B' as stored
  if (c.m < 0 || c.n < 0 || c.k < 0 || c.batch_count < 0 || c.lda < std::max(1, ra) || c.ldb < std::max(1, rb) ||
      c.ldc < std::max(1, c.m))
    fail("emulated cuBLAS GEMM: invalid arguments m={} n={} k={} lda={} ldb={} ldc={} batch={} "
         "(CUBLAS_STATUS_INVALID_VALUE)",
         c.m, c.n, c.k, c.lda, c.ldb, c.ldc, c.batch_count);
  const DType t = c.type;
  for (int64_t p = 0; p < c.batch_count; ++p) {
    const int64_t a0 = p * c.stride_a, b0 = p * c.stride_b, y0 = p * c.stride_c;
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t i = 0; i < c.m; ++i) {
        float acc = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          float av = load(t, A, a0 + (c.trans_a ? l + i * c.lda : i + l * c.lda));  // op(A')[i, l]
          float bv = load(t, B, b0 + (c.trans_b ? j + l * c.ldb : l + j * c.ldb));  // op(B')[l, j]
          if (tf32 && t == DType::f32) av = to_tf32(av), bv = to_tf32(bv);
          acc += av * bv;
        }
        const int64_t o = y0 + i + j * c.ldc;
        float v = c.beta == 0 ? c.alpha * acc : c.alpha * acc + c.beta * load(t, C, o);
        if (bias) v += load(t, bias, i);
        if (c.relu) v = fn::Relu{}(v);
        store(t, C, o, v);
      }
    }
  }
}

// The largest power of two (up to 256) that divides p: what cuBLASLt may assume of a pointer.
uint32_t alignment(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a) a /= 2;
  return a;
}

// cublasLtMatmul for a call with an epilogue (lt_fits): Y' = act(alpha op_a(A') op_b(B') + beta Y'
// + bias), act Relu or none, bias (m elements) when given. Returns false, having launched nothing,
// when cuBLASLt has no algorithm for it (the caller then computes the same values without it).
bool lt_matmul(const GemmCall& c, const void* A, const void* B, void* Y, const void* bias, cublasHandle_t blas,
               const LtContext& lt, cudaStream_t s) {
  cublasLtHandle_t h = static_cast<cublasLtHandle_t>(lt.handle);
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  ONNXDP_CUDA_CHECK(cublasGetMathMode(blas, &math));
  const bool tf32 = c.type == DType::f32 && (math & CUBLAS_TF32_TENSOR_OP_MATH);
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t t = c.type == DType::f16 ? CUDA_R_16F : c.type == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // Descriptors, destroyed on every way out.
  struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, y = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Descs() {
      if (pref) cublasLtMatmulPreferenceDestroy(pref);
      if (y) cublasLtMatrixLayoutDestroy(y);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (op) cublasLtMatmulDescDestroy(op);
    }
  } d;
  ONNXDP_CUDA_CHECK(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  const cublasOperation_t op_a = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = bias ? (c.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                           : CUBLASLT_EPILOGUE_RELU;
  ONNXDP_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  ONNXDP_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  ONNXDP_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  if (bias)
    ONNXDP_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  // Layouts as stored: A' is m x k after op_a, B' k x n after op_b.
  ONNXDP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&d.a, t, c.trans_a ? c.k : c.m, c.trans_a ? c.m : c.k, c.lda));
  ONNXDP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&d.b, t, c.trans_b ? c.n : c.k, c.trans_b ? c.k : c.n, c.ldb));
  ONNXDP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&d.y, t, c.m, c.n, c.ldc));
  ONNXDP_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = lt.workspace_bytes;
  ONNXDP_CUDA_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  // The pointers' real alignment (cuBLASLt assumes 256 bytes unless told).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, A},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, B},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, Y},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, Y}};
  for (const auto& [attr, p] : aligned) {
    const uint32_t a = alignment(p);
    ONNXDP_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &a, sizeof a));
  }
  if (bias && alignment(bias) < 16) return false;  // cuBLASLt has no preference for the bias's alignment: keep to 16
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, d.op, d.a, d.b, d.y, d.y, d.pref, 1, &best, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  ONNXDP_CUDA_CHECK(st);
  ONNXDP_CUDA_CHECK(cublasLtMatmul(h, d.op, &c.alpha, A, d.a, B, d.b, &c.beta, Y, d.y, Y, d.y, &best.algo,
                                   lt.workspace, lt.workspace_bytes, s));
  return true;
}

// Y <- C broadcast (the elementwise Identity kernel), for beta * Y.
void copy_c(const GemmCall& call, const void* c, void* y, cudaStream_t s, bool emulate) {
  const EwLaunch l = broadcast_launch(call, c, y);
  if (emulate) elementwise_emulate(l);
  else elementwise_launch(l, s);
}

// MatMul / Gemm without an epilogue: C broadcast into Y, then cuBLAS (or K = 0's fill).
void forward_plain(const GemmCall& call, const TensorRef* c, const TensorRef& a, const TensorRef& b,
                   const TensorRef& out, cublasHandle_t h, cudaStream_t s, bool emulate, bool tf32) {
  void* y = out.data;
  const int64_t ny = call.y_rows * call.y_cols;
  const void* A = b.data;
  const void* B = a.data;

  if (call.broadcast_c) copy_c(call, c->data, y, s, emulate);

  if (call.kind == GemmCall::Kind::fill) {  // K = 0 (f32 only): Y = beta * C, or zeros
    float* yf = out.as<float>();
    if (!call.broadcast_c) {
      if (emulate) std::memset(yf, 0, size_t(ny) * sizeof(float));
      else ONNXDP_CUDA_CHECK(cudaMemsetAsync(yf, 0, size_t(ny) * sizeof(float), s));
    } else if (call.beta != 1) {
      for (int64_t off = 0; off < ny; off += kIntMax) {  // cublasSscal counts in int
        const int64_t len = std::min(kIntMax, ny - off);
        if (emulate) host_sscal(len, call.beta, yf + off);
        else ONNXDP_CUDA_CHECK(cublasSscal(h, int(len), &call.beta, yf + off, 1));
      }
    }
    return;
  }

  if (emulate) return host_gemm(call, A, B, y, tf32, nullptr);
  const cublasOperation_t op_a = call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (call.type != DType::f32) {  // 16-bit inputs and output, fp32 accumulation
    const cudaDataType_t t = call.type == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
    if (call.batch_count == 1)
      ONNXDP_CUDA_CHECK(cublasGemmEx(h, op_a, op_b, call.m, call.n, call.k, &call.alpha, A, t, call.lda, B, t, call.ldb,
                                     &call.beta, y, t, call.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
      ONNXDP_CUDA_CHECK(cublasGemmStridedBatchedEx(h, op_a, op_b, call.m, call.n, call.k, &call.alpha, A, t, call.lda,
                                                   call.stride_a, B, t, call.ldb, call.stride_b, &call.beta, y, t,
                                                   call.ldc, call.stride_c, call.batch_count, CUBLAS_COMPUTE_32F,
                                                   CUBLAS_GEMM_DEFAULT));
    return;
  }
  if (tf32) {  // TF32 tensor cores asked for (--tf32): the compute type says so, not a math-mode hint
    if (call.batch_count == 1)
      ONNXDP_CUDA_CHECK(cublasGemmEx(h, op_a, op_b, call.m, call.n, call.k, &call.alpha, A, CUDA_R_32F, call.lda, B,
                                     CUDA_R_32F, call.ldb, &call.beta, y, CUDA_R_32F, call.ldc,
                                     CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    else
      ONNXDP_CUDA_CHECK(cublasGemmStridedBatchedEx(h, op_a, op_b, call.m, call.n, call.k, &call.alpha, A, CUDA_R_32F,
                                                   call.lda, call.stride_a, B, CUDA_R_32F, call.ldb, call.stride_b,
                                                   &call.beta, y, CUDA_R_32F, call.ldc, call.stride_c,
                                                   call.batch_count, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    return;
  }
  const float* Af = static_cast<const float*>(A);
  const float* Bf = static_cast<const float*>(B);
  float* yf = out.as<float>();
  if (call.batch_count == 1) {
    ONNXDP_CUDA_CHECK(cublasSgemm(h, op_a, op_b, call.m, call.n, call.k, &call.alpha, Af, call.lda, Bf, call.ldb,
                                  &call.beta, yf, call.ldc));
  } else {
    ONNXDP_CUDA_CHECK(cublasSgemmStridedBatched(h, op_a, op_b, call.m, call.n, call.k, &call.alpha, Af, call.lda,
                                                call.stride_a, Bf, call.ldb, call.stride_b, &call.beta, yf, call.ldc,
                                                call.stride_c, call.batch_count));
  }
}

void forward(const Node& n, const std::vector<TensorRef>& in, const TensorRef& out, void* handle, void* stream,
             const LtContext& lt, bool emulate, bool tf32) {
  if (n.op != Op::MatMul && n.op != Op::Gemm && n.op != Op::FusedGemm && n.op != Op::FusedMatMul)
    fail("{}: not a MatMul, Gemm, FusedGemm or FusedMatMul", n.describe());
  if (in.size() < 2 || !in[0].present() || !in[1].present()) fail("{}: inputs A and B are required", n.describe());
  const TensorRef& a = in[0];
  const TensorRef& b = in[1];
  const TensorRef* c = n.op != Op::MatMul && in.size() > 2 && in[2].present() ? &in[2] : nullptr;
  GemmCall call = gemm_call(n, a.dtype, *a.shape, b.dtype, *b.shape, c ? &c->dtype : nullptr, c ? c->shape : nullptr);
  if (!call.ok) fail("{}: no cuBLAS kernel: {}", n.describe(), call.why);
  if (!out.present() || out.dtype != call.type || out.numel != call.y_rows * call.y_cols)
    fail("{}: the output has {} elements of {}, the product {}", n.describe(), out.present() ? out.numel : 0,
         dtype_name(out.dtype), call.y_rows * call.y_cols);
  if (call.kind == GemmCall::Kind::nothing) return;

  cublasHandle_t h = static_cast<cublasHandle_t>(handle);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!emulate) {
    if (!h) fail("{}: no cuBLAS handle", n.describe());
    ONNXDP_CUDA_CHECK(cublasSetStream(h, s));
    ONNXDP_CUDA_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  }
  void* y = out.data;
  const int64_t ny = call.y_rows * call.y_cols;
  // Kind::gemm: cuBLAS's A is the node's B, its B the node's A (gemm.h).
  const void* A = b.data;
  const void* B = a.data;
  const void* bias = call.epilogue == GemmCall::Epilogue::bias ? c->data : nullptr;
  if (lt_fits(call) && (emulate || lt.handle)) {
    if (call.broadcast_c) copy_c(call, c->data, y, s, emulate);
    if (emulate) return host_gemm(call, A, B, y, tf32, bias);
    if (lt_matmul(call, A, B, y, bias, h, lt, s)) return;
  }
  // Without cuBLASLt: the Relu of a FusedGemm runs on Y after the rest.
  const bool relu_after = call.relu;
  call = without_epilogue(call);
  call.relu = false;
  forward_plain(call, c, a, b, out, h, s, emulate, tf32);
  if (relu_after) {
    EwLaunch l;
    l.op = EwOp::Relu;
    l.type = EwType::f32;
    l.in[0] = y;
    l.out = y;
    l.layout.contiguous = true;
    l.layout.numel = l.layout.dims[0] = ny;
    if (emulate) elementwise_emulate(l);
    else elementwise_launch(l, stream);
  }
}

}  // namespace

GemmCall gemm_call(const Node& n, DType a_type, const Shape& a, DType b_type, const Shape& b, const DType* c_type,
                   const Shape* c) {
  if (c && !c_type) return refused("C has a shape but no dtype");
  if (n.op == Op::MatMul) return matmul_call(a_type, a, b_type, b);
  if (n.op == Op::FusedMatMul) return fused_matmul_call(n, a_type, a, b_type, b, c_type, c);
  if (n.op == Op::Gemm || n.op == Op::FusedGemm) {
    return gemm_op_call(n, a_type, a, b_type, b, c_type, c);
  }
  return refused(fmt::format("{} is not MatMul, Gemm, FusedGemm or FusedMatMul", op_name(n.op)));
}

bool gemm_runs(const Graph& g, const Node& n) {
  if (kernel_family(n.op) != KernelFamily::gemm || !n.has_input(0) || !n.has_input(1)) return false;
  if (n.outputs.empty() || !gemm_type(g.value(n.outputs[0]).dtype)) return false;
  const Value& a = g.value(n.inputs[0]);
  const Value& b = g.value(n.inputs[1]);
  const Value* c = n.op != Op::MatMul && n.has_input(2) ? &g.value(n.inputs[2]) : nullptr;
  return gemm_call(n, a.dtype, a.shape, b.dtype, b.shape, c ? &c->dtype : nullptr, c ? &c->shape : nullptr).ok;
}

void gemm_forward(const Node& n, const std::vector<TensorRef>& in, const TensorRef& out, void* cublas_handle,
                  void* stream, const LtContext& lt) {
  forward(n, in, out, cublas_handle, stream, lt, false, false);
}

void gemm_emulate(const Node& n, const std::vector<TensorRef>& in, const TensorRef& out, bool tf32) {
  forward(n, in, out, nullptr, nullptr, {}, true, tf32);
}

float to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;  // inf, NaN
  u = (u + 0x1000u) & ~0x1FFFu;                     // half of the 13 dropped bits, added to the magnitude
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace onnxdp::cuda
