// Gradient rules of the math, logical, tensor and reduction ops, checked in float64 against
// central differences (tests/graph/gradcheck.h).
#include "tests/graph/gradcheck.h"

using namespace onnxdp;
using namespace onnxdp::testing;

TEST_CASE("autodiff: Gemm + Relu, all transposes and bias broadcast") {
  for (int64_t ta = 0; ta < 2; ++ta)
    for (int64_t tb = 0; tb < 2; ++tb) {
      Case c;
      ValueId a = c.param("a", ta ? Shape{4, 3} : Shape{3, 4});
      ValueId b = c.param("b", tb ? Shape{5, 4} : Shape{4, 5});
      ValueId bias = c.param("bias", {5});
      ValueId y = c.node(Op::Gemm, {a, b, bias},
                         {{"transA", Attr(ta)}, {"transB", Attr(tb)}, {"alpha", Attr(0.7f)}, {"beta", Attr(1.3f)}});
      gradcheck(c, c.node(Op::Relu, {y}));
    }
}

TEST_CASE("autodiff: batched broadcasting MatMul") {
  Case c;
  ValueId a = c.param("a", {2, 1, 3, 4});
  ValueId b = c.param("b", {3, 4, 2});
  gradcheck(c, c.node(Op::MatMul, {a, b}));
}

TEST_CASE("autodiff: MatMul by a 2-D weight (a Linear layer), a of rank 2, 3 and 4") {
  for (Shape sa : {Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 3, 1, 4}, Shape{2, 0, 3, 4}}) {
    INFO("a " << shape_str(sa));
    Case c;
    ValueId a = c.param("a", sa);
    ValueId w = c.param("w", {4, 5});
    gradcheck(c, c.node(Op::Tanh, {c.node(Op::MatMul, {a, w})}));
  }
  // Only the weight needs a gradient: a is a constant.
  Case c;
  ValueId w = c.param("w", {4, 2});
  Tensor x(DType::f64, {2, 3, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.as<double>()[i] = 0.1 * double(i % 7) - 0.3;
  gradcheck(c, c.node(Op::MatMul, {c.constant(x, "x"), w}));
}

TEST_CASE("autodiff: a Linear weight's gradient is one Gemm over the rows, without Transpose or ReduceSum") {
  // y = x [2, 3, 4] @ w [4, 5]: dw = Gemm(transA) of x and dy seen as [6, 4] and [6, 5]; dx =
  // Gemm(transB) of dy and w, reshaped back to [2, 3, 4].
  Case c;
  ValueId x = c.param("x", {2, 3, 4});
  ValueId w = c.param("w", {4, 5});
  ValueId y = c.node(Op::MatMul, {x, w});
  ValueId loss = c.node(Op::ReduceSum, {c.node(Op::Tanh, {y})}, {{"keepdims", Attr(int64_t(0))}});
  const size_t forward_nodes = c.g.nodes.size();
  std::vector<ValueId> grads = autodiff(c.g, loss, {x, w});
  verify(c.g);
  CHECK(c.g.value(grads[0]).shape == Shape{2, 3, 4});
  CHECK(c.g.value(grads[1]).shape == Shape{4, 5});
  std::map<Op, int> count;
  for (size_t i = forward_nodes; i < c.g.nodes.size(); ++i) ++count[c.g.nodes[i].op];
  CHECK(count[Op::Transpose] == 0);
  CHECK(count[Op::ReduceSum] == 0);
  CHECK(count[Op::MatMul] == 0);
  CHECK(count[Op::Gemm] == 2);
  const Node* dw = nullptr;
  for (const Node& n : c.g.nodes)
    if (!n.outputs.empty() && n.outputs[0] == grads[1]) dw = &n;
  REQUIRE(dw != nullptr);
  CHECK(dw->op == Op::Gemm);
  CHECK(dw->i("transA") == 1);
  CHECK(dw->i("transB") == 0);
  CHECK(c.g.value(dw->inputs[0]).shape == Shape{6, 4});
  CHECK(c.g.value(dw->inputs[1]).shape == Shape{6, 5});
}

TEST_CASE("autodiff: broadcasting arithmetic") {
  Case c;
  ValueId a = c.param("a", {2, 3}, 0.5, 1.5);
  ValueId b = c.param("b", {3}, 0.5, 1.5);
  ValueId s = c.node(Op::Sub, {c.node(Op::Add, {a, b}), c.node(Op::Mul, {a, b})});
  ValueId d = c.node(Op::Div, {s, b});
  gradcheck(c, c.node(Op::Pow, {c.node(Op::Add, {d, c.node(Op::Mul, {a, a})}), b}));
}

TEST_CASE("autodiff: unary math") {
  for (Op op : {Op::Sqrt, Op::Exp, Op::Log, Op::Neg, Op::Reciprocal, Op::Sigmoid, Op::Tanh, Op::Erf, Op::Gelu,
                Op::Softplus, Op::Abs, Op::Relu, Op::LeakyRelu, Op::Sin, Op::Cos, Op::Elu, Op::Selu, Op::Celu,
                Op::Mish, Op::Softsign}) {
    CAPTURE(op_name(op));
    Case c;
    bool positive = op == Op::Sqrt || op == Op::Log || op == Op::Reciprocal;
    ValueId x = c.param("x", {2, 5}, positive ? 0.5 : 0.2, positive ? 2.0 : 1.5, !positive);
    gradcheck(c, c.node(op, {x}));
  }
}

TEST_CASE("autodiff: Relu's gradient is one ReluGrad node on (dy, y), a NaN x passes dy, as PyTorch") {
  // loss = sum(Relu(x) * R): dx = R where x > 0 or x is NaN (PyTorch: relu keeps NaN, and
  // threshold_backward zeroes only where y <= 0), else 0; R has no zeros.
  Case c;
  ValueId x = c.param("x", {6});
  const double nan = std::nan("");
  const std::vector<double> xs = {-1.5, 0, 2, nan, 0.25, -0.0}, rs = {0.5, -0.75, 1.25, -2, 3, 4};
  for (int64_t i = 0; i < 6; ++i) c.set(c.g.value(x).data, i, xs[size_t(i)]);
  Tensor r(DType::f64, {6});
  for (int64_t i = 0; i < 6; ++i) r.as<double>()[i] = rs[size_t(i)];
  ValueId y = c.node(Op::Relu, {x});
  ValueId loss = c.node(Op::ReduceSum, {c.node(Op::Mul, {y, c.constant(r, "R")})}, {{"keepdims", Attr(int64_t(0))}});
  const int before = int(c.g.nodes.size());
  ValueId dx = autodiff(c.g, loss, {x})[0];
  int relu_grads = 0;
  for (size_t k = size_t(before); k < c.g.nodes.size(); ++k) {
    const Node& n = c.g.nodes[k];
    CHECK_MESSAGE(n.op != Op::Greater, n.describe());
    CHECK_MESSAGE(n.op != Op::Where, n.describe());
    if (n.op == Op::ReluGrad) {
      ++relu_grads;
      CHECK(n.inputs.at(1) == y);  // from the output: x is read by Relu alone
    }
  }
  CHECK(relu_grads == 1);
  c.g.outputs = {dx};
  verify(c.g);
  const std::string name = c.g.value(dx).name;
  const std::vector<double> got = Plan(c.g).run({}).at(name).to_f64();
  const std::vector<double> want = {0, 0, 1.25, -2, 3, 0};
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == want[i]);
  }
}

TEST_CASE("autodiff: Gelu's tanh form (one GeluGrad node, as the exact form)") {
  Case c;
  ValueId x = c.param("x", {3, 5}, 0.1, 2.5, true);
  gradcheck(c, c.node(Op::Gelu, {x}, {{"approximate", Attr(std::string("tanh"))}}));
}

TEST_CASE("autodiff: HardSigmoid and HardSwish on both flat parts and the slope, Mod on both inputs") {
  // x spans (-4.5, 4.5): below -3 and above 3 both ops are flat (HardSwish: 0, then the identity).
  Case c;
  ValueId x = c.param("x", {4, 6}, 0.1, 4.5, true);
  ValueId hs = c.node(Op::HardSigmoid, {x}, {{"alpha", Attr(float(1.0 / 6.0))}, {"beta", Attr(0.5f)}});
  gradcheck(c, c.node(Op::Add, {hs, c.node(Op::HardSwish, {x})}));
  Case m;
  ValueId a = m.param("a", {3, 4}, 0.5, 5.0, true);
  ValueId b = m.param("b", {4}, 0.7, 1.9, false);
  gradcheck(m, m.node(Op::Mod, {a, b}, {{"fmod", Attr(int64_t(1))}}));
}

TEST_CASE("autodiff: PRelu's slope, per channel, summed over the rest, Sign's gradient is 0") {
  Case c;
  ValueId x = c.param("x", {2, 3, 4}, 0.2, 1.5, true);
  ValueId slope = c.param("slope", {3, 1}, 0.1, 0.5);
  ValueId s = c.node(Op::Mul, {c.node(Op::Sign, {x}), x});  // |x|, its Sign factor constant
  gradcheck(c, c.node(Op::Add, {c.node(Op::PRelu, {x, slope}), s}));
}

TEST_CASE("autodiff: CumSum, plain, exclusive and reversed") {
  for (int64_t exclusive : {0, 1})
    for (int64_t reverse : {0, 1}) {
      CAPTURE(exclusive);
      CAPTURE(reverse);
      Case c;
      ValueId x = c.param("x", {3, 4});
      ValueId y = c.node(Op::CumSum, {x, c.ints({1}, "axis")}, {{"exclusive", Attr(exclusive)}, {"reverse", Attr(reverse)}});
      gradcheck(c, c.node(Op::Mul, {y, y}));
    }
}

TEST_CASE("autodiff: CastLike passes the gradient to its input 0 only") {
  Case c;
  ValueId x = c.param("x", {2, 3});
  ValueId like = c.scalar(7.0, "like");  // only its dtype matters
  gradcheck(c, c.node(Op::Mul, {c.node(Op::CastLike, {x, like}), x}));
}

TEST_CASE("autodiff: Clip passes the gradient inside the bounds only") {
  Case c;
  ValueId x = c.param("x", {3, 4}, 0.1, 2.0, true);
  ValueId lo = c.scalar(-0.5, "lo");
  ValueId hi = c.scalar(0.8, "hi");
  gradcheck(c, c.node(Op::Clip, {x, lo, hi}));
}

TEST_CASE("autodiff: Softmax and LogSoftmax on inner and outer axes") {
  for (int64_t axis : {-1, 0, 1}) {
    Case c;
    ValueId x = c.param("x", {3, 4, 2});
    ValueId s = c.node(Op::Softmax, {x}, {{"axis", Attr(axis)}});
    gradcheck(c, c.node(Op::Add, {s, c.node(Op::LogSoftmax, {x}, {{"axis", Attr(axis)}})}));
  }
}

TEST_CASE("autodiff: Softmax's gradient is one SoftmaxGrad node of (dy, y), LogSoftmax's one LogSoftmaxGrad") {
  for (Op op : {Op::Softmax, Op::LogSoftmax}) {
    CAPTURE(op_name(op));
    Case c;
    ValueId x = c.param("x", {2, 3, 4});
    ValueId y = c.node(op, {x}, {{"axis", Attr(int64_t(1))}});
    ValueId loss = c.node(Op::ReduceSum, {c.node(Op::Tanh, {y})}, {{"keepdims", Attr(int64_t(0))}});
    const size_t forward_nodes = c.g.nodes.size();
    std::vector<ValueId> grads = autodiff(c.g, loss, {x});
    verify(c.g);
    const Node* dx = nullptr;
    std::map<Op, int> count;
    for (size_t i = forward_nodes; i < c.g.nodes.size(); ++i) {
      ++count[c.g.nodes[i].op];
      if (c.g.nodes[i].outputs[0] == grads[0]) dx = &c.g.nodes[i];
    }
    REQUIRE(dx != nullptr);
    CHECK(dx->op == (op == Op::Softmax ? Op::SoftmaxGrad : Op::LogSoftmaxGrad));
    CHECK(dx->inputs[1] == y);
    CHECK(dx->i("axis") == 1);
    CHECK(count[Op::ReduceSum] == 0);  // the loss's own ReduceSum has no gradient node
    CHECK(count[Op::Exp] == 0);
  }
}

TEST_CASE("autodiff: Where routes the gradient by the condition") {
  Case c;
  ValueId x = c.param("x", {2, 3});
  ValueId y = c.param("y", {3});
  Tensor cond(DType::boolean, {2, 3});
  for (int i = 0; i < 6; ++i) cond.as<bool>()[i] = (i % 3) != 1;
  gradcheck(c, c.node(Op::Where, {c.constant(cond, "cond"), x, y}));
}

TEST_CASE("autodiff: tensor ops re-view the gradient") {
  Case c;
  ValueId x = c.param("x", {2, 3, 4});
  ValueId y = c.param("y", {2, 2, 4});
  ValueId t = c.node(Op::Transpose, {x}, {{"perm", Attr(std::vector<int64_t>{1, 0, 2})}});   // [3, 2, 4]
  ValueId r = c.node(Op::Reshape, {t, c.ints({2, 3, 4}, "shape")});                         // [2, 3, 4]
  ValueId cat = c.node(Op::Concat, {r, y}, {{"axis", Attr(int64_t(1))}});                  // [2, 5, 4]
  ValueId sl = c.node(Op::Slice, {cat, c.ints({1, 0}, "st"), c.ints({4, 3}, "en"), c.ints({1, 2}, "ax")});  // [2, 3, 3]
  ValueId pad = c.node(Op::Pad, {sl, c.ints({0, 1, 0, 1, 0, 2}, "pads")});                  // [3, 4, 5]
  ValueId e = c.node(Op::Expand, {c.param("z", {4, 1}), c.ints({3, 4, 5}, "eshape")});
  gradcheck(c, c.node(Op::Mul, {pad, e}));
}

TEST_CASE("autodiff: reductions") {
  Case c;
  ValueId x = c.param("x", {2, 3, 4});
  ValueId s = c.node(Op::ReduceSum, {x, c.ints({1}, "a1")}, {{"keepdims", Attr(int64_t(1))}});
  ValueId m = c.node(Op::ReduceMean, {x, c.ints({0, 2}, "a2")}, {{"keepdims", Attr(int64_t(0))}});
  ValueId all = c.node(Op::ReduceMean, {x}, {{"keepdims", Attr(int64_t(0))}});
  ValueId sm = c.node(Op::Mul, {s, c.node(Op::Unsqueeze, {c.node(Op::Unsqueeze, {m, c.ints({0}, "u0")}), c.ints({2}, "u2")})});
  gradcheck(c, c.node(Op::Add, {sm, all}));
}

TEST_CASE("autodiff: a value used twice accumulates both gradients") {
  Case c;
  ValueId x = c.param("x", {3});
  gradcheck(c, c.node(Op::Mul, {c.node(Op::Exp, {x}), c.node(Op::Tanh, {x})}));
}

TEST_CASE("autodiff: a missing gradient rule names the node") {
  // AllGather (the collective that gathers outputs for the host) has no gradient rule.
  Case c;
  ValueId x = c.param("x", {2, 3});
  ValueId y = c.node(Op::AllGather, {x}, {{"rows", Attr(int64_t(2))}});
  ValueId loss = c.node(Op::ReduceSum, {y}, {{"keepdims", Attr(int64_t(0))}});
  std::vector<ValueId> ps = c.params;
  CHECK_THROWS_WITH_AS(autodiff(c.g, loss, ps), doctest::Contains("(AllGather): gradient"), Error);
}

TEST_CASE("autodiff: Identity, Cast, Flatten, Squeeze, Split and Trilu") {
  Case c;
  ValueId x = c.param("x", {2, 1, 3, 4});
  ValueId id = c.node(Op::Identity, {x});
  ValueId cast = c.node(Op::Cast, {id}, {{"to", Attr(int64_t(11))}});           // f64 -> f64
  ValueId sq = c.node(Op::Squeeze, {cast, c.ints({1}, "sq_axes")});              // [2, 3, 4]
  std::vector<ValueId> parts = c.node_n(Op::Split, {sq, c.ints({1, 2}, "split")},
                                        {{"axis", Attr(int64_t(1))}}, 2);       // [2, 1, 4], [2, 2, 4]
  ValueId tri = c.node(Op::Trilu, {parts[1]}, {{"upper", Attr(int64_t(0))}});    // lower triangle of [2, 4]
  ValueId flat = c.node(Op::Flatten, {tri}, {{"axis", Attr(int64_t(1))}});       // [2, 8]
  ValueId first = c.node(Op::Flatten, {parts[0]}, {{"axis", Attr(int64_t(1))}}); // [2, 4]
  gradcheck(c, c.node(Op::Concat, {flat, first}, {{"axis", Attr(int64_t(1))}}));
}

TEST_CASE("autodiff: Split with an unused output gives zeros for it") {
  Case c;
  ValueId x = c.param("x", {6, 2});
  std::vector<ValueId> parts = c.node_n(Op::Split, {x, c.ints({2, 4}, "split")}, {{"axis", Attr(int64_t(0))}}, 2);
  gradcheck(c, c.node(Op::Exp, {parts[1]}));
}

TEST_CASE("autodiff: AllReduce's gradient is the AllReduce of the incoming gradients") {
  // In a world of one the collective is the identity, and so is its gradient.
  Case c;
  ValueId x = c.param("x", {3, 2});
  gradcheck(c, c.node(Op::Tanh, {c.node(Op::AllReduce, {x})}));
  // Structure: the backward of one forward AllReduce is one AllReduce.
  Case d;
  ValueId y = d.param("y", {3, 2});
  ValueId loss = d.node(Op::ReduceSum, {d.node(Op::AllReduce, {y})}, {{"keepdims", Attr(int64_t(0))}});
  autodiff(d.g, loss, {y});
  int reduces = 0;
  for (const Node& n : d.g.nodes) reduces += n.op == Op::AllReduce;
  CHECK(reduces == 2);
}
