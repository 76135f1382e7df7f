// Gradient rules of Min / Max, ReduceMax / ReduceMin, Resize, Gather, GatherND, ScatterND, Tile
// and strided Slice: float64 central differences (tests/graph/gradcheck.h), and hand-derived
// values where ties make the function non-differentiable (the gradient is split evenly among the
// tied elements, as torch.amax and torch.maximum do).
#include "tests/graph/gradcheck.h"
#include "tests/ops/op_test_util.h"
#include "compile/compile.h"

using namespace onnxdp;
using namespace onnxdp::testing;

namespace {
using Ints = std::vector<int64_t>;

// d sum(out * R) / d params, for a graph built in c (R: the given weights, or all ones).
std::vector<Tensor> gradients(Case& c, ValueId out, std::vector<double> r = {}) {
  Tensor rt(c.g.value(out).dtype, c.g.value(out).shape);
  for (int64_t i = 0; i < rt.numel(); ++i) c.set(rt, i, r.empty() ? 1.0 : r[size_t(i)]);
  ValueId loss = c.node(Op::ReduceSum, {c.node(Op::Mul, {out, c.constant(rt, "R")})}, {{"keepdims", Attr(int64_t(0))}});
  std::vector<ValueId> ps = c.params;
  std::vector<ValueId> grads = autodiff(c.g, loss, ps);
  c.g.outputs.clear();
  for (ValueId gr : grads) {
    REQUIRE(gr != kNoValue);
    c.g.outputs.push_back(gr);
  }
  verify(c.g);
  Plan plan(c.g);
  auto out_map = plan.run({});
  std::vector<Tensor> res;
  for (ValueId gr : grads) res.push_back(out_map.at(c.g.value(gr).name));
  return res;
}

ValueId fixed_param(Case& c, const std::string& name, Shape s, std::vector<double> v) {
  ValueId id = c.param(name, std::move(s));
  Tensor& t = c.g.value(id).data;
  for (int64_t i = 0; i < t.numel(); ++i) c.set(t, i, v[size_t(i)]);
  return id;
}

void check_values(const Tensor& got, const std::vector<double>& want) {
  REQUIRE(got.numel() == int64_t(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(Case::get(got, int64_t(i)) == doctest::Approx(want[i]).epsilon(1e-12));
  }
}
}  // namespace

// ---- Min / Max -----------------------------------------------------------------------------------

TEST_CASE("autodiff more: Min and Max, broadcasting, two and three inputs") {
  for (Op op : {Op::Min, Op::Max}) {
    CAPTURE(op_name(op));
    {
      Case c;
      ValueId a = c.param("a", {2, 3});
      ValueId b = c.param("b", {3});
      gradcheck(c, c.node(op, {a, b}));
    }
    {
      Case c;
      ValueId a = c.param("a", {2, 1, 3});
      ValueId b = c.param("b", {4, 1});
      ValueId d = c.param("d", {2, 4, 3});
      gradcheck(c, c.node(op, {a, b, d}));
    }
    {
      Case c;
      ValueId a = c.param("a", {5});
      gradcheck(c, c.node(op, {a}));
    }
  }
}

TEST_CASE("autodiff more: Max / Min split the gradient evenly among tied inputs") {
  // a = [1, 2, 3], b = [1, 5, 3], d = [1, 0, 0]; weights R = [2, 3, 4].
  // Max: element 0 tied three ways (2/3 each), element 1 b, element 2 a and b tied (2 each).
  for (Op op : {Op::Max, Op::Min}) {
    CAPTURE(op_name(op));
    Case c;
    ValueId a = fixed_param(c, "a", {3}, {1, 2, 3});
    ValueId b = fixed_param(c, "b", {3}, {1, 5, 3});
    ValueId d = fixed_param(c, "d", {3}, {1, 0, 0});
    std::vector<Tensor> g = gradients(c, c.node(op, {a, b, d}), {2, 3, 4});
    if (op == Op::Max) {
      check_values(g[0], {2.0 / 3, 0, 2});
      check_values(g[1], {2.0 / 3, 3, 2});
      check_values(g[2], {2.0 / 3, 0, 0});
    } else {  // Min: element 0 tied three ways, elements 1 and 2 d
      check_values(g[0], {2.0 / 3, 0, 0});
      check_values(g[1], {2.0 / 3, 0, 0});
      check_values(g[2], {2.0 / 3, 3, 4});
    }
  }
}

// ---- ReduceMax -----------------------------------------------------------------------------------

TEST_CASE("autodiff more: ReduceMax over some axes, all axes, keepdims 0 and 1, noop") {
  for (int64_t keep : {0, 1}) {
    CAPTURE(keep);
    Case c;
    ValueId x = c.param("x", {2, 3, 4});
    ValueId m1 = c.node(Op::ReduceMax, {x, c.ints({1}, "a1")}, {{"keepdims", Attr(keep)}});
    ValueId m2 = c.node(Op::ReduceMax, {x, c.ints({0, -1}, "a2")}, {{"keepdims", Attr(keep)}});
    ValueId m3 = c.node(Op::ReduceMax, {x}, {{"keepdims", Attr(keep)}});
    ValueId s1 = c.node(Op::ReduceSum, {m1}, {{"keepdims", Attr(int64_t(0))}});
    ValueId s2 = c.node(Op::ReduceSum, {c.node(Op::Mul, {m2, m2})}, {{"keepdims", Attr(int64_t(0))}});
    gradcheck(c, c.node(Op::Add, {c.node(Op::Add, {s1, s2}), m3}));
  }
  Case c;
  ValueId x = c.param("x", {2, 3});
  gradcheck(c, c.node(Op::ReduceMax, {x}, {{"noop_with_empty_axes", Attr(int64_t(1))}}));  // no axes: identity
}

TEST_CASE("autodiff more: ReduceMax splits ties evenly (torch.amax)") {
  // x = [[1, 3, 3], [2, 2, 2]] max over axis 1 with R = [6, 9]: row 0 ties twice, row 1 three times.
  Case c;
  ValueId x = fixed_param(c, "x", {2, 3}, {1, 3, 3, 2, 2, 2});
  std::vector<Tensor> g = gradients(c, c.node(Op::ReduceMax, {x, c.ints({1}, "ax")}, {{"keepdims", Attr(int64_t(0))}}), {6, 9});
  check_values(g[0], {0, 3, 3, 3, 3, 3});
}

TEST_CASE("autodiff more: ReduceMin, as ReduceMax: the minimum takes dy, ties split evenly (torch.amin)") {
  Case c;
  ValueId x = c.param("x", {3, 4});
  ValueId m = c.node(Op::ReduceMin, {x, c.ints({1}, "a")}, {{"keepdims", Attr(int64_t(0))}});
  gradcheck(c, c.node(Op::Mul, {m, m}));
  // x = [[1, 1, 3], [2, 0, 5]] min over axis 1 with R = [6, 9]
  Case t;
  ValueId y = fixed_param(t, "x", {2, 3}, {1, 1, 3, 2, 0, 5});
  std::vector<Tensor> g = gradients(t, t.node(Op::ReduceMin, {y, t.ints({1}, "ax")}, {{"keepdims", Attr(int64_t(0))}}), {6, 9});
  check_values(g[0], {3, 3, 0, 0, 9, 0});
}

TEST_CASE("autodiff more: ReduceProd, the product of the others, with one zero and with two in a set") {
  Case c;
  ValueId x = c.param("x", {3, 4});
  gradcheck(c, c.node(Op::ReduceProd, {x, c.ints({1}, "a")}, {{"keepdims", Attr(int64_t(0))}}));
  // x = [[2, 3, 4], [0, 5, 7], [0, 0, 2]] prod over axis 1 with R = [1, 2, 3]; by hand:
  // row 0: (12, 8, 6); row 1, one zero: (35, 0, 0) * 2; row 2, two zeros: all 0
  Case t;
  ValueId y = fixed_param(t, "x", {3, 3}, {2, 3, 4, 0, 5, 7, 0, 0, 2});
  std::vector<Tensor> g =
      gradients(t, t.node(Op::ReduceProd, {y, t.ints({1}, "ax")}, {{"keepdims", Attr(int64_t(0))}}), {1, 2, 3});
  check_values(g[0], {12, 8, 6, 70, 0, 0, 0, 0, 0});
}

// ---- Resize (nearest) ----------------------------------------------------------------------------

TEST_CASE("autodiff more: Resize nearest, up on some axes and down on others, scales and sizes") {
  auto f32 = [](std::vector<float> v) {
    Tensor t(DType::f32, {int64_t(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.as<float>()[i] = v[i];
    return t;
  };
  Case c;
  ValueId x = c.param("x", {1, 2, 3, 4});
  ValueId up = c.node(Op::Resize, {x, kNoValue, c.constant(f32({1, 1, 2, 0.5}), "scales")},
                      {{"coordinate_transformation_mode", Attr(std::string("asymmetric"))},
                       {"nearest_mode", Attr(std::string("floor"))}});
  ValueId sized = c.node(Op::Resize, {x, kNoValue, kNoValue, c.ints({1, 3, 5, 7}, "sizes")});  // half_pixel
  ValueId s1 = c.node(Op::ReduceSum, {c.node(Op::Mul, {up, up})}, {{"keepdims", Attr(int64_t(0))}});
  ValueId s2 = c.node(Op::ReduceSum, {c.node(Op::Mul, {sized, sized})}, {{"keepdims", Attr(int64_t(0))}});
  gradcheck(c, c.node(Op::Add, {s1, s2}));
}

// ---- Resize (linear, cubic) ----------------------------------------------------------------------

TEST_CASE("autodiff more: Resize linear and cubic, every coordinate mode, antialias, crops, 3-D") {
  auto f64s = [](std::vector<double> v) {
    Tensor t(DType::f64, {int64_t(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.as<double>()[i] = v[i];
    return t;
  };
  using A = std::map<std::string, Attr>;
  auto s = [](const char* v) { return Attr(std::string(v)); };
  struct Form {
    A attrs;
    std::vector<double> roi, scales;
    std::vector<int64_t> sizes;
  };
  const std::vector<Form> forms = {
      {{{"mode", s("linear")}}, {}, {1, 1, 2, 0.6}, {}},
      {{{"mode", s("linear")}, {"coordinate_transformation_mode", s("align_corners")}}, {}, {}, {1, 2, 5, 7}},
      {{{"mode", s("linear")}, {"coordinate_transformation_mode", s("pytorch_half_pixel")}}, {}, {}, {1, 2, 1, 3}},
      {{{"mode", s("cubic")}, {"coordinate_transformation_mode", s("asymmetric")}}, {}, {1, 1, 1.5, 2}, {}},
      {{{"mode", s("cubic")}, {"exclude_outside", Attr(int64_t(1))}, {"cubic_coeff_a", Attr(-0.5f)}}, {}, {}, {1, 2, 2, 6}},
      {{{"mode", s("cubic")}, {"antialias", Attr(int64_t(1))}}, {}, {1, 1, 0.5, 0.4}, {}},
      {{{"mode", s("linear")}, {"antialias", Attr(int64_t(1))}, {"coordinate_transformation_mode", s("half_pixel_symmetric")}},
       {}, {1, 1, 0.7, 1.3}, {}},
      {{{"mode", s("cubic")}, {"coordinate_transformation_mode", s("tf_crop_and_resize")},
        {"extrapolation_value", Attr(3.0f)}, {"axes", Attr(std::vector<int64_t>{2, 3})}},
       {0.1, -0.2, 0.9, 0.7}, {}, {4, 3}},
  };
  for (size_t k = 0; k < forms.size(); ++k) {
    CAPTURE(k);
    const Form& f = forms[k];
    Case c;
    ValueId x = c.param("x", {1, 2, 3, 5});
    std::vector<ValueId> ins = {x, f.roi.empty() ? kNoValue : c.constant(f64s(f.roi), "roi")};
    if (!f.scales.empty()) ins.push_back(c.constant(f64s(f.scales), "scales"));
    else ins.insert(ins.end(), {kNoValue, c.ints(f.sizes, "sizes")});
    ValueId y = c.node(Op::Resize, ins, f.attrs);
    gradcheck(c, c.node(Op::Mul, {y, y}));
  }
  Case c;  // trilinear on the last three axes of a 5-D tensor
  ValueId x = c.param("x", {1, 2, 2, 3, 4});
  ValueId y = c.node(Op::Resize, {x, kNoValue, kNoValue, c.ints({3, 2, 5}, "sizes")},
                     {{"mode", s("linear")}, {"axes", Attr(std::vector<int64_t>{2, 3, 4})}});
  gradcheck(c, c.node(Op::Mul, {y, y}));
}

// ---- GatherND, ScatterND -------------------------------------------------------------------------

TEST_CASE("autodiff more: GatherND, repeated and negative tuples add up, batch_dims") {
  {
    Case c;
    ValueId x = c.param("x", {3, 2, 4});
    ValueId i = c.constant(Tensor::from_i64({1, 0, -2, 0, 2, 1, 0, -1}, {2, 2, 2}), "idx");
    ValueId y = c.node(Op::GatherND, {x, i});
    gradcheck(c, c.node(Op::Mul, {y, y}));
  }
  Case c;
  ValueId x = c.param("x", {2, 3, 4});
  ValueId i = c.constant(Tensor::from_i64({2, 0, 2, 1, 1, -3}, {2, 3, 1}), "idx");
  ValueId y = c.node(Op::GatherND, {x, i}, {{"batch_dims", Attr(int64_t(1))}});
  gradcheck(c, c.node(Op::Mul, {y, y}));
}

TEST_CASE("autodiff more: ScatterND none and add, gradients of data and updates, mul refuses") {
  for (const char* reduction : {"none", "add"}) {
    CAPTURE(reduction);
    Case c;
    ValueId d = c.param("d", {4, 3});
    ValueId u = c.param("u", {3, 3});
    // none: distinct rows (a repeated one's overwritten updates would get dy, see grad_ScatterND);
    // add: row 1 twice
    ValueId i = c.constant(Tensor::from_i64(std::string(reduction) == "none" ? std::vector<int64_t>{1, 3, -4}
                                                                             : std::vector<int64_t>{1, 3, 1},
                                            {3, 1}),
                           "idx");
    ValueId y = c.node(Op::ScatterND, {d, i, u}, {{"reduction", Attr(std::string(reduction))}});
    gradcheck(c, c.node(Op::Mul, {y, y}));
  }
  Case c;
  ValueId d = c.param("d", {4, 3});
  ValueId u = c.param("u", {1, 3});
  ValueId y = c.node(Op::ScatterND, {d, c.constant(Tensor::from_i64({2}, {1, 1}), "idx"), u},
                     {{"reduction", Attr(std::string("mul"))}});
  ValueId loss = c.node(Op::ReduceSum, {y}, {{"keepdims", Attr(int64_t(0))}});
  CHECK_THROWS_WITH_AS(autodiff(c.g, loss, c.params), doctest::Contains("reduction 'mul' has no gradient"), Error);
}

// ---- TopK, OneHot, and the composites Einsum, DepthToSpace, SpaceToDepth --------------------------

namespace {
// A Case holding one ONNX node of `op_type` as the importer lowers it (composites become table
// rows), its inputs turned into float64 parameters with random values.
Case imported(const std::string& op_type, const std::vector<Shape>& shapes,
              const std::vector<onnx::AttributeProto>& attrs, int opset = 13) {
  std::vector<Tensor> ins;
  for (const Shape& s : shapes) ins.emplace_back(DType::f64, s);
  Case c;
  c.g = load_graph(optest::one_node_model(opset, op_type, ins, attrs, 1), "", {});
  std::uniform_real_distribution<double> u(-1, 1);
  for (ValueId id : c.g.inputs) {
    Value& v = c.g.value(id);
    v.kind = ValueKind::parameter;
    v.data = Tensor(v.dtype, v.shape);
    for (int64_t i = 0; i < v.data.numel(); ++i) c.set(v.data, i, u(c.rng));
    c.params.push_back(id);
  }
  c.g.inputs.clear();
  return c;
}
}  // namespace

TEST_CASE("autodiff more: TopK's values scatter dy to the picked elements, largest and smallest, any axis") {
  {
    Case c;
    ValueId x = c.param("x", {3, 5});
    auto y = c.node_n(Op::TopK, {x, c.ints({2}, "k")}, {{"axis", Attr(int64_t(1))}}, 2);
    gradcheck(c, c.node(Op::Mul, {y[0], y[0]}));
  }
  {
    Case c;
    ValueId x = c.param("x", {4, 2, 3});
    auto y = c.node_n(Op::TopK, {x, c.ints({3}, "k")}, {{"axis", Attr(int64_t(0))}, {"largest", Attr(int64_t(0))}}, 2);
    gradcheck(c, y[0]);
  }
}

TEST_CASE("autodiff more: OneHot's values [off, on] collect dy off and on the picked positions") {
  Case c;
  ValueId v = c.param("values", {2});
  ValueId idx = c.constant(Tensor::from_i64({2, -1, 0, 7, 1, 1}, {2, 3}), "indices");  // 7: out of range, all off
  ValueId y = c.node(Op::OneHot, {idx, c.constant(Tensor::scalar_i64(4), "depth"), v}, {{"axis", Attr(int64_t(1))}});
  gradcheck(c, c.node(Op::Mul, {y, y}));
}

TEST_CASE("autodiff more: Einsum (lowered at import) on the exporters' equations, ellipsis and 3 operands") {
  const std::vector<std::pair<std::string, std::vector<Shape>>> cases = {
      {"bhid,bhjd->bhij", {{2, 2, 3, 4}, {2, 2, 2, 4}}},
      {"bhij,bhjd->bhid", {{1, 2, 3, 2}, {1, 2, 2, 4}}},
      {"bij,bjk->bik", {{2, 2, 3}, {2, 3, 2}}},
      {"ij->ji", {{2, 3}}},
      {"bi,bi->b", {{2, 3}, {2, 3}}},
      {"...ij,...jk->...ik", {{2, 2, 3}, {1, 3, 2}}},
      {"i,j->ij", {{2}, {3}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 2}}},
      {"ij,jk->i", {{2, 3}, {3, 2}}},
      {"i...j,j->i...", {{2, 2, 2, 3}, {3}}},
      {"...ii->...i", {{2, 3, 3}}},
      {"iij,j->i", {{2, 2, 3}, {3}}},
  };
  for (const auto& [eq, shapes] : cases) {
    CAPTURE(eq);
    Case c = imported("Einsum", shapes, {optest::attr_s("equation", eq)});
    gradcheck(c, c.g.outputs[0]);
  }
}

TEST_CASE("autodiff more: DepthToSpace (DCR, CRD) and SpaceToDepth (lowered at import)") {
  for (const char* mode : {"DCR", "CRD"}) {
    CAPTURE(mode);
    Case c = imported("DepthToSpace", {{2, 8, 2, 3}}, {optest::attr_i("blocksize", 2), optest::attr_s("mode", mode)});
    gradcheck(c, c.g.outputs[0]);
  }
  Case c = imported("SpaceToDepth", {{1, 2, 4, 6}}, {optest::attr_i("blocksize", 2)});
  gradcheck(c, c.g.outputs[0]);
}

// ---- Gather, Tile --------------------------------------------------------------------------------

TEST_CASE("autodiff more: GatherElements, repeated and negative indices add up") {
  Case c;
  ValueId x = c.param("x", {3, 4});
  ValueId i = c.constant(Tensor::from_i64({2, 0, 1, -1, 0, 0, 2, 1, 2, 2, -3, 0}, {3, 4}), "idx");
  ValueId y = c.node(Op::GatherElements, {x, i});
  gradcheck(c, c.node(Op::Mul, {y, y}));
}

TEST_CASE("autodiff more: Gather with repeated and negative indices, on inner axes, scalar index") {
  {
    Case c;  // an embedding lookup: rows 1 and 3 picked twice (one by a negative index)
    ValueId x = c.param("x", {5, 3});
    ValueId idx = c.constant(Tensor::from_i64({1, 3, -4, 0, -2, 3}, {2, 3}), "idx");
    gradcheck(c, c.node(Op::Gather, {x, idx}));
  }
  {
    Case c;
    ValueId x = c.param("x", {2, 4, 3});
    ValueId idx = c.constant(Tensor::from_i64({3, 0, 3}), "idx");
    gradcheck(c, c.node(Op::Gather, {x, idx}, {{"axis", Attr(int64_t(1))}}));
  }
  {
    Case c;
    ValueId x = c.param("x", {2, 4, 3});
    ValueId idx = c.constant(Tensor::from_i64({2}, {}), "idx");
    gradcheck(c, c.node(Op::Gather, {x, idx}, {{"axis", Attr(int64_t(-1))}}));
  }
  {
    Case c;  // int32 indices
    ValueId x = c.param("x", {4, 2});
    Tensor i32(DType::i32, {3});
    i32.as<int32_t>()[0] = 2;
    i32.as<int32_t>()[1] = 2;
    i32.as<int32_t>()[2] = 0;
    gradcheck(c, c.node(Op::Gather, {x, c.constant(i32, "idx")}));
  }
}

TEST_CASE("autodiff more: Tile") {
  for (Ints reps : {Ints{2, 1, 3}, Ints{1, 1, 1}, Ints{1, 4, 1}}) {
    Case c;
    ValueId x = c.param("x", {2, 3, 2});
    gradcheck(c, c.node(Op::Tile, {x, c.ints(reps, "reps")}));
  }
}

// ---- Slice with steps ----------------------------------------------------------------------------

TEST_CASE("autodiff more: Slice with positive, negative and clamped steps on several axes") {
  struct S {
    Ints starts, ends, axes, steps;
  };
  for (const S& s : {S{{0}, {7}, {1}, {2}},                  // every other column
                     S{{1, 6}, {5, 0}, {0, 1}, {3, -2}},     // step 3 rows, reversed every other column
                     S{{-1}, {-100}, {1}, {-1}},             // a full reversal (end clamped)
                     S{{4, 2}, {-10, 100}, {0, 1}, {-1, 4}}, // both clamped
                     S{{2}, {3}, {0}, {5}},                  // one element with a large step
                     S{{0, 1}, {5, 7}, {0, 1}, {1, 1}}}) {   // unit steps
    CAPTURE(s.steps[0]);
    Case c;
    ValueId x = c.param("x", {5, 7, 2});
    gradcheck(c, c.node(Op::Slice, {x, c.ints(s.starts, "st"), c.ints(s.ends, "en"), c.ints(s.axes, "ax"),
                                    c.ints(s.steps, "sp")}));
  }
}

TEST_CASE("autodiff more: Slice that reads nothing gives a zero gradient") {
  Case c;
  ValueId x = c.param("x", {3, 4});
  ValueId a = c.param("a", {3, 4});
  ValueId empty = c.node(Op::Slice, {x, c.ints({2}, "st"), c.ints({2}, "en"), c.ints({1}, "ax")});  // [3, 0]
  ValueId y = c.node(Op::Concat, {c.node(Op::Mul, {a, x}), empty}, {{"axis", Attr(int64_t(1))}});     // [3, 4]
  gradcheck(c, y);
}
