#include "exec/plan.h"

#include "exec/cpu/threads.h"
#include "exec/device_backend.h"
#include "exec/profile.h"
#include "parallel/communicator.h"

#include <atomic>
#include <chrono>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace onnxdp {

namespace {
size_t align_up(size_t n) { return (n + kPlanAlign - 1) / kPlanAlign * kPlanAlign; }
bool is_view(Op op) {
  return op == Op::Reshape || op == Op::Flatten || op == Op::Squeeze || op == Op::Unsqueeze || op == Op::Identity;
}
}  // namespace

Plan::Plan(Graph g, PlanOptions opts) : graph_(std::move(g)), opts_(opts) {
  const size_t nv = graph_.values.size();
  const int nn = int(graph_.nodes.size());
  offset_.assign(nv, -1);
  bound_.assign(nv, nullptr);
  if (!opts_.bound.empty()) {
    std::vector<char> is_input(nv, 0);
    for (ValueId i : graph_.inputs) is_input[size_t(i)] = 1;
    for (size_t v = 0; v < nv; ++v) {
      const Value& val = graph_.values[v];
      auto it = opts_.bound.find(val.name);
      if (it == opts_.bound.end()) continue;
      if (!(val.kind == ValueKind::parameter || is_input[v] || val.producer >= 0))
        fail("value '{}' cannot live in the caller's memory: it is a constant", val.name);
      bound_[v] = it->second;
    }
  }

  // Liveness in node indices: graph inputs are born at -1, outputs live to the end.
  std::vector<int> born(nv, -2), dies(nv, -2);
  for (ValueId i : graph_.inputs) born[size_t(i)] = dies[size_t(i)] = -1;
  auto in_arena = [&](size_t v) { return born[v] != -2 && !bound_[v]; };
  for (int ni = 0; ni < nn; ++ni) {
    for (ValueId in : graph_.nodes[size_t(ni)].inputs)
      if (in != kNoValue && born[size_t(in)] != -2) dies[size_t(in)] = ni;
    for (ValueId o : graph_.nodes[size_t(ni)].outputs)
      if (o != kNoValue) born[size_t(o)] = dies[size_t(o)] = ni;
  }
  for (ValueId o : graph_.outputs)
    if (born[size_t(o)] != -2) dies[size_t(o)] = nn;

  // Views: the output of a Reshape, Flatten, Squeeze, Unsqueeze or Identity takes its input's
  // bytes when both live in the arena (the same bytes in the same order); the node then does
  // nothing. The shared bytes live from the first value's birth to the last one's death, so
  // nothing overwrites the input while the view is read (only a value's producer writes it).
  // In place: ReluGrad (dy, y) reads each element of dy and y before it writes that element of
  // dx, so dx takes the bytes of an input that a node made and nothing after ReluGrad reads (nor
  // a view of it): y's first, else dy's, as Greater + Where let y's bytes go to dx; the node still
  // runs. Otherwise dx, dy and y would be live at once (the sample CNN's activations: 24 % more).
  std::vector<ValueId> root(nv);
  for (size_t v = 0; v < nv; ++v) root[v] = ValueId(v);
  view_.assign(size_t(nn), 0);
  for (int ni = 0; ni < nn; ++ni) {
    const Node& n = graph_.nodes[size_t(ni)];
    if (n.op == Op::ReluGrad && n.inputs.size() == 2 && n.outputs.size() == 1) {
      const ValueId dy = n.inputs[0], y = n.inputs[1], o = n.outputs[0];
      if (dy == kNoValue || y == kNoValue || o == kNoValue || !in_arena(size_t(o))) continue;
      if (root[size_t(dy)] == root[size_t(y)]) continue;  // one input's bytes twice
      for (ValueId in : {y, dy}) {
        const ValueId r = root[size_t(in)];
        if (!in_arena(size_t(in)) || born[size_t(r)] < 0 || dies[size_t(r)] != ni) continue;  // fed, or read later
        root[size_t(o)] = r;
        dies[size_t(r)] = dies[size_t(o)];
        break;
      }
      continue;
    }
    if (!is_view(n.op) || n.inputs.empty() || n.outputs.size() != 1) continue;
    const ValueId x = n.inputs[0], o = n.outputs[0];
    if (x == kNoValue || o == kNoValue || !in_arena(size_t(x)) || !in_arena(size_t(o))) continue;
    const Value &xv = graph_.value(x), &ov = graph_.value(o);
    if (xv.dtype != ov.dtype || shape_numel(xv.shape) != shape_numel(ov.shape)) continue;
    const ValueId r = root[size_t(x)];
    root[size_t(o)] = r;
    born[size_t(r)] = std::min(born[size_t(r)], born[size_t(o)]);
    dies[size_t(r)] = std::max(dies[size_t(r)], dies[size_t(o)]);
    view_[size_t(ni)] = 1;
  }

  // Graph inputs read only by Scatter nodes of one row count (a replica's share of the global
  // batch): on a device only those rows are copied in (the replica's upload is its share).
  scatter_rows_.assign(nv, -1);
  {
    std::vector<char> is_input(nv, 0);
    for (ValueId i : graph_.inputs) is_input[size_t(i)] = 1;
    for (ValueId o : graph_.outputs)
      if (o != kNoValue) is_input[size_t(o)] = 0;
    for (const Node& n : graph_.nodes)
      for (ValueId in : n.inputs) {
        if (in == kNoValue || !is_input[size_t(in)]) continue;
        int64_t& r = scatter_rows_[size_t(in)];
        const int64_t rows = n.op == Op::Scatter ? n.i("rows") : -2;
        r = (r == -1 || r == rows) ? rows : -2;
      }
    for (int64_t& r : scatter_rows_)
      if (r < 0) r = -1;
  }

  // Nodes that read what an asynchronous collective writes (directly or through a view) wait for
  // the collectives in flight first: the bucket outputs of --grad-dtype bf16 are cast back in the
  // graph, where float gradient buckets are read only after the run.
  reads_async_.assign(graph_.nodes.size(), 0);
  {
    std::vector<char> async_value(nv, 0);
    for (size_t ni = 0; ni < graph_.nodes.size(); ++ni) {
      const Node& n = graph_.nodes[ni];
      for (ValueId in : n.inputs)
        if (in != kNoValue && async_value[size_t(in)]) reads_async_[ni] = 1;
      const bool async_collective = (n.op == Op::AllReduce || n.op == Op::ReduceScatter) && n.i("async") != 0;
      if (async_collective || (view_[ni] && reads_async_[ni]))
        for (ValueId o : n.outputs)
          if (o != kNoValue) async_value[size_t(o)] = 1;
    }
  }

  // Greedy placement in order of birth, largest first among equals: each value takes the lowest
  // offset that does not overlap a value whose lifetime intersects its own.
  std::vector<ValueId> order;
  for (size_t v = 0; v < nv; ++v)
    if (in_arena(v) && root[v] == ValueId(v)) order.push_back(ValueId(v));
  // tensor_bytes: at most 2^62 each, so a sum of a few cannot wrap; the arena's end is checked below.
  auto bytes = [&](ValueId v) { return align_up(size_t(tensor_bytes(graph_.value(v).shape, graph_.value(v).dtype))); };
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
    if (off > (size_t(1) << 62)) fail("the plan's activations need more than 2^62 bytes (at value '{}')", graph_.value(v).name);
    offset_[size_t(v)] = int64_t(off);
    placed.push_back({born[size_t(v)], dies[size_t(v)], off, size});
    arena_bytes_ = std::max(arena_bytes_, off + size);
  }
  for (size_t v = 0; v < nv; ++v)
    if (root[v] != ValueId(v)) offset_[v] = offset_[size_t(root[v])];
  if (int64_t(arena_bytes_) > physical_memory_bytes())
    fail("the model's activations need {:.1f} GiB, more than this machine's {:.1f} GiB of memory (a smaller batch?)",
         double(arena_bytes_) / double(1 << 30), double(physical_memory_bytes()) / double(1 << 30));
  arena_ = Tensor(DType::u8, {int64_t(std::max<size_t>(arena_bytes_, 1))});
  if (!opts_.device) return;

  DeviceBackend& dev = *opts_.device;
  dev.activate();
  data_offset_.assign(nv, -1);
  size_t data_bytes = 0;
  for (size_t v = 0; v < nv; ++v) {
    const Value& val = graph_.values[v];
    if (offset_[v] >= 0 || bound_[v] || val.data.empty()) continue;
    data_offset_[v] = int64_t(data_bytes);
    data_bytes += align_up(val.data.nbytes());
  }
  auto device_buffer = [&](size_t bytes) {
    return std::shared_ptr<void>(dev.alloc(std::max<size_t>(bytes, 1)), [d = opts_.device](void* p) {
      d->activate();
      d->release(p);
    });
  };
  device_arena_ = device_buffer(arena_bytes_);
  device_data_ = device_buffer(data_bytes);
  device_scalars_ = device_buffer(sizeof(RunScalars));
  device_checks_ = device_buffer(device_check_slots(size_t(nn)) * 8);
  device_bytes_ = arena_bytes_ + data_bytes;
  for (size_t v = 0; v < nv; ++v)
    if (data_offset_[v] >= 0 && graph_.values[v].data.nbytes())
      dev.to_device(device_ptr(ValueId(v)), graph_.values[v].data.data(), graph_.values[v].data.nbytes());
  on_device_.resize(size_t(nn));
  capturable_ = opts_.device_graph && dev.can_capture();
  for (const Node& n : graph_.nodes) talks_ = talks_ || n.op == Op::AllReduce || n.op == Op::ReduceScatter || n.op == Op::AllGather;
  for (int ni = 0; ni < nn; ++ni) {
    const Node& n = graph_.nodes[size_t(ni)];
    on_device_[size_t(ni)] = dev.has_kernel(graph_, n);
    capturable_ = capturable_ && on_device_[size_t(ni)];
  }
  on_host_.assign(nv, 0);
}

void* Plan::device_ptr(ValueId id) const {
  if (bound_[size_t(id)]) return bound_[size_t(id)];
  if (offset_[size_t(id)] >= 0) return static_cast<uint8_t*>(device_arena_.get()) + offset_[size_t(id)];
  if (data_offset_[size_t(id)] >= 0) return static_cast<uint8_t*>(device_data_.get()) + data_offset_[size_t(id)];
  fail("value '{}' has no storage on {}", graph_.value(id).name, opts_.device->name());
}

std::string Plan::host_ops() const {
  std::map<std::string, int> count;
  for (size_t ni = 0; ni < on_device_.size(); ++ni)
    if (!on_device_[ni]) ++count[op_name(graph_.nodes[ni].op)];
  std::string s;
  for (const auto& [op, k] : count) s += (s.empty() ? "" : ", ") + op + (k > 1 ? " x" + std::to_string(k) : "");
  return s;
}

int Plan::contiguous_all_reduces(const std::vector<int>& nodes) {
  int contiguous = 0;
  RunState none;
  for (int node : nodes) {
    const Node& n = graph_.nodes[size_t(node)];
    KernelCtx c{n, {}, {}, none};
    for (ValueId out : n.outputs) {
      const Value& v = graph_.value(out);
      TensorRef r{nullptr, v.dtype, &v.shape, shape_numel(v.shape)};
      r.data = opts_.device ? device_ptr(out) : ref(out).data;
      c.outputs.push_back(r);
    }
    contiguous += all_reduce_span(c) > 0;
  }
  return contiguous;
}

TensorRef Plan::ref(ValueId id) {
  if (id == kNoValue) return {};
  Value& v = graph_.value(id);
  const int64_t numel = shape_numel(v.shape);
  if (bound_[size_t(id)] && !opts_.device) return TensorRef{bound_[size_t(id)], v.dtype, &v.shape, numel};
  if (bound_[size_t(id)] && v.kind != ValueKind::parameter) {  // downloaded into a host copy of its own
    Tensor& host = shadow_[id];
    if (host.empty()) host = Tensor(v.dtype, v.shape);
    if (!on_host_[size_t(id)]) {
      if (numel) opts_.device->to_host(host.data(), bound_[size_t(id)], host.nbytes());
      on_host_[size_t(id)] = 1;
    }
    return TensorRef{host.data(), v.dtype, &v.shape, numel};
  }
  if (offset_[size_t(id)] >= 0) {
    uint8_t* host = arena_.as<uint8_t>() + offset_[size_t(id)];
    if (opts_.device && !on_host_[size_t(id)]) {
      if (numel) opts_.device->to_host(host, device_ptr(id), size_t(numel) * dtype_size(v.dtype));
      on_host_[size_t(id)] = 1;
    }
    return TensorRef{host, v.dtype, &v.shape, numel};
  }
  if (!v.data.empty()) {
    if (opts_.device && bound_[size_t(id)] && !on_host_[size_t(id)]) {  // the device holds the current values
      if (v.data.nbytes()) opts_.device->to_host(v.data.data(), bound_[size_t(id)], v.data.nbytes());
      on_host_[size_t(id)] = 1;
    }
    return TensorRef{v.data.data(), v.dtype, &v.shape, v.data.numel()};
  }
  fail("value '{}' has no storage in the plan", v.name);
}

namespace {
// The tensor fed for graph input v: by name, with exactly its dtype and shape.
const Tensor& fed(const std::map<std::string, Tensor>& inputs, const Value& v) {
  auto it = inputs.find(v.name);
  if (it == inputs.end()) fail("input '{}' was not given", v.name);
  const Tensor& t = it->second;
  if (t.dtype() != v.dtype || t.shape() != v.shape)
    fail("input '{}' is {} {}, the model expects {} {}", v.name, dtype_name(t.dtype()), shape_str(t.shape()),
         dtype_name(v.dtype), shape_str(v.shape));
  return t;
}

bool is_collective(Op op) { return std::strcmp(op_info(op).category, "collective") == 0; }
}  // namespace

void Plan::execute(const std::map<std::string, Tensor>& inputs, const RunState& given) {
  if (opts_.device) return execute_on_device(inputs, given);
  static std::atomic<uint64_t> serials{0};
  RunState state = given;
  state.serial = ++serials;
  for (ValueId i : graph_.inputs) {
    if (bound_[size_t(i)]) continue;  // the caller wrote it in place
    const Tensor& t = fed(inputs, graph_.value(i));
    if (t.nbytes()) std::memcpy(ref(i).data, t.data(), t.nbytes());
  }
  for (size_t ni = 0; ni < graph_.nodes.size(); ++ni) {
    if (view_[ni]) continue;  // its output is its input's bytes
    const Node& n = graph_.nodes[ni];
    if (reads_async_[ni] && state.comm) state.comm->wait_all();
    KernelCtx ctx{n, {}, {}, state};
    ctx.inputs.reserve(n.inputs.size());
    for (ValueId in : n.inputs) ctx.inputs.push_back(ref(in));
    for (ValueId o : n.outputs) ctx.outputs.push_back(ref(o));
    if (!state.profile) {
      cpu_kernel(n.op)(ctx);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    cpu_kernel(n.op)(ctx);
    const double cpu = thread_cpu_seconds() - c0;
    state.profile->add(n, ctx, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                       cpu_threads() == 1 ? cpu : -1.0);
  }
  if (state.profile) ++state.profile->runs;
  // Asynchronous all-reduces (gradient buckets) finish before the caller reads any output.
  if (state.comm) state.comm->wait_all();
}

void Plan::execute_on_device(const std::map<std::string, Tensor>& inputs, const RunState& state) {
  DeviceBackend& dev = *opts_.device;
  dev.activate();
  std::fill(on_host_.begin(), on_host_.end(), 0);
  for (ValueId i : graph_.inputs) {
    if (bound_[size_t(i)]) continue;  // the caller wrote it in place
    const Tensor& t = fed(inputs, graph_.value(i));
    size_t begin = 0, bytes = t.nbytes();  // the rows a Scatter reads, where only Scatters read it
    if (const int64_t rows = scatter_rows_[size_t(i)]; rows >= 0 && !t.shape().empty() && t.shape()[0] > 0) {
      const size_t row_bytes = t.nbytes() / size_t(t.shape()[0]);
      if (state.batch_offset >= 0 && state.batch_offset + rows <= t.shape()[0]) {
        begin = size_t(state.batch_offset) * row_bytes;
        bytes = size_t(rows) * row_bytes;
      }
    }
    if (bytes) {
      const uint8_t* src = static_cast<const uint8_t*>(t.data()) + begin;
      std::memcpy(arena_.as<uint8_t>() + offset_[size_t(i)] + begin, src, bytes);
      dev.to_device(static_cast<uint8_t*>(device_ptr(i)) + begin, src, bytes);
    }
    on_host_[size_t(i)] = 1;
  }
  // Parameters the caller changes on the host between runs (PlanOptions::changed_on_host).
  for (ValueId p : graph_.parameters()) {
    const Value& v = graph_.value(p);
    const bool changed = device_runs_ == 0 || !opts_.changed_on_host || opts_.changed_on_host->count(v.name);
    if (changed && data_offset_[size_t(p)] >= 0 && v.data.nbytes()) dev.to_device(device_ptr(p), v.data.data(), v.data.nbytes());
  }
  // What changes from run to run reaches recorded kernels through device memory.
  scalars_ = RunScalars{state.seed, state.step, state.batch_offset, state.sample_offset};
  dev.to_device(device_scalars_.get(), &scalars_, sizeof scalars_);
  RunState run = state;
  run.device = static_cast<const RunScalars*>(device_scalars_.get());
  run.device_checks = static_cast<unsigned long long*>(device_checks_.get());
  if (recording_ && state.batch_offset != recorded_batch_offset_) recording_.reset();  // recorded for other rows
  // The second run is recorded (the first one made the libraries' first-call allocations), later
  // runs replay it; a profiled run launches node by node to time each.
  if (recording_ && !state.profile) {
    dev.replay(recording_.get());
  } else if (capturable_ && device_runs_ >= 1 && !state.profile) {
    try {
      dev.begin_capture();
      run_nodes_on_device(run);
      if (opts_.after_run) opts_.after_run(*this);
      recording_ = dev.end_capture();
      recorded_batch_offset_ = state.batch_offset;
    } catch (const Error& e) {  // nothing recorded has run: go on node by node (below)
      dev.abort_capture();
      capturable_ = false;
      fmt::print(stderr, "onnxdp: {}: recording the run as a CUDA graph failed, running node by node: {}\n",
                 dev.name(), e.what());
    }
    // Replicas that talk to each other all replay or none does: a graph's NCCL calls must be alike
    // on every rank (NCCL's rule for CUDA graphs), and one replica launching node by node while
    // the others replay is what it warns against. Agreed before anything runs, so that every
    // replica's collectives keep one order.
    if (state.comm && talks_) {
      int32_t failed = recording_ ? 0 : 1;
      state.comm->all_reduce_sum(&failed, 1, DType::i32);
      if (failed && recording_) {
        recording_.reset();
        capturable_ = false;
        fmt::print(stderr, "onnxdp: {}: another replica could not record its run as a CUDA graph: every replica "
                           "runs node by node\n", dev.name());
      }
    }
    if (recording_) {
      dev.replay(recording_.get());
    } else {
      run_nodes_on_device(run);
      if (opts_.after_run) opts_.after_run(*this);
    }
  } else {
    run_nodes_on_device(run);
    if (opts_.after_run) {
      auto t0 = std::chrono::steady_clock::now();
      opts_.after_run(*this);
      if (state.profile) {
        dev.synchronize();
        state.profile->after_run_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
  }
  ++device_runs_;
  if (state.profile) ++state.profile->runs;
  if (state.comm) state.comm->wait_all();
  dev.synchronize();
  // What the kernels found wrong in the data (exec/run_scalars.h): the first failing node's error.
  unsigned long long first = 0;
  dev.to_host(&first, device_checks_.get(), sizeof first);
  if (first) {
    const size_t ni = size_t(~first);
    unsigned long long slot[2] = {0, 0};
    dev.to_host(slot, static_cast<unsigned long long*>(device_checks_.get()) + 1 + 2 * ni, sizeof slot);
    const Node& n = graph_.nodes.at(ni);
    throw Error(n.describe() + ": " + dev.check_message(graph_, n, int64_t(~slot[0]), int64_t(slot[1])));
  }
}

void Plan::run_nodes_on_device(const RunState& state) {
  DeviceBackend& dev = *opts_.device;
  dev.zero(device_checks_.get(), device_check_slots(graph_.nodes.size()) * 8);  // no bad data found yet
  auto device_ref = [&](ValueId id) -> TensorRef {
    if (id == kNoValue) return {};
    const Value& v = graph_.value(id);
    return TensorRef{device_ptr(id), v.dtype, &v.shape, shape_numel(v.shape)};
  };
  for (size_t ni = 0; ni < graph_.nodes.size(); ++ni) {
    if (view_[ni]) continue;  // its output is its input's bytes
    const Node& n = graph_.nodes[ni];
    auto t0 = std::chrono::steady_clock::now();
    KernelCtx ctx{n, {}, {}, state, int(ni)};
    if (on_device_[ni]) {
      for (ValueId in : n.inputs) ctx.inputs.push_back(device_ref(in));
      for (ValueId o : n.outputs) ctx.outputs.push_back(device_ref(o));
      dev.run(graph_, ctx);
    } else {  // the CPU kernel on host copies; its outputs go back to the device
      if (reads_async_[ni] && state.comm) state.comm->wait_all();  // a CPU fallback's asynchronous all-reduce
      for (ValueId in : n.inputs) ctx.inputs.push_back(ref(in));
      for (ValueId o : n.outputs) {  // marked valid on the host first: ref() must not fetch stale device bytes
        if (o != kNoValue) on_host_[size_t(o)] = 1;
        ctx.outputs.push_back(ref(o));
      }
      cpu_kernel(n.op)(ctx);
      if (is_collective(n.op) && state.comm) state.comm->wait_all();  // async all-reduces write later
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        const TensorRef& h = ctx.outputs[k];
        if (h.present() && h.numel) dev.to_device(device_ptr(n.outputs[k]), h.data, size_t(h.numel) * dtype_size(h.dtype));
      }
    }
    if (state.profile) {
      dev.synchronize();
      state.profile->add(n, ctx, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
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
