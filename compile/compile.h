// One compile for every command: a model, what it is compiled for (train, eval, infer), the world
// and this replica's rank, and the options -> the graph that runs, with what the caller needs to
// read from it. The trainer's step plans, its evaluator, `onnxdp run` and `onnxdp graph` all come
// from here; the passes run in the order of one list, `compile_passes()` in compile/compile.cpp,
// each with the modes it applies to. The Plan for the graph is the caller's (exec/plan.h): only it
// knows where the parameters and gradients live (the trainer's flat state).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/passes/loss.h"
#include "importer/importer.h"
#include "parallel/data_parallel.h"

namespace onnxdp {

enum class CompileMode {
  train,  // loss, backward, the data-parallel rewrite, gradient buckets: one step of training
  eval,   // inference mode, the loss beside the model's first output: held-out evaluation
  infer,  // the model's outputs (inference mode unless train_mode), gathered over replicas: `run`
};

struct CompileOptions {
  CompileMode mode = CompileMode::infer;
  int world = 1, rank = 0;
  // Rows of the whole batch this pass computes over all replicas (a micro-batch with --grad-accum);
  // the replica's graph holds shard_rows(batch, world)[rank] of them.
  int64_t batch = 1;
  // Import at the shard's rows: batch_size and input_shapes (axis 0 = the shard's rows).
  ImportOptions import;
  // The graph inputs split over the replicas by rows (the data-parallel pass Scatters them).
  std::vector<std::string> batch_inputs;
  std::string mixed_precision = "no";  // bf16 / fp16: graph/passes/autocast.h
  // train and eval: the loss (kind none: the model's first output is the loss already).
  LossOptions loss;
  // infer: run the graph as exported (BatchNormalization batch statistics, live Dropout).
  bool train_mode = false;
  // train: what trains (importer/trainability.h), BatchNormalization and gradient buckets.
  std::vector<std::string> freeze, trainable;
  bool local_bn = false;
  double bucket_mb = 25;
  int zero_stage = 0;  // 1: gradient buckets are ReduceScatter nodes (parallel/data_parallel.h)
  DType grad_dtype = DType::f32;  // bf16: gradients all-reduced in bfloat16
  int64_t step_rows = 0;    // rows of the whole optimizer step (0: batch); > batch with --grad-accum
  bool accumulate = false;  // --grad-accum > 1: inputs grad_accum/* carry the step's sums so far
  bool sync = true;         // the step's last micro-batch: gradient buckets all-reduce the sums
  // The graph runs on the CPU backend (no DeviceBackend): passes may use what only the CPU
  // kernels take (fuse_attention, fuse_masked_softmax). Callers that run the graph on a device
  // set it false.
  bool cpu = true;
};

// --mixed-precision fp16 in train mode: the graph's scalar input that seeds backward (the loss scale).
inline constexpr const char* kLossScaleInput = "amp/loss_scale";

struct Compiled {
  Graph g;
  // train: the step's loss (all-reduced over the world on the last micro-batch); eval: the mean
  // loss over the batch; infer: none.
  ValueId loss = kNoValue;
  ValueId prediction = kNoValue;  // train, eval: the model's first output, which the loss reads
  // train: the gradient per trainable parameter (all-reduced when world > 1), in `trainable`'s order.
  std::vector<ValueId> grads;
  std::vector<std::string> trainable, frozen;
  std::map<std::string, std::string> frozen_reason;  // frozen name -> why (importer/trainability.h)
  std::vector<size_t> order;   // positions in trainable in the order backward produces their gradients
  std::vector<Bucket> buckets;
  std::vector<std::pair<ValueId, std::string>> running_stats;  // BatchNormalization outputs -> initializer
  std::vector<std::string> passes;  // the passes that made g, in order (`onnxdp graph --passes`)
};

// The graph replica `o.rank` of `o.world` runs. Outputs: train: the loss, the gradients, then the
// running statistics; eval: prediction, loss; infer: the model's outputs under their own names.
Compiled compile(const onnx::ModelProto& m, const std::string& model_dir, const CompileOptions& o);

// The import stage alone: parse, import, infer shapes with constant folding (the CPU kernels),
// drop dead nodes, verify. The first pass of compile; tests use it for one-op graphs.
Graph load_graph(const std::string& model_path, const ImportOptions& options = {});
// The same from a parsed model (model_dir resolves external data).
Graph load_graph(const onnx::ModelProto& m, const std::string& model_dir, const ImportOptions& options = {});

}  // namespace onnxdp
