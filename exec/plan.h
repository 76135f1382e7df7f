// Plan: a graph compiled for a device: execution order, kernels, and a static memory plan that
// places every activation at an offset in one arena, reusing bytes of values no longer live; a
// reshape's output (Reshape, Flatten, Squeeze, Unsqueeze, Identity) is its input's bytes.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

class DeviceBackend;  // exec/device_backend.h
class Plan;

struct PlanOptions {
  // Where the plan runs: nullptr is the host CPU. Plans of one replica share their device.
  std::shared_ptr<DeviceBackend> device = nullptr;
  // On a device where every node has a kernel: the second run is recorded as one CUDA graph and
  // later runs replay it (inputs, RunScalars and the changed_on_host parameters are uploaded
  // before; Dropout reads the step there). False: every run launches node by node.
  bool device_graph = true;
  // Values (by name) that live in the caller's memory on the plan's device (host memory without
  // one) instead of the plan's: the trainer's flat buffers. A bound parameter is neither copied in
  // at construction nor uploaded per run (the fused optimizer updates it there); a bound graph
  // input is not fed (the caller wrote it there); a bound node output is written there and takes
  // no arena bytes. A node may write a bound value over the bytes of a bound input of its own only
  // when it reads each element before writing it (elementwise Add, an in-place all-reduce), and
  // nothing may read that input afterwards: the caller binds so. ref() on a device downloads.
  std::map<std::string, void*> bound = {};
  // On a device: the parameters (by name) the caller changes on the host between runs (the
  // trainer's BatchNorm running statistics): uploaded before every run. The other parameters that
  // are not bound (frozen ones) are uploaded before the first run only. Unset: every parameter
  // before every run (a caller that updates them on the host, as the evaluator).
  std::optional<std::set<std::string>> changed_on_host = {};
  // On a device: work queued on it after the nodes of every run (given the plan, for its
  // device_data), and recorded with them: the trainer's gradient copies and fused optimizer, so
  // that a replayed run is the whole training step. Nothing in it may copy to or from the host.
  std::function<void(Plan&)> after_run = {};
};

class Plan {
 public:
  Plan(Graph g, PlanOptions opts = {});

  const Graph& graph() const { return graph_; }
  // Bytes of the activation arena (the peak of live activations, after reuse).
  size_t arena_bytes() const { return arena_bytes_; }
  // Bytes of all activations if none shared memory: the plan's saving is the difference.
  size_t unshared_bytes() const { return unshared_bytes_; }

  // Feeds every graph input by name (dtype and shape must match exactly) and runs; the outputs
  // stay in the arena, read them with ref().
  void execute(const std::map<std::string, Tensor>& inputs, const RunState& state = {});
  // execute(), then copies of the graph outputs by name.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs, const RunState& state = {});

  // The tensor of a value after run(): parameters, constants and activations still in the arena.
  // On a device, the value is copied to the host first (once per run).
  TensorRef ref(ValueId id);

  // On a device: the ops of the nodes that run the CPU kernel for want of a device kernel, with
  // their node counts ("Softmax x2, ReduceSum x4"); empty when every node runs on the device.
  std::string host_ops() const;
  // On a device: bytes of device memory the plan holds (arena, parameters and constants).
  size_t device_bytes() const { return device_bytes_; }
  // The memory the plan holds where it runs: device_bytes() on a device, else arena_bytes().
  size_t memory_bytes() const { return opts_.device ? device_bytes_ : arena_bytes_; }
  // How many of the AllReduce nodes `nodes` (indices into graph().nodes) reduce one contiguous
  // range of memory where the plan runs (exec/kernel.h's all_reduce_span): one call each.
  int contiguous_all_reduces(const std::vector<int>& nodes);
  // On a device: where value id lives there (an activation, parameter or constant).
  void* device_data(ValueId id) const { return device_ptr(id); }
  // On a device: whether the plan replays a recorded graph now (see PlanOptions::device_graph).
  bool replays_graph() const { return recording_ != nullptr; }

 private:
  void execute_on_device(const std::map<std::string, Tensor>& inputs, const RunState& state);
  void run_nodes_on_device(const RunState& state);
  void* device_ptr(ValueId id) const;

  Graph graph_;
  PlanOptions opts_;
  std::vector<int64_t> offset_;  // per value: byte offset in the arena, -1 when not in the arena
  size_t arena_bytes_ = 0, unshared_bytes_ = 0;
  Tensor arena_;  // the activations; on a device, the host copies of those ref() or host kernels read

  // With a device: the arena's twin there, and the unbound parameters and constants at
  // data_offset_ in a second buffer (copied at construction; parameters again per changed_on_host).
  std::shared_ptr<void> device_arena_, device_data_;  // released through the device
  std::shared_ptr<void> device_scalars_;  // the run's RunScalars (RunState::device)
  std::shared_ptr<void> device_checks_;   // the kernels' check slots (RunState::device_checks)
  RunScalars scalars_;                    // their host copy, uploaded from here before each run
  int64_t recorded_batch_offset_ = 0;     // the recording's Scatter offsets are fixed in it
  std::vector<int64_t> data_offset_;  // per value with data: byte offset in device_data_, else -1
  std::vector<void*> bound_;          // per value: its place in PlanOptions::bound, or null
  std::map<ValueId, Tensor> shadow_;  // on a device: host copies of bound values that are not parameters
  std::vector<char> view_;            // per node: a view whose output shares its input's bytes (runs nothing)
  std::vector<char> reads_async_;     // per node: reads a value an asynchronous collective writes
  std::vector<int64_t> scatter_rows_;  // per value: a graph input only Scatters of these rows read, else -1
  std::vector<char> on_device_;       // per node: has a device kernel
  std::vector<char> on_host_;         // per value, during a run: the host arena holds its bytes
  size_t device_bytes_ = 0;
  bool capturable_ = false;           // device_graph and every node may be recorded
  bool talks_ = false;                // has collectives that exchange data with the other replicas
  int64_t device_runs_ = 0;
  std::shared_ptr<void> recording_;   // the recorded run, once made
};

}  // namespace onnxdp
