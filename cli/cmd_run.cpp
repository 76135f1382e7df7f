// `onnxdp run MODEL --data IN.npz --out OUT.npz [--batch-size N] [--train-mode] [--devices cpu:N]`:
// the forward pass over every sample of IN.npz, in inference mode unless --train-mode.
//
// Arrays named like graph inputs are fed (others ignored); axis 0 is the sample axis. Samples go
// through in batches of --batch-size; the last, smaller batch runs with its own shape (a second
// compiled plan). Outputs are concatenated along axis 0 and written under their graph output
// names. The data is checked against the model's declared inputs before anything is compiled.
//
// With several replicas (--devices cpu:N, mpirun) each batch is split over them as in training:
// the graph gets a Scatter on every batched input and an AllGather on every output, so replica 0
// holds the whole batch's outputs in sample order and alone writes the file.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "train/npz.h"
#include "train/outputs.h"
#include "train/run.h"

namespace onnxdp::cli {

namespace {

int run_command(const RunOptions& opt) {
  check_outputs_apart({{"--out", opt.out}}, {{"the model", opt.model}, {"--data", opt.data}});
  RunOutput r = run_model(opt);
  if (!r.writer) return 0;  // another process holds replica 0
  write_npz(opt.out, r.arrays, true);
  std::string summary;
  for (const auto& [name, t] : r.arrays) summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", name, shape_str(t.shape()));
  std::printf("onnxdp: ran %lld samples in %lld batches (%s mode%s); wrote %s to %s\n", (long long)r.samples,
              (long long)r.batches, opt.train_mode ? "training" : "inference",
              r.world > 1 ? fmt::format(", {} replicas", r.world).c_str() : "", summary.c_str(), opt.out.c_str());
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* sub = parent.add_subcommand("run", "Run the model forward over the samples of a .npz file");
  sub->add_option("model", opt->model, "The .onnx file")->required();
  sub->add_option("--data", opt->data, "Input .npz: one array per graph input, axis 0 = samples")->required();
  sub->add_option("--out", opt->out, "Output .npz: one array per graph output")->required();
  sub->add_option("--batch-size", opt->batch_size, "Samples per forward pass (default 64)");
  sub->add_option("--devices", opt->devices, "auto (every GPU, else the CPU), cpu, cpu:N (N replicas; under mpirun N per process), cuda (every GPU; under mpirun one per process) or cuda:0,1,...")
      ->capture_default_str();
  sub->add_flag("--train-mode", opt->train_mode,
                "Run the graph as exported (BatchNormalization batch statistics, live Dropout) instead of "
                "inference mode");
  sub->add_option("--mixed-precision", opt->mixed_precision,
                  "bf16 or fp16: MatMul, Gemm and convolutions on 16-bit copies of their float32 inputs, as train's option")
      ->check(CLI::IsMember({"no", "bf16", "fp16"}))
      ->capture_default_str();
  return Command{sub, [opt] { return run_command(*opt); }};
}

}  // namespace onnxdp::cli
