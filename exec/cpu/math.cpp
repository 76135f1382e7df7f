// CPU kernels of the math ops (see graph/op_table.h). The elementwise arithmetic lives in
// exec/functors.h (shared with other backends); numpy broadcasting in exec/cpu/broadcast.h;
// f32/f64 matrix products go to BLAS through blas_gemm (exec/cpu/blas.h).

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "exec/cpu/attention.h"
#include "exec/cpu/blas.h"
#include "exec/cpu/blocked.h"
#include "exec/cpu/broadcast.h"
#include "exec/cpu/clones.h"
#include "exec/cpu/row_sum.h"
#include "exec/cpu/in_float.h"
#include "exec/cpu/mask_rows.h"
#include "exec/functors.h"
#include "exec/kernel.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

namespace {

template <class T>
inline constexpr bool kIsFloat = std::is_same_v<T, float> || std::is_same_v<T, double>;
// uint16_t is the storage of f16 / bf16, which these kernels do not run; bool is not a number.
template <class T>
inline constexpr bool kIsNumber = !std::is_same_v<T, bool> && !std::is_same_v<T, uint16_t>;

[[noreturn]] void unsupported(const KernelCtx& c, DType t) {
  c.fail("the CPU kernel does not run on {} (input 0)", dtype_name(t));
}

// out = f(in0, in1), both inputs of the output's dtype, broadcast. A channel-blocked output
// (graph/passes/block_channels.h: float32 only) broadcasts the storage shapes (exec/cpu/blocked.h).
template <class F>
void binary_numeric(KernelCtx& c, const F& f) {
  if (blocked_output(c.node, 0)) {
    if (c.out(0).dtype != DType::f32) c.fail("output 0 is blocked and {}, not float32", dtype_name(c.out(0).dtype));
    const auto s = blocked_storages(c, 2);
    broadcast_map<float, float, float>(viewed_as(c.out(0), s[0]), f, viewed_as(c.in(0), s[1]),
                                       viewed_as(c.in(1), s[2]));
    return;
  }
  if (half_map<uint16_t>(c.in(0).dtype, c.out(0), f, c.in(0), c.in(1))) return;
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsNumber<T>) broadcast_map<T, T, T>(c.out(0), f, c.in(0), c.in(1));
    else unsupported(c, c.in(0).dtype);
  });
}

// out = f(in0) for the float dtypes (f16 / bf16 computed in float).
template <class F>
void unary_float(KernelCtx& c, const F& f) {
  if (half_map<uint16_t>(c.in(0).dtype, c.out(0), f, c.in(0))) return;
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsFloat<T>) broadcast_map<T, T>(c.out(0), f, c.in(0));
    else unsupported(c, c.in(0).dtype);
  });
}

// out = f(in0) for every number dtype (the shape rule narrowed the set per op).
template <class F>
void unary_numeric(KernelCtx& c, const F& f) {
  if (half_map<uint16_t>(c.in(0).dtype, c.out(0), f, c.in(0))) return;
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsNumber<T>) broadcast_map<T, T>(c.out(0), f, c.in(0));
    else unsupported(c, c.in(0).dtype);
  });
}

// Min / Max over 1..n inputs: out = in0 broadcast, then out = f(out, in_k) in place (out already
// has the full shape, so each element is read and written at its own index only).
template <class F>
void variadic(KernelCtx& c, const F& f) {
  const DType t = c.in(0).dtype;
  const TensorRef& out = c.out(0);
  if (t == DType::f16 || t == DType::bf16) {
    broadcast_map<uint16_t, uint16_t>(out, fn::Identity{}, c.in(0));
    for (size_t k = 1; k < c.inputs.size(); ++k) half_map<uint16_t>(t, out, f, out, c.in(int(k)));
    return;
  }
  dispatch_dtype(t, [&]<class T>() {
    if constexpr (kIsNumber<T>) {
      broadcast_map<T, T>(out, fn::Identity{}, c.in(0));
      for (size_t k = 1; k < c.inputs.size(); ++k) broadcast_map<T, T, T>(out, f, out, c.in(int(k)));
    } else {
      unsupported(c, t);
    }
  });
}

// One-element bound of Clip as T (the bound may be f32 for an f64 input, see shape_Clip).
template <class T>
T clip_bound(const KernelCtx& c, int k, T dflt) {
  if (!c.has_in(k)) return dflt;
  const TensorRef& b = c.in(k);
  if (b.dtype == DType::f32) return T(*b.as<float>());
  return *b.as<T>();
}

// Rows of at most this many terms (attention's rows over short contexts: tiny_lm's 16) run in
// fixed-width arrays, padded: the vector loops then have no scalar remainder, which ran most of
// such a row's max, exp and sum one element at a time.
constexpr int64_t kShortSoftmaxRow = 16;

// One short row (n <= kShortSoftmaxRow) of softmax_rows below, the same values bit for bit: the
// padding is -inf, which changes no max, and whose exp is +0, which changes no partial sum (they
// start at +0 and hold no -0: x + -x is +0). A row of -inf alone is NaN either way, as is a row
// with a NaN (the two may pick different maxima there, so rows with several different NaNs may
// keep a different one's payload).
template <class T, bool Log>
[[gnu::always_inline]] inline void softmax_short_row(const T* xo, T* yo, int64_t n) {
  constexpr int W = int(kShortSoftmaxRow);
  T v[W], m[W], e[W];
  for (int j = 0; j < W; ++j) v[j] = j < n ? xo[j] : -std::numeric_limits<T>::infinity();
  for (int j = 0; j < W; ++j) m[j] = v[j];
  for (int w = W / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) m[j] = m[j + w] > m[j] ? m[j + w] : m[j];
  const T mx = m[0];
  for (int j = 0; j < W; ++j) e[j] = fn::m::exp(T(v[j] - mx));
  const double sum = row_sum(W, [&](int64_t j) { return double(e[j]); });
  if constexpr (Log) {
    const T ls = T(std::log(sum));
    for (int j = 0; j < W; ++j) e[j] = (v[j] - mx) - ls;
  } else {
    const T inv = T(1.0 / sum);
    for (int j = 0; j < W; ++j) e[j] *= inv;
  }
  for (int64_t j = 0; j < n; ++j) yo[j] = e[j];
}

// Softmax / LogSoftmax of x viewed as [outer, n, inner] along n, rows lo..hi of the outer dim;
// max-subtracted so exp never overflows. Masked (MaskedSoftmax, inner 1, not Log): row o reads
// x[j] as `fill` where mask[row_mask[o] + j] == fill_when, as Softmax of Where's output would; it
// writes that row into y first (one pass that vectorizes) and works in place from there.
template <class T, bool Log, bool Masked = false>
ONNXDP_CPU_CLONES void softmax_rows(const T* x, T* y, int64_t lo, int64_t hi, int64_t n, int64_t inner,
                                    const int32_t* mask = nullptr, const int64_t* row_mask = nullptr,
                                    bool fill_when = true, T fill = T(0)) {
  static_assert(!(Masked && Log), "LogSoftmax reads x after y is written");
  for (int64_t o = lo; o < hi; ++o) {
    const T* xo = x + o * n * inner;
    T* yo = y + o * n * inner;
    if constexpr (Masked) {  // x as the Where writes it, into y's row; then the row as below, from there
      const int32_t* mo = mask + row_mask[o];
      const int32_t when = fill_when ? 1 : 0;
      for (int64_t j = 0; j < n; ++j) yo[j] = mo[j] == when ? fill : xo[j];
      xo = yo;
    }
    if (inner == 1 && n <= kShortSoftmaxRow) {
      softmax_short_row<T, Log>(xo, yo, n);
      continue;
    }
    if (inner == 1) {
      // The row's max in 8 lanes (max is exact: any order finds the same value), so it vectorizes.
      // A NaN makes every output NaN whichever max it leaves (through its own exp and the sum).
      T lane[8];
      for (int k = 0; k < 8; ++k) lane[k] = xo[0];
      int64_t j = 0;
      for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k) lane[k] = xo[j + k] > lane[k] ? xo[j + k] : lane[k];  // std::max(lane, x), NaN too
      T mx = xo[0];
      for (int k = 0; k < 8; ++k) mx = std::max(mx, lane[k]);
      for (; j < n; ++j) mx = std::max(mx, xo[j]);
      // The exponentials first (a loop that vectorizes), then their sum.
      for (int64_t j = 0; j < n; ++j) yo[j] = fn::m::exp(T(xo[j] - mx));
      const double sum = row_sum(n, [&](int64_t j) { return double(yo[j]); });
      if constexpr (Log) {  // (x - max) - log(sum): adding max to log(sum) first would round it
        T ls = T(std::log(sum));
        for (int64_t j = 0; j < n; ++j) yo[j] = (xo[j] - mx) - ls;
      } else {
        T inv = T(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) yo[j] *= inv;
      }
      continue;
    }
    // inner > 1: walk the [n, inner] slab row by row, keeping per-column max and sum.
    std::vector<T> mx(xo, xo + inner);
    for (int64_t j = 1; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) mx[size_t(i)] = std::max(mx[size_t(i)], xo[j * inner + i]);
    std::vector<double> sum(size_t(inner), 0.0);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        T e = fn::m::exp(T(xo[j * inner + i] - mx[size_t(i)]));
        if constexpr (!Log) yo[j * inner + i] = e;
        sum[size_t(i)] += double(e);
      }
    for (int64_t i = 0; i < inner; ++i) sum[size_t(i)] = Log ? std::log(sum[size_t(i)]) : 1.0 / sum[size_t(i)];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        if constexpr (Log) yo[j * inner + i] = (xo[j * inner + i] - mx[size_t(i)]) - T(sum[size_t(i)]);
        else yo[j * inner + i] *= T(sum[size_t(i)]);
      }
  }
}

// Threads split the outer dim.
template <class T, bool Log>
void softmax_along(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  split_rows(outer, outer * n * inner > parallel_min_elements(),
             [&](int, int64_t lo, int64_t hi) { softmax_rows<T, Log>(x, y, lo, hi, n, inner); });
}

template <bool Log>
void softmax_forward(KernelCtx& c) {
  const TensorRef& x = c.in(0);
  int64_t axis = normalize_axis(c.node.i("axis"), x.rank(), c.node);
  int64_t outer = 1, inner = 1, n = x.dim(int(axis));
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = int(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
  if (x.numel == 0) return;
  dispatch_dtype(x.dtype, [&]<class T>() {
    if constexpr (kIsFloat<T>) softmax_along<T, Log>(x.as<const T>(), c.out(0).as<T>(), outer, n, inner);
    else unsupported(c, x.dtype);
  });
}

// ---- matrix products --------------------------------------------------------------------------

// C [m, n] = alpha * op(A) [m, k] x op(B) [k, n] + beta * C, row-major; lda / ldb are the row
// lengths of A and B as stored. f32 / f64 through BLAS, integers by a plain loop. beta == 0 means
// C is not read.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, double beta, T* y) {
  if constexpr (kIsFloat<T>) {  // empty products and k = 0 included
    blas_gemm(ta, tb, m, n, k, T(alpha), a, lda, b, ldb, T(beta), y, n);
  } else {
    parallel_for(m, m * n * k > parallel_min_elements(), [&](int64_t i) {
      for (int64_t j = 0; j < n; ++j) {
        T acc = T(0);
        for (int64_t p = 0; p < k; ++p) {
          T av = ta ? a[p * lda + i] : a[i * lda + p];
          T bv = tb ? b[j * ldb + p] : b[p * ldb + j];
          acc = T(acc + av * bv);
        }
        T prod = alpha == 1 ? acc : T(alpha * double(acc));
        y[i * n + j] = beta == 0 ? prod : T(prod + (beta == 1 ? y[i * n + j] : T(beta * double(y[i * n + j]))));
      }
    });
  }
}

bool blas_int_ok(int64_t v) { return v <= int64_t(std::numeric_limits<int>::max()); }

// MatMul, numpy semantics; ta / tb (FusedMatMul's transA / transB): that operand's last two dims
// are stored swapped ([.., K, M] for A, [.., N, K] for B) and BLAS reads it transposed. Y = alpha
// A @ B, plus `bias` [N] along Y's rows where given (FusedMatMul's): in the product's own pass
// where it is one product (blas_gemm_bias), else Y's rows start as the bias and the products
// are accumulated onto them (BLAS with beta 1, as torch's addmm does a Linear). Either way the
// sum is rounded once, not twice.
template <class T>
void matmul(KernelCtx& c, bool ta, bool tb, double alpha = 1, const T* bias = nullptr) {
  const TensorRef &ra = c.in(0), &rb = c.in(1), &ry = c.out(0);
  Shape a = *ra.shape, b = *rb.shape;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const int64_t lda = a.back(), ldb = b.back();  // row lengths as stored
  const int64_t m = ta ? a.back() : a[a.size() - 2], k = ta ? a[a.size() - 2] : a.back();
  const int64_t n = tb ? b[b.size() - 2] : b.back();
  for (int64_t v : {m, n, k})
    if (!blas_int_ok(v)) c.fail("matrix dim {} is too large for BLAS", v);
  const Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch);
  const int64_t nbatch = shape_numel(batch);
  const T* pa = ra.as<const T>();
  const T* pb = rb.as<const T>();
  T* py = ry.as<T>();
  if (ry.numel == 0) return;

  // b shared by every batch and a's batches contiguous rows: one product [nbatch * m, k] x [k, n].
  const bool one_product = shape_numel(b_batch) == 1 && a_batch == batch && !ta && blas_int_ok(nbatch * m);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    if (one_product && bias && alpha == 1) return blas_gemm_bias(tb, nbatch * m, n, k, pa, lda, pb, ldb, bias, py, n);
  double beta = 0;
  if (bias) {
    split_rows(nbatch * m, ry.numel > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) std::copy(bias, bias + n, py + r * n);
    });
    beta = 1;
  }
  if (one_product) {
    gemm<T>(false, tb, nbatch * m, n, k, alpha, pa, lda, pb, ldb, beta, py);
    return;
  }
  const std::vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
  auto one = [&](int64_t bi) {  // y[bi] = a[bi] @ b[bi], a and b indexed through their broadcast
    int64_t rest = bi, oa = 0, ob = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t coord = rest % batch[d];
      rest /= batch[d];
      oa += coord * sa[d];
      ob += coord * sb[d];
    }
    gemm<T>(ta, tb, m, n, k, alpha, pa + oa * m * k, lda, pb + ob * k * n, ldb, beta, py + bi * m * n);
  };
  // Many small products (attention's [b, heads] of [t, d] x [d, t]): the threads split the batch,
  // each product whole on one thread (exec/cpu/blas.h), rather than every thread joining each
  // small product in turn. Worth it when the batch splits evenly enough among the threads.
  const int threads = cpu_threads();
  const bool by_batch = threads > 1 && nbatch * m * n * k >= blas_split_min_work() &&
                        (nbatch % threads == 0 || nbatch >= 4 * int64_t(threads));
  parallel_for(nbatch, by_batch, [&](int64_t bi) { one(bi); });
}

template <class T>
void gemm_op(KernelCtx& c) {
  const TensorRef &ra = c.in(0), &rb = c.in(1), &ry = c.out(0);
  const bool ta = c.node.i("transA") != 0, tb = c.node.i("transB") != 0;
  const double alpha = c.node.f("alpha"), beta = c.node.f("beta");
  const int64_t m = ry.dim(0), n = ry.dim(1), k = ta ? ra.dim(0) : ra.dim(1);
  for (int64_t v : {m, n, k})
    if (!blas_int_ok(v)) c.fail("matrix dim {} is too large for BLAS", v);
  const bool with_c = c.has_in(2) && beta != 0;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    // Y = A op(B) + a bias along Y's rows (C [n] or [1, n]: a Linear layer's export): one pass.
    const TensorRef& rc = with_c ? c.in(2) : ra;
    if (with_c && !ta && alpha == 1 && beta == 1 && rc.numel == n && n > 1 && rc.dim(rc.rank() - 1) == n)
      return blas_gemm_bias(tb, m, n, k, ra.as<const T>(), ra.dim(1), rb.as<const T>(), rb.dim(1), rc.as<const T>(),
                            ry.as<T>(), n);
  }
  if (with_c) broadcast_map<T, T>(ry, fn::Identity{}, c.in(2));  // y = C broadcast to [m, n]
  gemm<T>(ta, tb, m, n, k, alpha, ra.as<const T>(), ra.dim(1), rb.as<const T>(), rb.dim(1), with_c ? beta : 0.0,
          ry.as<T>());
}

}  // namespace

void Add_forward(KernelCtx& c) { binary_numeric(c, fn::Add{}); }
void Sub_forward(KernelCtx& c) { binary_numeric(c, fn::Sub{}); }
void Mul_forward(KernelCtx& c) { binary_numeric(c, fn::Mul{}); }
void Div_forward(KernelCtx& c) { binary_numeric(c, fn::Div{}); }

namespace {
struct Square {
  template <class T> T operator()(T a) const { return T(a * a); }
};

// A one-element exponent's value as a double; NaN when there are more elements.
double scalar_exponent(const TensorRef& e) {
  double v = std::numeric_limits<double>::quiet_NaN();
  if (e.numel == 1 && e.dtype != DType::boolean)
    dispatch_elem(e.dtype, [&]<class E>() { v = E::to_f64(e.as<const typename E::T>()[0]); });
  return v;
}
}  // namespace

// Pow: base dtype T (the output's), exponent dtype E (any number). A float base raised to one
// exponent of 2 or 1 (RMSNorm's x.pow(2), and the x^1 of its gradient) is x * x or x: the
// correctly rounded result pow approximates, without pow's cost per element (pow made a third of
// rope_lm's step).
void Pow_forward(KernelCtx& c) {
  if (dtype_is_float(c.in(0).dtype)) {
    const double e = scalar_exponent(c.in(1));
    if (e == 2) return unary_float(c, Square{});
    if (e == 1) return unary_float(c, fn::Identity{});
  }
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsNumber<T>) {
      dispatch_dtype(c.in(1).dtype, [&]<class E>() {
        if constexpr (kIsNumber<E>) broadcast_map<T, T, E>(c.out(0), fn::Pow{}, c.in(0), c.in(1));
        else c.fail("the CPU kernel does not run on exponent dtype {}", dtype_name(c.in(1).dtype));
      });
    } else {
      unsupported(c, c.in(0).dtype);
    }
  });
}

void Min_forward(KernelCtx& c) { variadic(c, fn::Min{}); }
void Max_forward(KernelCtx& c) { variadic(c, fn::Max{}); }
void Sqrt_forward(KernelCtx& c) { unary_float(c, fn::Sqrt{}); }
void Exp_forward(KernelCtx& c) { unary_float(c, fn::Exp{}); }
void Log_forward(KernelCtx& c) { unary_float(c, fn::Log{}); }
void Neg_forward(KernelCtx& c) { unary_numeric(c, fn::Neg{}); }
void Abs_forward(KernelCtx& c) { unary_numeric(c, fn::Abs{}); }
void Reciprocal_forward(KernelCtx& c) { unary_float(c, fn::Reciprocal{}); }
void Relu_forward(KernelCtx& c) { unary_numeric(c, fn::Relu{}); }
void LeakyRelu_forward(KernelCtx& c) { unary_float(c, fn::LeakyRelu{c.node.f("alpha")}); }
void Sigmoid_forward(KernelCtx& c) { unary_float(c, fn::Sigmoid{}); }
void Tanh_forward(KernelCtx& c) { unary_float(c, fn::Tanh{}); }
void Erf_forward(KernelCtx& c) { unary_float(c, fn::Erf{}); }

void Gelu_forward(KernelCtx& c) {
  if (c.node.s("approximate") == "tanh") unary_float(c, fn::GeluTanh{});
  else unary_float(c, fn::Gelu{});
}

void Softplus_forward(KernelCtx& c) { unary_float(c, fn::Softplus{}); }
void Sin_forward(KernelCtx& c) { unary_float(c, fn::Sin{}); }
void Cos_forward(KernelCtx& c) { unary_float(c, fn::Cos{}); }
void HardSigmoid_forward(KernelCtx& c) { unary_float(c, fn::HardSigmoid{c.node.f("alpha"), c.node.f("beta")}); }
void HardSwish_forward(KernelCtx& c) { unary_float(c, fn::HardSwish{}); }
void Mod_forward(KernelCtx& c) { binary_numeric(c, fn::Mod{c.node.i("fmod") != 0}); }
void Elu_forward(KernelCtx& c) { unary_float(c, fn::Elu{c.node.f("alpha")}); }
void Selu_forward(KernelCtx& c) { unary_float(c, fn::Selu{c.node.f("alpha"), c.node.f("gamma")}); }
void Celu_forward(KernelCtx& c) { unary_float(c, fn::Celu{c.node.f("alpha")}); }
void Mish_forward(KernelCtx& c) { unary_float(c, fn::Mish{}); }
void Softsign_forward(KernelCtx& c) { unary_float(c, fn::Softsign{}); }
void Sign_forward(KernelCtx& c) { unary_numeric(c, fn::Sign{}); }
void PRelu_forward(KernelCtx& c) { binary_numeric(c, fn::PRelu{}); }

// Running sums along the axis, in double for floats (as PyTorch's CPU cumsum) and int64 for
// integers, each output rounded once; exclusive leaves the element itself out, reverse runs from
// the end.
void CumSum_forward(KernelCtx& c) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  int64_t axis = 0;
  dispatch_elem(c.in(1).dtype, [&]<class E>() { axis = E::to_i64(c.in(1).as<const typename E::T>()[0]); });
  axis = normalize_axis(axis, in.rank(), c.node);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < int(axis); ++d) outer *= in.dim(d);
  for (int d = int(axis) + 1; d < in.rank(); ++d) inner *= in.dim(d);
  const int64_t n = in.dim(int(axis));
  const bool exclusive = c.node.i("exclusive") != 0, reverse = c.node.i("reverse") != 0;
  dispatch_elem(in.dtype, [&]<class E>() {
    using T = typename E::T;
    using A = std::conditional_t<E::kind == ElemKind::floating, double, int64_t>;
    const T* src = in.as<const T>();
    T* dst = out.as<T>();
    parallel_for(outer * inner, in.numel > parallel_min_elements(), [&](int64_t o) {
      const int64_t base = (o / inner) * n * inner + o % inner;
      A acc = A(0);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t j = base + (reverse ? n - 1 - k : k) * inner;
        A v;
        if constexpr (E::kind == ElemKind::floating) v = E::to_f64(src[j]);
        else v = E::to_i64(src[j]);
        if (!exclusive) acc = fn::Wrap<A>::add(acc, v);  // integers wrap as numpy's cumsum
        if constexpr (E::kind == ElemKind::floating) dst[j] = E::from_f64(acc);
        else dst[j] = E::from_i64(acc);
        if (exclusive) acc = fn::Wrap<A>::add(acc, v);
      }
    });
  });
}

void Clip_forward(KernelCtx& c) {
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsNumber<T>) {
      fn::Clip<T> f{clip_bound<T>(c, 1, std::numeric_limits<T>::lowest()),
                    clip_bound<T>(c, 2, std::numeric_limits<T>::max())};
      broadcast_map<T, T>(c.out(0), f, c.in(0));
    } else {
      unsupported(c, c.in(0).dtype);
    }
  });
}

void Softmax_forward(KernelCtx& c) { softmax_forward<false>(c); }

// Softmax(Where(mask, fill, x)) along the last axis (fill_when 0: Where(mask, x, fill)), the same
// values as the two nodes, without Where's tensor.
void MaskedSoftmax_forward(KernelCtx& c) {
  const TensorRef& x = c.in(0);
  if (x.numel == 0) return;
  const int64_t n = x.dim(x.rank() - 1), outer = x.numel / n;
  const MaskRows m = mask_rows(c.in(1), *x.shape);
  const bool when = c.node.i("fill_when") != 0;
  dispatch_dtype(x.dtype, [&]<class T>() {
    if constexpr (kIsFloat<T>) {
      const T fill = T(c.node.f("fill"));
      const T* px = x.as<const T>();
      T* py = c.out(0).as<T>();
      split_rows(outer, x.numel > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
        softmax_rows<T, false, true>(px, py, lo, hi, n, 1, m.data.data(), m.start.data(), when, fill);
      });
    } else {
      unsupported(c, x.dtype);
    }
  });
}
void LogSoftmax_forward(KernelCtx& c) { softmax_forward<true>(c); }

// FusedAttention (graph/op_table.h, graph/attention.h): per head, on one thread, in blocks of
// rows of p (exec/cpu/attention.h): S = scale * q k^T over the columns the block reaches, written
// into p's rows; each row's softmax in place, as MaskedSoftmax / Softmax compute it (unmasked where the
// mask leaves the row's reach whole), the columns past its reach zeroed; then that block's rows of
// y = p v (nan_to_zero: p's NaNs read as 0). The products read q, k, v and write y where they are
// (a head's rows H * D apart with heads 1).
void FusedAttention_forward(KernelCtx& c) {
  const AttentionDims a = attention_dims_of(c, 0);
  if (a.count == 0 || a.tq == 0) return;
  const AttentionRows rows = attention_rows(c, a, 3);
  const double scale = c.node.f("scale");
  const bool nan_to_zero = c.node.i("nan_to_zero") != 0;
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsFloat<T>) {
      // heads 2: q, k and v one tensor, input 0 (a.k_at and a.v_at find k and v in it).
      const T* q = c.in(0).as<const T>();
      const T *k = a.packed ? q : c.in(1).as<const T>(), *v = a.packed ? q : c.in(2).as<const T>();
      T *y = c.out(0).as<T>(), *p = c.out(1).as<T>();
      const T fill = T(rows.fill);
      const int64_t zero = 0, lq = a.q_stride(), lk = a.k_stride(), lv = a.v_stride(), ly = a.y_stride();
      const bool parallel = a.count > 1 && a.count * a.tq * a.tk * (a.d + a.dv) >= blas_split_min_work();
      parallel_for(a.count, parallel, [&](int64_t i) {
        const T *qh = q + a.q_at(i), *kh = k + a.k_at(i), *vh = v + a.v_at(i);
        T *yh = y + a.y_at(i), *ph = p + i * a.tq * a.tk;
        for (int64_t r0 = 0; r0 < a.tq; r0 += kAttentionRowBlock) {
          const int64_t r1 = std::min(a.tq, r0 + kAttentionRowBlock), l = rows.block_reach(a, i, r0, r1);
          // k as rows [Tk, D] (heads 1) or as kt [D, Tk].
          blas_gemm(false, a.heads, r1 - r0, l, a.d, T(scale), qh + r0 * lq, lq, kh, lk, T(0), ph + r0 * a.tk, a.tk);
          for (int64_t r = r0; r < r1; ++r) {
            T* row = ph + r * a.tk;
            const int64_t o = i * a.tq + r, n = rows.reach(o);
            if (n == 0) continue;  // no keys (Tk 0): y is 0, as the product of empty p and v makes it
            if (rows.masked_within(o))
              softmax_rows<T, false, true>(row, row, 0, 1, n, 1, rows.mask_row(o), &zero, rows.fill_when, fill);
            else
              softmax_rows<T, false>(row, row, 0, 1, n, 1);
            std::fill(row + n, row + a.tk, T(0));
          }
          thread_local std::vector<T> zeroed;
          const T* pb = nan_to_zero ? attention_nan_zeroed(ph + r0 * a.tk, r1 - r0, a.tk, l, zeroed) : ph + r0 * a.tk;
          blas_gemm(false, false, r1 - r0, a.dv, l, T(1), pb, a.tk, vh, lv, T(0), yh + r0 * ly, ly);
        }
      });
    } else {
      unsupported(c, c.in(0).dtype);
    }
  });
}

namespace {
// MatMul, or FusedMatMul's product with its transA / transB, times alpha.
void matmul_any(KernelCtx& c, bool ta, bool tb, double alpha = 1) {
  if (is_16bit_float(c.in(0).dtype)) return in_float(c, [&](KernelCtx& fc) { matmul<float>(fc, ta, tb, alpha); });
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsNumber<T>) matmul<T>(c, ta, tb, alpha);
    else unsupported(c, c.in(0).dtype);
  });
}

}  // namespace

void MatMul_forward(KernelCtx& c) { matmul_any(c, false, false); }

void Gemm_forward(KernelCtx& c) {
  if (is_16bit_float(c.in(0).dtype)) return in_float(c, gemm_op<float>);
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (kIsNumber<T>) gemm_op<T>(c);
    else unsupported(c, c.in(0).dtype);
  });
}

namespace {
// Relu's functor on Y in place.
void relu_in_place(KernelCtx& c) {
  const TensorRef& y = c.out(0);
  if (half_map<uint16_t>(y.dtype, y, fn::Relu{}, y)) return;
  dispatch_dtype(y.dtype, [&]<class T>() {
    if constexpr (kIsNumber<T>) broadcast_map<T, T>(y, fn::Relu{}, y);
    else unsupported(c, y.dtype);
  });
}
}  // namespace

// Gemm, then Relu on Y: the values of the two nodes it replaced.
void FusedGemm_forward(KernelCtx& c) {
  Gemm_forward(c);
  relu_in_place(c);
}

// MatMul (each operand possibly stored with its last two dims swapped: transA, transB), plus the
// bias [N] along Y's rows, then Relu. In f32 / f64 the bias is added with the product (matmul
// above: one pass over Y fewer than the product and then the bias, and the sum rounded once).
// Other dtypes: the product, then Add's functor.
void FusedMatMul_forward(KernelCtx& c) {
  const bool ta = c.node.i("transA") != 0, tb = c.node.i("transB") != 0;
  const double alpha = c.node.f("alpha");
  const TensorRef& y = c.out(0);
  if (c.has_in(2) && (y.dtype == DType::f32 || y.dtype == DType::f64)) {
    dispatch_dtype(y.dtype, [&]<class T>() {
      if constexpr (kIsFloat<T>) matmul<T>(c, ta, tb, alpha, c.in(2).as<const T>());  // bias [N] (shape_FusedMatMul)
    });
    if (c.node.s("activation") == "Relu") relu_in_place(c);
    return;
  }
  matmul_any(c, ta, tb, alpha);
  if (c.has_in(2)) {
    const TensorRef& bias = c.in(2);
    if (!half_map<uint16_t>(y.dtype, y, fn::Add{}, y, bias))
      dispatch_dtype(y.dtype, [&]<class T>() {
        if constexpr (kIsNumber<T>) broadcast_map<T, T, T>(y, fn::Add{}, y, bias);
        else unsupported(c, y.dtype);
      });
  }
  if (c.node.s("activation") == "Relu") relu_in_place(c);
}

}  // namespace onnxdp
