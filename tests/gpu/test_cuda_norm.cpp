// The CUDA normalisation and loss kernels (exec/cuda/norm.*) run through a one-node Plan on the
// device against the same Plan on the CPU kernels (the reference): LayerNormalization(Grad),
// BatchNormalization (inference and training, with its running outputs) and BatchNormalizationGrad,
// SoftmaxCrossEntropyLoss(Grad) and NegativeLogLikelihoodLoss(Grad), on f32 and f64, every output
// compared.
//
// Tolerance: both sides accumulate in double; only the order of the additions differs (the device
// adds lane partials in a tree, the CPU adds in sequence), and exp / log / sqrt in double may
// differ by an ulp between libm and CUDA's. Those differences are ~1e-16 relative to the terms,
// so after rounding to f32 the results differ by at most an ulp or so: 1e-6 relative (plus 1e-7
// absolute for results that cancel to ~0). On f64 the difference stays at the ~1e-15 level even
// through the cancellations of the gradients (dx = a * (dy - mean - xhat * mean2)) on these
// well-conditioned inputs: 1e-12 relative plus 1e-13 absolute.
//
// The cases are the backend harness's family "norm" (tests/backend/backend_ops.h), run by
// tests/backend/test_backend_ops.cpp on every device backend present: the emulated device (the
// kernels' bodies run on the host, lane by lane, with the device's tree of partials: the node to
// launch mapping and the bodies, not the device) and cuda:0 where there is a GPU.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/backend/backend_ops.h"

#include <cmath>
#include <optional>
#include <random>

#include "exec/cuda/elementwise.h"
#include "exec/device_backend.h"
#include "exec/plan.h"

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

enum class Fill { uniform, positive, labels, dy };

struct In {
  std::string name = {};          // "" = absent optional input
  std::optional<DType> dtype = {};  // nullopt: the case's float dtype
  Shape shape = {};
  Fill fill = Fill::uniform;
  std::vector<int64_t> constant = {};  // a constant int64 input (NLL grad's x_shape)
};

struct NormCase {
  std::string what = {};
  Op op = Op::LayerNormalization;
  std::vector<In> ins = {};
  std::map<std::string, Attr> attrs = {};
  int n_out = 1;
  std::vector<int> absent_out = {};  // outputs the node does not produce
  int64_t classes = 0;            // labels in [0, classes)
  std::optional<int64_t> ignore = {};  // planted at every 4th label (and everywhere with all_ignored)
  bool all_ignored = false;
  bool nan = false;               // a NaN in input 0's third element (input 1 for the grads)
};

// Input k of c: labels in [0, classes) with ignore_index planted,
// positive or uniform floats, a NaN where c.nan says.
Tensor input_of(const NormCase& c, size_t k, DType dtype, const Shape& shape, std::mt19937& rng) {
  const In& in = c.ins[k];
  std::uniform_real_distribution<double> u(-2, 2), pos(0.25, 2);
  std::uniform_int_distribution<int64_t> lab(0, std::max<int64_t>(c.classes - 1, 0));
  const bool grad = c.op == Op::LayerNormalizationGrad || c.op == Op::BatchNormalizationGrad ||
                    c.op == Op::SoftmaxCrossEntropyLossGrad;
  Tensor x(dtype, shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (in.fill == Fill::labels) {
      int64_t v = lab(rng);
      if (c.ignore && (c.all_ignored || i % 4 == 1)) v = *c.ignore;
      if (x.dtype() == DType::i64) x.as<int64_t>()[i] = v;
      else x.as<int32_t>()[i] = int32_t(v);
      continue;
    }
    double v = in.fill == Fill::positive ? pos(rng) : u(rng);
    if (c.nan && i == 2 && k == (grad ? 1u : 0u)) v = NAN;
    if (x.dtype() == DType::f32) x.as<float>()[i] = float(v);
    else x.as<double>()[i] = v;
  }
  return x;
}

bool close(double a, double b, double rtol);

// The harness case of c on float dtype t: inputs as c.ins (absent, int64 constants, fed),
// outputs y0.. less c.absent_out; floats within 1e-6 (f32) / 1e-12 (f64) (see the top).
OpCase op_case(const NormCase& c, DType t) {
  OpCase o{.label = c.what, .op = c.op, .attrs = c.attrs, .outputs = c.n_out, .absent_outputs = c.absent_out};
  for (const In& in : c.ins) {
    if (in.name.empty()) o.inputs.push_back(absent());
    else if (!in.constant.empty()) o.inputs.push_back(fixed(in.name, ints(in.constant)));
    else o.inputs.push_back(fed(in.name, in.dtype.value_or(t), in.shape));
  }
  o.fill = [c](const OpCase& oc, size_t k, std::mt19937& rng) {
    return input_of(c, k, oc.inputs[k].dtype, oc.inputs[k].shape, rng);
  };
  o.compare = [](const Compared& m) {
    const double rtol = m.cpu.dtype() == DType::f32 ? 1e-6 : 1e-12;
    return mismatches(m, [&](int64_t, double x, double y) { return close(y, x, rtol); });
  };
  return o;
}

bool close(double a, double b, double rtol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= rtol * std::abs(b) + rtol * 1e-1;
}

Attr i(int64_t v) { return Attr(v); }
Attr f(float v) { return Attr(v); }
Attr s(const char* v) { return Attr(std::string(v)); }

std::vector<NormCase> cases() {
  std::vector<NormCase> cs;
  // ---- LayerNormalization: rows of 32-lane, 128-lane and 256-lane blocks, broadcast parameters.
  const Op LN = Op::LayerNormalization, LNG = Op::LayerNormalizationGrad;
  cs.push_back({"ln last axis", LN, {{"x", {}, {4, 6}}, {"scale", {}, {6}}, {"b", {}, {6}}}, {{"axis", i(-1)}}, 3});
  cs.push_back({"ln axis 1, broadcast B", LN, {{"x", {}, {3, 4, 5}}, {"scale", {}, {4, 5}}, {"b", {}, {5}}},
                {{"axis", i(1)}, {"epsilon", f(1e-3f)}}, 3});
  cs.push_back({"ln scalar scale, no B", LN, {{"x", {}, {2, 3, 5}}, {"scale", {}, {1}}, {"", {}, {}}}, {{"axis", i(-1)}}, 3});
  cs.push_back({"ln scale [1,5] over [4,5]", LN, {{"x", {}, {2, 4, 5}}, {"scale", {}, {1, 5}}, {"b", {}, {4, 1}}},
                {{"axis", i(1)}}, 3});
  cs.push_back({"ln long rows (128 lanes)", LN, {{"x", {}, {3, 700}}, {"scale", {}, {700}}, {"b", {}, {700}}}, {}, 3});
  cs.push_back({"ln long rows (256 lanes)", LN, {{"x", {}, {2, 5000}}, {"scale", {}, {5000}}, {"b", {}, {5000}}}, {}, 3});
  cs.push_back({"ln axis 0: one row", LN, {{"x", {}, {3, 7}}, {"scale", {}, {3, 7}}, {"b", {}, {7}}}, {{"axis", i(0)}}, 3,
                {1, 2}});
  cs.push_back({"ln stash f64", LN, {{"x", {}, {5, 9}}, {"scale", {}, {9}}, {"b", {}, {9}}}, {{"stash_type", i(11)}}, 3});
  cs.push_back({"ln NaN row", LN, {{"x", {}, {4, 6}}, {"scale", {}, {6}}, {"b", {}, {6}}}, {}, 3, {}, 0, {}, false, true});
  cs.push_back({"ln empty", LN, {{"x", {}, {0, 4}}, {"scale", {}, {4}}, {"b", {}, {4}}}, {}, 3});
  // ---- LayerNormalizationGrad: (dy, x, scale) -> dx, dscale, dbias.
  auto lng = [&](const char* what, Shape x, Shape sc, int64_t axis, std::vector<int> absent = {}) {
    cs.push_back({what, LNG, {{"dy", {}, x}, {"x", {}, x}, {"scale", {}, sc}}, {{"axis", i(axis)}}, 3, absent});
  };
  lng("lng last axis", {4, 6}, {6}, -1);
  lng("lng axis 1", {3, 4, 5}, {4, 5}, 1);
  lng("lng broadcast scale", {3, 4, 5}, {5}, 1);
  lng("lng scalar scale", {3, 4, 5}, {1}, -1);
  lng("lng long rows", {2, 700}, {700}, -1);
  lng("lng many rows (32 lanes per column)", {300, 8}, {8}, -1);
  lng("lng very many rows (256 lanes per column)", {5000, 3}, {3}, -1);
  lng("lng dx only", {4, 6}, {6}, -1, {1, 2});
  lng("lng dscale, dbias only", {4, 6}, {6}, -1, {0});
  lng("lng dbias only", {4, 6}, {6}, -1, {0, 1});
  lng("lng empty rows", {0, 4}, {4}, -1);
  cs.push_back({"lng NaN", LNG, {{"dy", {}, {4, 6}}, {"x", {}, {4, 6}}, {"scale", {}, {6}}}, {}, 3, {}, 0, {}, false, true});
  // ---- BatchNormalization.
  const Op BN = Op::BatchNormalization, BNG = Op::BatchNormalizationGrad;
  auto bn = [&](const char* what, Shape x, int64_t training, std::vector<int> absent = {}, std::optional<DType> pt = {},
                bool nan = false, int64_t unbiased = 0) {
    const int64_t C = x[1];
    cs.push_back({what, BN,
                  {{"x", {}, x}, {"scale", pt, {C}}, {"b", pt, {C}}, {"mean", {}, {C}}, {"var", {}, {C}, Fill::positive}},
                  {{"training_mode", i(training)}, {"epsilon", f(1e-4f)}, {"momentum", f(0.8f)},
                   {"unbiased_running_var", i(unbiased)}},
                  3, absent, 0, {}, false, nan});
  };
  for (int64_t tr : {0, 1}) {
    bn(tr ? "bn training 4d" : "bn inference 4d", {4, 3, 5, 5}, tr);
    bn(tr ? "bn training 2d" : "bn inference 2d", {6, 4}, tr);
    bn(tr ? "bn training 3d odd" : "bn inference 3d odd", {3, 5, 7}, tr);
    bn(tr ? "bn training 256 lanes" : "bn inference 256 lanes", {2, 3, 50, 50}, tr);
    bn(tr ? "bn training y only" : "bn inference y only", {2, 3, 4}, tr, {1, 2});
    bn(tr ? "bn training f64 scale/bias" : "bn inference f64 scale/bias", {2, 3, 4}, tr, {}, DType::f64);
    bn(tr ? "bn training NaN" : "bn inference NaN", {2, 3, 4}, tr, {}, {}, true);
  }
  bn("bn training empty batch", {0, 3, 2}, 1);
  // The trainer's running_var (times M / (M - 1); M = 1 keeps the biased 0).
  bn("bn training unbiased 4d", {4, 3, 5, 5}, 1, {}, {}, false, 1);
  bn("bn training unbiased 2d", {6, 4}, 1, {}, {}, false, 1);
  bn("bn training unbiased 256 lanes", {2, 3, 50, 50}, 1, {}, DType::f64, false, 1);
  bn("bn training unbiased one element per channel", {1, 3}, 1, {}, {}, false, 1);
  bn("bn training unbiased var only", {2, 3, 4}, 1, {1}, {}, false, 1);
  // ---- BatchNormalizationGrad: (dy, x, scale, relu_y?) -> dx, dscale, dbias.
  auto bng = [&](const char* what, Shape x, std::vector<int> absent = {}, bool nan = false) {
    cs.push_back({what, BNG, {{"dy", {}, x}, {"x", {}, x}, {"scale", {}, {x[1]}}}, {{"epsilon", f(1e-4f)}}, 3, absent, 0,
                  {}, false, nan});
  };
  bng("bng 4d", {4, 3, 5, 5});
  bng("bng 2d", {6, 4});
  bng("bng 256 lanes", {2, 3, 50, 50});
  bng("bng dx only", {3, 2, 5}, {1, 2});
  bng("bng dscale, dbias only", {3, 2, 5}, {0});
  bng("bng NaN", {3, 2, 5}, {}, true);
  // With relu_y (fuse_relu_grad): dy taken as ReluGrad(dy, relu_y), relu_y half negative.
  auto bngr = [&](const char* what, Shape x, std::vector<int> absent = {}) {
    cs.push_back({what, BNG, {{"dy", {}, x}, {"x", {}, x}, {"scale", {}, {x[1]}}, {"relu_y", {}, x}},
                  {{"epsilon", f(1e-4f)}}, 3, absent});
  };
  bngr("bng relu 4d", {4, 3, 5, 5});
  bngr("bng relu 256 lanes", {2, 3, 50, 50});
  bngr("bng relu dx only", {3, 2, 5}, {1, 2});
  // ---- the losses: every reduction, with and without weights and ignore_index, [N, C] and
  // [N, C, d1, d2], classes for 32 and 128 lanes, an ignore_index that is a real class, all
  // ignored (the mean is 0 / 0), an empty batch, int32 labels.
  struct LossShape {
    const char* what = "";
    Shape x = {};
  };
  const LossShape shapes[] = {{"[8,5]", {8, 5}}, {"[3,4,2,3]", {3, 4, 2, 3}}, {"[5,600]", {5, 600}}};
  for (const char* red : {"none", "sum", "mean"}) {
    for (const LossShape& sh : shapes) {
      const int64_t N = sh.x[0], C = sh.x[1];
      Shape lab = {N};
      lab.insert(lab.end(), sh.x.begin() + 2, sh.x.end());
      for (int variant = 0; variant < 4; ++variant) {  // 0 plain, 1 weights, 2 ignore -100, 3 weights + ignore 2
        const bool w = variant == 1 || variant == 3;
        std::optional<int64_t> ig;
        if (variant == 2) ig = -100;
        if (variant == 3) ig = 2;
        std::map<std::string, Attr> attrs{{"reduction", s(red)}};
        if (ig) attrs["ignore_index"] = i(*ig);
        const std::string what = std::string(red) + " " + sh.what + " variant " + std::to_string(variant);
        const In weights = w ? In{"w", {}, {C}, Fill::positive} : In{"", {}, {}};
        const Shape dys = std::string(red) == "none" ? lab : Shape{};
        cs.push_back({"sce " + what, Op::SoftmaxCrossEntropyLoss, {{"x", {}, sh.x}, {"labels", DType::i64, lab, Fill::labels}, weights},
                      attrs, 2, {}, C, ig});
        cs.push_back({"nll " + what, Op::NegativeLogLikelihoodLoss,
                      {{"x", {}, sh.x}, {"labels", DType::i64, lab, Fill::labels}, weights}, attrs, 1, {}, C, ig});
        cs.push_back({"sceg " + what, Op::SoftmaxCrossEntropyLossGrad,
                      {{"dy", {}, dys}, {"x", {}, sh.x}, {"labels", DType::i64, lab, Fill::labels}, weights}, attrs, 1, {},
                      C, ig});
        cs.push_back({"nllg " + what, Op::NegativeLogLikelihoodLossGrad,
                      {{"dy", {}, dys}, {"labels", DType::i64, lab, Fill::labels},
                       {"xs", DType::i64, {int64_t(sh.x.size())}, Fill::uniform, sh.x}, weights},
                      attrs, 1, {}, C, ig});
      }
    }
    std::map<std::string, Attr> attrs{{"reduction", s(red)}, {"ignore_index", i(1)}};
    const Shape dys = std::string(red) == "none" ? Shape{6} : Shape{};
    const std::string r = red;
    // All labels ignored.
    cs.push_back({"sce all ignored " + r, Op::SoftmaxCrossEntropyLoss, {{"x", {}, {6, 3}}, {"labels", DType::i64, {6}, Fill::labels}},
                  attrs, 2, {}, 3, 1, true});
    cs.push_back({"nll all ignored " + r, Op::NegativeLogLikelihoodLoss,
                  {{"x", {}, {6, 3}}, {"labels", DType::i64, {6}, Fill::labels}}, attrs, 1, {}, 3, 1, true});
    cs.push_back({"sceg all ignored " + r, Op::SoftmaxCrossEntropyLossGrad,
                  {{"dy", {}, dys}, {"x", {}, {6, 3}}, {"labels", DType::i64, {6}, Fill::labels}}, attrs, 1, {}, 3, 1, true});
    cs.push_back({"nllg all ignored " + r, Op::NegativeLogLikelihoodLossGrad,
                  {{"dy", {}, dys}, {"labels", DType::i64, {6}, Fill::labels}, {"xs", DType::i64, {2}, Fill::uniform, {6, 3}}},
                  attrs, 1, {}, 3, 1, true});
    // int32 labels, SCE without its log_prob output, a NaN score.
    attrs.erase("ignore_index");
    cs.push_back({"sce i32 labels, no log_prob " + r, Op::SoftmaxCrossEntropyLoss,
                  {{"x", {}, {7, 4}}, {"labels", DType::i32, {7}, Fill::labels}}, attrs, 2, {1}, 4});
    cs.push_back({"sce NaN " + r, Op::SoftmaxCrossEntropyLoss, {{"x", {}, {7, 4}}, {"labels", DType::i64, {7}, Fill::labels}},
                  attrs, 2, {}, 4, {}, false, true});
    cs.push_back({"sceg NaN " + r, Op::SoftmaxCrossEntropyLossGrad,
                  {{"dy", {}, std::string(red) == "none" ? Shape{7} : Shape{}}, {"x", {}, {7, 4}},
                   {"labels", DType::i64, {7}, Fill::labels}},
                  attrs, 1, {}, 4, {}, false, true});
    cs.push_back({"nllg i32 labels " + r, Op::NegativeLogLikelihoodLossGrad,
                  {{"dy", {}, std::string(red) == "none" ? Shape{7} : Shape{}}, {"labels", DType::i32, {7}, Fill::labels},
                   {"xs", DType::i64, {2}, Fill::uniform, {7, 4}}},
                  attrs, 1, {}, 4});
    // An empty batch: none is empty, sum 0, mean 0 / 0.
    const Shape dy0 = std::string(red) == "none" ? Shape{0} : Shape{};
    cs.push_back({"sce empty " + r, Op::SoftmaxCrossEntropyLoss, {{"x", {}, {0, 4}}, {"labels", DType::i64, {0}, Fill::labels}},
                  attrs, 2, {}, 4});
    cs.push_back({"nll empty " + r, Op::NegativeLogLikelihoodLoss,
                  {{"x", {}, {0, 4}}, {"labels", DType::i64, {0}, Fill::labels}}, attrs, 1, {}, 4});
    cs.push_back({"sceg empty " + r, Op::SoftmaxCrossEntropyLossGrad,
                  {{"dy", {}, dy0}, {"x", {}, {0, 4}}, {"labels", DType::i64, {0}, Fill::labels}}, attrs, 1, {}, 4});
    cs.push_back({"nllg empty " + r, Op::NegativeLogLikelihoodLossGrad,
                  {{"dy", {}, dy0}, {"labels", DType::i64, {0}, Fill::labels}, {"xs", DType::i64, {2}, Fill::uniform, {0, 4}}},
                  attrs, 1, {}, 4});
  }
  return cs;
}

// (f16 / bf16 inputs, which the kernels refuse too, are refused by the Plan for these ops.)
// Zero classes and a broadcast Scale over more than 8 dims stay on the CPU.
std::vector<OpCase> refused_cases() {
  NormCase ln{"ln rank 10", Op::LayerNormalization,
              {{"x", {}, {2, 1, 1, 1, 1, 1, 1, 1, 1, 3}}, {"scale", {}, {3}}, {"b", {}, {3}}}, {{"axis", i(0)}}, 1};
  NormCase sce{"sce C=0", Op::SoftmaxCrossEntropyLoss, {{"x", {}, {3, 0}}, {"labels", DType::i64, {3}, Fill::labels}},
               {{"reduction", s("sum")}, {"ignore_index", i(0)}}, 2, {}, 0, 0, true};
  std::vector<OpCase> cs{op_case(ln, DType::f32), op_case(sce, DType::f32)};
  for (OpCase& c : cs) {
    c.expect = Expect::host;
    c.compare = {};  // the CPU kernel on both sides: the same bytes
  }
  return cs;
}

std::vector<OpCase> norm_family() {
  std::vector<OpCase> out;
  for (const NormCase& c : cases())
    for (DType t : {DType::f32, DType::f64}) out.push_back(op_case(c, t));
  for (OpCase& c : refused_cases()) out.push_back(std::move(c));
  return out;
}

const bool registered = register_cases("norm", norm_family);

}  // namespace

TEST_SUITE("cuda") {
  // The CPU kernels refuse a label outside [0, C) with an error; a kernel cannot raise one, so the
  // device's loss and gradient are NaN there (exec/cuda/norm_launch.h).
  TEST_CASE("cuda norm (emulated): a label outside 0..C-1 gives NaN") {
    auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
    NormCase sce{"sce bad label", Op::SoftmaxCrossEntropyLoss, {{"x", {}, {4, 3}}, {"labels", DType::i64, {4}, Fill::labels}},
                 {{"reduction", s("mean")}}, 2, {}, 3};
    const OpCase sc = op_case(sce, DType::f32);
    Plan gpu(one_node_graph(sc), PlanOptions{.device = dev});
    auto in = feed_of(sc, 0);
    in.at("labels").as<int64_t>()[2] = 3;
    CHECK(std::isnan(gpu.run(in).at("y0").as<float>()[0]));
    NormCase g{"sceg bad label", Op::SoftmaxCrossEntropyLossGrad,
               {{"dy", {}, {4}}, {"x", {}, {4, 3}}, {"labels", DType::i64, {4}, Fill::labels}}, {{"reduction", s("none")}},
               1, {}, 3};
    const OpCase gc = op_case(g, DType::f32);
    Plan gg(one_node_graph(gc), PlanOptions{.device = dev});
    auto gin = feed_of(gc, 0);
    gin.at("labels").as<int64_t>()[1] = -5;
    const Tensor dx = gg.run(gin).at("y0");
    CHECK(std::isnan(dx.as<float>()[3]));   // row 1
    CHECK(!std::isnan(dx.as<float>()[0]));  // row 0
  }
}
#endif
