#include "exec/plan.h"

#include "exec/profile.h"
#include "parallel/communicator.h"

#include <chrono>

#include <algorithm>
#include <cstring>

namespace onnxdp {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Plan::Plan(Graph g, PlanOptions opts) : graph_(std::move(g)), opts_(opts) {
  const size_t nv = graph_.values.size();
  const int nn = int(graph_.nodes.size());
  offset_.assign(nv, -1);

  // Liveness in node indices: graph inputs are born at -1, outputs live to the end.
  std::vector<int> born(nv, -2), dies(nv, -2);
  for (ValueId i : graph_.inputs) born[size_t(i)] = dies[size_t(i)] = -1;
  for (int ni = 0; ni < nn; ++ni) {
    for (ValueId in : graph_.nodes[size_t(ni)].inputs)
      if (in != kNoValue && born[size_t(in)] != -2) dies[size_t(in)] = ni;
    for (ValueId o : graph_.nodes[size_t(ni)].outputs)
      if (o != kNoValue) born[size_t(o)] = dies[size_t(o)] = ni;
  }
  for (ValueId o : graph_.outputs)
    if (born[size_t(o)] != -2) dies[size_t(o)] = nn;

  // Greedy placement in order of birth, largest first among equals: each value takes the lowest
  // offset that does not overlap a value whose lifetime intersects its own.
  std::vector<ValueId> order;
  for (size_t v = 0; v < nv; ++v)
    if (born[v] != -2) order.push_back(ValueId(v));
  auto bytes = [&](ValueId v) { return align_up(size_t(shape_numel(graph_.value(v).shape)) * dtype_size(graph_.value(v).dtype)); };
  std::stable_sort(order.begin(), order.end(), [&](ValueId a, ValueId b) {
    return born[size_t(a)] != born[size_t(b)] ? born[size_t(a)] < born[size_t(b)] : bytes(a) > bytes(b);
  });
  struct Placed { int born, dies; size_t off, size; };
  std::vector<Placed> placed;
  for (ValueId v : order) {
    size_t size = bytes(v);
    unshared_bytes_ += size;
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& p : placed)
      if (!(p.dies < born[size_t(v)] || dies[size_t(v)] < p.born)) busy.emplace_back(p.off, p.off + p.size);
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto [b, e] : busy) {
      if (off + size <= b) break;
      off = std::max(off, e);
    }
    offset_[size_t(v)] = int64_t(off);
    placed.push_back({born[size_t(v)], dies[size_t(v)], off, size});
    arena_bytes_ = std::max(arena_bytes_, off + size);
  }
  arena_ = Tensor(DType::u8, {int64_t(std::max<size_t>(arena_bytes_, 1))});
}

TensorRef Plan::ref(ValueId id) {
  if (id == kNoValue) return {};
  Value& v = graph_.value(id);
  if (offset_[size_t(id)] >= 0)
    return TensorRef{arena_.as<uint8_t>() + offset_[size_t(id)], v.dtype, &v.shape, shape_numel(v.shape)};
  if (!v.data.empty()) return TensorRef{v.data.data(), v.dtype, &v.shape, v.data.numel()};
  fail("value '{}' has no storage in the plan", v.name);
}

void Plan::execute(const std::map<std::string, Tensor>& inputs, const RunState& state) {
  for (ValueId i : graph_.inputs) {
    const Value& v = graph_.value(i);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) fail("input '{}' was not given", v.name);
    const Tensor& t = it->second;
    if (t.dtype() != v.dtype || t.shape() != v.shape)
      fail("input '{}' is {} {}, the model expects {} {}", v.name, dtype_name(t.dtype()), shape_str(t.shape()),
           dtype_name(v.dtype), shape_str(v.shape));
    if (t.nbytes()) std::memcpy(ref(i).data, t.data(), t.nbytes());
  }
  for (const Node& n : graph_.nodes) {
    KernelCtx ctx{n, {}, {}, state};
    ctx.inputs.reserve(n.inputs.size());
    for (ValueId in : n.inputs) ctx.inputs.push_back(ref(in));
    for (ValueId o : n.outputs) ctx.outputs.push_back(ref(o));
    if (!state.profile) {
      cpu_kernel(n.op)(ctx);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    cpu_kernel(n.op)(ctx);
    state.profile->add(n, ctx, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (state.profile) ++state.profile->runs;
  // Asynchronous all-reduces (gradient buckets) finish before the caller reads any output.
  if (state.comm) state.comm->wait_all();
}

std::map<std::string, Tensor> Plan::run(const std::map<std::string, Tensor>& inputs, const RunState& state) {
  execute(inputs, state);
  std::map<std::string, Tensor> out;
  for (ValueId o : graph_.outputs) {
    const Value& v = graph_.value(o);
    Tensor t(v.dtype, v.shape);
    if (t.nbytes()) std::memcpy(t.data(), ref(o).data, t.nbytes());
    out[v.name] = std::move(t);
  }
  return out;
}

}  // namespace onnxdp
