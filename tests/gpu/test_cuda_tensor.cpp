// The CUDA tensor ops (exec/cuda/tensor_ops.*) through a one-node Plan on the device against the
// same Plan on the CPU (the reference): Gather, GatherGrad, Cast, Concat, Split, Slice, Pad, Tile,
// Trilu and Dropout, every output of every case.
//
// Tolerance: none. Every op here is exact on both sides: the copying ops move element bytes;
// GatherGrad adds each dx element's rows in the CPU's order (increasing index position) in T, so
// its sums are bit-identical (the cases mix magnitudes, 1e8 with 1, so another order would show);
// Dropout draws the same Philox uniforms and multiplies once in T; Cast performs the CPU's
// conversions (through double or int64, round-to-odd before f16 / bf16). Outputs are compared
// bit for bit, except that any NaN matches any NaN (a NaN's payload after a float conversion is
// the hardware's choice).
//
// Suite "cuda": on the emulated device (the kernels' loop bodies run on the host): checks the
// node-to-launch mapping and the loops, not the device. Suite "gpu": on cuda:0, skipped without one.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/gpu/cuda_test_util.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "exec/cuda/elementwise.h"
#include "exec/device_backend.h"
#include "exec/plan.h"
#include "graph/shape_helpers.h"

using namespace onnxdp;
using onnxdp::test::have_gpu;

namespace {

// An input of the node: fed each run (data generated unless given), a constant, or absent.
struct In {
  std::string name;  // empty: an absent optional input
  DType t = DType::f32;
  Shape shape;
  bool constant = false;
  Tensor data;  // constants: required; fed inputs: generated when empty
};

struct TCase {
  std::string label;
  Op op;
  std::vector<In> ins = {};
  std::map<std::string, Attr> attrs = {};
  int outs = 1;
  RunState rs = {};
};

Tensor tensor_of(DType t, Shape s, const std::vector<double>& v) {
  Tensor x(t, std::move(s));
  REQUIRE(size_t(x.numel()) == v.size());
  dispatch_elem(t, [&]<class E>() {
    for (int64_t i = 0; i < x.numel(); ++i) x.as<typename E::T>()[i] = E::from_f64(v[size_t(i)]);
  });
  return x;
}
Tensor ints(const std::vector<int64_t>& v, DType t = DType::i64) {
  std::vector<double> d(v.begin(), v.end());
  Tensor x(t, {int64_t(v.size())});
  if (t == DType::i64) {
    if (!v.empty()) std::memcpy(x.data(), v.data(), v.size() * 8);  // exact past 2^53
    return x;
  }
  return tensor_of(t, {int64_t(v.size())}, d);
}
Tensor scalar(DType t, double v) { return tensor_of(t, {}, {v}); }

// (given data takes the input's shape)
In fed(const char* name, DType t, Shape s, Tensor data = {}) {
  if (!data.empty()) data = data.reshaped(s);
  return {name, t, std::move(s), false, std::move(data)};
}
In fixed(const char* name, Tensor data) { return {name, data.dtype(), data.shape(), true, data}; }
In absent() { return {}; }

// Distinct values per element: any misplaced element shows. Floats get fractions and signs.
Tensor generated(DType t, const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(-1000, 1000);
  std::vector<double> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) {
    const double r = u(rng);
    switch (t) {
      case DType::boolean: v[i] = r > 0; break;
      case DType::u8: v[i] = double((i * 7 + 3) % 256); break;
      case DType::i8: v[i] = double(int(i * 5 % 256) - 128); break;
      default: v[i] = dtype_is_float(t) ? r / 8.0 + double(i) * 1024.0 : r + double(i) * 4096.0;
    }
  }
  return tensor_of(t, s, v);
}

Graph graph_of(const TCase& c) {
  Graph g;
  std::vector<ValueId> ins;
  for (const In& in : c.ins) {
    if (in.name.empty()) {
      ins.push_back(kNoValue);
      continue;
    }
    Value v;
    v.name = in.name;
    v.dtype = in.t;
    v.shape = in.shape;
    v.kind = in.constant ? ValueKind::constant : ValueKind::input;
    if (in.constant) v.data = in.data;
    ins.push_back(g.add_value(std::move(v)));
    if (!in.constant) g.inputs.push_back(ins.back());
  }
  std::vector<std::string> outs;
  for (int k = 0; k < c.outs; ++k) outs.push_back("y" + std::to_string(k));
  int n = g.add_node(c.op, "node", ins, outs, c.attrs);
  g.outputs = g.nodes[size_t(n)].outputs;
  verify(g);
  return g;
}

// Bit-identical, or both NaN for float dtypes.
int64_t mismatches(const Tensor& a, const Tensor& b) {
  const size_t es = dtype_size(a.dtype());
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const auto* p = static_cast<const uint8_t*>(a.data()) + size_t(i) * es;
    const auto* q = static_cast<const uint8_t*>(b.data()) + size_t(i) * es;
    if (std::memcmp(p, q, es) == 0) continue;
    if (dtype_is_float(a.dtype())) {
      const double x = dispatch_elem(a.dtype(), [&]<class E>() { return E::to_f64(a.as<typename E::T>()[i]); });
      const double y = dispatch_elem(b.dtype(), [&]<class E>() { return E::to_f64(b.as<typename E::T>()[i]); });
      if (std::isnan(x) && std::isnan(y)) continue;
    }
    ++bad;
  }
  return bad;
}

// Runs c on the CPU and on `dev`; the node must run on the device and match. Returns 1.
int check_case(const TCase& c, const std::shared_ptr<DeviceBackend>& dev) {
  CAPTURE(c.label);
  CAPTURE(std::string(op_name(c.op)));
  Plan cpu(graph_of(c));
  Plan gpu(graph_of(c), PlanOptions{.device = dev});
  CHECK(gpu.host_ops().empty());  // the node runs on the device
  std::mt19937 rng(7);
  std::map<std::string, Tensor> feed;
  for (const In& in : c.ins)
    if (!in.name.empty() && !in.constant) feed[in.name] = in.data.empty() ? generated(in.t, in.shape, rng) : in.data;
  auto a = cpu.run(feed, c.rs), b = gpu.run(feed, c.rs);
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    CAPTURE(name);
    const Tensor& u = b.at(name);
    REQUIRE(t.dtype() == u.dtype());
    REQUIRE(t.shape() == u.shape());
    CHECK(mismatches(t, u) == 0);
  }
  return 1;
}

const std::vector<DType> kAll = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64,
                                 DType::i32, DType::i8,  DType::u8,  DType::boolean};

std::vector<TCase> gather_cases() {
  std::vector<TCase> cs;
  auto gather = [&](std::string label, DType t, Shape data, In idx, int64_t axis) {
    cs.push_back({label, Op::Gather, {fed("data", t, std::move(data)), std::move(idx)}, {{"axis", Attr(axis)}}});
  };
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::i64, DType::u8, DType::boolean})
    gather("rows", t, {5, 4}, fed("idx", DType::i64, {3}, ints({0, -1, 2})), 0);
  gather("axis 1, i32 2-D indices, negative", DType::f32, {3, 5, 2}, fed("idx", DType::i32, {2, 2}, ints({4, -5, 0, -1}, DType::i32)), 1);
  gather("last axis", DType::i64, {2, 3, 4}, fed("idx", DType::i64, {5}, ints({3, 0, -4, 1, 1})), -1);
  gather("scalar index", DType::f32, {4, 3}, fed("idx", DType::i64, {}, scalar(DType::i64, -2)), 0);
  gather("no indices", DType::f32, {4, 3}, fed("idx", DType::i64, {0}, ints({})), 0);
  gather("empty outer dim", DType::f32, {0, 3}, fed("idx", DType::i64, {2}, ints({0, 2})), 1);
  gather("constant indices", DType::f32, {6, 7}, fixed("idx", ints({5, 0, 5, -6})), 0);
  gather("embedding", DType::f32, {50, 33}, fed("idx", DType::i64, {4, 30}), 0);  // generated below
  // The embedding's indices: in range with repeats (generated() would go out of range).
  std::vector<int64_t> v(120);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 37 + 11) % 100) - 50;
  cs.back().ins[1].data = ints(v).reshaped({4, 30});
  return cs;
}

std::vector<TCase> gather_grad_cases() {
  std::vector<TCase> cs;
  // dy's values mix 1e8 and small ones: summing a row in another order changes the bits.
  auto dy_of = [](DType t, const Shape& s) {
    std::vector<double> v(size_t(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 == 0 ? 1e8 : 1.0) * (double(i % 17) - 8.3) / 7.0;
    return tensor_of(t, s, v);
  };
  auto grad = [&](std::string label, DType t, Shape data, Tensor idx, int64_t axis, bool const_idx = false) {
    const int64_t a = axis < 0 ? axis + int64_t(data.size()) : axis;
    Shape dy(data.begin(), data.begin() + a);
    dy.insert(dy.end(), idx.shape().begin(), idx.shape().end());
    dy.insert(dy.end(), data.begin() + a + 1, data.end());
    In in = const_idx ? fixed("idx", idx) : fed("idx", idx.dtype(), idx.shape(), idx);
    cs.push_back({label, Op::GatherGrad, {fed("dy", t, dy, dy_of(t, dy)), in, fixed("shape", ints(data))}, {{"axis", Attr(axis)}}});
  };
  for (DType t : {DType::f32, DType::f64}) {
    grad("repeats", t, {6, 3}, ints({0, 5, 0, -1, 2, 0, 0}), 0);
    grad("axis 1, i32", t, {2, 7, 3}, ints({6, -7, 3, 3, 3}, DType::i32), 1);
    grad("last axis", t, {3, 4}, ints({1, 1, -1}), -1);
    grad("no indices", t, {4, 2}, ints({}), 0);
    grad("constant indices", t, {4, 2}, ints({3, 3, 1}), 0, true);
    std::vector<int64_t> v(300);
    for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * i * 7 + 3) % 37) - 20;  // rows 37..49 untouched
    grad("embedding", t, {50, 33}, ints(v).reshaped({10, 30}), 0);
  }
  return cs;
}

// Values each Cast source takes: the edges of every conversion.
std::vector<double> cast_values(DType from) {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 127, 128, 255, 256, -128, -129,
                           65504, 65519, 65520, 1e5, -1e5, 6e-8, 1e-8, 3e-5, 2147483647.0, 2147483648.0, -2147483649.0,
                           1e10, -1e10, 9.3e18, -9.3e18, 1e30, 3.4e38, 1e300, 1.0000001, 1.00048828125, 1.00146484375};
  if (dtype_is_float(from)) {
    v.push_back(INFINITY);
    v.push_back(-INFINITY);
    v.push_back(NAN);
  }
  return v;
}

std::vector<TCase> cast_cases() {
  std::vector<TCase> cs;
  for (DType from : kAll)
    for (DType to : kAll) {
      std::vector<double> v = cast_values(from);
      Tensor x = tensor_of(from, {int64_t(v.size())}, v);
      cs.push_back({std::string(dtype_name(from)) + " -> " + dtype_name(to), Op::Cast, {fed("x", from, x.shape(), x)},
                    {{"to", Attr(int64_t(dtype_to_onnx(to)))}}});
    }
  // Every half and bfloat16 bit pattern to f32 and f64; many f32 / f64 bit patterns to the halves
  // (round to nearest even, subnormals, overflow, NaN) and f64 to f32 (round-to-odd's neighbours).
  for (DType half : {DType::f16, DType::bf16}) {
    Tensor x(half, {65536});
    for (int i = 0; i < 65536; ++i) x.as<uint16_t>()[i] = uint16_t(i);
    for (DType to : {DType::f32, DType::f64})
      cs.push_back({std::string("all ") + dtype_name(half) + " -> " + dtype_name(to), Op::Cast, {fed("x", half, x.shape(), x)},
                    {{"to", Attr(int64_t(dtype_to_onnx(to)))}}});
  }
  std::mt19937_64 rng(3);
  Tensor f(DType::f32, {200000});
  for (int64_t i = 0; i < f.numel(); ++i) {
    // half the patterns near the halves' rounding points: low mantissa bits around the tie
    uint32_t b = uint32_t(rng());
    if (i % 2) b = (b & 0xFFFFE000u) | (i % 4 == 1 ? 0x1000u : 0x0FFFu + uint32_t(i % 3));
    std::memcpy(f.as<float>() + i, &b, 4);
    if (i % 8 == 4) {  // half subnormals' ties (k + 1/2) * 2^-24, and their float neighbours
      const float tie = (float(b % 1024) + 0.5f) * 5.9604644775390625e-8f * ((b >> 20) & 1 ? -1.f : 1.f);
      const int side = int((b >> 12) % 3);
      f.as<float>()[i] = side == 0 ? tie : std::nextafter(tie, side == 1 ? 1.f : -1.f);
    }
  }
  Tensor d(DType::f64, {200000});
  for (int64_t i = 0; i < d.numel(); ++i) {
    uint64_t b = rng();
    if (i % 2) b = (b & 0xC7FFFFFFFFFFFFFFull) | 0x3800000000000000ull;  // exponents that f32 / f16 hold
    if (i % 4 == 1) b = (b & ~0x1FFFFFFFull) | (0x10000000ull + uint64_t(i % 3) - 1);  // f32 ties
    if (i % 8 == 3 || i % 8 == 7) {
      // Just past (or below) a half / bfloat16 tie by less than half an f32 ulp: rounding to f32
      // first lands on the tie, so only a single correct rounding gets these right. Exponents in
      // the halves' normal range; the f16 (i % 8 == 3) or bf16 (7) mantissa random.
      const uint64_t sign = b & (1ull << 63), exp = uint64_t(1023 - 14 + int64_t(b >> 40) % 29) << 52;
      const uint64_t low = ((b >> 3) & 0x0FFFFFFFull) | 1ull;  // below half an f32 ulp, not 0
      const int keep = i % 8 == 3 ? 10 : 7;                    // mantissa bits of the half
      const uint64_t top = (b & ((1ull << keep) - 1)) << (52 - keep), tie = 1ull << (51 - keep);
      b = sign | exp | top | (i % 16 < 8 ? tie | low : tie - low);
    }
    std::memcpy(d.as<double>() + i, &b, 8);
  }
  for (DType to : {DType::f16, DType::bf16, DType::f64, DType::i32, DType::boolean})
    cs.push_back({std::string("float bits -> ") + dtype_name(to), Op::Cast, {fed("x", DType::f32, f.shape(), f)},
                  {{"to", Attr(int64_t(dtype_to_onnx(to)))}}});
  for (DType to : {DType::f16, DType::bf16, DType::f32, DType::i64, DType::u8})
    cs.push_back({std::string("double bits -> ") + dtype_name(to), Op::Cast, {fed("x", DType::f64, d.shape(), d)},
                  {{"to", Attr(int64_t(dtype_to_onnx(to)))}}});
  Tensor big(DType::i64, {6});
  const int64_t bv[6] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), (int64_t(1) << 53) + 1,
                         (int64_t(1) << 24) + 1, -((int64_t(1) << 40) + 3), 65521};
  std::memcpy(big.data(), bv, sizeof bv);
  for (DType to : kAll)
    cs.push_back({std::string("big int64 -> ") + dtype_name(to), Op::Cast, {fed("x", DType::i64, {6}, big)},
                  {{"to", Attr(int64_t(dtype_to_onnx(to)))}}});
  cs.push_back({"empty", Op::Cast, {fed("x", DType::f32, {0, 3})}, {{"to", Attr(int64_t(dtype_to_onnx(DType::i64)))}}});
  // CastLike: the same conversion, to the dtype of its second input.
  for (DType to : kAll) {
    std::vector<double> v = cast_values(DType::f32);
    Tensor x = tensor_of(DType::f32, {int64_t(v.size())}, v);
    cs.push_back({std::string("CastLike float32 -> ") + dtype_name(to), Op::CastLike,
                  {fed("x", DType::f32, x.shape(), x), fed("like", to, {1})}, {}});
  }
  return cs;
}

std::vector<TCase> concat_split_cases() {
  std::vector<TCase> cs;
  for (DType t : {DType::f32, DType::i64, DType::boolean, DType::f16}) {
    cs.push_back({"axis 1, an empty input", Op::Concat,
                  {fed("a", t, {2, 3, 4}), fed("b", t, {2, 1, 4}), fed("c", t, {2, 0, 4}), fed("d", t, {2, 2, 4})},
                  {{"axis", Attr(int64_t(1))}}});
    cs.push_back({"axis 0", Op::Concat, {fed("a", t, {1, 5}), fed("b", t, {3, 5})}, {{"axis", Attr(int64_t(0))}}});
    cs.push_back({"axis -1", Op::Concat, {fed("a", t, {3, 2, 1}), fed("b", t, {3, 2, 3})}, {{"axis", Attr(int64_t(-1))}}});
    cs.push_back({"one input", Op::Concat, {fed("a", t, {3, 2})}, {{"axis", Attr(int64_t(1))}}});
    TCase sizes{"sizes, axis 1", Op::Split, {fed("x", t, {2, 5, 3}), fixed("s", ints({2, 0, 3}))}, {{"axis", Attr(int64_t(1))}}, 3};
    cs.push_back(sizes);
    cs.push_back({"even, axis -1", Op::Split, {fed("x", t, {4, 6})}, {{"axis", Attr(int64_t(-1))}}, 3});
    cs.push_back({"even, axis 0", Op::Split, {fed("x", t, {4, 3, 2})}, {}, 2});
    cs.push_back({"num_outputs uneven", Op::Split, {fed("x", t, {5, 2})},
                  {{"axis", Attr(int64_t(0))}, {"num_outputs", Attr(int64_t(2))}}, 2});
  }
  cs.push_back({"i32 sizes, empty input", Op::Split, {fed("x", DType::i32, {0, 4}), fixed("s", ints({1, 3}, DType::i32))},
                {{"axis", Attr(int64_t(1))}}, 2});
  return cs;
}

std::vector<TCase> slice_cases() {
  std::vector<TCase> cs;
  const int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  auto slice = [&](std::string label, DType t, Shape s, std::vector<int64_t> st, std::vector<int64_t> en,
                   std::vector<int64_t> axes, std::vector<int64_t> steps, bool with_axes = true, bool with_steps = true) {
    std::vector<In> ins{fed("x", t, std::move(s)), fixed("starts", ints(st)), fixed("ends", ints(en))};
    if (with_axes || with_steps) ins.push_back(with_axes ? fixed("axes", ints(axes)) : absent());
    if (with_steps) ins.push_back(fixed("steps", ints(steps)));
    cs.push_back({label, Op::Slice, ins});
  };
  for (DType t : {DType::f32, DType::i8, DType::f64, DType::f16}) {
    slice("middle", t, {5, 6}, {1, 2}, {4, 5}, {0, 1}, {1, 1});
    slice("negative step", t, {5, 6}, {-1}, {kMin}, {1}, {-1});
    slice("negative step 2, negative axis", t, {4, 7, 3}, {5, 2}, {0, kMax}, {-2, 0}, {-2, 1});
    slice("step 3, clamped end", t, {10, 2}, {1}, {kMax}, {0}, {3});
    slice("empty result", t, {4, 4}, {3}, {1}, {0}, {1});
    slice("no axes, no steps", t, {3, 4, 5}, {0, 1}, {2, -1}, {}, {}, false, false);
    slice("steps without axes", t, {6, 5}, {5, 0}, {0, 5}, {}, {-2, 2}, false, true);
    slice("5-D", t, {2, 3, 4, 3, 2}, {1, 3, 0}, {3, 0, 1}, {1, 2, 4}, {1, -1, 1});
  }
  return cs;
}

std::vector<TCase> pad_cases() {
  std::vector<TCase> cs;
  auto pad = [&](std::string label, DType t, Shape s, std::vector<int64_t> pads, const char* mode, In value = absent(),
                 In axes = absent()) {
    std::vector<In> ins{fed("x", t, std::move(s)), fixed("pads", ints(pads))};
    if (!value.name.empty() || !axes.name.empty()) ins.push_back(std::move(value));
    if (!axes.name.empty()) ins.push_back(std::move(axes));
    cs.push_back({label + " " + mode, Op::Pad, ins, {{"mode", Attr(std::string(mode))}}});
  };
  for (DType t : {DType::f32, DType::i64, DType::f16, DType::u8}) {
    for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
      pad("2-D", t, {3, 4}, {1, 2, 2, 3}, mode);
      pad("crop and pad", t, {4, 5}, {-1, 2, 1, -2}, mode);
      pad("axes", t, {2, 3, 4}, {2, 1, 3, 0}, mode, absent(), fixed("axes", ints({-1, 1})));
      pad("1-D wide", t, {3}, {7, 5}, mode);  // reflect / wrap more than once around
      pad("size-1 dim", t, {1, 3}, {2, 0, 1, 1}, mode);
      pad("4-D", t, {2, 2, 3, 3}, {0, 1, 1, 2, 1, 0, 2, 1}, mode);
    }
    pad("value", t, {2, 3}, {1, 1, 1, 1}, "constant", fixed("v", scalar(t, 7)));
  }
  pad("f32 value on f64 data", DType::f64, {2, 3}, {0, 1, 2, 0}, "constant", fixed("v", scalar(DType::f32, -2.5)));
  pad("f32 value on i32 data", DType::i32, {2, 3}, {0, 1, 2, 0}, "constant", fixed("v", scalar(DType::f32, -2.75)));
  pad("empty data", DType::f32, {0, 3}, {1, 0, 1, 0}, "constant", fixed("v", scalar(DType::f32, 4)));
  pad("scalar", DType::f32, {}, {}, "constant");
  return cs;
}

std::vector<TCase> tile_trilu_cases() {
  std::vector<TCase> cs;
  for (DType t : {DType::f32, DType::i64, DType::f16, DType::boolean}) {
    cs.push_back({"2-D", Op::Tile, {fed("x", t, {2, 3}), fixed("r", ints({2, 3}))}});
    cs.push_back({"ones and a zero", Op::Tile, {fed("x", t, {2, 3, 2}), fixed("r", ints({1, 0, 2}))}});
    cs.push_back({"4-D", Op::Tile, {fed("x", t, {2, 1, 3, 2}), fixed("r", ints({2, 3, 1, 2}))}});
    cs.push_back({"1-D", Op::Tile, {fed("x", t, {5}), fixed("r", ints({3}))}});
    for (int64_t upper : {0, 1}) {
      const std::map<std::string, Attr> a{{"upper", Attr(upper)}};
      cs.push_back({"no k", Op::Trilu, {fed("x", t, {4, 5})}, a});
      for (int64_t k : {-1, 0, 2, 9, -9})
        cs.push_back({"k " + std::to_string(k), Op::Trilu, {fed("x", t, {2, 5, 3}), fixed("k", ints({k}).reshaped({}))}, a});
      cs.push_back({"batched, i32 k", Op::Trilu, {fed("x", t, {3, 2, 4, 4}), fixed("k", ints({1}, DType::i32))}, a});
      cs.push_back({"empty", Op::Trilu, {fed("x", t, {0, 3})}, a});
    }
  }
  return cs;
}

std::vector<TCase> dropout_cases() {
  std::vector<TCase> cs;
  RunState rs = {};
  rs.seed = 0x123456789abcdefull;
  rs.step = 17;
  rs.batch_offset = 3;
  rs.sample_offset = 8;
  Tensor yes(DType::boolean, {}), no(DType::boolean, {});
  yes.as<bool>()[0] = true;
  for (DType t : {DType::f32, DType::f64}) {
    cs.push_back({"training by inputs, mask", Op::Dropout,
                  {fed("x", t, {7, 5, 3}), fixed("ratio", scalar(DType::f32, 0.3)), fixed("t", yes)}, {}, 2, rs});
    cs.push_back({"training by attribute, no mask", Op::Dropout, {fed("x", t, {33, 17})},
                  {{"training_mode", Attr(int64_t(1))}, {"ratio", Attr(0.25f)}}, 1, rs});
    cs.push_back({"f64 ratio, seed attribute", Op::Dropout,
                  {fed("x", t, {9, 4}), fixed("ratio", scalar(DType::f64, 0.7)), fixed("t", yes)},
                  {{"seed", Attr(int64_t(99))}}, 2, rs});
    cs.push_back({"ratio 0: a copy", Op::Dropout, {fed("x", t, {4, 3}), fixed("ratio", scalar(DType::f32, 0)), fixed("t", yes)},
                  {}, 2, rs});
    cs.push_back({"scalar", Op::Dropout, {fed("x", t, {}), absent(), fixed("t", yes)}, {}, 2, rs});
    cs.push_back({"empty", Op::Dropout, {fed("x", t, {0, 4}), absent(), fixed("t", yes)}, {}, 2, rs});
    RunState zero;
    cs.push_back({"first step, offset 0", Op::Dropout, {fed("x", t, {64, 9}), absent(), fixed("t", yes)}, {}, 2, zero});
  }
  for (DType t : {DType::f32, DType::f64}) {
    cs.push_back({"inference by input", Op::Dropout, {fed("x", t, {5, 3}), fixed("ratio", scalar(DType::f32, 0.5)), fixed("t", no)},
                  {}, 2, rs});
    cs.push_back({"inference by default", Op::Dropout, {fed("x", t, {5, 3})}, {}, 2, rs});
  }
  return cs;
}

struct Group {
  const char* name;
  std::vector<TCase> (*cases)();
};
const Group kGroups[] = {{"Gather", gather_cases},    {"GatherGrad", gather_grad_cases},  {"Cast", cast_cases},
                         {"Concat/Split", concat_split_cases}, {"Slice", slice_cases},   {"Pad", pad_cases},
                         {"Tile/Trilu", tile_trilu_cases}, {"Dropout", dropout_cases}};

int check_all(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  int ran = 0;
  for (const Group& gr : kGroups) {
    CAPTURE(std::string(gr.name));
    for (const TCase& c : gr.cases()) ran += check_case(c, dev);
  }
  return ran;
}

// Out-of-range indices fail on the device with the CPU kernel's message (fed indices: the shape
// rule cannot see them), for Gather and GatherGrad, including where the output is empty; also in
// a run replaying a recorded graph (the plan's check slots are read after every run), after which
// the plan goes on with good indices.
int check_bad_indices(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  std::vector<TCase> cs;
  cs.push_back({"gather", Op::Gather, {fed("data", DType::f32, {4, 3}), fed("idx", DType::i64, {5}, ints({0, 4, -5, 9, 1}))}});
  cs.push_back({"gather i32, axis 1", Op::Gather,
                {fed("data", DType::f32, {2, 3}), fed("idx", DType::i32, {3}, ints({0, 2, -4}, DType::i32))},
                {{"axis", Attr(int64_t(1))}}});
  cs.push_back({"gather, empty output", Op::Gather, {fed("data", DType::f32, {0, 3}), fed("idx", DType::i64, {2}, ints({1, 3}))},
                {{"axis", Attr(int64_t(1))}}});
  cs.push_back({"gather grad", Op::GatherGrad,
                {fed("dy", DType::f32, {3, 2}), fed("idx", DType::i64, {3}, ints({1, -7, 2})), fixed("shape", ints({4, 2}))}});
  int ran = 0;
  for (const TCase& c : cs) {
    CAPTURE(c.label);
    Plan cpu(graph_of(c));
    Plan gpu(graph_of(c), PlanOptions{.device = dev});
    CHECK(gpu.host_ops().empty());
    std::map<std::string, Tensor> feed;
    std::mt19937 rng(1);
    for (const In& in : c.ins)
      if (!in.constant) feed[in.name] = in.data.empty() ? generated(in.t, in.shape, rng) : in.data;
    std::string a, b;
    try {
      cpu.run(feed);
    } catch (const Error& e) {
      a = e.what();
    }
    try {
      gpu.run(feed);
    } catch (const Error& e) {
      b = e.what();
    }
    CHECK(!a.empty());
    CHECK(a.find("out of range") != std::string::npos);
    CHECK(b == a);
    // The same in a replayed run: two good runs record the plan, the bad one replays it.
    std::map<std::string, Tensor> good = feed;
    good.at("idx") = Tensor(feed.at("idx").dtype(), feed.at("idx").shape());  // zeros: in range
    Plan replayed(graph_of(c), PlanOptions{.device = dev});
    replayed.run(good);
    replayed.run(good);
    CHECK(replayed.replays_graph());
    std::string r;
    try {
      replayed.run(feed);
    } catch (const Error& e) {
      r = e.what();
    }
    CHECK(r == a);
    CHECK_NOTHROW(replayed.run(good));
    ++ran;
  }
  return ran;
}

// Plans run three times: the second run is recorded as a CUDA graph (exec/plan.cpp), the third
// replays it; generated inputs change every run. Covers the recorded path of the kernels (Gather's
// and GatherGrad's index checks without a read-back, GatherGrad's stream-ordered scratch and sort).
int check_recorded(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  std::vector<TCase> cs;
  for (const TCase& c : gather_cases())
    if (c.label == "embedding" || c.label == "axis 1, i32 2-D indices, negative") cs.push_back(c);
  for (const TCase& c : gather_grad_cases())
    if (c.label == "embedding" || c.label == "repeats") cs.push_back(c);
  cs.push_back(slice_cases()[2]);
  cs.push_back(pad_cases()[1]);
  cs.push_back(concat_split_cases()[0]);
  cs.push_back(concat_split_cases()[4]);
  cs.push_back(tile_trilu_cases()[0]);
  cs.push_back(tile_trilu_cases()[6]);
  cs.push_back(cast_cases()[3]);
  int ran = 0;
  for (const TCase& c : cs) {
    CAPTURE(c.label);
    CAPTURE(std::string(op_name(c.op)));
    Plan cpu(graph_of(c));
    Plan gpu(graph_of(c), PlanOptions{.device = dev});
    CHECK(gpu.host_ops().empty());
    for (int run = 0; run < 3; ++run) {
      CAPTURE(run);
      std::mt19937 rng(100 + unsigned(run));
      std::map<std::string, Tensor> feed;
      for (const In& in : c.ins)
        if (!in.name.empty() && !in.constant) feed[in.name] = in.data.empty() ? generated(in.t, in.shape, rng) : in.data;
      auto a = cpu.run(feed), b = gpu.run(feed);
      for (const auto& [name, t] : a) {
        CAPTURE(name);
        REQUIRE(b.at(name).shape() == t.shape());
        CHECK(mismatches(t, b.at(name)) == 0);
      }
    }
    CHECK(gpu.replays_graph());
    ++ran;
  }
  return ran;
}

// Nodes whose arguments are computed at run time (or dtypes the CPU kernel fails on) stay there.
void check_refusals() {
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  Tensor yes(DType::boolean, {});
  yes.as<bool>()[0] = true;
  std::vector<std::pair<TCase, const char*>> cs;
  cs.push_back({{"Trilu k fed", Op::Trilu, {fed("x", DType::f32, {3, 3}), fed("k", DType::i64, {})}}, "Trilu"});
  cs.push_back({{"Dropout training fed", Op::Dropout,
                 {fed("x", DType::f32, {3, 3}), fixed("r", scalar(DType::f32, 0.5)), fed("t", DType::boolean, {})}, {}, 2},
                "Dropout"});
  cs.push_back({{"Dropout ratio fed", Op::Dropout, {fed("x", DType::f32, {3, 3}), fed("r", DType::f32, {}), fixed("t", yes)}, {}, 2},
                "Dropout"});
  cs.push_back({{"Pad value fed", Op::Pad,
                 {fed("x", DType::f32, {3, 3}), fixed("pads", ints({1, 1, 1, 1})), fed("v", DType::f32, {})}},
                "Pad"});
  cs.push_back({{"Pad rank 9", Op::Pad, {fed("x", DType::f32, {1, 2, 1, 2, 1, 2, 1, 2, 2}), fixed("pads", ints(std::vector<int64_t>(18, 1)))}},
                "Pad"});
  cs.push_back({{"Slice 9 unmergeable dims", Op::Slice,
                 {fed("x", DType::f32, {3, 3, 3, 3, 3, 3, 3, 3, 3}), fixed("s", ints(std::vector<int64_t>(9, 0))),
                  fixed("e", ints(std::vector<int64_t>(9, 3))), fixed("a", ints({0, 1, 2, 3, 4, 5, 6, 7, 8})),
                  fixed("st", ints(std::vector<int64_t>(9, 2)))}},
                "Slice"});
  cs.push_back({{"Tile 5-D", Op::Tile, {fed("x", DType::f32, {2, 2, 2, 2, 2}), fixed("r", ints({2, 2, 2, 2, 2}))}}, "Tile"});
  for (const auto& [c, name] : cs) {
    CAPTURE(c.label);
    Plan p(graph_of(c), PlanOptions{.device = dev});
    CHECK(p.host_ops() == name);
  }
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda tensor (emulated): Gather(Grad), Cast, Concat, Split, Slice, Pad, Tile, Trilu, Dropout match the CPU") {
    const int n = check_all(DeviceKind::cuda_emulated) + check_bad_indices(DeviceKind::cuda_emulated) +
                  check_recorded(DeviceKind::cuda_emulated);
    MESSAGE("cuda tensor emulated: " << n << " cases match the CPU kernels");
  }

  TEST_CASE("cuda tensor: run-time arguments and dtypes the CPU refuses stay on the CPU") { check_refusals(); }
}

TEST_SUITE("gpu") {
  TEST_CASE("cuda tensor on GPU: Gather(Grad), Cast, Concat, Split, Slice, Pad, Tile, Trilu, Dropout match the CPU") {
    if (!have_gpu()) return;
    const int n = check_all(DeviceKind::cuda) + check_bad_indices(DeviceKind::cuda) + check_recorded(DeviceKind::cuda);
    MESSAGE("cuda tensor on GPU: " << n << " cases match the CPU kernels");
  }
}
#endif
