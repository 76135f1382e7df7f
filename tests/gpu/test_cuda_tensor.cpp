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
// The cases are the backend harness's family "tensor" (tests/backend/backend_ops.h), run by
// tests/backend/test_backend_ops.cpp on every device backend present: the emulated device (the
// kernels' loop bodies run on the host: the node-to-launch mapping and the loops, not the device)
// and cuda:0 where there is a GPU. Some run three times (the third replays a recording); bad
// indices must fail with the CPU's message; run-time arguments must stay on the CPU.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/backend/backend_ops.h"
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
using namespace onnxdp::test;

namespace {

using In = CaseInput;
using TCase = OpCase;

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
  gather("embedding", DType::f32, {50, 33}, fed("idx", DType::i64, {4, 30}), 0);  // indices set below
  // The embedding's indices: in range with repeats (filled() would go out of range).
  std::vector<int64_t> v(120);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 37 + 11) % 100) - 50;
  cs.back().inputs[1].data = ints(v).reshaped({4, 30});
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

// Plans run three times: the second run is recorded as a CUDA graph (exec/plan.cpp), the third
// replays it; inputs filled anew every run. Covers the recorded path of the kernels (Gather's
// and GatherGrad's index checks without a read-back, GatherGrad's stream-ordered scratch and sort).
std::vector<TCase> recorded_cases() {
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
  for (TCase& c : cs) {
    c.label += ", recorded";
    c.runs = 3;
    c.fresh_inputs = true;
  }
  return cs;
}

// Out-of-range indices fail on the device with the CPU kernel's message (fed indices: the shape
// rule cannot see them), for Gather and GatherGrad, including where the output is empty.
std::vector<TCase> bad_index_cases() {
  std::vector<TCase> cs;
  cs.push_back({"gather", Op::Gather, {fed("data", DType::f32, {4, 3}), fed("idx", DType::i64, {5}, ints({0, 4, -5, 9, 1}))}});
  cs.push_back({"gather i32, axis 1", Op::Gather,
                {fed("data", DType::f32, {2, 3}), fed("idx", DType::i32, {3}, ints({0, 2, -4}, DType::i32))},
                {{"axis", Attr(int64_t(1))}}});
  cs.push_back({"gather, empty output", Op::Gather, {fed("data", DType::f32, {0, 3}), fed("idx", DType::i64, {2}, ints({1, 3}))},
                {{"axis", Attr(int64_t(1))}}});
  cs.push_back({"gather grad", Op::GatherGrad,
                {fed("dy", DType::f32, {3, 2}), fed("idx", DType::i64, {3}, ints({1, -7, 2})), fixed("shape", ints({4, 2}))}});
  for (TCase& c : cs) c.expect_error = "out of range";
  return cs;
}

// Nodes whose arguments are computed at run time (or dtypes the CPU kernel fails on) stay there.
std::vector<TCase> refused_cases() {
  Tensor yes(DType::boolean, {});
  yes.as<bool>()[0] = true;
  std::vector<TCase> cs;
  cs.push_back({"Trilu k fed", Op::Trilu, {fed("x", DType::f32, {3, 3}), fed("k", DType::i64, {}, scalar(DType::i64, 1))}});
  cs.push_back({"Dropout training fed", Op::Dropout,
                {fed("x", DType::f32, {3, 3}), fixed("r", scalar(DType::f32, 0.5)), fed("t", DType::boolean, {}, yes)}, {}, 2});
  cs.push_back({"Dropout ratio fed", Op::Dropout,
                {fed("x", DType::f32, {3, 3}), fed("r", DType::f32, {}, scalar(DType::f32, 0.5)), fixed("t", yes)}, {}, 2});
  cs.push_back({"Pad value fed", Op::Pad, {fed("x", DType::f32, {3, 3}), fixed("pads", ints({1, 1, 1, 1})), fed("v", DType::f32, {})}});
  cs.push_back({"Pad rank 9", Op::Pad, {fed("x", DType::f32, {1, 2, 1, 2, 1, 2, 1, 2, 2}), fixed("pads", ints(std::vector<int64_t>(18, 1)))}});
  cs.push_back({"Slice 9 unmergeable dims", Op::Slice,
                {fed("x", DType::f32, {3, 3, 3, 3, 3, 3, 3, 3, 3}), fixed("s", ints(std::vector<int64_t>(9, 0))),
                 fixed("e", ints(std::vector<int64_t>(9, 3))), fixed("a", ints({0, 1, 2, 3, 4, 5, 6, 7, 8})),
                 fixed("st", ints(std::vector<int64_t>(9, 2)))}});
  cs.push_back({"Tile 5-D", Op::Tile, {fed("x", DType::f32, {2, 2, 2, 2, 2}), fixed("r", ints({2, 2, 2, 2, 2}))}});
  for (TCase& c : cs) c.expect = Expect::host;
  return cs;
}

std::vector<TCase> tensor_family() {
  std::vector<TCase> out;
  for (auto group : {gather_cases, gather_grad_cases, cast_cases, concat_split_cases, slice_cases, pad_cases,
                     tile_trilu_cases, dropout_cases, recorded_cases, bad_index_cases, refused_cases})
    for (TCase& c : group()) out.push_back(std::move(c));
  return out;
}

const bool registered = register_cases("tensor", tensor_family);

// A plan that replays a recording reads its check slots after every run: bad indices fail there
// with the CPU's message too, after which the plan goes on with good indices. Returns the cases run.
int check_bad_indices_replayed(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  int ran = 0;
  for (const TCase& c : bad_index_cases()) {
    CAPTURE(c.label);
    const std::map<std::string, Tensor> feed = feed_of(c, 0);
    std::string a;
    try {
      run_on_cpu(c, feed);
    } catch (const Error& e) {
      a = e.what();
    }
    CHECK(a.find("out of range") != std::string::npos);
    std::map<std::string, Tensor> good = feed;
    good.at("idx") = Tensor(feed.at("idx").dtype(), feed.at("idx").shape());  // zeros: in range
    Plan replayed(one_node_graph(c), PlanOptions{.device = dev});
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

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda tensor (emulated): bad indices fail in a replayed run with the CPU's message") {
    MESSAGE("cuda tensor replayed bad indices emulated: " << check_bad_indices_replayed(DeviceKind::cuda_emulated)
                                                            << " cases match the CPU kernels");
  }

  TEST_CASE("cuda tensor: run-time arguments and dtypes the CPU refuses stay on the CPU") {
    auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
    for (const TCase& c : refused_cases()) {
      CAPTURE(c.label);
      CHECK(host_ops(c, dev) == op_name(c.op));
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("cuda tensor on GPU: bad indices fail in a replayed run with the CPU's message") {
    if (!have_gpu()) return;
    MESSAGE("cuda tensor replayed bad indices on GPU: " << check_bad_indices_replayed(DeviceKind::cuda)
                                                          << " cases match the CPU kernels");
  }
}
#endif
