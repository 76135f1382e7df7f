// Views in the memory plan (exec/plan.h): a Reshape / Flatten / Squeeze / Unsqueeze / Identity
// output is its input's bytes, the node runs nothing, and the shared bytes stay untouched while
// either value is read, on the CPU and on the emulated CUDA device; a bound output (the trainer's
// gradient buffer) still gets its copy. ReluGrad's dx in place of its dy.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "exec/device_backend.h"
#include "exec/functors.h"
#include "exec/plan.h"
#include "tests/graph/graph_test_util.h"

using namespace onnxdp;
using onnxdp::test::add_input;
using onnxdp::test::add_ints;
using onnxdp::test::out;

namespace {

// x [4, 2, 3] -> r = Relu(x) -> f = Flatten(r) [4, 6] -> s = Reshape(f, [24]) -> u = Unsqueeze(s, 0)
// [1, 24] -> i = Identity(u); then e = Exp(x) and k = Neg(e), born while r's bytes are shared
// and must not land on them; y = Add(i, Reshape(k, [1, 24])) reads the view after k exists.
Graph views() {
  Graph g;
  ValueId x = add_input(g, "x", {4, 2, 3});
  ValueId r = out(g, g.add_node(Op::Relu, "relu", {x}, {"r"}));
  ValueId f = out(g, g.add_node(Op::Flatten, "flatten", {r}, {"f"}));
  ValueId s = out(g, g.add_node(Op::Reshape, "reshape", {f, add_ints(g, "shape24", {24})}, {"s"}));
  ValueId u = out(g, g.add_node(Op::Unsqueeze, "unsqueeze", {s, add_ints(g, "axes0", {0})}, {"u"}));
  ValueId i = out(g, g.add_node(Op::Identity, "identity", {u}, {"i"}));
  ValueId e = out(g, g.add_node(Op::Exp, "exp", {x}, {"e"}));
  ValueId k = out(g, g.add_node(Op::Neg, "neg", {e}, {"k"}));
  ValueId kr = out(g, g.add_node(Op::Reshape, "reshape_k", {k, add_ints(g, "shape1x24", {1, 24})}, {"kr"}));
  ValueId y = out(g, g.add_node(Op::Add, "add", {i, kr}, {"y"}));
  g.outputs = {y, s};
  verify(g);
  return g;
}

// The values the nodes compute, one at a time (the Exp kernel's float exp is fn::m::exp, checked
// against std::exp in test_float_math.cpp; here only where the bytes live is under test).
std::vector<float> expected(const Tensor& x) {
  std::vector<float> y(24);
  for (int64_t j = 0; j < 24; ++j) {
    const float v = x.as<float>()[j];
    y[size_t(j)] = std::max(v, 0.0f) + -fn::m::exp(v);
  }
  return y;
}

}  // namespace

TEST_CASE("plan: reshapes are views of their input's bytes, run nothing, and keep the values") {
  Tensor x(DType::f32, {4, 2, 3});
  for (int64_t j = 0; j < 24; ++j) x.as<float>()[j] = float(std::sin(0.7 * double(j)) * 2);
  const std::vector<float> want = expected(x);
  std::vector<std::shared_ptr<DeviceBackend>> devices = {nullptr};
#if defined(ONNXDP_HAVE_CUDA)
  devices.push_back(make_device_backend(DeviceKind::cuda_emulated, 0));
#endif
  for (const auto& dev : devices) {
    CAPTURE(dev ? dev->name() : std::string("cpu"));
    Plan p(views(), PlanOptions{.device = dev});
    const Graph& g = p.graph();
    auto y = p.run({{"x", x}});
    REQUIRE(y.at("y").numel() == 24);
    for (int64_t j = 0; j < 24; ++j) CHECK(y.at("y").as<float>()[j] == want[size_t(j)]);
    for (int64_t j = 0; j < 24; ++j) CHECK(y.at("s").as<float>()[j] == std::max(x.as<float>()[j], 0.0f));
    // r, f, s, u and i are one buffer; e and k are not on it.
    auto where = [&](const char* name) -> const void* {
      return dev ? p.device_data(g.find(name)) : static_cast<const void*>(p.ref(g.find(name)).data);
    };
    for (const char* v : {"f", "s", "u", "i"}) CHECK_MESSAGE(where(v) == where("r"), v);
    CHECK(where("kr") == where("k"));
    CHECK(where("e") != where("r"));
    CHECK(where("k") != where("r"));
  }
}

TEST_CASE("plan: a reshape whose output lives in the caller's memory copies into it") {
  Tensor x(DType::f32, {4, 2, 3});
  for (int64_t j = 0; j < 24; ++j) x.as<float>()[j] = float(j) - 10;
  std::vector<float> s_buf(24, -1.0f);
  Plan p(views(), PlanOptions{.bound = {{"s", s_buf.data()}}});
  auto y = p.run({{"x", x}});
  for (int64_t j = 0; j < 24; ++j) CHECK(s_buf[size_t(j)] == std::max(x.as<float>()[j], 0.0f));
  const std::vector<float> want = expected(x);
  for (int64_t j = 0; j < 24; ++j) CHECK(y.at("y").as<float>()[j] == want[size_t(j)]);
}

TEST_CASE("plan: ReluGrad writes dx over y's or dy's bytes when nothing reads them after it") {
  // x [8, 8] (fed) -> y = Relu(x), d = Neg(x) (form 3: d is x itself, fed); dx = ReluGrad(d, y)
  // = d where x > 0, else 0. What reads y and d after ReluGrad decides where dx may live:
  //   0: nothing (z = Exp(dx)): y's bytes;  1: y (z = dx + y): d's;  2: both (z = (dx + d) + y):
  //   bytes of its own;  3: y, and d is fed (z = dx + y): its own (the caller's feed stays).
  Tensor x(DType::f32, {8, 8});
  for (int64_t j = 0; j < 64; ++j) x.as<float>()[j] = float(std::sin(0.9 * double(j)) * 3);
  std::vector<std::shared_ptr<DeviceBackend>> devices = {nullptr};
#if defined(ONNXDP_HAVE_CUDA)
  devices.push_back(make_device_backend(DeviceKind::cuda_emulated, 0));
#endif
  for (const auto& dev : devices)
    for (int form = 0; form < 4; ++form) {
      CAPTURE(dev ? dev->name() : std::string("cpu"));
      CAPTURE(form);
      Graph g;
      ValueId xi = add_input(g, "x", {8, 8});
      ValueId y = out(g, g.add_node(Op::Relu, "relu", {xi}, {"y"}));
      ValueId d = form == 3 ? xi : out(g, g.add_node(Op::Neg, "neg", {xi}, {"d"}));
      ValueId dx = out(g, g.add_node(Op::ReluGrad, "relu_grad", {d, y}, {"dx"}));
      ValueId z;
      if (form == 0) z = out(g, g.add_node(Op::Exp, "exp", {dx}, {"z"}));
      else if (form == 2) z = out(g, g.add_node(Op::Add, "add_y", {out(g, g.add_node(Op::Add, "add_d", {dx, d}, {"s"})), y}, {"z"}));
      else z = out(g, g.add_node(Op::Add, "add_y", {dx, y}, {"z"}));
      g.outputs = {z};
      verify(g);
      Plan p(std::move(g), PlanOptions{.device = dev});
      auto r = p.run({{"x", x}});
      for (int64_t j = 0; j < 64; ++j) {
        const float v = x.as<float>()[j], relu = std::max(v, 0.0f), dv = form == 3 ? v : -v;
        const float want_dx = v > 0 ? dv : 0.0f;
        const float want = form == 0 ? fn::m::exp(want_dx) : form == 2 ? (want_dx + dv) + relu : want_dx + relu;
        CHECK(r.at("z").as<float>()[j] == want);
      }
      CHECK((p.ref(dx).data == p.ref(y).data) == (form == 0));
      CHECK((p.ref(dx).data == p.ref(d).data) == (form == 1));
    }
}
