// The CPU kernel interface. Every op of the op table has `void <Op>_forward(KernelCtx&)` in
// exec/cpu/<category>.cpp; the dispatch table in exec/cpu/dispatch.cpp derives from the op table.
#pragma once
#include <cstdint>
#include <vector>

#include "exec/run_scalars.h"
#include "graph/graph.h"

namespace onnxdp {

// A view of a tensor living in the plan's arena (or a parameter / constant buffer).
struct TensorRef {
  void* data = nullptr;  // nullptr for an absent optional input or output
  DType dtype = DType::f32;
  const Shape* shape = nullptr;
  int64_t numel = 0;

  bool present() const { return shape != nullptr; }
  int rank() const { return int(shape->size()); }
  int64_t dim(int k) const { return (*shape)[size_t(k)]; }
  template <class T> T* as() const { return static_cast<T*>(data); }
};

class Communicator;  // parallel/communicator.h
struct Profile;       // exec/profile.h

// Per-run state a kernel may need (Dropout's counter-based generator is keyed by these).
// --zero-stage 1: replica r owns floats [bounds[r], bounds[r + 1]) of the flat gradient buffer
// starting at `base` (exec/flat_state.h); a ReduceScatter over a range of that buffer gives each
// owner the sums of its part of the range.
struct FlatShards {
  const float* base = nullptr;
  std::vector<int64_t> bounds;  // world + 1 offsets, in floats from base
};

struct RunState {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t batch_offset = 0;       // index of this replica's first row in the global batch (Scatter)
  int64_t sample_offset = 0;      // index of the global batch's first row in the step (micro-batches, run's batches)
  Communicator* comm = nullptr;   // this replica's world; nullptr: a world of one
  const FlatShards* shards = nullptr;  // --zero-stage 1 (ReduceScatter); nullptr: none
  Profile* profile = nullptr;     // when set, every kernel call is timed into it
  const RunScalars* device = nullptr;  // on a device: seed, step and offsets above, in device memory
  unsigned long long* device_checks = nullptr;  // on a device: the plan's check slots (exec/run_scalars.h)
  // This run of a plan on the CPU, numbered from 1 in the process (Plan::execute); 0 outside one.
  // With a value's id it names the value's contents (ValueTag): a kernel may keep work derived
  // from an input for a later kernel of the same run that reads the same value.
  uint64_t serial = 0;
};

// A value of one plan run (RunState::serial, ValueId): the same tag, the same contents. Unknown
// (run 0) outside a plan.
struct ValueTag {
  uint64_t run = 0;
  int64_t value = -1;
  bool known() const { return run != 0 && value >= 0; }
  bool operator==(const ValueTag&) const = default;
};

struct KernelCtx {
  const Node& node;
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> outputs;
  const RunState& run;
  int index = -1;  // the node's position in its plan (its device check slots), -1 outside a plan

  const TensorRef& in(int k) const { return inputs.at(size_t(k)); }
  const TensorRef& out(int k) const { return outputs.at(size_t(k)); }
  bool has_in(int k) const { return k < int(inputs.size()) && inputs[size_t(k)].present(); }
  bool has_out(int k) const { return k < int(outputs.size()) && outputs[size_t(k)].present(); }
  ValueTag in_tag(int k) const { return {run.serial, k < int(node.inputs.size()) ? int64_t(node.inputs[size_t(k)]) : -1}; }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(node.describe() + ": " + fmt::format(f, std::forward<Args>(args)...));
  }
};

// Every value of a plan starts at a multiple of this many bytes from its buffer's start (buffers
// themselves are at least this aligned); callers binding values (PlanOptions::bound) keep to it.
inline constexpr size_t kPlanAlign = 64;

// When an all-reduce's outputs are of one float dtype and each starts at the first multiple of
// kPlanAlign bytes after the previous one's end (a bucket of the trainer's flat gradient buffer,
// laid out in bucket order): the element count of one all-reduce over [out(0), end of the last),
// the alignment gaps included; else 0 (one all-reduce per tensor).
inline int64_t all_reduce_span(const KernelCtx& c) {
  const DType t = c.out(0).dtype;
  if (!(t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16)) return 0;
  const size_t es = dtype_size(t);
  auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  const uintptr_t start = addr(c.out(0).data);
  if (start % kPlanAlign) return 0;
  uintptr_t end = start;
  for (const TensorRef& y : c.outputs) {
    if (y.dtype != t || addr(y.data) != (end + kPlanAlign - 1) / kPlanAlign * kPlanAlign) return 0;
    end = addr(y.data) + size_t(y.numel) * es;
  }
  return int64_t((end - start) / es);
}

using Kernel = void (*)(KernelCtx&);
Kernel cpu_kernel(Op op);

// Runs one node's CPU kernel on owned tensors (constant folding, tests). Outputs are allocated
// from the shapes the node's output values carry in g.
std::vector<Tensor> run_node(const Graph& g, const Node& n, const std::vector<const Tensor*>& inputs,
                             const RunState& run = {});

}  // namespace onnxdp
