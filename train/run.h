// `onnxdp run`'s engine: the forward pass over every sample of a .npz file, in inference mode
// unless train_mode (cli/cmd_run.cpp parses the options and writes the outputs).
//
// Arrays named like graph inputs are fed (others ignored); axis 0 is the sample axis. Samples go
// through in batches of batch_size; the last, smaller batch runs with its own shape (a second
// compiled plan). Outputs are concatenated along axis 0 under their graph output names. The data
// is checked against the model's declared inputs before anything is compiled.
//
// With several replicas (--devices cpu:N, mpirun) each batch is split over them as in training:
// compile()'s infer mode puts a Scatter on every batched input and an AllGather on every output,
// so replica 0 holds the whole batch's outputs in sample order.
#pragma once
#include <map>
#include <string>

#include "graph/tensor.h"

namespace onnxdp {

struct RunOptions {
  std::string model, data, out;
  int64_t batch_size = 64;
  bool train_mode = false;
  std::string devices = "auto";
  std::string mixed_precision = "no";  // bf16 / fp16: MatMul / Gemm / Conv on 16-bit copies (graph/passes/autocast.h)
};

struct RunOutput {
  std::map<std::string, Tensor> arrays;  // per graph output, all samples (on the process holding replica 0)
  int64_t samples = 0, batches = 0;
  int world = 1;
  bool writer = false;  // this process holds replica 0: arrays are filled, it writes them
};

RunOutput run_model(const RunOptions& opt);

}  // namespace onnxdp
