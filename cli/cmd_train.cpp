// `onnxdp train MODEL ...`: the training issue's CLI, names exactly as documented in docs/CLI.md.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "train/replicas.h"
#include "train/trainer.h"

namespace onnxdp::cli {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train an ONNX model on .npz, .npy or token-shard data");
  auto o = std::make_shared<TrainOptions>();
  auto loss = std::make_shared<std::string>("cross_entropy");
  auto optimizer = std::make_shared<std::string>("adamw");
  auto schedule = std::make_shared<std::string>("constant");
  cmd->add_option("model", o->model, "The .onnx model")->required();
  cmd->add_option("--data", o->data,
                  "Training data: .npz, .npy, a folder or 'glob*' of shards, llm.c token shards 'train_*.bin' "
                  "(default: the .npz beside the model)");
  cmd->add_option("--label", o->label, "Name of the target array in the data")->capture_default_str();
  cmd->add_option("--loss", *loss, "cross_entropy | mse | bce_with_logits | l1 | none")->capture_default_str();
  cmd->add_option("--class-axis", o->class_axis, "cross_entropy: axis of the classes (-1: last; 1: ONNX-style [N, C, ...])")
      ->capture_default_str();
  cmd->add_option("--optimizer", *optimizer, "sgd | momentum | adam | adamw")->capture_default_str();
  cmd->add_option("--lr,--learning-rate", o->optimizer.lr, "Learning rate (default: sgd/momentum 0.01, adam/adamw 0.001)");
  cmd->add_option("--momentum", o->optimizer.momentum, "Momentum of the momentum optimizer")->capture_default_str();
  cmd->add_flag("--nesterov", o->optimizer.nesterov, "Nesterov momentum");
  cmd->add_option("--weight-decay", o->optimizer.weight_decay, "Weight decay (default: adamw 0.01, others 0)");
  cmd->add_option("--max-grad-norm", o->optimizer.max_grad_norm, "Clip the global gradient norm (0: off)");
  cmd->add_option("--lr-schedule,--lr-scheduler-type", *schedule, "constant | linear | cosine")->capture_default_str();
  cmd->add_option("--warmup-steps", o->warmup_steps, "Linear warmup steps")->capture_default_str();
  auto* batch = cmd->add_option("--batch-size", o->batch_size, "Global batch size of one forward/backward pass")
                    ->capture_default_str();
  auto* per_device = cmd->add_option("--per-device-train-batch-size", o->per_device_batch_size,
                                     "Rows per replica instead of --batch-size (global batch = this x replicas)");
  batch->excludes(per_device);
  cmd->add_option("--grad-accum,--gradient-accumulation-steps", o->grad_accum,
                  "Micro-batches of --batch-size per optimizer step (gradients all-reduced after the last only)")
      ->capture_default_str();
  auto* epochs = cmd->add_option("--epochs,--num-train-epochs", o->epochs, "Epochs")->capture_default_str();
  auto* steps = cmd->add_option("--steps,--max-steps", o->steps, "Optimizer steps (cross epochs); instead of --epochs");
  epochs->excludes(steps);
  cmd->add_flag("--drop-last", o->drop_last, "Drop the last partial batch of each epoch");
  auto no_shuffle = std::make_shared<bool>(false);
  cmd->add_flag("--no-shuffle", *no_shuffle, "Keep the data's order");
  cmd->add_option("--seed", o->seed, "Seed for shuffling and dropout")->capture_default_str();
  cmd->add_option("--freeze", o->freeze, "Do not train initializers whose name matches this regex (repeatable)");
  cmd->add_option("--trainable", o->trainable,
                  "Train initializers whose name matches this regex although onnxdp takes them for constants (repeatable)");
  auto output_dir = std::make_shared<std::string>();
  cmd->add_option("--output-dir", *output_dir,
                  "Folder for the run's metrics.jsonl, tensorboard/, checkpoint-STEP/ and model.onnx "
                  "(default: runs/<model name>, or runs/<model name>-N when that holds an earlier run)");
  cmd->add_option("--report-to", o->report_to, "What the output folder gets: jsonl, tensorboard (comma-separated) or none")
      ->capture_default_str();
  cmd->add_option("--metrics", o->metrics, "Write one JSON object per step to this file (default: OUTPUT_DIR/metrics.jsonl)");
  cmd->add_option("--save", o->save, "Write the trained model to this .onnx file (default: OUTPUT_DIR/model.onnx)");
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir, "Write checkpoint-STEP/ folders here (default: OUTPUT_DIR)");
  cmd->add_option("--checkpoint-every,--save-steps", o->checkpoint_every, "Steps between checkpoints (0: at the end only)");
  cmd->add_flag("--resume", o->resume, "Continue from the newest complete checkpoint in --checkpoint-dir");
  cmd->add_option("--eval-data", o->eval_data, "Evaluate on this data after training (loss, accuracy); as --data");
  cmd->add_option("--eval-every,--eval-steps", o->eval_every, "Also evaluate every N steps (needs --eval-data)");
  cmd->add_option("--devices", o->devices, "auto (every GPU, else the CPU), cpu, cpu:N (N replicas; under mpirun N per process), cuda (every GPU; under mpirun one per process) or cuda:0,1,...")
      ->capture_default_str();
  cmd->add_option("--launch", o->launch,
                  "processes: one worker process per device, started by onnxdp (as torchrun would); threads: every "
                  "replica a thread of this process; auto: processes for several GPUs, else threads")
      ->check(CLI::IsMember({"auto", "threads", "processes"}))
      ->capture_default_str();
  cmd->add_flag("--local-bn", o->local_bn, "Per-replica BatchNormalization statistics (DDP's default; not equivalent to one device)");
  cmd->add_option("--grad-dtype", o->grad_dtype,
                  "bf16: all-reduce the gradients in bfloat16 (half the bytes, as DDP's bf16 compression hook); "
                  "fp32 (default): as computed")
      ->capture_default_str();
  cmd->add_option("--zero-stage", o->zero_stage,
                  "1: ZeRO-1, the optimizer state sharded over the replicas (each updates its part, then the "
                  "parameters are gathered); 0: every replica holds it all (default)");
  cmd->add_option("--bucket-mb", o->bucket_mb, "Gradient all-reduce bucket size in MB (the first bucket at most 1 MB)")
      ->capture_default_str();
  cmd->add_option("--comm-timeout", o->comm_timeout_s, "Seconds a replica waits for the others before failing")
      ->capture_default_str();
  cmd->add_option("--log-every,--logging-steps", o->log_every, "Steps between progress lines when output is not a terminal (0: ~10 a run)");
  cmd->add_flag("--quiet", o->quiet, "Print nothing but errors");
  auto no_cuda_graph = std::make_shared<bool>(false);
  cmd->add_flag("--no-cuda-graph", *no_cuda_graph,
                "On a GPU, launch every kernel of every step instead of replaying a recorded CUDA graph");
  cmd->add_flag("--tf32", o->tf32,
                "On a GPU, MatMul and Gemm on TF32 tensor cores (10-bit mantissa inputs, fp32 sums: ~1e-3 relative error)");
  cmd->add_option("--mixed-precision", o->mixed_precision,
                  "bf16 or fp16: MatMul, Gemm and convolutions on 16-bit copies of their float32 inputs (PyTorch's autocast), "
                  "float32 master weights; fp16 with dynamic loss scaling (PyTorch's GradScaler)")
      ->check(CLI::IsMember({"no", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--loss-scale-init", o->loss_scale.init,
                  "fp16: the first loss scale (GradScaler's init_scale), halved after a step whose gradients overflow")
      ->capture_default_str();
  cmd->add_option("--loss-scale-growth-interval", o->loss_scale.growth_interval,
                  "fp16: the loss scale doubles after this many steps in a row without overflow (GradScaler's growth_interval)")
      ->capture_default_str();
  cmd->add_flag("--profile", o->profile, "Time every kernel and print where a step's time goes (per op, GFLOP/s)");
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "Options from a TOML file (keys as the long option names; the command line wins)")
      ->configurable(false);
  auto action = [=]() {
    if (!config->empty()) apply_config_file(*cmd, *config);
    // Options whose unset value means "the default" (train/trainer.h): a typed value must be in
    // range, never taken for that default. The rest are checked by train().
    auto given = [&](const char* name) { return cmd->get_option(name)->count() > 0; };
    auto at_least = [](const char* name, double v, double lo, const char* range) {
      if (!(std::isfinite(v) && v >= lo)) fail("{} {}: expected {}", name, v, range);
    };
    if (given("--lr")) at_least("--lr", o->optimizer.lr, 0, "a finite number >= 0");
    if (given("--weight-decay")) at_least("--weight-decay", o->optimizer.weight_decay, 0, "a finite number >= 0");
    if (given("--per-device-train-batch-size"))
      if (o->per_device_batch_size < 1)
        fail("--per-device-train-batch-size must be at least 1 (got {})", o->per_device_batch_size);
    if (given("--steps") && o->steps < 1) fail("--steps must be at least 1 (got {})", o->steps);
    TrainOptions opts = *o;
    opts.output_dir = *output_dir;
    opts.config_file = *config;
    if (opts.output_dir.empty()) {  // a fresh folder under runs/ for every run that does not resume
      const std::string stem = std::filesystem::path(opts.model).stem().string();
      const std::string parent = std::filesystem::path(opts.model).parent_path().filename().string();
      const std::string name = stem == "model" && !parent.empty() ? parent : stem;
      opts.output_dir = "runs/" + name;
      for (int n = 2; !opts.resume && std::filesystem::exists(opts.output_dir) &&
                      !std::filesystem::is_empty(opts.output_dir); ++n)
        opts.output_dir = "runs/" + name + "-" + std::to_string(n);
    }
    // One process per device: this one only starts and watches the workers, which run this same
    // command line (with the output folder decided here, so that they all use the one folder).
    if (const int workers = worker_processes_for(opts.devices, opts.launch); workers > 1) {
      std::vector<std::string> argv = command_line();
      if (!given("--output-dir")) argv.insert(argv.end(), {"--output-dir", opts.output_dir});
      if (!opts.quiet)
        fmt::print("onnxdp: {} worker processes, one per device of --devices {} (--launch threads: one process)\n",
                   workers, opts.devices);
      std::fflush(stdout);
      return run_workers(workers, argv);
    }
    opts.shuffle = !*no_shuffle;
    opts.cuda_graph = !*no_cuda_graph;
    opts.loss = loss_kind_from_name(*loss);
    opts.optimizer.kind = optimizer_kind_from_name(*optimizer);
    opts.schedule = schedule_kind_from_name(*schedule);
    train(opts);
    return 0;
  };
  return Command{cmd, action};
}

}  // namespace onnxdp::cli
