// Training: every replica (a thread per CPU replica or GPU, an MPI rank) runs the same step loop
// over its shard of each batch: data from .npz, the training graph from compile() (forward, loss,
// backward, collectives), one Plan per micro-batch size, the fused optimizer over the flat state
// (exec/flat_state.h), metrics, evaluation, checkpoints and the trained model out (train/trainer.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "compile/compile.h"
#include "graph/tensor.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"

namespace onnxdp {

struct TrainOptions {
  std::string model;
  std::string data;            // empty: the .npz beside the model (model.npz for model.onnx)
  std::string label = "label";
  LossKind loss = LossKind::cross_entropy;
  int64_t class_axis = -1;
  OptimizerOptions optimizer;
  ScheduleKind schedule = ScheduleKind::constant;
  int64_t warmup_steps = 0;
  int64_t batch_size = 32;     // the global batch of one forward/backward pass
  int64_t per_device_batch_size = 0;  // > 0: instead of batch_size, this many rows per replica
  int64_t grad_accum = 1;      // micro-batches of batch_size per optimizer step; all-reduce on the last only
  int64_t epochs = 1;
  int64_t steps = 0;           // > 0: this many optimizer steps, crossing epochs
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  std::vector<std::string> freeze;     // regexes over initializer names: do not train
  std::vector<std::string> trainable;  // regexes: train although a rule says constant (importer/trainability.h)
  // One place for a run's files: metrics.jsonl, tensorboard/, checkpoint-STEP/ and model.onnx go
  // there unless --metrics, --checkpoint-dir or --save put them elsewhere. Empty: only what those
  // three name is written (the CLI's default is runs/<model name>, see cli/cmd_train.cpp).
  std::string output_dir;
  std::string report_to = "jsonl,tensorboard";  // what output_dir gets: jsonl, tensorboard, none
  std::string tensorboard_dir;  // TensorBoard event files (output_dir/tensorboard when report_to has it)
  std::string metrics;         // jsonl file, one object per step
  std::string save;            // trained .onnx out
  std::string eval_data;       // .npz evaluated after training (loss, accuracy)
  std::string config_file;     // --config's TOML: an input, never overwritten by an output
  int64_t eval_every = 0;      // > 0: also evaluate every this many steps (needs eval_data)
  std::string checkpoint_dir;  // checkpoint-STEP/ folders go here
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: only at the end, when a dir is given)
  bool resume = false;         // continue from the newest complete checkpoint in checkpoint_dir
  bool quiet = false;
  std::string devices = "auto";  // --devices: exec/device_backend.h's parse_devices (auto, cpu, cpu:N, cuda, cuda:i,j, cuda-emulated)
  std::string launch = "auto";  // --launch: worker processes or threads (train/replicas.h's worker_processes_for)
  bool local_bn = false;        // per-replica BatchNormalization statistics (DDP's default)
  int zero_stage = 0;           // 1: ZeRO-1, the optimizer state sharded over the replicas
  std::string grad_dtype = "fp32";  // bf16: gradients all-reduced in bfloat16 (DDP's bf16 compression hook)
  double bucket_mb = 25;        // gradient all-reduce bucket size (the first is 1 MB)
  double comm_timeout_s = 300;  // a collective waiting longer fails (a peer died or diverged)
  int64_t log_every = 0;       // 0: about 10 lines per run (when output is not a terminal)
  bool progress_bar = true;    // a redrawn status line when stdout is a terminal
  bool profile = false;        // time every kernel of replica 0 and print where the step's time goes
  bool tf32 = false;            // on a GPU: MatMul / Gemm on TF32 tensor cores (as torch.backends.cuda.matmul.allow_tf32)
  std::string mixed_precision = "no";  // "bf16" / "fp16": MatMul / Gemm / Conv on 16-bit copies, float32 master weights (graph/passes/autocast.h)
  LossScalerOptions loss_scale;  // fp16's dynamic loss scaling (train/loss_scaler.h)
  bool cuda_graph = true;      // on a GPU: replay each plan's run as one recorded CUDA graph where it can
};

struct TrainResult {
  std::vector<float> losses;   // per step run by this call
  std::vector<float> grad_norms;  // per step: the global gradient norm (metrics' grad_norm)
  int64_t first_step = 1;      // > 1 when resumed
  int64_t steps = 0;
  double samples_per_s = 0;
  std::vector<std::string> trainable, frozen;
  bool evaluated = false;
  double eval_loss = 0, eval_accuracy = -1;  // accuracy < 0: not a classifier
  double comm_wait_ms = 0;     // summed over the steps
  size_t peak_bytes = 0;       // this replica's largest plan: activation arena + parameters, gradients, optimizer state
  size_t device_bytes = 0;     // on a GPU: device memory of this replica's plans (0 on the CPU)
  size_t optimizer_state_bytes = 0;  // this replica's optimizer moments (1/N of them with --zero-stage 1)
  std::vector<size_t> replica_bytes;  // every replica's peak_bytes, in replica order (a world of one: empty)
  int contiguous_buckets = 0;  // gradient buckets laid out as one range of the flat buffer: one all-reduce call each
  int replayed_plans = 0;      // on a GPU: this replica's plans that replay a recorded CUDA graph
  std::string saved_model, last_checkpoint, metrics_file, tensorboard_dir;  // where the lead's files went
  int world_size = 1;
  std::vector<size_t> bucket_bytes;  // the gradient buckets of the full-batch plan
  std::map<std::string, Tensor> parameters;  // final trained values (replica 0), by initializer name
  // --mixed-precision fp16: the loss scale after each step run by this call (as GradScaler's
  // get_scale() after update()), and how many steps were skipped for non-finite gradients.
  std::vector<float> loss_scales;
  int64_t skipped_steps = 0;
  int64_t batches_read_ahead = 0;  // micro-batches whose rows the background reader had read (all but the first)
};

TrainResult train(const TrainOptions& options);

// The training graph replica `replica` of a world of `world` runs (compile()'s train mode: model,
// loss, --freeze, --trainable, --batch-size, --local-bn, --bucket-mb, --mixed-precision from
// options; input shapes from the model, symbolic leading dims = the replica's rows, labels i64 for
// cross_entropy and f32 otherwise): what `onnxdp graph --train` and `inspect --train` show. With
// --grad-accum K > 1 it is a micro-batch's graph (inputs grad_accum/* carry the step's sums);
// `last_micro` false gives the graph of the micro-batches before the last: no gradient buckets.
// `cpu` false: the graph a device replica runs (CompileOptions::cpu: without the CPU-only passes).
using TrainingGraph = Compiled;
TrainingGraph training_graph(const TrainOptions& options, int world, int replica, bool last_micro = true,
                             bool cpu = true);
// How many replicas --devices asks for in this process (cpu: 1, cpu:N: N, cuda: one per GPU).
int local_replicas(const std::string& devices);

}  // namespace onnxdp
