// The CUDA convolutions (cuDNN) and pooling kernels (exec/cuda/conv.*) against the CPU kernels
// (the reference): the backend harness's family "conv" (tests/backend/backend_ops.h), each case a
// one-node Graph run by a Plan on the CPU and by a Plan on every device backend present (emulated
// in suite "cuda", cuda:0 in suite "gpu": tests/backend/test_backend_ops.cpp), every output
// compared; the cases cuDNN or the kernels refuse must run on the CPU there.
//
// Covered: Conv 1-D / 2-D / 3-D with and without bias, pads (symmetric, asymmetric where cuDNN's
// symmetric pad gives the same output size, auto_pad SAME_UPPER / SAME_LOWER / VALID), strides,
// dilations, group (2 and depthwise), 1x1, odd sizes, an empty batch, an empty spatial extent
// (bias only); ConvTranspose with strides, pads, output_padding, output_shape, SAME_LOWER, group,
// dilation, bias, 1-D / 3-D, and the asymmetric-pad form the Conv input gradient takes;
// ConvGradFilter with pads, strides, dilations, group, 1-D / 3-D and an empty batch (zeros).
// MaxPool (f32, f64, int8, uint8; Indices in both storage orders), AveragePool (count_include_pad
// 0 / 1), MaxPoolGrad and AveragePoolGrad with pads (asymmetric too), strides, dilations,
// ceil_mode, auto_pad, windows entirely in padding, 1-D / 2-D / 3-D, inputs drawn from 3 levels
// (so windows tie: the first maximum wins in both) and with NaNs; GlobalAveragePool 1-D / 2-D /
// 3-D, f64, an empty spatial extent (NaN). Refusals (f64 Conv, asymmetric pads cuDNN cannot
// express, a negative ConvTranspose pad, 4 spatial dims) stay on the CPU (Plan::host_ops).
//
// Tolerance. Convolution inputs are multiples of 1/8 in [-1, 1]: every product is a multiple of
// 1/64 and every partial sum of the at most a few hundred terms here is exactly representable in
// fp32, so any summation order gives the exact result; the emulation (host loops with cuDNN's
// definitions) must equal the CPU bit for bit. On the GPU the same holds for the GEMM-based and
// direct algorithms the kernels prefer (exec/cuda/conv.cpp takes FFT / Winograd only when cuDNN
// offers nothing else), but the check is the fp32 summation bound instead of exactness: |gpu - cpu| <= (2T + 8) u mag per element,
// u = 2^-24, T the terms per output and mag the CPU kernel's result on the absolute inputs (the
// bound of tests/gpu/test_cuda_gemm.cpp); a wrong index moves a result by at least 1/64.
// Pooling runs the CPU's arithmetic in the CPU's order (exec/cuda/conv_launch.h): bit-identical
// in both suites (NaN equal to NaN), Indices exact.
// float16 / bfloat16 convolutions (--mixed-precision) on the same cases: the exact float sum
// rounds once to the 16-bit type on both sides, so they are equal, except that with a bias the
// device rounds the convolution and then the sum with the bias (cudnnAddTensor) where the CPU
// rounds once: one unit in the 16-bit type's last place apart at most (and the fp32 bound on the
// GPU). The emulation without a bias must be exact.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/backend/backend_ops.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/cuda/conv.h"
#include "exec/cuda/elementwise.h"
#include "exec/device_backend.h"
#include "exec/plan.h"

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

using Attrs = std::map<std::string, Attr>;
using Ints = std::vector<int64_t>;

struct Case {
  Case(Op o, std::vector<Shape> i, Attrs a, DType type = DType::f32)
      : op(o), ins(std::move(i)), attrs(std::move(a)), t(type) {}
  Op op;
  std::vector<Shape> ins;  // float graph inputs (AveragePoolGrad: dy only; its x_shape is `xshape`)
  Attrs attrs;
  DType t = DType::f32;
  Ints xshape;           // AveragePoolGrad: the constant input 1
  bool indices = false;  // MaxPool: the Indices output too
  int levels = 0;        // 0: multiples of 1/8 in [-1, 1]; n: integers 0..n-1 (ties)
  bool nan = false;      // a few NaN inputs
};

std::string describe(const Case& c) {
  std::string s = std::string(op_name(c.op)) + " " + dtype_name(c.t) + " (";
  for (size_t k = 0; k < c.ins.size(); ++k) s += (k ? ", " : "") + shape_str(c.ins[k]);
  s += ")";
  for (const auto& [name, a] : c.attrs) {
    s += " " + name + "=";
    if (const int64_t* i = std::get_if<int64_t>(&a)) s += std::to_string(*i);
    else if (const std::string* str = std::get_if<std::string>(&a)) s += *str;
    else if (const std::vector<int64_t>* v = std::get_if<std::vector<int64_t>>(&a)) s += shape_str(*v);
  }
  if (c.levels) s += " levels=" + std::to_string(c.levels);
  if (c.nan) s += " nan";
  return s;
}

// "i<k>", built by appending (GCC 12 warns falsely (-Wrestrict) on "i" + std::to_string(k)).
std::string input_name(size_t k) {
  std::string s = "i";
  s += std::to_string(k);
  return s;
}

OpCase op_case(const Case& c);

Graph graph_of(const Case& c) { return one_node_graph(op_case(c)); }

// The output shape of forward op(shapes) with attrs: a gradient case's dy shape.
Shape forward_shape(Op op, const std::vector<Shape>& shapes, const Attrs& attrs) {
  Case c{op, shapes, attrs};
  Graph g = graph_of(c);
  return g.value(g.outputs[0]).shape;
}

void store(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::f32: t.as<float>()[i] = float(v); break;
    case DType::f64: t.as<double>()[i] = v; break;
    case DType::f16: t.as<uint16_t>()[i] = f32_to_f16(float(v)); break;
    case DType::bf16: t.as<uint16_t>()[i] = f32_to_bf16(float(v)); break;
    case DType::i8: t.as<int8_t>()[i] = int8_t(v); break;
    case DType::u8: t.as<uint8_t>()[i] = uint8_t(v); break;
    default: FAIL("unexpected dtype");
  }
}

double load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.as<float>()[i];
    case DType::f64: return t.as<double>()[i];
    case DType::f16: return f16_to_f32(t.as<uint16_t>()[i]);
    case DType::bf16: return bf16_to_f32(t.as<uint16_t>()[i]);
    case DType::i8: return t.as<int8_t>()[i];
    case DType::u8: return t.as<uint8_t>()[i];
    case DType::i64: return double(t.as<int64_t>()[i]);
    default: return NAN;
  }
}

Tensor input_of(const Case& c, const Shape& s, std::mt19937& rng) {
  Tensor x(c.t, s);
  std::uniform_int_distribution<int> eighths(-8, 8), level(0, std::max(c.levels, 1) - 1);
  const bool int_type = c.t == DType::i8 || c.t == DType::u8;
  std::uniform_int_distribution<int> ints(c.t == DType::i8 ? -128 : 0, c.t == DType::i8 ? 127 : 255);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = c.levels ? double(level(rng)) : int_type ? double(ints(rng)) : eighths(rng) / 8.0;
    if (c.nan && (i % 13 == 4 || i == 0)) v = NAN;
    store(x, i, v);
  }
  return x;
}

bool is_conv(Op op) { return op == Op::Conv || op == Op::ConvTranspose || op == Op::ConvGradFilter; }

// Terms per output of a convolution case (the T of the tolerance).
int64_t terms(const Case& c) {
  auto prod = [](const Shape& s, size_t from) {
    int64_t p = 1;
    for (size_t i = from; i < s.size(); ++i) p *= s[i];
    return p;
  };
  const int64_t group = c.attrs.count("group") ? std::get<int64_t>(c.attrs.at("group")) : 1;
  if (c.op == Op::Conv) return c.ins[1][1] * prod(c.ins[1], 2) + 1;
  if (c.op == Op::ConvTranspose) return c.ins[1][0] / group * prod(c.ins[1], 2) + 1;
  return c.ins[0][0] * prod(c.ins[1], 2);  // ConvGradFilter: images x dy positions
}

// Integers and pooling: equal (NaN equal to NaN). Convolutions on a GPU: within the fp32
// summation bound, mag the CPU kernel's result on the absolute inputs; 16-bit with a bias: the
// device's two roundings against the CPU's one (see the top).
std::string conv_compare(const Case& c, const Compared& m) {
  const bool tolerant = is_conv(c.op) && m.on_gpu;
  Tensor mag;
  if (tolerant) {
    std::map<std::string, Tensor> abs_feed = m.feed;
    for (auto& [name, t] : abs_feed)
      for (int64_t i = 0; i < t.numel(); ++i) store(t, i, std::abs(load(t, i)));
    mag = run_on_cpu(m.c, abs_feed).at(m.output);
  }
  const double tol = tolerant ? double(2 * terms(c) + 8) * std::ldexp(1.0, -24) : 0.0;
  const bool low = c.t == DType::f16 || c.t == DType::bf16;
  const double ulp = !low || c.ins.size() < 3 || c.op == Op::ConvGradFilter ? 0.0
                     : std::ldexp(1.0, c.t == DType::f16 ? -10 : -7);
  return mismatches(m, [&](int64_t i, double u, double v) {
    bool ok = std::isnan(u) || std::isnan(v) ? std::isnan(u) && std::isnan(v) : u == v;
    if (!ok && (tolerant || ulp > 0))
      ok = std::abs(u - v) <= (tolerant ? tol * element(mag, i) : 0.0) + ulp * std::max(std::abs(u), std::abs(v));
    return ok;
  });
}

// The harness case: float inputs i0.. of c.t (input_of), AveragePoolGrad's x_shape a constant,
// MaxPool's Indices as output 1.
OpCase op_case(const Case& c) {
  OpCase o{.label = describe(c), .op = c.op, .attrs = c.attrs, .outputs = c.indices ? 2 : 1};
  for (size_t k = 0; k < c.ins.size(); ++k) o.inputs.push_back(fed(input_name(k), c.t, c.ins[k]));
  if (c.op == Op::AveragePoolGrad) o.inputs.push_back(fixed("xshape", ints(c.xshape)));
  o.fill = [c](const OpCase& oc, size_t k, std::mt19937& rng) { return input_of(c, oc.inputs[k].shape, rng); };
  o.compare = [c](const Compared& m) { return conv_compare(c, m); };
  return o;
}

Attrs A(std::initializer_list<std::pair<const std::string, Attr>> l) { return Attrs(l); }
Attr I(int64_t v) { return Attr(v); }
Attr V(Ints v) { return Attr(std::move(v)); }
Attr S(const char* s) { return Attr(std::string(s)); }

std::vector<Case> conv_cases() {
  std::vector<Case> cs;
  // Conv: x, W (, B).
  cs.push_back({Op::Conv, {{2, 3, 7, 6}, {4, 3, 3, 3}, {4}}, A({{"pads", V({1, 1, 1, 1})}})});
  cs.push_back({Op::Conv, {{1, 2, 9, 8}, {3, 2, 3, 3}}, A({{"pads", V({1, 1, 1, 1})}, {"strides", V({2, 2})}})});
  cs.push_back({Op::Conv, {{2, 2, 10, 9}, {2, 2, 3, 2}, {2}},
                A({{"pads", V({2, 1, 2, 1})}, {"dilations", V({2, 3})}, {"strides", V({1, 2})}})});
  cs.push_back({Op::Conv, {{2, 4, 6, 5}, {6, 2, 3, 3}, {6}}, A({{"pads", V({1, 1, 1, 1})}, {"group", I(2)}})});
  cs.push_back({Op::Conv, {{1, 3, 5, 5}, {3, 1, 3, 3}}, A({{"group", I(3)}, {"strides", V({2, 2})}})});  // depthwise
  cs.push_back({Op::Conv, {{2, 5, 4, 3}, {7, 5, 1, 1}, {7}}, A({})});                                    // 1x1
  // Asymmetric pads whose trailing pad does not change the size: pads (0, 1) with stride 2 on 7.
  cs.push_back({Op::Conv, {{1, 1, 7, 7}, {2, 1, 3, 3}}, A({{"pads", V({0, 0, 1, 1})}, {"strides", V({2, 2})}})});
  cs.push_back({Op::Conv, {{1, 2, 5, 6}, {2, 2, 3, 3}}, A({{"auto_pad", S("SAME_UPPER")}})});
  cs.push_back({Op::Conv, {{1, 2, 5, 6}, {2, 2, 3, 3}}, A({{"auto_pad", S("SAME_LOWER")}})});
  cs.push_back({Op::Conv, {{1, 2, 9, 7}, {3, 2, 3, 3}, {3}}, A({{"auto_pad", S("VALID")}, {"strides", V({2, 2})}})});
  cs.push_back({Op::Conv, {{2, 3, 11}, {4, 3, 3}, {4}}, A({{"pads", V({1, 1})}, {"strides", V({2})}})});      // 1-D
  cs.push_back({Op::Conv, {{1, 2, 12}, {2, 2, 3}}, A({{"pads", V({2, 2})}, {"dilations", V({2})}})});         // 1-D
  cs.push_back({Op::Conv, {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {3}}, A({{"pads", V({1, 1, 0, 1, 1, 0})}})});   // 3-D
  cs.push_back({Op::Conv, {{2, 2, 5, 4, 4}, {2, 1, 3, 2, 2}},
                A({{"group", I(2)}, {"strides", V({2, 1, 2})}, {"dilations", V({1, 2, 1})}})});  // 3-D
  cs.push_back({Op::Conv, {{0, 3, 5, 5}, {4, 3, 3, 3}, {4}}, A({{"pads", V({1, 1, 1, 1})}})});  // empty batch
  cs.push_back({Op::Conv, {{2, 2, 0, 4}, {3, 2, 3, 3}, {3}}, A({{"pads", V({2, 1, 2, 1})}})});   // empty extent: bias
  // ConvTranspose: x, W [C, M/group, k..] (, B).
  cs.push_back({Op::ConvTranspose, {{2, 3, 4, 4}, {3, 2, 3, 3}, {2}},
                A({{"strides", V({2, 2})}, {"pads", V({1, 1, 1, 1})}, {"output_padding", V({1, 1})}})});
  cs.push_back({Op::ConvTranspose, {{1, 4, 3, 5}, {4, 3, 3, 2}, {6}},
                A({{"group", I(2)}, {"dilations", V({2, 1})}, {"strides", V({1, 2})}})});
  // The Conv input gradient of the asymmetric case above: pads (0, 1), output_padding 1.
  cs.push_back({Op::ConvTranspose, {{1, 2, 3, 3}, {2, 1, 3, 3}},
                A({{"strides", V({2, 2})}, {"pads", V({0, 0, 1, 1})}, {"output_padding", V({1, 1})}})});
  cs.push_back({Op::ConvTranspose, {{1, 2, 3, 3}, {2, 2, 3, 3}}, A({{"strides", V({2, 2})}, {"output_shape", V({6, 6})}})});
  cs.push_back({Op::ConvTranspose, {{1, 1, 3, 4}, {1, 2, 3, 3}}, A({{"strides", V({2, 2})}, {"auto_pad", S("SAME_LOWER")}})});
  cs.push_back({Op::ConvTranspose, {{2, 3, 5}, {3, 2, 3}, {2}}, A({{"strides", V({2})}, {"pads", V({1, 1})}})});  // 1-D
  cs.push_back({Op::ConvTranspose, {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 3}}, A({{"strides", V({2, 1, 2})}})});           // 3-D
  cs.push_back({Op::ConvTranspose, {{0, 3, 4, 4}, {3, 2, 3, 3}, {2}}, A({})});  // empty batch
  // ConvGradFilter: x, dy (the Conv's output shape) with Conv's explicit attributes.
  auto cgf = [&](Shape x, Shape w, Attrs attrs) {
    attrs["kernel_shape"] = V(Ints(w.begin() + 2, w.end()));
    const Shape dy = forward_shape(Op::Conv, {x, w}, attrs);
    cs.push_back({Op::ConvGradFilter, {x, dy}, attrs});
  };
  cgf({2, 3, 7, 6}, {4, 3, 3, 3}, A({{"pads", V({1, 1, 1, 1})}}));
  cgf({2, 4, 9, 9}, {6, 2, 3, 3}, A({{"pads", V({1, 0, 1, 1})}, {"strides", V({2, 2})}, {"group", I(2)}}));
  cgf({1, 2, 10, 9}, {2, 2, 3, 2}, A({{"dilations", V({2, 3})}, {"pads", V({2, 1, 2, 1})}}));
  cgf({1, 1, 7, 7}, {2, 1, 3, 3}, A({{"pads", V({0, 0, 1, 1})}, {"strides", V({2, 2})}}));  // asymmetric
  cgf({3, 2, 13}, {3, 2, 4}, A({{"pads", V({1, 1})}, {"strides", V({3})}}));              // 1-D
  cgf({1, 2, 4, 5, 3}, {2, 2, 2, 3, 2}, A({{"pads", V({1, 1, 0, 1, 1, 0})}}));             // 3-D
  cgf({0, 3, 5, 5}, {2, 3, 1, 1}, A({}));                                                 // empty batch: zeros
  return cs;
}

std::vector<Case> pool_cases() {
  std::vector<Case> cs;
  // Window geometries shared by the max / average forward and gradient cases.
  struct Geo {
    Shape x;
    Attrs attrs;
  };
  const std::vector<Geo> geos = {
      {{2, 3, 7, 7}, A({{"kernel_shape", V({3, 3})}, {"strides", V({2, 2})}, {"pads", V({1, 1, 1, 1})}})},
      {{1, 2, 6, 6}, A({{"kernel_shape", V({3, 3})}, {"strides", V({2, 2})}, {"ceil_mode", I(1)}})},
      {{1, 2, 6, 7}, A({{"kernel_shape", V({3, 2})}, {"strides", V({2, 2})}, {"pads", V({1, 0, 1, 1})}, {"ceil_mode", I(1)}})},
      {{2, 2, 8, 7}, A({{"kernel_shape", V({2, 3})}, {"dilations", V({2, 2})}, {"pads", V({0, 1, 1, 0})}})},
      {{1, 2, 5, 6}, A({{"kernel_shape", V({3, 3})}, {"strides", V({2, 2})}, {"auto_pad", S("SAME_UPPER")}})},
      {{1, 2, 5, 6}, A({{"kernel_shape", V({2, 2})}, {"auto_pad", S("SAME_LOWER")}})},
      {{1, 1, 3, 3}, A({{"kernel_shape", V({2, 2})}, {"pads", V({2, 2, 2, 2})}})},  // windows all in padding
      {{2, 3, 11}, A({{"kernel_shape", V({3})}, {"strides", V({2})}, {"pads", V({1, 0})}})},  // 1-D
      {{1, 2, 4, 5, 6}, A({{"kernel_shape", V({2, 3, 2})}, {"strides", V({2, 1, 2})}, {"pads", V({0, 1, 1, 0, 1, 1})}})},
      {{0, 2, 5, 5}, A({{"kernel_shape", V({2, 2})}})},  // empty batch
  };
  for (const Geo& g : geos) {
    for (int levels : {0, 3}) {
      Case mp{Op::MaxPool, {g.x}, g.attrs};
      mp.levels = levels;
      mp.indices = true;
      cs.push_back(mp);
      Case mg{Op::MaxPoolGrad, {g.x, forward_shape(Op::MaxPool, {g.x}, g.attrs)}, g.attrs};
      mg.levels = levels;
      cs.push_back(mg);
    }
    for (int64_t include : {0, 1}) {
      Attrs a = g.attrs;
      a["count_include_pad"] = I(include);
      cs.push_back({Op::AveragePool, {g.x}, a});
      Case ag{Op::AveragePoolGrad, {forward_shape(Op::AveragePool, {g.x}, a)}, a};
      ag.xshape = Ints(g.x.begin(), g.x.end());
      cs.push_back(ag);
    }
  }
  const Attrs k3s2 = A({{"kernel_shape", V({3, 3})}, {"strides", V({2, 2})}, {"pads", V({1, 1, 1, 1})}});
  Case so{Op::MaxPool, {{2, 3, 7, 6}}, k3s2};  // storage_order 1
  so.attrs["storage_order"] = I(1);
  so.indices = true;
  cs.push_back(so);
  for (DType t : {DType::f64, DType::i8, DType::u8}) {
    Case c{Op::MaxPool, {{2, 3, 7, 6}}, k3s2, t};
    c.indices = true;
    cs.push_back(c);
  }
  Case mpn{Op::MaxPool, {{2, 3, 7, 6}}, k3s2};  // NaN as a window's first tap wins, later ones lose
  mpn.nan = true;
  mpn.indices = true;
  cs.push_back(mpn);
  Case mgn{Op::MaxPoolGrad, {{2, 3, 7, 6}, forward_shape(Op::MaxPool, {{2, 3, 7, 6}}, k3s2)}, k3s2};
  mgn.nan = true;
  cs.push_back(mgn);
  Case mg64{Op::MaxPoolGrad, {{2, 3, 7, 6}, forward_shape(Op::MaxPool, {{2, 3, 7, 6}}, k3s2)}, k3s2, DType::f64};
  mg64.levels = 3;
  cs.push_back(mg64);
  Attrs avg = k3s2;
  avg["count_include_pad"] = I(1);
  cs.push_back({Op::AveragePool, {{2, 3, 7, 6}}, avg, DType::f64});
  Case ag64{Op::AveragePoolGrad, {forward_shape(Op::AveragePool, {{2, 3, 7, 6}}, avg)}, avg, DType::f64};
  ag64.xshape = {2, 3, 7, 6};
  cs.push_back(ag64);
  Case apn{Op::AveragePool, {{2, 3, 7, 6}}, avg};
  apn.nan = true;
  cs.push_back(apn);
  for (DType t : {DType::f32, DType::f64}) {
    cs.push_back({Op::GlobalAveragePool, {{2, 3, 5, 4}}, A({}), t});
    cs.push_back({Op::GlobalAveragePool, {{2, 3, 7}}, A({}), t});
    cs.push_back({Op::GlobalAveragePool, {{1, 2, 2, 3, 4}}, A({}), t});
    cs.push_back({Op::GlobalAveragePool, {{2, 3, 0, 4}}, A({}), t});  // empty extent: 0 / 0
    cs.push_back({Op::GlobalAveragePool, {{0, 3, 4, 4}}, A({}), t});  // empty batch
  }
  return cs;
}

// The convolution cases again on float16 and bfloat16 operands (--mixed-precision).
std::vector<Case> conv_cases_16bit() {
  std::vector<Case> cs;
  for (DType t : {DType::f16, DType::bf16})
    for (Case c : conv_cases()) {
      c.t = t;
      cs.push_back(c);
    }
  return cs;
}

// What cuDNN or the kernels do not match stays on the CPU.
std::vector<Case> refused_cases() {
  std::vector<Case> cs;
  cs.push_back({Op::Conv, {{1, 2, 5, 5}, {2, 2, 3, 3}}, A({}), DType::f64});
  // SAME_UPPER with stride 2 on an even extent: pads (0, 1), cuDNN's symmetric pad 0 gives one
  // output fewer.
  cs.push_back({Op::Conv, {{1, 1, 4, 4}, {1, 1, 3, 3}}, A({{"auto_pad", S("SAME_UPPER")}, {"strides", V({2, 2})}})});
  cs.push_back({Op::Conv, {{1, 1, 5, 5}, {1, 1, 3, 3}}, A({{"pads", V({1, 1, 0, 0})}})});
  // An output_shape larger than the taps reach: a negative leading pad.
  cs.push_back({Op::ConvTranspose, {{1, 1, 3, 3}, {1, 1, 3, 3}}, A({{"output_shape", V({9, 9})}})});
  // SAME_UPPER ConvTranspose with stride 2: leading pad 0, trailing 1.
  cs.push_back({Op::ConvTranspose, {{1, 1, 3, 3}, {1, 2, 3, 3}}, A({{"strides", V({2, 2})}, {"auto_pad", S("SAME_UPPER")}})});
  // 4 spatial dims: neither cuDNN nor the pooling kernels.
  cs.push_back({Op::Conv, {{1, 1, 3, 3, 3, 3}, {1, 1, 2, 2, 2, 2}}, A({})});
  cs.push_back({Op::MaxPool, {{1, 1, 3, 3, 3, 3}}, A({{"kernel_shape", V({2, 2, 2, 2})}})});
  cs.push_back({Op::AveragePool, {{1, 1, 3, 3, 3, 3}}, A({{"kernel_shape", V({2, 2, 2, 2})}})});
  return cs;
}

std::vector<OpCase> conv_family() {
  std::vector<OpCase> out;
  for (const std::vector<Case>& cs : {conv_cases(), conv_cases_16bit(), pool_cases()})
    for (const Case& c : cs) out.push_back(op_case(c));
  for (const Case& c : refused_cases()) {
    out.push_back(op_case(c));
    out.back().expect = Expect::host;
  }
  return out;
}

const bool registered = register_cases("conv", conv_family);

// One node's conv_call (shapes from its graph).
cuda::ConvCall call_of(const Case& c) {
  Graph g = graph_of(c);
  const Node& n = g.nodes[0];
  std::vector<DType> types;
  std::vector<Shape> shapes;
  for (size_t k = 0; k < c.ins.size(); ++k) types.push_back(c.t), shapes.push_back(c.ins[k]);
  return cuda::conv_call(n, types, shapes, c.ins.size() > 2, g.value(n.outputs[0]).shape);
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda conv: conv_call maps the three convolutions to cuDNN's descriptors") {
    // Conv 1-D: run as 2-D with a leading spatial dim of 1 and a 1-tap window there.
    cuda::ConvCall c = call_of({Op::Conv, {{2, 3, 11}, {4, 3, 3}, {4}}, A({{"pads", V({1, 1})}, {"strides", V({2})}})});
    REQUIRE(c.ok);
    CHECK(c.kind == cuda::ConvCall::Kind::forward);
    CHECK(c.nb_dims == 4);
    CHECK(std::vector<int>(c.x_dims, c.x_dims + 4) == std::vector<int>{2, 3, 1, 11});
    CHECK(std::vector<int>(c.w_dims, c.w_dims + 4) == std::vector<int>{4, 3, 1, 3});
    CHECK(std::vector<int>(c.y_dims, c.y_dims + 4) == std::vector<int>{2, 4, 1, 6});
    CHECK(std::vector<int>(c.pads, c.pads + 2) == std::vector<int>{0, 1});
    CHECK(std::vector<int>(c.strides, c.strides + 2) == std::vector<int>{1, 2});
    CHECK((c.x_is == 0 && c.w_is == 1 && c.y_is == -1 && c.bias && c.bias_channels == 4));
    CHECK(c.cross_correlation);
    // ConvTranspose: backward data, its output the conv input grid X, its input the grid Y.
    c = call_of({Op::ConvTranspose, {{2, 3, 4, 4}, {3, 2, 3, 3}},
                 A({{"strides", V({2, 2})}, {"pads", V({1, 1, 1, 1})}, {"output_padding", V({1, 1})}})});
    REQUIRE(c.ok);
    CHECK(c.kind == cuda::ConvCall::Kind::backward_data);
    CHECK(std::vector<int>(c.x_dims, c.x_dims + 4) == std::vector<int>{2, 2, 8, 8});
    CHECK(std::vector<int>(c.y_dims, c.y_dims + 4) == std::vector<int>{2, 3, 4, 4});
    CHECK((c.x_is == -1 && c.w_is == 1 && c.y_is == 0 && !c.bias));
    // ConvGradFilter 3-D with groups: backward filter into W [M, C/g, k..].
    c = call_of({Op::ConvGradFilter, {{1, 4, 5, 5, 5}, {1, 2, 5, 5, 5}},
                 A({{"kernel_shape", V({3, 3, 3})}, {"pads", V({1, 1, 1, 1, 1, 1})}, {"group", I(2)}})});
    REQUIRE(c.ok);
    CHECK(c.kind == cuda::ConvCall::Kind::backward_filter);
    CHECK(c.nb_dims == 5);
    CHECK(c.groups == 2);
    CHECK(std::vector<int>(c.w_dims, c.w_dims + 5) == std::vector<int>{2, 2, 3, 3, 3});
    CHECK((c.x_is == 0 && c.w_is == -1 && c.y_is == 1));
    // Asymmetric pads that change cuDNN's output size are refused, with the reason.
    c = call_of({Op::Conv, {{1, 1, 4, 4}, {1, 1, 3, 3}}, A({{"pads", V({0, 0, 1, 1})}, {"strides", V({2, 2})}})});
    CHECK(!c.ok);
    CHECK(c.why.find("asymmetric") != std::string::npos);
    // Empty operands: no cuDNN call.
    c = call_of({Op::Conv, {{0, 3, 5, 5}, {4, 3, 3, 3}}, A({})});
    CHECK((c.ok && c.kind == cuda::ConvCall::Kind::nothing));
    c = call_of({Op::Conv, {{2, 2, 0, 4}, {3, 2, 3, 3}, {3}}, A({{"pads", V({2, 1, 2, 1})}})});
    CHECK((c.ok && c.kind == cuda::ConvCall::Kind::fill && c.bias));
    // 16-bit operands keep their type (cuDNN's HALF / BFLOAT16 data with fp32 compute).
    for (DType t : {DType::f16, DType::bf16}) {
      c = call_of({Op::Conv, {{2, 3, 7, 6}, {4, 3, 3, 3}, {4}}, A({{"pads", V({1, 1, 1, 1})}}), t});
      CHECK((c.ok && c.type == t && c.kind == cuda::ConvCall::Kind::forward));
    }
    // Operands of different types are refused, naming them.
    Graph g = graph_of({Op::Conv, {{1, 2, 5, 5}, {2, 2, 3, 3}}, A({})});
    c = cuda::conv_call(g.nodes[0], {DType::f16, DType::f32}, {{1, 2, 5, 5}, {2, 2, 3, 3}}, false, {1, 2, 3, 3});
    CHECK(!c.ok);
    CHECK(c.why.find("input 1 is f32") != std::string::npos);
  }

  TEST_CASE("cuda conv: what cuDNN or the kernels do not match stays on the CPU") {
    auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
    for (const Case& c : refused_cases()) {
      CAPTURE(describe(c));
      CHECK(host_ops(op_case(c), dev) == op_name(c.op));
    }
  }
}
#endif
