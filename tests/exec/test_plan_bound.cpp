// Values living in the caller's memory (PlanOptions::bound: the trainer's flat gradient buffer),
// and the all-reduce's one call over a bucket laid out as one range (all_reduce_span).
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "exec/device_backend.h"
#include "exec/kernel.h"
#include "exec/plan.h"
#include "tests/test_util.h"

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

// y = Add(g, acc), z = Relu(y): g an input, acc the accumulator input (shape [n]).
Graph accumulate_graph(int64_t n) {
  Graph g;
  auto input = [&](const char* name) {
    Value v;
    v.name = name;
    v.shape = {n};
    v.kind = ValueKind::input;
    ValueId id = g.add_value(std::move(v));
    g.inputs.push_back(id);
    return id;
  };
  ValueId x = input("g"), acc = input("acc");
  int a = g.add_node(Op::Add, "add", {x, acc}, {"y"});
  int r = g.add_node(Op::Relu, "relu", {g.nodes[size_t(a)].outputs[0]}, {"z"});
  g.outputs = {g.nodes[size_t(a)].outputs[0], g.nodes[size_t(r)].outputs[0]};
  verify(g);
  return g;
}

PlanOptions bound_to(std::map<std::string, void*> bound, std::shared_ptr<DeviceBackend> device = nullptr) {
  PlanOptions o;
  o.device = std::move(device);
  o.bound = std::move(bound);
  return o;
}

}  // namespace

TEST_CASE("plan: all_reduce_span is one range only for consecutive aligned float outputs") {
  alignas(64) static float buf[256];
  Shape s5{5}, s16{16}, s3{3};
  Node n;
  n.name = "bucket";
  n.op = Op::AllReduce;
  RunState rs;
  auto ctx = [&](std::vector<TensorRef> outs) {
    KernelCtx c{n, {}, std::move(outs), rs};
    return all_reduce_span(c);
  };
  auto ref = [](float* p, const Shape& s, DType t = DType::f32) { return TensorRef{p, t, &s, shape_numel(s)}; };
  // 5 floats end at byte 20; the next starts at the next 64-byte boundary (float 16).
  CHECK(ctx({ref(buf, s5), ref(buf + 16, s16), ref(buf + 32, s3)}) == 35);
  CHECK(ctx({ref(buf, s16)}) == 16);
  CHECK(ctx({ref(buf, s5), ref(buf + 32, s3)}) == 0);             // a gap of a whole slot: someone else's bytes
  CHECK(ctx({ref(buf + 16, s16), ref(buf, s5)}) == 0);            // out of order
  CHECK(ctx({ref(buf + 1, s5)}) == 0);                            // not aligned
  CHECK(ctx({ref(buf, s5), ref(buf + 16, s16, DType::i32)}) == 0);  // mixed dtypes
  CHECK(ctx({ref(buf, s5, DType::i64)}) == 0);                    // integer sums are per tensor
}

TEST_CASE("plan: bound values live in the caller's memory, an accumulator added to in place") {
  const int64_t n = 37;
  std::vector<float> gv(n), acc0(n);
  for (int64_t i = 0; i < n; ++i) gv[size_t(i)] = float(i % 7) - 3.0f, acc0[size_t(i)] = 0.25f * float(i % 5) - 0.5f;
  auto expect = [&](int64_t i) { return gv[size_t(i)] + acc0[size_t(i)]; };
  Tensor g(DType::f32, {n});
  std::memcpy(g.data(), gv.data(), size_t(n) * 4);

  SUBCASE("host") {
    alignas(64) static float flat[64], relu[64];
    std::memcpy(flat, acc0.data(), size_t(n) * 4);
    Plan free_plan(accumulate_graph(n));
    Plan p(accumulate_graph(n), bound_to({{"acc", flat}, {"y", flat}, {"z", relu}}));
    CHECK(p.arena_bytes() < free_plan.arena_bytes());  // y and z take no arena bytes, nor does acc
    p.execute({{"g", g}});                              // acc is not fed: it is already in place
    for (int64_t i = 0; i < n; ++i) {
      CHECK(flat[i] == expect(i));
      CHECK(relu[i] == std::max(0.0f, expect(i)));
    }
    CHECK(p.ref(p.graph().find("y")).data == flat);
  }
#if defined(ONNXDP_HAVE_CUDA)
  SUBCASE("emulated device") {
    auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
    float* flat = static_cast<float*>(dev->alloc(64 * 4));
    float* relu = static_cast<float*>(dev->alloc(64 * 4));
    dev->to_device(flat, acc0.data(), size_t(n) * 4);
    Plan p(accumulate_graph(n), bound_to({{"acc", flat}, {"y", flat}, {"z", relu}}, dev));
    p.execute({{"g", g}});
    std::vector<float> got(n);
    dev->to_host(got.data(), flat, size_t(n) * 4);
    for (int64_t i = 0; i < n; ++i) CHECK(got[size_t(i)] == expect(i));
    CHECK(p.device_data(p.graph().find("z")) == relu);
    TensorRef z = p.ref(p.graph().find("z"));  // downloaded to a host copy
    CHECK(z.data != relu);
    for (int64_t i = 0; i < n; ++i) CHECK(z.as<float>()[i] == std::max(0.0f, expect(i)));
    dev->release(flat);
    dev->release(relu);
  }
#endif
}

TEST_CASE("plan: a constant cannot be bound to the caller's memory") {
  Graph g = accumulate_graph(4);
  Value c;
  c.name = "c";
  c.shape = {4};
  c.kind = ValueKind::constant;
  c.data = Tensor(DType::f32, {4});
  ValueId cv = g.add_value(std::move(c));
  int m = g.add_node(Op::Mul, "mul", {g.find("z"), cv}, {"w"});
  g.outputs.push_back(g.nodes[size_t(m)].outputs[0]);
  verify(g);
  float where[4];
  CHECK(contains(error_of([&] { Plan p(g, bound_to({{"c", where}})); }), "'c' cannot live in the caller's memory"));
}
