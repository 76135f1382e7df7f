// Plan: a graph compiled for a device: execution order, kernels, and a static memory plan that
// places every activation at an offset in one arena, reusing bytes of values no longer live.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

class DeviceBackend;  // exec/device_backend.h

struct PlanOptions {
  int threads = 0;  // 0: OpenMP's default
  // Where the plan runs: nullptr is the host CPU. Plans of one replica share their device.
  std::shared_ptr<DeviceBackend> device;
  // On a device where every node has a kernel and none depends on the step (Dropout): the second
  // run is recorded as one CUDA graph and later runs replay it (the inputs and parameters are
  // uploaded before). False: every run launches node by node.
  bool device_graph = true;
  // On a device: parameters (by name) that live in the caller's device memory instead of the
  // plan's (the trainer's flat parameter buffer, updated there by the fused optimizer): neither
  // copied in at construction nor uploaded per run. ref() on one downloads it into its host data.
  std::map<std::string, void*> device_parameters = {};
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

  // With a device: the arena's twin there, and the parameters and constants at data_offset_ in
  // a second buffer (parameters are uploaded every run: the optimizer updates them on the host).
  std::shared_ptr<void> device_arena_, device_data_;  // released through the device
  std::vector<int64_t> data_offset_;  // per value with data: byte offset in device_data_, else -1
  std::vector<void*> bound_;          // per value: its place in PlanOptions::device_parameters, or null
  std::vector<char> on_device_;       // per node: has a device kernel
  std::vector<char> on_host_;         // per value, during a run: the host arena holds its bytes
  size_t device_bytes_ = 0;
  bool capturable_ = false;           // device_graph and every node may be recorded
  int64_t device_runs_ = 0;
  std::shared_ptr<void> recording_;   // the recorded run, once made
};

}  // namespace onnxdp
