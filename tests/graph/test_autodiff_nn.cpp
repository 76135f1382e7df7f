// Gradient rules of the nn ops, checked in float64 against central differences
// (tests/graph/gradcheck.h): Conv, ConvTranspose, the pools, the normalisations, Dropout and the
// losses, with and without strides / pads / groups / dilations / weights / ignore_index.
#include <cmath>

#include "tests/graph/gradcheck.h"

using namespace onnxdp;
using namespace onnxdp::testing;

namespace {
using Ints = std::vector<int64_t>;
using Attrs = std::map<std::string, Attr>;

ValueId labels(Case& c, Shape s, std::vector<int64_t> v) { return c.constant(Tensor::from_i64(v, s), "labels"); }
}  // namespace

// ---- Conv ----------------------------------------------------------------------------------------

TEST_CASE("autodiff nn: Conv 2-D with groups, strides, dilations, asymmetric pads and bias") {
  Case c;
  ValueId x = c.param("x", {2, 4, 6, 5});
  ValueId w = c.param("w", {4, 2, 3, 2});
  ValueId b = c.param("b", {4});
  gradcheck(c, c.node(Op::Conv, {x, w, b},
                      {{"group", Attr(int64_t(2))}, {"strides", Attr(Ints{2, 1})}, {"dilations", Attr(Ints{1, 2})},
                       {"pads", Attr(Ints{1, 0, 0, 1})}}));
}

TEST_CASE("autodiff nn: Conv without bias, plain and with strides that skip trailing rows") {
  for (int64_t s : {1, 2, 3}) {
    CAPTURE(s);
    Case c;
    ValueId x = c.param("x", {1, 2, 7, 6});
    ValueId w = c.param("w", {3, 2, 3, 3});
    gradcheck(c, c.node(Op::Conv, {x, w}, {{"strides", Attr(Ints{s, s})}}));
  }
}

TEST_CASE("autodiff nn: Conv 1-D auto_pad SAME_UPPER, SAME_LOWER and VALID") {
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    CAPTURE(ap);
    Case c;
    ValueId x = c.param("x", {2, 2, 7});
    ValueId w = c.param("w", {3, 2, 4});
    ValueId b = c.param("b", {3});
    gradcheck(c, c.node(Op::Conv, {x, w, b}, {{"auto_pad", Attr(std::string(ap))}, {"strides", Attr(Ints{2})}}));
  }
}

TEST_CASE("autodiff nn: Conv 3-D, and the 1x1 path") {
  {
    Case c;
    ValueId x = c.param("x", {1, 2, 4, 3, 4});
    ValueId w = c.param("w", {2, 2, 2, 2, 3});
    gradcheck(c, c.node(Op::Conv, {x, w}, {{"pads", Attr(Ints{1, 0, 1, 0, 1, 0})}, {"strides", Attr(Ints{1, 2, 1})}}));
  }
  {
    Case c;
    ValueId x = c.param("x", {3, 4, 3, 3});
    ValueId w = c.param("w", {6, 2, 1, 1});
    ValueId b = c.param("b", {6});
    gradcheck(c, c.node(Op::Conv, {x, w, b}, {{"group", Attr(int64_t(2))}}));
  }
}

TEST_CASE("autodiff nn: Conv depthwise") {
  Case c;
  ValueId x = c.param("x", {2, 3, 5, 5});
  ValueId w = c.param("w", {6, 1, 3, 3});
  gradcheck(c, c.node(Op::Conv, {x, w}, {{"group", Attr(int64_t(3))}, {"pads", Attr(Ints{1, 1, 1, 1})},
                                         {"strides", Attr(Ints{2, 2})}}));
}

// ---- ConvTranspose -------------------------------------------------------------------------------

TEST_CASE("autodiff nn: ConvTranspose 2-D with groups, strides, pads, output_padding, dilations, bias") {
  Case c;
  ValueId x = c.param("x", {2, 4, 3, 4});
  ValueId w = c.param("w", {4, 3, 3, 2});
  ValueId b = c.param("b", {6});
  gradcheck(c, c.node(Op::ConvTranspose, {x, w, b},
                      {{"group", Attr(int64_t(2))}, {"strides", Attr(Ints{2, 3})}, {"dilations", Attr(Ints{1, 2})},
                       {"pads", Attr(Ints{1, 0, 0, 2})}, {"output_padding", Attr(Ints{1, 1})}}));
}

TEST_CASE("autodiff nn: ConvTranspose 1-D SAME_UPPER, SAME_LOWER and output_shape") {
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    Case c;
    ValueId x = c.param("x", {2, 2, 3});
    ValueId w = c.param("w", {2, 3, 3});
    Attrs a = {{"strides", Attr(Ints{2})}};
    if (variant == 0) a["auto_pad"] = Attr(std::string("SAME_UPPER"));
    if (variant == 1) a["auto_pad"] = Attr(std::string("SAME_LOWER"));
    if (variant == 2) a["output_shape"] = Attr(Ints{6});
    if (variant == 3) a["output_shape"] = Attr(Ints{9});  // larger than the taps reach: pads < 0
    gradcheck(c, c.node(Op::ConvTranspose, {x, w}, a));
  }
}

TEST_CASE("autodiff nn: ConvTranspose 3-D") {
  Case c;
  ValueId x = c.param("x", {1, 2, 2, 3, 2});
  ValueId w = c.param("w", {2, 2, 2, 2, 2});
  gradcheck(c, c.node(Op::ConvTranspose, {x, w}, {{"strides", Attr(Ints{2, 1, 2})}, {"pads", Attr(Ints{0, 1, 0, 1, 0, 0})}}));
}

// ---- pools ---------------------------------------------------------------------------------------

TEST_CASE("autodiff nn: MaxPool with pads, strides, dilations and ceil_mode") {
  for (int64_t ceil : {0, 1}) {
    CAPTURE(ceil);
    Case c;
    ValueId x = c.param("x", {2, 2, 6, 7});
    Attrs a = {{"kernel_shape", Attr(Ints{3, 2})}, {"strides", Attr(Ints{2, 2})}, {"pads", Attr(Ints{1, 0, 1, 1})},
               {"ceil_mode", Attr(ceil)}};
    if (ceil) a["dilations"] = Attr(Ints{1, 2});
    gradcheck(c, c.node(Op::MaxPool, {x}, a));
  }
}

TEST_CASE("autodiff nn: MaxPool 1-D SAME_UPPER with overlapping windows, and the Indices output") {
  Case c;
  ValueId x = c.param("x", {1, 3, 9});
  std::vector<ValueId> y = c.node_n(Op::MaxPool, {x},
                                    {{"kernel_shape", Attr(Ints{3})}, {"auto_pad", Attr(std::string("SAME_UPPER"))}}, 2);
  gradcheck(c, y[0]);
}

TEST_CASE("autodiff nn: AveragePool count_include_pad 0 and 1, ceil_mode, SAME_LOWER, 3-D") {
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    Case c;
    Attrs a;
    ValueId x;
    if (variant < 2) {
      x = c.param("x", {2, 2, 5, 6});
      a = {{"kernel_shape", Attr(Ints{3, 3})}, {"strides", Attr(Ints{2, 2})}, {"pads", Attr(Ints{1, 1, 1, 0})},
           {"ceil_mode", Attr(int64_t(1))}, {"count_include_pad", Attr(int64_t(variant))}};
    } else if (variant == 2) {
      x = c.param("x", {1, 2, 5, 4});
      a = {{"kernel_shape", Attr(Ints{2, 3})}, {"auto_pad", Attr(std::string("SAME_LOWER"))},
           {"count_include_pad", Attr(int64_t(1))}};
    } else {
      x = c.param("x", {1, 1, 4, 3, 5});
      a = {{"kernel_shape", Attr(Ints{2, 2, 3})}, {"strides", Attr(Ints{1, 1, 2})}, {"dilations", Attr(Ints{2, 1, 1})}};
    }
    gradcheck(c, c.node(Op::AveragePool, {x}, a));
  }
}

TEST_CASE("autodiff nn: GlobalAveragePool") {
  Case c;
  ValueId x = c.param("x", {2, 3, 4, 5});
  gradcheck(c, c.node(Op::GlobalAveragePool, {x}));
}

// ---- normalisations ------------------------------------------------------------------------------

TEST_CASE("autodiff nn: BatchNormalization inference mode, every input") {
  for (Shape xs : {Shape{2, 3, 4}, Shape{4, 3}, Shape{2, 3, 2, 2}}) {
    CAPTURE(shape_str(xs));
    Case c;
    ValueId x = c.param("x", xs);
    ValueId scale = c.param("scale", {3});
    ValueId bias = c.param("bias", {3});
    ValueId mean = c.param("mean", {3});
    ValueId var = c.param("var", {3}, 0.5, 1.5);
    gradcheck(c, c.node(Op::BatchNormalization, {x, scale, bias, mean, var}, {{"epsilon", Attr(1e-3f)}}));
  }
}

TEST_CASE("autodiff nn: BatchNormalization training mode (batch statistics)") {
  for (Shape xs : {Shape{3, 2, 2, 3}, Shape{5, 3}}) {
    CAPTURE(shape_str(xs));
    Case c;
    ValueId x = c.param("x", xs);
    ValueId scale = c.param("scale", {xs[1]});
    ValueId bias = c.param("bias", {xs[1]});
    Tensor m(DType::f64, {xs[1]}), v(DType::f64, {xs[1]});
    for (int64_t i = 0; i < xs[1]; ++i) v.as<double>()[i] = 1.0;
    std::vector<ValueId> y = c.node_n(Op::BatchNormalization, {x, scale, bias, c.constant(m, "m"), c.constant(v, "v")},
                                      {{"training_mode", Attr(int64_t(1))}, {"epsilon", Attr(1e-2f)}}, 3);
    gradcheck(c, y[0]);
  }
}

TEST_CASE("autodiff nn: LayerNormalization over the last axis and over two axes with broadcast Scale / B") {
  {
    Case c;
    ValueId x = c.param("x", {3, 5});
    ValueId s = c.param("scale", {5});
    ValueId b = c.param("b", {5});
    gradcheck(c, c.node(Op::LayerNormalization, {x, s, b}));
  }
  {
    Case c;
    ValueId x = c.param("x", {2, 3, 4});
    ValueId s = c.param("scale", {1, 4});
    ValueId b = c.param("b", {3, 1});
    gradcheck(c, c.node(Op::LayerNormalization, {x, s, b}, {{"axis", Attr(int64_t(1))}, {"epsilon", Attr(1e-3f)}}));
  }
  {
    Case c;  // no B, axis 0 (everything normalised together), Scale full
    ValueId x = c.param("x", {2, 3});
    ValueId s = c.param("scale", {2, 3});
    gradcheck(c, c.node(Op::LayerNormalization, {x, s}, {{"axis", Attr(int64_t(-2))}}));
  }
}

// ---- Dropout -------------------------------------------------------------------------------------

TEST_CASE("autodiff nn: Dropout's gradient redraws the forward mask: dx = dy * mask / (1 - ratio)") {
  Case c;
  ValueId x = c.param("x", {4, 3, 5});
  Tensor on(DType::boolean, {});
  on.as<bool>()[0] = true;
  std::vector<ValueId> y =
      c.node_n(Op::Dropout, {x, c.scalar(0.3, "ratio"), c.constant(on, "training")}, {}, 2);  // seed from RunState
  Tensor r(DType::f64, {4, 3, 5});
  for (int64_t i = 0; i < r.numel(); ++i) r.as<double>()[i] = std::sin(0.7 * double(i)) + 1.5;
  ValueId loss = c.node(Op::ReduceSum, {c.node(Op::Mul, {y[0], c.constant(r, "R")})}, {{"keepdims", Attr(int64_t(0))}});
  std::vector<ValueId> ps = c.params;
  std::vector<ValueId> grads = autodiff(c.g, loss, ps);
  REQUIRE(grads[0] != kNoValue);
  c.g.outputs = {grads[0], y[1]};
  verify(c.g);
  Plan plan(c.g);
  for (uint64_t step : {0, 1, 7}) {
    RunState rs;
    rs.seed = 1234;
    rs.step = step;
    auto out = plan.run({}, rs);
    const Tensor& dx = out.at(c.g.value(grads[0]).name);
    const Tensor& mask = out.at(c.g.value(y[1]).name);
    int kept = 0;
    for (int64_t i = 0; i < r.numel(); ++i) {
      double want = mask.as<bool>()[i] ? r.as<double>()[i] / 0.7 : 0.0;
      kept += mask.as<bool>()[i];
      CHECK(dx.as<double>()[i] == doctest::Approx(want).epsilon(1e-12));
    }
    CHECK(kept > 20);
    CHECK(kept < 60);
  }
}

TEST_CASE("autodiff nn: Dropout gradcheck, training (seed attribute) and inference") {
  for (int64_t training : {0, 1}) {
    CAPTURE(training);
    Case c;
    ValueId x = c.param("x", {3, 4});
    Tensor on(DType::boolean, {});
    on.as<bool>()[0] = training != 0;
    ValueId y = c.node(Op::Dropout, {x, c.scalar(0.5, "ratio"), c.constant(on, "training")}, {{"seed", Attr(int64_t(5))}});
    gradcheck(c, c.node(Op::Tanh, {y}));
  }
}

// ---- losses --------------------------------------------------------------------------------------

TEST_CASE("autodiff nn: SoftmaxCrossEntropyLoss reductions, weights, ignore_index, [N, C] and [N, C, d]") {
  for (const char* red : {"mean", "sum", "none"})
    for (int variant = 0; variant < 4; ++variant) {
      CAPTURE(red);
      CAPTURE(variant);
      Case c;
      const bool spatial = variant & 1, weighted = variant & 2;
      Shape xs = spatial ? Shape{2, 4, 3} : Shape{5, 4};
      ValueId x = c.param("x", xs, -2, 2);
      ValueId l = spatial ? labels(c, {2, 3}, {0, 3, 1, 2, 2, 3}) : labels(c, {5}, {1, 0, 3, 3, 2});
      std::vector<ValueId> ins = {x, l};
      if (weighted) {
        Tensor w(DType::f64, {4});
        for (int k = 0; k < 4; ++k) w.as<double>()[k] = 0.5 + 0.25 * k;
        ins.push_back(c.constant(w, "weights"));
      }
      Attrs a = {{"reduction", Attr(std::string(red))}};
      if (variant >= 1) a["ignore_index"] = Attr(int64_t(3));
      gradcheck(c, c.node(Op::SoftmaxCrossEntropyLoss, ins, a));
    }
}

TEST_CASE("autodiff nn: SoftmaxCrossEntropyLoss with the log_prob output used too") {
  Case c;
  ValueId x = c.param("x", {3, 4, 2});
  ValueId l = labels(c, {3, 2}, {0, 1, 2, 3, 1, 1});
  std::vector<ValueId> y = c.node_n(Op::SoftmaxCrossEntropyLoss, {x, l}, {{"ignore_index", Attr(int64_t(2))}}, 2);
  gradcheck(c, c.node(Op::Add, {y[1], y[0]}));
  Case d;  // log_prob alone
  ValueId xd = d.param("x", {3, 4});
  std::vector<ValueId> yd =
      d.node_n(Op::SoftmaxCrossEntropyLoss, {xd, labels(d, {3}, {0, 1, 3})}, {{"reduction", Attr(std::string("sum"))}}, 2);
  gradcheck(d, yd[1]);
}

TEST_CASE("autodiff nn: NegativeLogLikelihoodLoss reductions, weights, ignore_index") {
  for (const char* red : {"mean", "sum", "none"})
    for (int variant = 0; variant < 4; ++variant) {
      CAPTURE(red);
      CAPTURE(variant);
      Case c;
      const bool spatial = variant & 1, weighted = variant & 2;
      Shape xs = spatial ? Shape{2, 3, 2, 2} : Shape{4, 3};
      ValueId x = c.param("x", xs);
      ValueId l = spatial ? labels(c, {2, 2, 2}, {0, 2, 1, 1, 2, -1, 0, 0}) : labels(c, {4}, {2, -1, 0, 1});
      std::vector<ValueId> ins = {x, l};
      if (weighted) {
        Tensor w(DType::f64, {3});
        for (int k = 0; k < 3; ++k) w.as<double>()[k] = 1.5 - 0.5 * k;
        ins.push_back(c.constant(w, "weights"));
      }
      Attrs a = {{"reduction", Attr(std::string(red))}, {"ignore_index", Attr(int64_t(-1))}};
      // LogSoftmax first, as a model would: the NLL input is a log-probability.
      ValueId lp = c.node(Op::LogSoftmax, {x}, {{"axis", Attr(int64_t(1))}});
      ins[0] = lp;
      gradcheck(c, c.node(Op::NegativeLogLikelihoodLoss, ins, a));
    }
}

TEST_CASE("autodiff nn: loss class weights get no gradient, as in PyTorch") {
  Case c;
  ValueId x = c.param("x", {3, 4});
  ValueId w = c.param("w", {4}, 0.5, 1.5);
  ValueId loss = c.node(Op::SoftmaxCrossEntropyLoss, {x, labels(c, {3}, {0, 1, 2}), w});
  std::vector<ValueId> ps = c.params;
  std::vector<ValueId> grads = autodiff(c.g, loss, ps);
  CHECK(grads[0] != kNoValue);
  CHECK(grads[1] == kNoValue);
}

TEST_CASE("autodiff nn: a conv net end to end (Conv, BN, Relu, MaxPool, GlobalAveragePool, Gemm, SCE)") {
  Case c;
  ValueId x = c.param("x", {2, 2, 6, 6});
  ValueId w1 = c.param("w1", {4, 2, 3, 3}, -0.5, 0.5);
  ValueId b1 = c.param("b1", {4});
  ValueId s = c.param("s", {4}, 0.5, 1.5);
  ValueId bb = c.param("bb", {4});
  Tensor m(DType::f64, {4}), v(DType::f64, {4});
  for (int i = 0; i < 4; ++i) v.as<double>()[i] = 1.0;
  ValueId y = c.node(Op::Conv, {x, w1, b1}, {{"pads", Attr(Ints{1, 1, 1, 1})}});
  y = c.node_n(Op::BatchNormalization, {y, s, bb, c.constant(m, "m"), c.constant(v, "v")},
               {{"training_mode", Attr(int64_t(1))}}, 3)[0];
  y = c.node(Op::Tanh, {y});
  y = c.node(Op::MaxPool, {y}, {{"kernel_shape", Attr(Ints{2, 2})}, {"strides", Attr(Ints{2, 2})}});
  y = c.node(Op::GlobalAveragePool, {y});
  y = c.node(Op::Reshape, {y, c.ints({2, 4}, "flat")});
  ValueId wf = c.param("wf", {4, 3});
  y = c.node(Op::Gemm, {y, wf});
  gradcheck(c, c.node(Op::SoftmaxCrossEntropyLoss, {y, labels(c, {2}, {2, 0})}));
}
