// Shape rules of the math ops (see graph/op_table.h).
#include <initializer_list>

#include "graph/attention.h"
#include "graph/graph.h"

namespace onnxdp {

namespace {

// The dtypes each family of ops computes in (the ONNX type constraints, cut to the dtypes onnxdp
// holds). Elementwise ops also take f16 / bf16 (the CPU computes them in float); softmax and the
// matrix products reject them by name.
const std::initializer_list<DType> kFloat = {DType::f32, DType::f64, DType::f16, DType::bf16};
const std::initializer_list<DType> kSigned = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                              DType::i64, DType::i32, DType::i8};
const std::initializer_list<DType> kNumeric = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64,
                                               DType::i32, DType::i8,  DType::u8};
const std::initializer_list<DType> kFloatWide = {DType::f32, DType::f64};
const std::initializer_list<DType> kNumericWide = {DType::f32, DType::f64, DType::i64,
                                                   DType::i32, DType::i8,  DType::u8};
const std::initializer_list<DType> kBlas = {DType::f32, DType::f64, DType::i64, DType::i32};
// MatMul and Gemm also take 16-bit floats (computed in float, rounded once).
const std::initializer_list<DType> kProducts = {DType::f32, DType::f64, DType::i64, DType::i32, DType::f16, DType::bf16};

std::string dtype_list(std::initializer_list<DType> ok) {
  std::string s;
  for (DType t : ok) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

DType check_dtype(const ShapeCtx& c, int k, std::initializer_list<DType> ok) {
  DType t = c.dtype(k);
  for (DType o : ok)
    if (o == t) return t;
  c.fail("input {} ('{}') is {}; onnxdp runs this op on {}", k, c.in(k).name, dtype_name(t), dtype_list(ok));
}

void same_dtype(const ShapeCtx& c, int a, int b) {
  if (c.dtype(a) != c.dtype(b))
    c.fail("inputs {} and {} have different dtypes ({} and {})", a, b, dtype_name(c.dtype(a)),
           dtype_name(c.dtype(b)));
}

Shape broadcast_or_fail(const ShapeCtx& c, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const Error& e) {
    c.fail("{}", e.what());
  }
}

// Binary numpy-broadcasting op, both inputs of one dtype from `ok`.
void binary(ShapeCtx& c, std::initializer_list<DType> ok) {
  DType t = check_dtype(c, 0, ok);
  same_dtype(c, 0, 1);
  c.set(0, t, broadcast_or_fail(c, c.shape(0), c.shape(1)));
}

void unary(ShapeCtx& c, std::initializer_list<DType> ok) {
  c.set(0, check_dtype(c, 0, ok), c.shape(0));
}

// Min / Max: 1..n inputs of one dtype, broadcast together.
void variadic(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kNumeric);
  Shape s = c.shape(0);
  for (int k = 1; k < c.num_inputs(); ++k) {
    same_dtype(c, 0, k);
    s = broadcast_or_fail(c, s, c.shape(k));
  }
  c.set(0, t, s);
}

void softmax_like(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kFloatWide);
  int64_t rank = int64_t(c.shape(0).size());
  if (rank == 0) c.fail("input 0 is a scalar; softmax needs at least one dim");
  normalize_axis(c.node.i("axis"), rank, c.node);
  c.set(0, t, c.shape(0));
}

}  // namespace

void shape_Add(ShapeCtx& c) { binary(c, kNumeric); }
void shape_Sub(ShapeCtx& c) { binary(c, kNumeric); }
void shape_Mul(ShapeCtx& c) { binary(c, kNumeric); }
void shape_Div(ShapeCtx& c) { binary(c, kNumeric); }

// Pow: the result has the base's dtype; the exponent may be any numeric dtype (Pow-12+).
void shape_Pow(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kBlas);
  check_dtype(c, 1, kNumericWide);
  c.set(0, t, broadcast_or_fail(c, c.shape(0), c.shape(1)));
}

void shape_Min(ShapeCtx& c) { variadic(c); }
void shape_Max(ShapeCtx& c) { variadic(c); }

void shape_Sqrt(ShapeCtx& c) { unary(c, kFloat); }
void shape_Exp(ShapeCtx& c) { unary(c, kFloat); }
void shape_Log(ShapeCtx& c) { unary(c, kFloat); }
void shape_Neg(ShapeCtx& c) { unary(c, kSigned); }
void shape_Abs(ShapeCtx& c) { unary(c, kNumeric); }
void shape_Reciprocal(ShapeCtx& c) { unary(c, kFloat); }
void shape_Relu(ShapeCtx& c) { unary(c, kSigned); }
void shape_LeakyRelu(ShapeCtx& c) { unary(c, kFloat); }
void shape_Sigmoid(ShapeCtx& c) { unary(c, kFloat); }
void shape_Tanh(ShapeCtx& c) { unary(c, kFloat); }
void shape_Erf(ShapeCtx& c) { unary(c, kFloat); }
void shape_Softplus(ShapeCtx& c) { unary(c, kFloat); }
void shape_Sin(ShapeCtx& c) { unary(c, kFloat); }
void shape_Cos(ShapeCtx& c) { unary(c, kFloat); }
void shape_HardSigmoid(ShapeCtx& c) { unary(c, kFloat); }
void shape_HardSwish(ShapeCtx& c) { unary(c, kFloat); }
void shape_Elu(ShapeCtx& c) { unary(c, kFloat); }
void shape_Selu(ShapeCtx& c) { unary(c, kFloat); }
void shape_Celu(ShapeCtx& c) {
  if (c.node.f("alpha") == 0) c.fail("alpha must not be 0");
  unary(c, kFloat);
}
void shape_Mish(ShapeCtx& c) { unary(c, kFloat); }
void shape_Softsign(ShapeCtx& c) { unary(c, kFloat); }
void shape_Sign(ShapeCtx& c) { unary(c, kNumeric); }
// The slope broadcasts to x (unidirectionally: the output has x's shape).
void shape_PRelu(ShapeCtx& c) {
  if (broadcast_or_fail(c, c.shape(0), c.shape(1)) != c.shape(0))
    c.fail("the slope {} does not broadcast to x {}", shape_str(c.shape(1)), shape_str(c.shape(0)));
  binary(c, kSigned);
}

// CumSum(x, axis): the axis a known integer scalar (or one-element tensor).
void shape_CumSum(ShapeCtx& c) {
  const Tensor& a = c.require_constant(1, "axis");
  if (!dtype_is_integer(a.dtype()) || a.numel() != 1) c.fail("input 1 (the axis) must be one integer");
  normalize_axis(a.to_i64()[0], int64_t(c.shape(0).size()), c.node);
  unary(c, kNumeric);
}

void shape_Mod(ShapeCtx& c) {
  const int64_t fmod = c.node.i("fmod");
  if (fmod != 0 && fmod != 1) c.fail("attribute fmod must be 0 or 1, not {}", fmod);
  binary(c, kNumeric);
  if (fmod == 0 && dtype_is_float(c.in(0).dtype))
    c.fail("Mod of {} needs fmod=1 (fmod=0 is integer modulo)", dtype_name(c.in(0).dtype));
}

void shape_Gelu(ShapeCtx& c) {
  const std::string& a = c.node.s("approximate");
  if (a != "none" && a != "tanh") c.fail("approximate = '{}'; it must be 'none' or 'tanh'", a);
  unary(c, kFloat);
}

// Clip: min (input 1) and max (input 2) are optional one-element tensors. Their dtype is the
// input's, or f32 for the bounds the importer made from Clip-6's float attributes.
void shape_Clip(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kNumericWide);
  for (int k = 1; k <= 2; ++k) {
    if (!c.has(k)) continue;
    if (shape_numel(c.shape(k)) != 1)
      c.fail("input {} ('{}', the {} bound) has shape {}; it must be a scalar", k, c.in(k).name,
             k == 1 ? "min" : "max", shape_str(c.shape(k)));
    if (c.dtype(k) != t && !(c.dtype(k) == DType::f32 && dtype_is_float(t)))
      c.fail("input {} ('{}') is {}, input 0 is {}", k, c.in(k).name, dtype_name(c.dtype(k)), dtype_name(t));
  }
  c.set(0, t, c.shape(0));
}

// Softmax / LogSoftmax with Softmax-13 semantics: normalised along `axis` only. (The importer
// rewrites the older "flatten to 2-D at axis" form.)
void shape_Softmax(ShapeCtx& c) { softmax_like(c); }

// MaskedSoftmax: Softmax's rule along the last axis, with the fill a float attribute and the mask
// bool, broadcast to x.
void shape_MaskedSoftmax(ShapeCtx& c) {
  softmax_like(c);
  const int64_t rank = int64_t(c.shape(0).size());
  if (normalize_axis(c.node.i("axis"), rank, c.node) != rank - 1) c.fail("the axis must be the last");
  if (!c.node.has("fill")) c.fail("attribute 'fill' is required");
  if (c.dtype(1) != DType::boolean) c.fail("the mask is {}, not bool", dtype_name(c.dtype(1)));
  if (broadcast_or_fail(c, c.shape(1), c.shape(0)) != c.shape(0))
    c.fail("the mask {} does not broadcast to x {}", shape_str(c.shape(1)), shape_str(c.shape(0)));
}
void shape_LogSoftmax(ShapeCtx& c) { softmax_like(c); }

// FusedAttention: q, k, v (and the mask) as graph/attention.h says; y and p in q's dtype.
void shape_FusedAttention(ShapeCtx& c) {
  const AttentionDims a = check_attention_inputs(c, 0, 3);
  c.set(0, c.dtype(0), a.y_shape());
  c.set(1, c.dtype(0), a.p_shape());
}

// MatMul as numpy.matmul: a [..., M, K] x b [..., K, N] -> [..., M, N] with the batch dims
// broadcast; a 1-D a is [1, K] and a 1-D b is [K, 1], their added dim removed from the result.
void shape_MatMul(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kProducts);
  same_dtype(c, 0, 1);
  Shape a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) c.fail("MatMul of a scalar (shapes {} and {})", shape_str(a), shape_str(b));
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  int64_t m = a[a.size() - 2], ka = a.back(), kb = b[b.size() - 2], n = b.back();
  if (ka != kb)
    c.fail("inner dims differ: {} x {} (K = {} and {})", shape_str(c.shape(0)), shape_str(c.shape(1)), ka, kb);
  Shape batch = broadcast_or_fail(c, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  Shape out = batch;
  if (!a1) out.push_back(m);
  if (!b1) out.push_back(n);
  c.set(0, t, out);
}

// Gemm: Y [M, N] = alpha * A' [M, K] x B' [K, N] + beta * C, A' = transA ? A^T : A (likewise B);
// C (optional) broadcasts to [M, N] one way.
void shape_Gemm(ShapeCtx& c) {
  DType t = check_dtype(c, 0, kProducts);
  same_dtype(c, 0, 1);
  const Shape &a = c.shape(0), &b = c.shape(1);
  if (a.size() != 2 || b.size() != 2)
    c.fail("A and B must be 2-D, they are {} and {}", shape_str(a), shape_str(b));
  bool ta = c.node.i("transA") != 0, tb = c.node.i("transB") != 0;
  int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (ka != kb)
    c.fail("inner dims differ: A {} (transA={}) and B {} (transB={})", shape_str(a), int(ta), shape_str(b), int(tb));
  Shape y{m, n};
  if (c.has(2)) {
    same_dtype(c, 0, 2);
    const Shape& cs = c.shape(2);
    bool ok = cs.size() <= 2;
    for (size_t d = 0; ok && d < cs.size(); ++d) {
      int64_t want = y[d + 2 - cs.size()];
      ok = cs[d] == want || cs[d] == 1;
    }
    if (!ok) c.fail("C has shape {}, which does not broadcast to the result {}", shape_str(cs), shape_str(y));
  }
  c.set(0, t, y);
}

// Gemm's rule; the activation is one the kernels apply.
void shape_FusedGemm(ShapeCtx& c) {
  if (c.node.s("activation") != "Relu") c.fail("activation '{}' is not one FusedGemm has (Relu)", c.node.s("activation"));
  shape_Gemm(c);
}

// MatMul's rule for A and B of rank >= 2, each with its last two dims swapped when transA /
// transB says so; the bias is [N] of A's dtype.
void shape_FusedMatMul(ShapeCtx& c) {
  const std::string& act = c.node.s("activation");
  if (!act.empty() && act != "Relu") c.fail("activation '{}' is not one FusedMatMul has (none, Relu)", act);
  Shape a = c.shape(0), b = c.shape(1);
  if (a.size() < 2 || b.size() < 2)
    c.fail("A and B must have 2 or more dims, they are {} and {}", shape_str(a), shape_str(b));
  const bool ta = c.node.i("transA") != 0, tb = c.node.i("transB") != 0;
  if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  const int64_t K = b[b.size() - 2], N = b.back();
  if (a.back() != K)
    c.fail("A {}{} and B {}{} do not multiply: {} != {}", shape_str(c.shape(0)), ta ? " (transposed)" : "",
           shape_str(c.shape(1)), tb ? " (transposed)" : "", a.back(), K);
  Shape y = broadcast_or_fail(c, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  const DType t = check_dtype(c, 0, kProducts);
  same_dtype(c, 0, 1);
  y.push_back(a[a.size() - 2]);
  y.push_back(N);
  c.set(0, t, y);
  if (c.has(2)) {
    same_dtype(c, 0, 2);
    if (c.shape(2) != Shape{N}) c.fail("the bias has shape {}, expected [{}]", shape_str(c.shape(2)), N);
  }
}

}  // namespace onnxdp
