// FlatState (exec/flat_state.h): the layout of the flat buffers, and one optimizer step through
// bind / collect_gradients / begin_step / end_step on the host and on the cuda-emulated device,
// against the update computed by hand.
#include <doctest/doctest.h>

#include <vector>

#include "exec/device_backend.h"
#include "exec/flat_state.h"
#include "tests/test_util.h"

using namespace onnxdp;

namespace {

// gval = Neg(x): x [n] an input; its output is the "gradient" a step writes.
Graph negate_graph(int64_t n) {
  Graph g;
  Value v;
  v.name = "x";
  v.shape = {n};
  v.kind = ValueKind::input;
  ValueId x = g.add_value(std::move(v));
  g.inputs.push_back(x);
  int neg = g.add_node(Op::Neg, "neg", {x}, {"gval"});
  g.outputs = {g.nodes[size_t(neg)].outputs[0]};
  verify(g);
  return g;
}

// One SGD step (lr 0.5, no weight decay) of one tensor of 3 elements, p = [1, 2, 3], whose
// gradient is -x for x = [2, -4, 6]: p - 0.5 * (-x) = [2, 0, 6]; squared norm 4 + 16 + 36 = 56.
void sgd_step_on(std::shared_ptr<DeviceBackend> device) {
  FlatState s({3}, {0}, device);
  Tensor m, v;  // SGD keeps no moments
  s.set_moments(&m, &v);
  float* p = s.params().as<float>();
  p[0] = 1, p[1] = 2, p[2] = 3;
  s.push();
  PlanOptions po{.device = device};
  s.bind(po, {"w"}, {{"gval", 0}}, {ValueId(1)}, {1}, /*update=*/true);
  Plan plan(negate_graph(3), po);
  OptimizerUpdate u;
  u.kind = OptimizerUpdate::Kind::sgd;
  u.lr = 0.5f;
  s.begin_step(u);
  plan.execute({{"x", Tensor::from_f32({2, -4, 6}, {3})}});
  s.collect_gradients(plan, {plan.graph().find("gval")}, {1});
  CHECK(s.end_step() == doctest::Approx(56.0));
  s.pull();
  CHECK(p[0] == 2.0f);
  CHECK(p[1] == 0.0f);
  CHECK(p[2] == 6.0f);
}

}  // namespace

TEST_CASE("flat state: tensors at 64-byte offsets in the layout's order, the gaps counted in floats()") {
  // Tensor 2 (1 element) first at 0, tensor 0 (3) at 16 floats, tensor 1 (20) at 32; 20 rounds to 32.
  FlatState s({3, 20, 1}, {2, 0, 1}, nullptr);
  CHECK(s.offset(2) == 0);
  CHECK(s.offset(0) == 16);
  CHECK(s.offset(1) == 32);
  CHECK(s.floats() == 64);
  CHECK(s.numel() == 24);
  Tensor m(DType::f32, {64}), v(DType::f32, {64});
  s.set_moments(&m, &v);
  CHECK(s.bytes() == 4 * 64 * 4);  // parameters, gradients and two moments
}

TEST_CASE("flat state: an SGD step on the host writes the gradient into its slice and updates there") {
  sgd_step_on(nullptr);
}

#if defined(ONNXDP_HAVE_CUDA)
TEST_CASE("flat state: the same SGD step on the cuda-emulated device, the update queued after the plan's nodes") {
  sgd_step_on(make_device_backend(DeviceKind::cuda_emulated, 0));
}
#endif
