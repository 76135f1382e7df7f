// Gradient rules of the math ops (see graph/autodiff.h). Each rule emits ordinary nodes.
#include <cmath>

#include "graph/autodiff.h"

namespace onnxdp {

namespace {
DType dt(GradCtx& c) { return c.in(0).dtype; }
// Gradient of a broadcasting binary op's input k, given the full-shape gradient g.
void add_reduced(GradCtx& c, int k, ValueId g) { c.add(k, c.reduce_to(g, c.in(k).shape)); }
// Transposes the last two axes.
ValueId swap_last2(GradCtx& c, ValueId v) {
  size_t r = c.graph.value(v).shape.size();
  std::vector<int64_t> perm(r);
  for (size_t i = 0; i < r; ++i) perm[i] = int64_t(i);
  std::swap(perm[r - 1], perm[r - 2]);
  return c.emit(Op::Transpose, {v}, {{"perm", Attr(perm)}});
}
}  // namespace

void grad_Add(GradCtx& c) {
  for (int k = 0; k < 2; ++k)
    if (c.needs(k)) add_reduced(c, k, c.dy());
}

void grad_Sub(GradCtx& c) {
  if (c.needs(0)) add_reduced(c, 0, c.dy());
  if (c.needs(1)) add_reduced(c, 1, c.emit(Op::Neg, {c.dy()}));
}

void grad_Mul(GradCtx& c) {
  if (c.needs(0)) add_reduced(c, 0, c.emit(Op::Mul, {c.dy(), c.in_id(1)}));
  if (c.needs(1)) add_reduced(c, 1, c.emit(Op::Mul, {c.dy(), c.in_id(0)}));
}

void grad_Div(GradCtx& c) {
  // y = a / b: da = dy / b, db = -dy * y / b
  if (c.needs(0)) add_reduced(c, 0, c.emit(Op::Div, {c.dy(), c.in_id(1)}));
  if (c.needs(1)) {
    ValueId t = c.emit(Op::Div, {c.emit(Op::Mul, {c.dy(), c.out_id(0)}), c.in_id(1)});
    add_reduced(c, 1, c.emit(Op::Neg, {t}));
  }
}

void grad_Pow(GradCtx& c) {
  // y = a ^ b: da = dy * b * a^(b-1), db = dy * y * log(a)
  if (c.in(1).dtype != c.in(0).dtype) c.fail("exponent dtype differs from the base's");
  if (c.needs(0)) {
    ValueId bm1 = c.emit(Op::Sub, {c.in_id(1), c.scalar(1, dt(c))});
    ValueId d = c.emit(Op::Mul, {c.emit(Op::Mul, {c.dy(), c.in_id(1)}), c.emit(Op::Pow, {c.in_id(0), bm1})});
    add_reduced(c, 0, d);
  }
  if (c.needs(1)) {
    ValueId d = c.emit(Op::Mul, {c.emit(Op::Mul, {c.dy(), c.out_id(0)}), c.emit(Op::Log, {c.in_id(0)})});
    add_reduced(c, 1, d);
  }
}

// y = Min / Max(x_0, .., x_{n-1}), broadcasting: dy goes to the inputs equal to y, split evenly
// among ties (as torch.maximum / torch.minimum do for two), summed back to each input's shape.
static void grad_min_max(GradCtx& c) {
  const int n = int(c.node.inputs.size());
  if (n == 1) {
    c.add(0, c.dy());
    return;
  }
  const DType t = c.graph.value(c.out_id(0)).dtype;
  const int64_t onnx_t = dtype_to_onnx(t);
  std::vector<ValueId> hit(static_cast<size_t>(n));
  ValueId count = kNoValue;  // how many inputs equal y, per element of y
  for (int k = 0; k < n; ++k) {
    hit[size_t(k)] = c.emit(Op::Equal, {c.in_id(k), c.out_id(0)});
    ValueId one = c.emit(Op::Cast, {hit[size_t(k)]}, {{"to", Attr(onnx_t)}});
    count = count == kNoValue ? one : c.emit(Op::Add, {count, one});
  }
  ValueId share = c.emit(Op::Div, {c.dy(), count});
  ValueId zero = c.scalar(0, t);
  for (int k = 0; k < n; ++k)
    if (c.needs(k)) add_reduced(c, k, c.emit(Op::Where, {hit[size_t(k)], share, zero}));
}

void grad_Min(GradCtx& c) { grad_min_max(c); }
void grad_Max(GradCtx& c) { grad_min_max(c); }

void grad_Sqrt(GradCtx& c) {  // dx = dy / (2 y)
  c.add(0, c.emit(Op::Div, {c.dy(), c.emit(Op::Mul, {c.out_id(0), c.scalar(2, dt(c))})}));
}

void grad_Exp(GradCtx& c) { c.add(0, c.emit(Op::Mul, {c.dy(), c.out_id(0)})); }
void grad_Log(GradCtx& c) { c.add(0, c.emit(Op::Div, {c.dy(), c.in_id(0)})); }
void grad_Neg(GradCtx& c) { c.add(0, c.emit(Op::Neg, {c.dy()})); }

void grad_Abs(GradCtx& c) {  // sign(x) * dy, with sign(0) = 0 as PyTorch
  ValueId zero = c.scalar(0, dt(c));
  ValueId neg = c.emit(Op::Where, {c.emit(Op::Less, {c.in_id(0), zero}), c.emit(Op::Neg, {c.dy()}), zero});
  c.add(0, c.emit(Op::Where, {c.emit(Op::Greater, {c.in_id(0), zero}), c.dy(), neg}));
}

void grad_Reciprocal(GradCtx& c) {  // y = 1/x: dx = -dy * y^2
  ValueId y2 = c.emit(Op::Mul, {c.out_id(0), c.out_id(0)});
  c.add(0, c.emit(Op::Neg, {c.emit(Op::Mul, {c.dy(), y2})}));
}

// dy where y > 0, i.e. x > 0 (PyTorch: 0 at x == 0): one ReluGrad node. From the output, as
// PyTorch's threshold_backward: x is then read by Relu alone, so a producer may take Relu into
// its own kernel (graph/passes/fuse_epilogues.cpp).
void grad_Relu(GradCtx& c) { c.add(0, c.emit(Op::ReluGrad, {c.dy(), c.out_id(0)})); }

void grad_LeakyRelu(GradCtx& c) {
  ValueId zero = c.scalar(0, dt(c));
  ValueId scaled = c.emit(Op::Mul, {c.dy(), c.scalar(c.node.f("alpha"), dt(c))});
  c.add(0, c.emit(Op::Where, {c.emit(Op::Greater, {c.in_id(0), zero}), c.dy(), scaled}));
}

void grad_Sigmoid(GradCtx& c) {  // dy * y * (1 - y)
  ValueId one_minus = c.emit(Op::Sub, {c.scalar(1, dt(c)), c.out_id(0)});
  c.add(0, c.emit(Op::Mul, {c.emit(Op::Mul, {c.dy(), c.out_id(0)}), one_minus}));
}

void grad_Tanh(GradCtx& c) {  // dy * (1 - y^2)
  ValueId y2 = c.emit(Op::Mul, {c.out_id(0), c.out_id(0)});
  c.add(0, c.emit(Op::Mul, {c.dy(), c.emit(Op::Sub, {c.scalar(1, dt(c)), y2})}));
}

void grad_Erf(GradCtx& c) {  // dy * 2/sqrt(pi) * exp(-x^2)
  ValueId x2 = c.emit(Op::Mul, {c.in_id(0), c.in_id(0)});
  ValueId e = c.emit(Op::Exp, {c.emit(Op::Neg, {x2})});
  ValueId k = c.scalar(float(2.0 / std::sqrt(M_PI)), dt(c));
  c.add(0, c.emit(Op::Mul, {c.dy(), c.emit(Op::Mul, {e, k})}));
}

// exact: dy * (Phi(x) + x phi(x)); tanh: the derivative of the tanh form. One GeluGrad node.
void grad_Gelu(GradCtx& c) {
  const std::string& a = c.node.s("approximate");
  if (a != "none" && a != "tanh") c.fail("approximate '{}' is not none or tanh", a);
  c.add(0, c.emit(Op::GeluGrad, {c.dy(), c.in_id(0)}, {{"approximate", Attr(a)}}));
}

void grad_Sin(GradCtx& c) { c.add(0, c.emit(Op::Mul, {c.dy(), c.emit(Op::Cos, {c.in_id(0)})})); }

void grad_Cos(GradCtx& c) { c.add(0, c.emit(Op::Mul, {c.dy(), c.emit(Op::Neg, {c.emit(Op::Sin, {c.in_id(0)})})})); }

// dy * alpha where 0 < alpha x + beta < 1 (PyTorch's hardsigmoid_backward: -3 < x < 3), else 0.
void grad_HardSigmoid(GradCtx& c) {
  const float alpha = c.node.f("alpha"), beta = c.node.f("beta");
  ValueId t = c.emit(Op::Add, {c.emit(Op::Mul, {c.in_id(0), c.scalar(alpha, dt(c))}), c.scalar(beta, dt(c))});
  ValueId zero = c.scalar(0, dt(c));
  ValueId g = c.emit(Op::Mul, {c.dy(), c.scalar(alpha, dt(c))});
  g = c.emit(Op::Where, {c.emit(Op::Greater, {t, zero}), g, zero});
  c.add(0, c.emit(Op::Where, {c.emit(Op::Less, {t, c.scalar(1, dt(c))}), g, zero}));
}

// PyTorch's hardswish_backward: 0 for x <= -3, dy (x / 3 + 1/2) for -3 < x < 3, dy for x >= 3.
void grad_HardSwish(GradCtx& c) {
  ValueId x = c.in_id(0);
  ValueId slope = c.emit(Op::Add, {c.emit(Op::Div, {x, c.scalar(3, dt(c))}), c.scalar(0.5, dt(c))});
  ValueId g = c.emit(Op::Where, {c.emit(Op::Less, {x, c.scalar(3, dt(c))}), c.emit(Op::Mul, {c.dy(), slope}), c.dy()});
  c.add(0, c.emit(Op::Where, {c.emit(Op::Greater, {x, c.scalar(-3, dt(c))}), g, c.scalar(0, dt(c))}));
}

// Elu, Selu, Celu: dy (times gamma) for x > 0, and below dy (gamma) alpha e^x (Celu: e^(x / alpha)),
// as PyTorch's elu_backward.
static void grad_exp_linear(GradCtx& c, float alpha, float gamma, float x_scale) {
  ValueId x = c.in_id(0);
  ValueId positive = c.emit(Op::Greater, {x, c.scalar(0, dt(c))});
  ValueId e = c.emit(Op::Exp, {x_scale == 1 ? x : c.emit(Op::Mul, {x, c.scalar(x_scale, dt(c))})});
  ValueId neg = c.emit(Op::Mul, {c.dy(), c.emit(Op::Mul, {e, c.scalar(gamma * alpha, dt(c))})});
  ValueId pos = gamma == 1 ? c.dy() : c.emit(Op::Mul, {c.dy(), c.scalar(gamma, dt(c))});
  c.add(0, c.emit(Op::Where, {positive, pos, neg}));
}
void grad_Elu(GradCtx& c) { grad_exp_linear(c, c.node.f("alpha"), 1.0f, 1.0f); }
void grad_Selu(GradCtx& c) { grad_exp_linear(c, c.node.f("alpha"), c.node.f("gamma"), 1.0f); }
void grad_Celu(GradCtx& c) { grad_exp_linear(c, 1.0f, 1.0f, 1.0f / c.node.f("alpha")); }

// PyTorch's mish_backward: dy (t + x sigmoid(x) (1 - t^2)) with t = tanh(softplus(x)).
void grad_Mish(GradCtx& c) {
  ValueId x = c.in_id(0);
  ValueId t = c.emit(Op::Tanh, {c.emit(Op::Softplus, {x})});
  ValueId one_minus = c.emit(Op::Sub, {c.scalar(1, dt(c)), c.emit(Op::Mul, {t, t})});
  ValueId right = c.emit(Op::Mul, {c.emit(Op::Mul, {x, c.emit(Op::Sigmoid, {x})}), one_minus});
  c.add(0, c.emit(Op::Mul, {c.dy(), c.emit(Op::Add, {t, right})}));
}

// y = x / (1 + |x|): dy / (1 + |x|)^2 (the derivative is 1 / (1 + |x|)^2 on both sides of 0).
void grad_Softsign(GradCtx& c) {
  ValueId d = c.emit(Op::Add, {c.scalar(1, dt(c)), c.emit(Op::Abs, {c.in_id(0)})});
  c.add(0, c.emit(Op::Div, {c.dy(), c.emit(Op::Mul, {d, d})}));
}

void grad_Sign(GradCtx& c) { c.add(0, c.emit(Op::Mul, {c.dy(), c.scalar(0, dt(c))})); }  // 0, as torch.sign's

// dx = dy where x > 0, slope dy elsewhere; dslope = dy x where x <= 0, summed to the slope's shape
// (PyTorch's prelu backward).
void grad_PRelu(GradCtx& c) {
  ValueId x = c.in_id(0), zero = c.scalar(0, dt(c));
  ValueId positive = c.emit(Op::Greater, {x, zero});
  if (c.needs(0)) c.add(0, c.emit(Op::Where, {positive, c.dy(), c.emit(Op::Mul, {c.dy(), c.in_id(1)})}));
  if (c.needs(1)) add_reduced(c, 1, c.emit(Op::Where, {positive, zero, c.emit(Op::Mul, {c.dy(), x})}));
}

// x_j reaches every y_i with i after j (or before, reversed): dx is dy's cumulative sum the other
// way, exclusive as the forward is.
void grad_CumSum(GradCtx& c) {
  if (!c.needs(0)) return;
  c.add(0, c.emit(Op::CumSum, {c.dy(), c.in_id(1)},
                  {{"exclusive", Attr(c.node.i("exclusive"))}, {"reverse", Attr(int64_t(c.node.i("reverse") == 0))}}));
}

// y = fmod(a, b) = a - trunc(a / b) b: da = dy, db = -dy trunc(a / b) = dy (y - a) / b.
void grad_Mod(GradCtx& c) {
  if (c.needs(0)) add_reduced(c, 0, c.dy());
  if (c.needs(1)) {
    ValueId q = c.emit(Op::Div, {c.emit(Op::Sub, {c.out_id(0), c.in_id(0)}), c.in_id(1)});
    add_reduced(c, 1, c.emit(Op::Mul, {c.dy(), q}));
  }
}

void grad_Softplus(GradCtx& c) { c.add(0, c.emit(Op::Mul, {c.dy(), c.emit(Op::Sigmoid, {c.in_id(0)})})); }

void grad_Clip(GradCtx& c) {  // dy where min <= x <= max (PyTorch's clamp passes the bounds through)
  ValueId zero = c.scalar(0, dt(c));
  ValueId g = c.dy();
  if (c.node.has_input(1)) g = c.emit(Op::Where, {c.emit(Op::Less, {c.in_id(0), c.in_id(1)}), zero, g});
  if (c.node.has_input(2)) g = c.emit(Op::Where, {c.emit(Op::Greater, {c.in_id(0), c.in_id(2)}), zero, g});
  c.add(0, g);
}

void grad_Softmax(GradCtx& c) {  // dx = y * (dy - sum(dy * y, axis)): one SoftmaxGrad node
  c.add(0, c.emit(Op::SoftmaxGrad, {c.dy(), c.out_id(0)}, {{"axis", Attr(c.node.i("axis"))}}));
}

void grad_LogSoftmax(GradCtx& c) {  // dx = dy - exp(y) * sum(dy, axis): one LogSoftmaxGrad node
  c.add(0, c.emit(Op::LogSoftmaxGrad, {c.dy(), c.out_id(0)}, {{"axis", Attr(c.node.i("axis"))}}));
}

void grad_MatMul(GradCtx& c) {
  // y = a @ b over the last two axes, batch axes broadcast: da = dy @ b^T, db = a^T @ dy, each
  // summed over the batch axes its input was broadcast along.
  const Shape &sa = c.in(0).shape, &sb = c.in(1).shape;
  if (sa.size() < 2 || sb.size() < 2) gradient_missing(c);
  if (sb.size() == 2) {
    // A Linear layer: a [..., m, k] @ W [k, n]. Its rows are independent, so with a and dy seen
    // as [r, k] and [r, n] (r = the product of a's leading dims): dW = a^T dy is one GEMM summing
    // over every row of every batch (no transposed copy of a, no [batch, k, n] partial products to
    // reduce), and da = dy W^T one more.
    const int64_t k = sb[0], n = sb[1], r = shape_numel(Shape(sa.begin(), sa.end() - 1));
    auto reshape = [&](ValueId v, const Shape& s) {  // allowzero: a 0 in s is a 0, not "keep"
      return c.emit(Op::Reshape, {v, c.ints(s)}, {{"allowzero", Attr(int64_t(1))}});
    };
    auto rows = [&](ValueId v, int64_t cols) { return sa.size() == 2 ? v : reshape(v, {r, cols}); };
    auto gemm = [&](ValueId x, ValueId w, int64_t ta, int64_t tb) {
      return c.emit(Op::Gemm, {x, w}, {{"transA", Attr(ta)}, {"transB", Attr(tb)}});
    };
    const ValueId dy = rows(c.dy(), n);
    if (c.needs(0)) {
      ValueId da = gemm(dy, c.in_id(1), 0, 1);  // [r, k]
      c.add(0, sa.size() == 2 ? da : reshape(da, sa));
    }
    if (c.needs(1)) c.add(1, gemm(rows(c.in_id(0), k), dy, 1, 0));
    return;
  }
  if (c.needs(0)) add_reduced(c, 0, c.emit(Op::MatMul, {c.dy(), swap_last2(c, c.in_id(1))}));
  if (c.needs(1)) add_reduced(c, 1, c.emit(Op::MatMul, {swap_last2(c, c.in_id(0)), c.dy()}));
}

void grad_Gemm(GradCtx& c) {
  // y = alpha * A' B' + beta * C, with A' = transA ? A^T : A and B' = transB ? B^T : B.
  int64_t ta = c.node.i("transA"), tb = c.node.i("transB");
  float alpha = c.node.f("alpha"), beta = c.node.f("beta");
  auto gemm = [&](ValueId a, ValueId b, int64_t t_a, int64_t t_b) {
    return c.emit(Op::Gemm, {a, b}, {{"alpha", Attr(alpha)}, {"transA", Attr(t_a)}, {"transB", Attr(t_b)}});
  };
  if (c.needs(0))  // dA' = dy B'^T; dA = transA ? (dA')^T = B' dy^T : dA'
    c.add(0, ta ? gemm(c.in_id(1), c.dy(), tb, 1) : gemm(c.dy(), c.in_id(1), 0, 1 - tb));
  if (c.needs(1))  // dB' = A'^T dy; dB = transB ? dy^T A' : dB'
    c.add(1, tb ? gemm(c.dy(), c.in_id(0), 1, ta) : gemm(c.in_id(0), c.dy(), 1 - ta, 0));
  if (c.needs(2)) {
    ValueId g = beta == 1.0f ? c.dy() : c.emit(Op::Mul, {c.dy(), c.scalar(beta, dt(c))});
    add_reduced(c, 2, g);
  }
}

// Made after autodiff (graph/passes/fuse_epilogues.cpp): a graph holding one is not differentiated.
void grad_FusedGemm(GradCtx& c) { gradient_missing(c); }
void grad_FusedMatMul(GradCtx& c) { gradient_missing(c); }
void grad_MaskedSoftmax(GradCtx& c) { gradient_missing(c); }

// FusedAttention (graph/passes/fuse_attention.h): one FusedAttentionGrad node for dq, dk and dv from dy and
// the saved probabilities p. The mask gets none (bool); p is kept for this node alone, so a
// gradient reaching it is refused.
void grad_FusedAttention(GradCtx& c) {
  if (c.dy(1) != kNoValue) gradient_missing(c);
  if (c.dy(0) == kNoValue) return;
  std::vector<ValueId> ins = {c.dy(0), c.in_id(0), c.in_id(1), c.in_id(2), c.out_id(1)};  // heads 2: k, v absent
  if (c.node.has_input(3)) ins.push_back(c.in_id(3));
  const int n = c.node.i("heads") == 2 ? 1 : 3;  // heads 2: dqkv alone
  const std::vector<ValueId> g = c.emit_n(Op::FusedAttentionGrad, ins, c.node.attrs, n);
  for (int k = 0; k < n; ++k)
    if (c.needs(k)) c.add(k, g[size_t(k)]);
}

}  // namespace onnxdp
