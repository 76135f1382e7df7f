// Tests of the internal gradient ops (category grad): shape rule and CPU kernel of each against
// PyTorch autograd values, float64 (and float32 where the kernel has a separate path), errors
// that name the node, and the refusal to import them from a model.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "exec/cpu/clones.h"  // parallel_min_elements()
#include "exec/kernel.h"
#include "importer/importer.h"
#include "tests/ops/conv_reference.h"

using namespace onnxdp;

namespace {

using Ints = std::vector<int64_t>;
using Attrs = std::map<std::string, Attr>;

// Inputs both sides can build: element i = sin(0.37 i + phase) * scale. In torch (float64):
//   torch.tensor(np.sin(0.37 * np.arange(n) + phase) * scale).reshape(shape)
Tensor pattern(Shape s, double phase, double scale = 1.0, DType t = DType::f64) {
  Tensor r(t, std::move(s));
  for (int64_t i = 0; i < r.numel(); ++i) {
    double v = std::sin(0.37 * double(i) + phase) * scale;
    if (t == DType::f64) r.as<double>()[i] = v;
    else r.as<float>()[i] = float(v);
  }
  return r;
}

// One node in a graph of its own: float inputs are graph inputs, integer ones constants (the
// shape rules read shapes and indices as constants). Returns its outputs from the CPU kernel.
std::vector<Tensor> run_op(Op op, const std::vector<Tensor>& ins, int num_outputs, Attrs attrs = {}) {
  Graph g;
  std::vector<ValueId> ids;
  std::vector<const Tensor*> ptrs;
  for (size_t k = 0; k < ins.size(); ++k) {
    if (ins[k].empty()) {
      ids.push_back(kNoValue);
      ptrs.push_back(nullptr);
      continue;
    }
    Value v;
    v.name = "in" + std::to_string(k);
    v.dtype = ins[k].dtype();
    v.shape = ins[k].shape();
    v.kind = dtype_is_float(v.dtype) ? ValueKind::input : ValueKind::constant;
    if (v.kind == ValueKind::constant) v.data = ins[k];
    ids.push_back(g.add_value(std::move(v)));
    ptrs.push_back(&ins[k]);
  }
  std::vector<std::string> outs;
  for (int k = 0; k < num_outputs; ++k) outs.push_back("out" + std::to_string(k));
  int idx = g.add_node(op, "node", ids, outs, std::move(attrs));
  return run_node(g, g.nodes[size_t(idx)], ptrs);
}

void check_close(const Tensor& got, const std::vector<double>& want, double rtol = 1e-7, double atol = 1e-9) {
  REQUIRE(got.numel() == int64_t(want.size()));
  std::vector<double> g = got.to_f64();
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(g[i] - want[i]) <= atol + rtol * std::fabs(want[i])) continue;
    if (bad++ == 0) {
      INFO("first mismatch at " << i << ": got " << g[i] << ", expected " << want[i]);
      CHECK(g[i] == doctest::Approx(want[i]));
    }
  }
  CHECK(bad == 0);
}

Tensor i64(std::vector<int64_t> v, Shape s = {}) { return Tensor::from_i64(v, std::move(s)); }

// ---- expected values ---------------------------------------------------------------------------
// Printed by this script (torch 2.x, float64 default dtype), inputs from pattern():
//   A ConvGradFilter: x [2,4,5,5] ph 0, w [4,2,3,2] ph 1 sc .5; y = F.conv2d(F.pad(x, (0,1,1,0)), w,
//                     stride=(2,1), dilation=(1,2), groups=2); dy = pattern(y.shape, 1); w.grad.
//                     1x1: x [2,4,3,3] ph .2, w [6,2,1,1] ph .4, groups 2, dy ph .9
//   B MaxPoolGrad:    x [1,2,5,6] ph .3; F.max_pool2d(F.pad(x, (0,1,1,1), value=-inf), (3,2),
//                     stride=(2,1), dilation=(1,2)); dy ph 2; x.grad
//   C AveragePoolGrad: x [1,2,5,6]; F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=
//                     True / False); dy ph 2
//   D BN grad:        x [3,2,2,3] ph .1, scale pattern([2], .5) + 1.5, bias 0; F.batch_norm(x, None,
//                     None, scale, bias, training=True, eps=1e-5); dy ph 1.1
//   E LN grad:        x [2,3,4] ph .2, scale pattern([4], .7) + 1 expanded to [3,4] (its grad is
//                     the unreduced [3,4] one), bias zeros [3,4]; F.layer_norm(x, (3,4)); dy ph 1.3
//   F GatherGrad:     x.index_select(1, [2,0,2]) of x [2,4,2]; dy [2,3,2] ph .4
//   G SCE grad:       x [3,4,2] ph .6 sc 2, labels [[0,3],[1,2],[3,3]], weight [.5,.75,1,1.25],
//                     ignore_index 2; F.cross_entropy(reduction=mean/sum: dy 0.7; none: dy
//                     pattern([3,2], .8))
//   H NLL grad:       x [4,3] ph .9, labels [2,1,0,1], weight [1.5,1,.5], ignore_index 0,
//                     F.nll_loss, dy as G (none: pattern([4], .8))
//   I Softmax grads:  x [2,3,4] ph .5 sc 2; torch.softmax / torch.log_softmax(x, axis) for axis
//                     1 and -1, backward(dy), dy ph 1.7; x.grad
const std::vector<double> kConvDw = {
    3.232643118, 2.273261516, 1.175908761, 0.6232370436, 1.807650461, 0.7557828767, -3.143618457, -2.60497996,
    -0.7723774761, -0.445954998, -2.082943165, -0.8946867477, -3.973291235, -2.482755426, -0.5976558994, 0.2937736069,
    -0.9105306106, -0.4996796114, 3.977100064, 2.920836708, 0.3940458412, -0.3650419237, 1.050164042, 0.4638354428,
    4.633718637, 3.57498407, 0.005678852871, -1.091477487, -0.01724530104, -0.1922229725, -4.446456225, -3.900398967,
    -0.008428811592, 0.9856637276, 0.01681502439, 0.3963197138, -5.255327669, -3.762482343, 0.1672583884, 1.721873788,
    1.191722822, 0.79198299, 5.121937645, 4.153159708, 0.05920427405, -1.466535696, -1.263233972, -1.13087748};
const std::vector<double> kConv1x1Dw = {
    5.66240297, -6.901908446, -4.331845965, 5.763718469, 2.84797433, -4.421536389, -4.478977362, 5.876567438,
    2.960823299, -4.496108929, -1.337878453, 2.956522122};
const std::vector<double> kMaxPoolDx = {
    0, 0, 0.9092974268, 0.7288651367, 0.05889959068, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, -2.037657711, -1.559498416, -0.03392129405, 0,
    0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0.6594159545, 1.229583053, 0.6923768063,
    0.3846032379, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, -0.8304285449, -1.089315949, -0.9678079975, -0.8112989998,
    -0.5449844885, 0, 0, 0};
const std::vector<double> kAvgPoolDxIncl = {
    0.1010330474, 0.1785083517, 0.07747530425, 0.1209069464, 0.0434316421, 0.0434316421, 0.1045427584, 0.1451308195,
    0.04058806112, 0.01172802132, -0.0288600398, -0.0288600398, 0.003509710937, -0.0333775322, -0.03688724314, -0.109178925,
    -0.0722916819, -0.0722916819, -0.09440206971, -0.2415692921, -0.1471672223, -0.3271812042, -0.1800139818, -0.1800139818,
    -0.09791178065, -0.2081917599, -0.1102799792, -0.2180022792, -0.1077222999, -0.1077222999, -0.09058491272, -0.1517721952,
    -0.06118728251, -0.08469552317, -0.02350824066, -0.02350824066, -0.07323238143, -0.07855494442, -0.005322562991, 0.05798507639,
    0.06330763938, 0.06330763938, 0.01735253128, 0.0732172508, 0.05586471952, 0.1426805996, 0.08681588004, 0.08681588004,
    0.1233694498, 0.2901032336, 0.1667337839, 0.3542652664, 0.1875314825, 0.1875314825, 0.1060169185, 0.2168859828,
    0.1108690643, 0.2115846668, 0.1007156025, 0.1007156025};
const std::vector<double> kAvgPoolDxExcl = {
    0.2273243567, 0.3435373131, 0.1162129564, 0.1813604195, 0.06514746315, 0.06514746315, 0.2325889231, 0.3119146364,
    0.07932571324, 0.07218149449, -0.007144218746, -0.007144218746, 0.005264566406, -0.03162267673, -0.03688724314, -0.109178925,
    -0.0722916819, -0.0722916819, -0.2150369401, -0.417344152, -0.202307212, -0.4361823438, -0.2338751318, -0.2338751318,
    -0.2203015065, -0.3857214753, -0.1654199688, -0.3270034187, -0.1615834499, -0.1615834499, -0.2038160536, -0.2955969774,
    -0.09178092377, -0.1270432848, -0.03526236099, -0.03526236099, -0.1777872567, -0.2137034609, -0.03591620425, 0.01563731481,
    0.05155351905, 0.05155351905, 0.02602879692, 0.08189351644, 0.05586471952, 0.1426805996, 0.08681588004, 0.08681588004,
    0.2645668635, 0.4867351795, 0.222168316, 0.4600575998, 0.2378892837, 0.2378892837, 0.2385380666, 0.4048416631,
    0.1663035965, 0.3173770002, 0.1510734037, 0.1510734037};
const std::vector<double> kBnDx = {
    2.119261545, 1.784816354, 1.178185306, 0.3814730672, -0.4974890983, -1.339737785, -1.941204487, -2.599117851,
    -2.915215435, -2.846714913, -2.402887511, -1.643803183, -0.3892330733, 0.4859673276, 1.264774994, 1.841781962,
    2.138893044, 2.115895651, 2.517746229, 1.90293282, 1.020603754, -0.009821870059, -1.048880778, -1.955941221,
    -2.484018239, -2.620488808, -2.432907846, -1.946663557, -1.227566825, -0.3729440183, 0.3996659042, 1.388389586,
    2.179238623, 2.665175308, 2.78043039, 2.509404634};
const std::vector<double> kBnDscale = {
    7.90816545, 6.092358948};
const std::vector<double> kBnDbias = {
    0.4067089068, 1.516316307};
const std::vector<double> kLnDx = {
    2.986264028, 2.559799226, 1.72255165, 0.5807710435, -0.6647292541, -1.343121151, -1.907325281, -2.058899573,
    -1.342449821, -1.03900681, -0.304073844, 0.8102197876, -1.352171575, -0.6736135216, 0.1759026357, 0.9025733635,
    1.048736991, 1.477489033, 1.49617628, 1.030187851, 0.05014213068, -0.5506646343, -1.396791985, -2.207966569};
const std::vector<double> kLnDscale = {
    0.6528714829, 0.6576860289, 0.5037396199, 0.263419304, 0.07740619825, 0.07906315129, 0.3197961831, 0.7350910377,
    1.169947418, 1.451532022, 1.472188136, 1.240383165};
const std::vector<double> kLnDbias = {
    0.446692741, 0.8227624741, 1.087475166, 1.205003196, 1.159439696, 0.9569514725, 0.6249443565, 0.2083539535,
    -0.2364361796, -0.649225785, -0.974145726, -1.167219613};
const std::vector<double> kGatherDdata = {
    0.9086334961, 0.9981524725, 0, 0, 1.341994537, 1.474208436, 0, 0,
    -0.2166750804, -0.5550369172, 0, 0, -0.3200154687, -0.8197546246, 0, 0};
const std::vector<double> kSceMean = {
    -0.0577768685, 0.05377366735, 0.02768842117, 0.07486347149, 0.02265342814, 0.03698608905, 0.007435019201, -0.1656232279,
    0.0410302977, 0, -0.09020054593, 0, 0.01391955402, 0, 0.03525069421, 0,
    0.01587747237, 0.03091302966, 0.05209787629, 0.06945728245, 0.07183723494, 0.05627507346, -0.1398125836, -0.1566453856};
const std::vector<double> kSceSum = {
    -0.2888843425, 0.2688683367, 0.1384421058, 0.3743173574, 0.1132671407, 0.1849304453, 0.03717509601, -0.8281161394,
    0.2051514885, 0, -0.4510027296, 0, 0.06959777008, 0, 0.1762534711, 0,
    0.07938736187, 0.1545651483, 0.2604893814, 0.3472864122, 0.3591861747, 0.2813753673, -0.699062918, -0.7832269278};
const std::vector<double> kSceNone = {
    -0.296047061, 0.3536581168, 0.1418746969, 0.4923613294, 0.1160755332, 0.24324974, 0.03809683079, -1.089269186,
    0.2929345885, 0, -0.6439841114, 0, 0.09937824135, 0, 0.2516712815, 0,
    0.08606505343, 0.1042278152, 0.2824005232, 0.2341854188, 0.3893992266, 0.1897396671, -0.7578648033, -0.528152901};
const std::vector<double> kNllMean = {
    0, 0, -0.14, 0, -0.28, 0, 0, 0,
    0, 0, -0.28, 0};
const std::vector<double> kNllSum = {
    0, 0, -0.35, 0, -0.7, 0, 0, 0,
    0, 0, -0.7, 0};
const std::vector<double> kNllNone = {
    0, 0, -0.3586780454, 0, -0.9207505977, 0, 0, 0,
    0, 0, -0.9430199313, 0};

}  // namespace

TEST_CASE("grad ops: ConvGradFilter with groups, strides, dilations, asymmetric pads") {
  Tensor x = pattern({2, 4, 5, 5}, 0), dy = pattern({2, 4, 2, 4}, 1);
  Attrs a = {{"group", Attr(int64_t(2))}, {"strides", Attr(Ints{2, 1})}, {"dilations", Attr(Ints{1, 2})},
             {"pads", Attr(Ints{1, 0, 0, 1})}, {"kernel_shape", Attr(Ints{3, 2})}};
  auto out = run_op(Op::ConvGradFilter, {x, dy}, 1, a);
  CHECK(out[0].shape() == Shape{4, 2, 3, 2});
  check_close(out[0], kConvDw);
  // float32: the same numbers to float precision
  auto out32 = run_op(Op::ConvGradFilter, {pattern({2, 4, 5, 5}, 0, 1, DType::f32), pattern({2, 4, 2, 4}, 1, 1, DType::f32)}, 1, a);
  CHECK(out32[0].dtype() == DType::f32);
  check_close(out32[0], kConvDw, 1e-5, 1e-5);
}

TEST_CASE("grad ops: ConvGradFilter 1x1 (no im2col)") {
  Tensor x = pattern({2, 4, 3, 3}, 0.2), dy = pattern({2, 6, 3, 3}, 0.9);
  auto out = run_op(Op::ConvGradFilter, {x, dy}, 1, {{"group", Attr(int64_t(2))}, {"kernel_shape", Attr(Ints{1, 1})}});
  CHECK(out[0].shape() == Shape{6, 2, 1, 1});
  check_close(out[0], kConv1x1Dw);
}

// ConvGradFilter on every path of the CPU convolution engine (tests/ops/conv_reference.h's cases
// name theirs) and through oneDNN, float32 and float64, on 1, 2 and 3 threads (each thread sums its own chunks; the
// count changes the chunks), against the reference's naive loop.
TEST_CASE("grad ops: ConvGradFilter on every path of the CPU convolution engine matches a naive loop") {
  convref::KeepThreads keep;
  for (const convref::Case& cs : convref::engine_cases()) {
    const std::string path = cs.path;
    CAPTURE(path);
    const Shape ys = convref::conv_output_shape(cs);
    const Tensor x = pattern(cs.x, .3), dy = pattern(ys, .7);
    const std::vector<double> want = convref::filter_grad(x, dy, convref::windows_of(cs, ys), cs.group);
    const Attrs a = {{"group", cs.group}, {"strides", Attr(cs.strides)}, {"dilations", Attr(cs.dilations)},
                     {"pads", Attr(cs.pads)}, {"kernel_shape", Attr(cs.kernel)}};
    for (DType t : {DType::f32, DType::f64})
      for (bool dnnl : convref::dnnl_settings_for(t))
      for (int threads : {1, 2, 3}) {
        CAPTURE(dtype_name(t));
        CAPTURE(dnnl);
        CAPTURE(threads);
        set_cpu_threads(threads);
        set_dnnl_enabled(dnnl);
        auto dw = run_op(Op::ConvGradFilter, {pattern(cs.x, .3, 1, t), pattern(ys, .7, 1, t)}, 1, a);
        // float32: sums of up to ~25,000 products of size ~1 (the large image's taps)
        if (t == DType::f64) check_close(dw[0], want, 1e-10, 1e-10);
        else check_close(dw[0], want, 1e-4, 2e-3);
      }
  }
}

// The depthwise filter gradient over padded planes sums whole vectors of positions and masks out
// those past a row's end: their columns hold x's values, which no window reads here (a stride-2
// window leaves x's last column out). An infinity there must not reach dw (0 * inf is NaN).
TEST_CASE("grad ops: a depthwise ConvGradFilter never multiplies by a column no window reads") {
  convref::KeepThreads keep;
  const Attrs a = {{"group", Attr(int64_t(2))}, {"strides", Attr(Ints{2})}, {"kernel_shape", Attr(Ints{3})}};
  for (DType t : {DType::f32, DType::f64})
    for (bool dnnl : convref::dnnl_settings_for(t)) {
      CAPTURE(dtype_name(t));
      CAPTURE(dnnl);
      set_dnnl_enabled(dnnl);
      Tensor x = pattern({2, 2, 22}, .3, 1, t), dy = pattern({2, 2, 10}, .7, 1, t);  // columns 0..20 read
      const Tensor clean = pattern({2, 2, 22}, .3), dyd = pattern({2, 2, 10}, .7);
      const std::vector<double> want = convref::filter_grad(clean, dyd, {{10}, {22}, {3}, {2}, {1}, {0}}, 2);
      for (int64_t row = 0; row < 4; ++row) {
        if (t == DType::f32) x.as<float>()[row * 22 + 21] = INFINITY;
        else x.as<double>()[row * 22 + 21] = INFINITY;
      }
      auto dw = run_op(Op::ConvGradFilter, {x, dy}, 1, a);
      if (t == DType::f64) check_close(dw[0], want, 1e-12, 1e-12);
      else check_close(dw[0], want, 1e-5, 1e-5);
    }
}

// The AVX-512 depthwise loops (exec/cpu/conv_depthwise.h) sum whole vectors of output columns: a
// 7x7 window on rows of 20 leaves lanes 20-31 of the second vector past the row, and through taps
// 0-2 they meet x's last column, which no output reads through those taps. With infinity there,
// dw's taps 0-2 stay finite (as the naive loop's) and the others are not.
TEST_CASE("grad ops: a 2-D depthwise ConvGradFilter never multiplies by a column its tap does not read") {
  convref::KeepThreads keep;
  const Attrs a = {{"group", Attr(int64_t(2))}, {"pads", Attr(Ints{3, 3, 3, 3})}, {"kernel_shape", Attr(Ints{7, 7})}};
  for (DType t : {DType::f32, DType::f64})
    for (bool dnnl : convref::dnnl_settings_for(t)) {
      CAPTURE(dtype_name(t));
      CAPTURE(dnnl);
      set_dnnl_enabled(dnnl);
      Tensor x = pattern({2, 2, 9, 20}, .3, 1, t);
      const Tensor dy = pattern({2, 2, 9, 20}, .7, 1, t);
      const convref::Windows win = {{9, 20}, {9, 20}, {7, 7}, {1, 1}, {1, 1}, {3, 3}};
      const std::vector<double> want =
          convref::filter_grad(pattern({2, 2, 9, 20}, .3), pattern({2, 2, 9, 20}, .7), win, 2);
      for (int64_t row = 0; row < 2 * 2 * 9; ++row) {
        if (t == DType::f32) x.as<float>()[row * 20 + 19] = INFINITY;
        else x.as<double>()[row * 20 + 19] = INFINITY;
      }
      auto dw = run_op(Op::ConvGradFilter, {x, dy}, 1, a);
      REQUIRE(dw[0].shape() == Shape{2, 1, 7, 7});
      for (int64_t k = 0; k < 2 * 49; ++k) {
        CAPTURE(k);
        const double got = t == DType::f32 ? double(dw[0].as<float>()[k]) : dw[0].as<double>()[k];
        if (k % 7 < 3) CHECK(got == doctest::Approx(want[size_t(k)]).epsilon(1e-5));
        else CHECK_FALSE(std::isfinite(got));
      }
    }
}

TEST_CASE("grad ops: MaxPoolGrad routes dy to the first maximum of each window") {
  Tensor x = pattern({1, 2, 5, 6}, 0.3), dy = pattern({1, 2, 3, 5}, 2);
  Attrs a = {{"kernel_shape", Attr(Ints{3, 2})}, {"strides", Attr(Ints{2, 1})}, {"dilations", Attr(Ints{1, 2})},
             {"pads", Attr(Ints{1, 0, 1, 1})}};
  auto out = run_op(Op::MaxPoolGrad, {x, dy}, 1, a);
  CHECK(out[0].shape() == Shape{1, 2, 5, 6});
  check_close(out[0], kMaxPoolDx);
  // Ties: the first maximum in window order gets everything.
  Tensor flat(DType::f64, {1, 1, 4});
  for (int i = 0; i < 4; ++i) flat.as<double>()[i] = 1.0;
  auto tie = run_op(Op::MaxPoolGrad, {flat, pattern({1, 1, 3}, 0.5)}, 1, {{"kernel_shape", Attr(Ints{2})}});
  check_close(tie[0], {std::sin(0.5), std::sin(0.87), std::sin(1.24), 0});
  auto f32 = run_op(Op::MaxPoolGrad, {pattern({1, 2, 5, 6}, 0.3, 1, DType::f32), pattern({1, 2, 3, 5}, 2, 1, DType::f32)}, 1, a);
  check_close(f32[0], kMaxPoolDx, 1e-6, 1e-6);
}

TEST_CASE("grad ops: AveragePoolGrad with count_include_pad 1 and 0") {
  Tensor dy = pattern({1, 2, 3, 3}, 2);
  Attrs a = {{"kernel_shape", Attr(Ints{3, 3})}, {"strides", Attr(Ints{2, 2})}, {"pads", Attr(Ints{1, 1, 1, 1})}};
  a["count_include_pad"] = Attr(int64_t(1));
  check_close(run_op(Op::AveragePoolGrad, {dy, i64({1, 2, 5, 6})}, 1, a)[0], kAvgPoolDxIncl);
  a["count_include_pad"] = Attr(int64_t(0));
  auto out = run_op(Op::AveragePoolGrad, {dy, i64({1, 2, 5, 6})}, 1, a);
  CHECK(out[0].shape() == Shape{1, 2, 5, 6});
  check_close(out[0], kAvgPoolDxExcl);
}

TEST_CASE("grad ops: BatchNormalizationGrad (training mode, batch statistics)") {
  Tensor x = pattern({3, 2, 2, 3}, 0.1), dy = pattern({3, 2, 2, 3}, 1.1), scale = pattern({2}, 0.5);
  for (int i = 0; i < 2; ++i) scale.as<double>()[i] += 1.5;
  auto out = run_op(Op::BatchNormalizationGrad, {dy, x, scale}, 3);
  check_close(out[0], kBnDx);
  check_close(out[1], kBnDscale);
  check_close(out[2], kBnDbias);
  // float32 data with float32 scale
  Tensor s32(DType::f32, {2});
  for (int i = 0; i < 2; ++i) s32.as<float>()[i] = float(scale.as<double>()[i]);
  auto o32 = run_op(Op::BatchNormalizationGrad,
                    {pattern({3, 2, 2, 3}, 1.1, 1, DType::f32), pattern({3, 2, 2, 3}, 0.1, 1, DType::f32), s32}, 3);
  check_close(o32[0], kBnDx, 1e-5, 1e-5);
  check_close(o32[1], kBnDscale, 1e-5, 1e-5);
}

// ClipGrad (graph/passes/fuse_clip_grad.h's form of Clip's gradient) against its definition, dy
// where min <= x <= max: float64 and float32, float32 bounds, each bound absent or present.
TEST_CASE("grad ops: ClipGrad passes dy where min <= x <= max, else 0") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    const Tensor dy = pattern({2, 5}, 0.7, 1, t), x = pattern({2, 5}, 1.3, 1, t);
    const std::vector<double> dyv = dy.to_f64(), xv = x.to_f64();
    for (int bounds = 0; bounds < 4; ++bounds) {
      CAPTURE(bounds);
      const bool has_lo = bounds & 1, has_hi = bounds & 2;
      std::vector<double> want(dyv.size());
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = (has_lo && xv[i] < double(-0.4f)) || (has_hi && xv[i] > double(0.6f)) ? 0.0 : dyv[i];
      const Tensor dx = run_op(Op::ClipGrad,
                               {dy, x, has_lo ? Tensor::scalar_f32(-0.4f) : Tensor(), has_hi ? Tensor::scalar_f32(0.6f) : Tensor()},
                               1)[0];
      CHECK(dx.dtype() == t);
      CHECK(dx.to_f64() == want);
      int zeros = 0;
      for (double v : dx.to_f64()) zeros += v == 0;
      CHECK(zeros == (has_lo ? 3 : 0) + (has_hi ? 4 : 0));  // the pattern's x: 3 under -0.4, 4 over 0.6
    }
  }
}

// With relu_y (fuse_relu_grad's form), dy is ReluGrad(dy, relu_y) as read: the values of ReluGrad
// then BatchNormalizationGrad, bit for bit, on f64 and f32; relu_y has negatives, zeros (masked:
// PyTorch's threshold_backward, y <= 0) and a NaN (passes dy). All positive, the torch values.
TEST_CASE("grad ops: BatchNormalizationGrad with relu_y is ReluGrad then BatchNormalizationGrad") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    Tensor x = pattern({3, 2, 2, 3}, 0.1, 1, t), dy = pattern({3, 2, 2, 3}, 1.1, 1, t), y = pattern({3, 2, 2, 3}, 0.7, 1, t);
    Tensor scale = pattern({2}, 0.5, 1, t);
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double v = i % 5 == 0 ? 0.0 : i == 7 ? NAN : y.to_f64()[size_t(i)];
      if (t == DType::f32) y.as<float>()[i] = float(v);
      else y.as<double>()[i] = v;
    }
    const Tensor masked = run_op(Op::ReluGrad, {dy, y}, 1)[0];
    auto two = run_op(Op::BatchNormalizationGrad, {masked, x, scale}, 3);
    auto one = run_op(Op::BatchNormalizationGrad, {dy, x, scale, y}, 3);
    int zeros = 0;
    for (double v : masked.to_f64()) zeros += v == 0;
    CHECK(zeros >= 8);  // the mask bites
    for (int k = 0; k < 3; ++k) {
      CAPTURE(k);
      const std::vector<double> a = two[size_t(k)].to_f64(), b = one[size_t(k)].to_f64();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
    }
  }
  Tensor x = pattern({3, 2, 2, 3}, 0.1), dy = pattern({3, 2, 2, 3}, 1.1), scale = pattern({2}, 0.5);
  for (int i = 0; i < 2; ++i) scale.as<double>()[i] += 1.5;
  Tensor positive(DType::f64, {3, 2, 2, 3});
  for (int64_t i = 0; i < positive.numel(); ++i) positive.as<double>()[i] = 1.0 + double(i);
  auto out = run_op(Op::BatchNormalizationGrad, {dy, x, scale, positive}, 3);
  check_close(out[0], kBnDx);
  check_close(out[1], kBnDscale);
  check_close(out[2], kBnDbias);
}

// Large enough to split over threads and to take in blocks of channels (batch_norm_block): the
// same values on 1, 2 and 3 threads, bit for bit, with and without relu_y; relu_y's form equal
// to ReluGrad then BatchNormalizationGrad.
TEST_CASE("grad ops: BatchNormalizationGrad over blocks of channels and threads") {
  convref::KeepThreads keep;
  const Shape xs{16, 40, 64, 64};
  Tensor x = pattern(xs, 0.1, 1, DType::f32), dy = pattern(xs, 1.1, 1, DType::f32), y = pattern(xs, 0.7, 1, DType::f32);
  Tensor scale = pattern({40}, 0.5, 1, DType::f32);
  set_cpu_threads(1);
  const std::vector<Tensor> plain = run_op(Op::BatchNormalizationGrad, {dy, x, scale}, 3);
  const std::vector<Tensor> fused = run_op(Op::BatchNormalizationGrad, {dy, x, scale, y}, 3);
  const std::vector<Tensor> two =
      run_op(Op::BatchNormalizationGrad, {run_op(Op::ReluGrad, {dy, y}, 1)[0], x, scale}, 3);
  for (int k = 0; k < 3; ++k) CHECK(std::memcmp(fused[size_t(k)].data(), two[size_t(k)].data(), two[size_t(k)].nbytes()) == 0);
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    set_cpu_threads(threads);
    const std::vector<Tensor> p = run_op(Op::BatchNormalizationGrad, {dy, x, scale}, 3);
    const std::vector<Tensor> f = run_op(Op::BatchNormalizationGrad, {dy, x, scale, y}, 3);
    for (int k = 0; k < 3; ++k) {
      CHECK(std::memcmp(p[size_t(k)].data(), plain[size_t(k)].data(), plain[size_t(k)].nbytes()) == 0);
      CHECK(std::memcmp(f[size_t(k)].data(), fused[size_t(k)].data(), fused[size_t(k)].nbytes()) == 0);
    }
  }
}

// BatchNormalization's gradient does not change when x moves by a constant, so x + 1e8 has the
// torch values above. The kernel's sums are of x minus the channel's first element: sums of x^2
// in double would lose the variance (0.5 against 1e16 per term) entirely.
TEST_CASE("grad ops: BatchNormalizationGrad far from zero mean (shifted sums)") {
  Tensor x = pattern({3, 2, 2, 3}, 0.1), dy = pattern({3, 2, 2, 3}, 1.1), scale = pattern({2}, 0.5);
  for (int i = 0; i < 2; ++i) scale.as<double>()[i] += 1.5;
  for (int64_t i = 0; i < x.numel(); ++i) x.as<double>()[i] += 1e8;
  auto out = run_op(Op::BatchNormalizationGrad, {dy, x, scale}, 3);
  check_close(out[0], kBnDx, 1e-6, 1e-6);
  check_close(out[1], kBnDscale, 1e-6, 1e-6);
  check_close(out[2], kBnDbias, 1e-6, 1e-6);
}

TEST_CASE("grad ops: LayerNormalizationGrad over two axes with a broadcast scale") {
  Tensor x = pattern({2, 3, 4}, 0.2), dy = pattern({2, 3, 4}, 1.3), scale = pattern({4}, 0.7);
  for (int i = 0; i < 4; ++i) scale.as<double>()[i] += 1.0;
  auto out = run_op(Op::LayerNormalizationGrad, {dy, x, scale}, 3, {{"axis", Attr(int64_t(1))}});
  CHECK(out[1].shape() == Shape{3, 4});
  check_close(out[0], kLnDx);
  check_close(out[1], kLnDscale);
  check_close(out[2], kLnDbias);
}

TEST_CASE("grad ops: GatherGrad adds repeated indices, negative indices count from the end") {
  Tensor dy = pattern({2, 3, 2}, 0.4);
  check_close(run_op(Op::GatherGrad, {dy, i64({2, 0, 2}), i64({2, 4, 2})}, 1, {{"axis", Attr(int64_t(1))}})[0], kGatherDdata);
  check_close(run_op(Op::GatherGrad, {dy, i64({-2, 0, 2}), i64({2, 4, 2})}, 1, {{"axis", Attr(int64_t(1))}})[0], kGatherDdata);
  // axis 0 (an embedding): rows 1, 1, 0 of a [3, 2] table
  Tensor e = pattern({3, 2}, 0);
  auto out = run_op(Op::GatherGrad, {e, i64({1, 1, 0}), i64({3, 2})}, 1);
  check_close(out[0], {e.as<double>()[4], e.as<double>()[5], e.as<double>()[0] + e.as<double>()[2],
                       e.as<double>()[1] + e.as<double>()[3], 0, 0});
  CHECK_THROWS_WITH_AS(run_op(Op::GatherGrad, {e, i64({1, 3, 0}), i64({3, 2})}, 1), doctest::Contains("out of range"), Error);
}

TEST_CASE("grad ops: GatherNDGrad adds dy's slices where GatherND read them, repeats add, batch_dims") {
  // data [3, 2, 2], tuples (1, 0), (-2, 0), (2, 1): slices [2] (the first two the same slice)
  Tensor dy = pattern({3, 2}, 0.3);
  const double* v = dy.as<double>();
  check_close(run_op(Op::GatherNDGrad, {dy, i64({1, 0, -2, 0, 2, 1}, {3, 2}), i64({3, 2, 2})}, 1)[0],
              {0, 0, 0, 0, v[0] + v[2], v[1] + v[3], 0, 0, 0, 0, v[4], v[5]});
  // batch_dims 1: data [2, 3], indices [2, 2, 1]: batch 0 reads 2 twice, batch 1 reads 0 and 1
  Tensor e = pattern({2, 2}, 1.1);
  const double* w = e.as<double>();
  check_close(run_op(Op::GatherNDGrad, {e, i64({2, -1, 0, 1}, {2, 2, 1}), i64({2, 3})}, 1,
                     {{"batch_dims", Attr(int64_t(1))}})[0],
              {0, 0, w[0] + w[1], w[2], w[3], 0});
  CHECK_THROWS_WITH_AS(run_op(Op::GatherNDGrad, {dy, i64({1, 0, 3, 0, 2, 1}, {3, 2}), i64({3, 2, 2})}, 1),
                       doctest::Contains("index 3 (element 2 of the indices) is out of range for axis 0"), Error);
}

// Expected: torch autograd in float64 of sum(F.interpolate(x, ...) * dy), x [1, 1, 3, 4],
// dy[i] = ((5 i) mod 7) / 2 - 1.5:
//   x.grad of F.interpolate(x, size=(5, 3), mode='bicubic', align_corners=False)
//   x.grad of F.interpolate(x, size=(5, 7), mode='bilinear', align_corners=True)
TEST_CASE("grad ops: ResizeGrad is PyTorch's interpolate backward (bicubic, bilinear align_corners)") {
  auto dy = [](Shape s, DType t) {
    Tensor r(t, s);
    for (int64_t i = 0; i < r.numel(); ++i) {
      const double v = double((i * 5) % 7) * 0.5 - 1.5;
      if (t == DType::f64) r.as<double>()[i] = v;
      else r.as<float>()[i] = float(v);
    }
    return r;
  };
  auto attrs = [](const char* mode, const char* ct) {
    return Attrs{{"mode", Attr(std::string(mode))}, {"coordinate_transformation_mode", Attr(std::string(ct))}};
  };
  for (DType t : {DType::f64, DType::f32}) {
    check_close(run_op(Op::ResizeGrad, {dy({1, 1, 5, 3}, t), i64({1, 1, 3, 4}), Tensor(), Tensor(), i64({1, 1, 5, 3})}, 1,
                       attrs("cubic", "half_pixel"))[0],
                {-2.12778472222, 0.872180555556, 1.30958333333, -0.0259791666667, -0.6164375, -0.957395833333,
                 -0.435506944444, 1.89134027778, 0.649893518519, -0.639900462963, -0.886229166667, -0.533763888889},
                t == DType::f64 ? 1e-10 : 1e-6);
    check_close(run_op(Op::ResizeGrad, {dy({1, 1, 5, 7}, t), i64({1, 1, 3, 4}), Tensor(), Tensor(), i64({1, 1, 5, 7})}, 1,
                       attrs("linear", "align_corners"))[0],
                {-1.5, 0, 1.875, -0.375, -2, 0, 2.5, -0.5, -1.5, 0, 1.875, -0.375}, t == DType::f64 ? 1e-10 : 1e-6);
  }
  CHECK_THROWS_WITH_AS(run_op(Op::ResizeGrad, {dy({1, 1, 5, 4}, DType::f64), i64({1, 1, 3, 4}), Tensor(), Tensor(),
                                               i64({1, 1, 5, 3})},
                              1, attrs("cubic", "half_pixel")),
                       doctest::Contains("resizing [1, 1, 3, 4] gives [1, 1, 5, 3]"), Error);
}

TEST_CASE("grad ops: SoftmaxCrossEntropyLossGrad with weights and ignore_index, every reduction") {
  Tensor x = pattern({3, 4, 2}, 0.6, 2), lab = i64({0, 3, 1, 2, 3, 3}, {3, 2});
  Tensor w = Tensor(DType::f64, {4});
  for (int k = 0; k < 4; ++k) w.as<double>()[k] = 0.5 + 0.25 * k;
  Tensor dy(DType::f64, {});
  dy.as<double>()[0] = 0.7;
  for (const char* red : {"mean", "sum", "none"}) {
    CAPTURE(red);
    Attrs a = {{"reduction", Attr(std::string(red))}, {"ignore_index", Attr(int64_t(2))}};
    Tensor d = std::string(red) == "none" ? pattern({3, 2}, 0.8) : dy;
    auto out = run_op(Op::SoftmaxCrossEntropyLossGrad, {d, x, lab, w}, 1, a);
    check_close(out[0], std::string(red) == "mean" ? kSceMean : std::string(red) == "sum" ? kSceSum : kSceNone);
  }
}

TEST_CASE("grad ops: NegativeLogLikelihoodLossGrad with weights and ignore_index, every reduction") {
  Tensor lab = i64({2, 1, 0, 1});
  Tensor w = Tensor(DType::f64, {3});
  w.as<double>()[0] = 1.5;
  w.as<double>()[1] = 1.0;
  w.as<double>()[2] = 0.5;
  Tensor dy(DType::f64, {});
  dy.as<double>()[0] = 0.7;
  for (const char* red : {"mean", "sum", "none"}) {
    CAPTURE(red);
    Attrs a = {{"reduction", Attr(std::string(red))}, {"ignore_index", Attr(int64_t(0))}};
    Tensor d = std::string(red) == "none" ? pattern({4}, 0.8) : dy;
    auto out = run_op(Op::NegativeLogLikelihoodLossGrad, {d, lab, i64({4, 3}), w}, 1, a);
    CHECK(out[0].shape() == Shape{4, 3});
    check_close(out[0], std::string(red) == "mean" ? kNllMean : std::string(red) == "sum" ? kNllSum : kNllNone);
  }
}

const std::vector<double> kSoftmaxDx1 = {
    0.2215589346, 0.3274014953, 0.2660940046, 0.1472828378, -0.1538546315, -0.2905865788, -0.2457632922, -0.1369652239,
    -0.06770430313, -0.03681491654, -0.02033071237, -0.01031761385, -0.008902069969, -0.0007909076215, 0.009792586237, 0.0322211736,
    0.08388763957, 0.2122258398, 0.3018246268, 0.2128025619, -0.0749855696, -0.2114349322, -0.3116172131, -0.2450237355};
const std::vector<double> kSoftmaxDxLast = {
    0.04477294393, 0.05445283955, 0.005655236697, -0.1048810202, 0.1305257594, -0.02149507229, -0.06188478626, -0.0471459008,
    -0.05176787705, -0.01507520454, 0.01808132136, 0.04876176023, -0.07808118824, -0.05014444306, 9.641632616e-05, 0.128129215,
    0.01478677192, 0.03283303894, 0.02248177041, -0.07010158127, 0.1395850619, 0.004186066824, -0.07101615143, -0.07275497731};
const std::vector<double> kLogSoftmaxDx1 = {
    1.004243137, 1.117269876, 1.251633097, 1.247301382, -0.008193129371, -0.1818484445, -0.4948669867, -0.7736008187,
    -0.9960500074, -0.9354214313, -0.7567661105, -0.4737005631, -0.1612426803, 0.2001524617, 0.5254311525, 0.7730770484,
    0.8017866935, 0.649768999, 0.3454443289, 0.1116286259, -0.6405440132, -0.8499214607, -0.8708754815, -0.8847056743};
const std::vector<double> kLogSoftmaxDxLast = {
    0.6425857776, 0.2608183568, -0.2417160628, -0.6616880715, 0.8928124125, 0.2196586971, -0.3651615698, -0.7473095399,
    0.5234701767, -0.1510027978, -0.2746638091, -0.09780356974, -0.3053582408, 0.006388340163, 0.194940887, 0.1040290137,
    0.6734223175, 0.3891863657, -0.1854800908, -0.8771285924, 0.6282253862, 0.2159917255, -0.2310985159, -0.6131185958};

TEST_CASE("grad ops: SoftmaxGrad and LogSoftmaxGrad on an inner and the last axis, float64 and float32") {
  // y comes from the CPU Softmax / LogSoftmax of x, as in a training graph; dx is x's gradient.
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    const double tol = t == DType::f64 ? 1e-8 : 2e-6;
    for (int64_t axis : {1, -1}) {
      CAPTURE(axis);
      Tensor x = pattern({2, 3, 4}, 0.5, 2, t), dy = pattern({2, 3, 4}, 1.7, 1, t);
      const Attrs a = {{"axis", Attr(axis)}};
      Tensor y = run_op(Op::Softmax, {x}, 1, a)[0], ly = run_op(Op::LogSoftmax, {x}, 1, a)[0];
      check_close(run_op(Op::SoftmaxGrad, {dy, y}, 1, a)[0], axis == 1 ? kSoftmaxDx1 : kSoftmaxDxLast, tol, tol);
      check_close(run_op(Op::LogSoftmaxGrad, {dy, ly}, 1, a)[0], axis == 1 ? kLogSoftmaxDx1 : kLogSoftmaxDxLast, tol, tol);
    }
  }
}

TEST_CASE("grad ops: SoftmaxGrad on many rows (threads) equals a plain double loop") {
  // [192, 3, 300] along axis -1 (contiguous rows) and 1 (columns of a slab): enough elements for
  // the threaded loop (parallel_min_elements()); each dx against the formula evaluated in double.
  Tensor dy = pattern({192, 3, 300}, 0.3, 1.5), y = pattern({192, 3, 300}, 0.9, 0.5);
  REQUIRE(dy.numel() > parallel_min_elements());
  for (int64_t axis : {-1, 1}) {
    for (bool log : {false, true}) {
      CAPTURE(axis);
      CAPTURE(log);
      const int64_t n = axis == -1 ? 300 : 3, inner = axis == -1 ? 1 : 300, outer = axis == -1 ? 576 : 192;
      const double *g = dy.as<double>(), *v = y.as<double>();
      std::vector<double> want(size_t(dy.numel()));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double s = 0;
          for (int64_t j = 0; j < n; ++j) {
            const int64_t k = (o * n + j) * inner + i;
            s += log ? g[k] : g[k] * v[k];
          }
          for (int64_t j = 0; j < n; ++j) {
            const int64_t k = (o * n + j) * inner + i;
            want[size_t(k)] = log ? g[k] - std::exp(v[k]) * s : v[k] * (g[k] - s);
          }
        }
      check_close(run_op(log ? Op::LogSoftmaxGrad : Op::SoftmaxGrad, {dy, y}, 1, {{"axis", Attr(axis)}})[0], want,
                  1e-12, 1e-13);
    }
  }
}

TEST_CASE("grad ops: ReluGrad is PyTorch's threshold_backward from the output, NaN and -0 included") {
  // Expected values worked out by hand from threshold_backward's rule (PyTorch's ReLU backward,
  // threshold 0, applied to the output y): dx = y <= 0 ? 0 : dy. So y = 0 and -0 give +0; y > 0
  // passes dy as it is (NaN, -inf; a small y, subnormal in float16); a NaN y (torch.relu keeps a
  // NaN x) is not <= 0 and passes dy too, where Where(Greater(y, 0), dy, 0) would have given 0.
  const double nan = std::nan(""), inf = HUGE_VAL;
  const std::vector<double> y = {-1, 0, -0.0, 2, 1e-6, nan, 3, 0.5, nan, -inf, inf};
  const std::vector<double> dy = {5, 6, 7, 8, 9, 10, nan, -inf, nan, 1, -2};
  const std::vector<double> want = {0, 0, 0, 8, 9, 10, nan, -inf, nan, 0, -2};
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(t));
    auto make = [&](const std::vector<double>& v) {
      Tensor r(t, {int64_t(v.size())});
      for (size_t i = 0; i < v.size(); ++i) {
        if (t == DType::f64) r.as<double>()[i] = v[i];
        else if (t == DType::f32) r.as<float>()[i] = float(v[i]);
        else static_cast<uint16_t*>(r.data())[i] = f32_to_half(t, float(v[i]));
      }
      return r;
    };
    const Tensor dx = run_op(Op::ReluGrad, {make(dy), make(y)}, 1)[0];
    REQUIRE(dx.dtype() == t);
    const std::vector<double> got = dx.to_f64();
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      if (std::isnan(want[i])) {
        CHECK(std::isnan(got[i]));
      } else {
        CHECK(got[i] == want[i]);
        CHECK(std::signbit(got[i]) == std::signbit(want[i]));  // the zeros are +0
      }
    }
  }
  // Shape rule: one float dtype and shape, the node named.
  CHECK_THROWS_WITH_AS(run_op(Op::ReluGrad, {pattern({2, 3}, 0), pattern({3, 2}, 0)}, 1),
                       doctest::Contains("node node (ReluGrad)"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::ReluGrad, {pattern({2}, 0), pattern({2}, 0, 1, DType::f32)}, 1),
                       doctest::Contains("input 0 (dy) is f64, input 1 (y) is f32"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::ReluGrad, {i64({1, 2}), i64({1, 2})}, 1),
                       doctest::Contains("input 1 (y) is i64; ReluGrad takes floats"), Error);
}

TEST_CASE("grad ops: shape rules reject inconsistent nodes, naming them") {
  // dy of the wrong size for the convolution it claims to come from
  CHECK_THROWS_WITH_AS(run_op(Op::ConvGradFilter, {pattern({1, 2, 5, 5}, 0), pattern({1, 3, 4, 4}, 0)}, 1,
                              {{"kernel_shape", Attr(Ints{3, 3})}}),
                       doctest::Contains("node node (ConvGradFilter)"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::MaxPoolGrad, {pattern({1, 1, 6}, 0), pattern({1, 1, 4}, 0)}, 1,
                              {{"kernel_shape", Attr(Ints{2})}}),
                       doctest::Contains("pooling [1, 1, 6] gives [1, 1, 5]"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::GatherGrad, {pattern({2, 2}, 0), i64({0, 1, 1}), i64({4, 2})}, 1),
                       doctest::Contains("GatherGrad"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::SoftmaxCrossEntropyLossGrad, {pattern({3}, 0), pattern({3, 4}, 0), i64({0, 1, 2})}, 1),
                       doctest::Contains("reduction mean expects []"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::BatchNormalizationGrad, {pattern({2, 3}, 0), pattern({2, 3}, 0), pattern({2}, 0)}, 3),
                       doctest::Contains("scale"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::SoftmaxGrad, {pattern({2, 3}, 0), pattern({2, 4}, 0)}, 1),
                       doctest::Contains("different shapes ([2, 3] and [2, 4])"), Error);
  CHECK_THROWS_WITH_AS(run_op(Op::LogSoftmaxGrad, {pattern({2, 3}, 0), pattern({2, 3}, 0)}, 1, {{"axis", Attr(int64_t(2))}}),
                       doctest::Contains("node node (LogSoftmaxGrad)"), Error);
}

TEST_CASE("grad ops: a model naming an internal op does not import") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  for (const char* in : {"x", "dy"}) {
    onnx::ValueInfoProto* vi = g->add_input();
    vi->set_name(in);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {1, 1, 4}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("MaxPoolGrad");
  n->set_name("mpg");
  n->add_input("x");
  n->add_input("dy");
  n->add_output("dx");
  g->add_output()->set_name("dx");
  CHECK_THROWS_WITH_AS(import_graph(m, ".", ImportOptions{}), doctest::Contains("internal onnxdp op, not importable"), Error);
  CHECK_THROWS_WITH_AS(import_graph(m, ".", ImportOptions{}), doctest::Contains("mpg"), Error);
}
