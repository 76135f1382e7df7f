// Plan: a graph compiled for a device: execution order, kernels, and a static memory plan that
// places every activation at an offset in one arena, reusing bytes of values no longer live.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

struct PlanOptions {
  int threads = 0;  // 0: OpenMP's default
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
  TensorRef ref(ValueId id);

 private:
  Graph graph_;
  PlanOptions opts_;
  std::vector<int64_t> offset_;  // per value: byte offset in the arena, -1 when not in the arena
  size_t arena_bytes_ = 0, unshared_bytes_ = 0;
  Tensor arena_;
};

}  // namespace onnxdp
