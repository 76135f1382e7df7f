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
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "exec/device.h"
#include "exec/device_backend.h"
#include "exec/fold.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "train/trainer.h"
#include "exec/plan.h"
#include "graph/passes/autocast.h"
#include "graph/passes/fold_transposes.h"
#include "graph/passes/fuse_gelu.h"
#include "graph/passes/fuse_epilogues.h"
#include "graph/passes/inference_mode.h"
#include "importer/onnx_io.h"
#include "train/npz.h"
#include "train/pipeline.h"

namespace onnxdp::cli {

namespace {

struct RunOptions {
  std::string model, data, out;
  int64_t batch_size = 64;
  bool train_mode = false;
  std::string devices = "auto";
  std::string mixed_precision = "no";  // bf16 / fp16: MatMul / Gemm / Conv on 16-bit copies (graph/passes/autocast.h)
};

// A graph input as the model declares it, and the array that feeds it.
struct FedInput {
  std::string name;
  DType dtype = DType::f32;
  const Tensor* array = nullptr;
  bool batched = true;       // axis 0 is the sample axis (false for 0-d inputs: fed whole)
  int64_t fixed_batch = -1;  // the model fixes dim 0 to this size; -1 when symbolic
};

std::string names_of(const std::map<std::string, Tensor>& arrays) {
  std::string s;
  for (const auto& [name, t] : arrays) s += (s.empty() ? "" : ", ") + name;
  return s.empty() ? "none" : s;
}

std::string declared_shape(const onnx::TensorShapeProto& shape) {
  std::string s = "[";
  for (int k = 0; k < shape.dim_size(); ++k) {
    const auto& d = shape.dim(k);
    s += k ? ", " : "";
    s += d.has_dim_value() ? std::to_string(d.dim_value()) : d.dim_param().empty() ? "?" : d.dim_param();
  }
  return s + "]";
}

// Matches the data against the model's graph inputs; every problem names the array.
std::vector<FedInput> match_inputs(const onnx::GraphProto& gp, const std::map<std::string, Tensor>& data,
                                   const RunOptions& opt) {
  std::map<std::string, bool> is_init;
  for (const auto& t : gp.initializer()) is_init[t.name()] = true;
  std::vector<FedInput> fed;
  std::map<std::string, std::pair<int64_t, std::string>> sym;  // dim_param -> size, and who set it
  for (const auto& vi : gp.input()) {
    if (is_init.count(vi.name())) continue;
    FedInput f;
    f.name = vi.name();
    auto it = data.find(f.name);
    if (it == data.end())
      fail("the model's input '{}' has no array in '{}' (arrays there: {})", f.name, opt.data, names_of(data));
    f.array = &it->second;
    const Tensor& a = *f.array;
    if (!vi.type().has_tensor_type()) fail("the model's input '{}' is not a tensor; onnxdp feeds tensors only", f.name);
    const auto& tt = vi.type().tensor_type();
    if (!dtype_from_onnx(tt.elem_type(), &f.dtype))
      fail("the model's input '{}' has element type {}, which onnxdp does not support", f.name,
           onnx_type_name(tt.elem_type()));
    if (a.dtype() != f.dtype)
      fail("array '{}' in '{}' is {}, but the model's input '{}' is {}", f.name, opt.data, dtype_name(a.dtype()), f.name,
           dtype_name(f.dtype));
    if (tt.has_shape()) {
      const auto& shape = tt.shape();
      std::string decl = declared_shape(shape);
      if (shape.dim_size() != a.rank())
        fail("array '{}' in '{}' has shape {} (rank {}), but the model's input '{}' is {} (rank {})", f.name, opt.data,
             shape_str(a.shape()), a.rank(), f.name, decl, shape.dim_size());
      for (int k = 0; k < shape.dim_size(); ++k) {
        const auto& d = shape.dim(k);
        if (d.has_dim_value()) {
          if (k == 0) {
            if (d.dim_value() < 1) fail("the model's input '{}' is {}: its batch dim is {}", f.name, decl, d.dim_value());
            f.fixed_batch = d.dim_value();
            continue;
          }
          if (d.dim_value() != a.shape()[size_t(k)])
            fail("array '{}' in '{}' has shape {}, but the model's input '{}' is {}: dim {} must be {}", f.name,
                 opt.data, shape_str(a.shape()), f.name, decl, k, d.dim_value());
        } else if (k > 0 && !d.dim_param().empty()) {
          // One symbolic name is one size across all inputs.
          auto [s, fresh] = sym.try_emplace(d.dim_param(), a.shape()[size_t(k)], f.name);
          if (!fresh && s->second.first != a.shape()[size_t(k)])
            fail("array '{}' in '{}' has shape {}: its dim {} ('{}') is {}, but array '{}' gives '{}' = {}", f.name,
                 opt.data, shape_str(a.shape()), k, d.dim_param(), a.shape()[size_t(k)], s->second.second,
                 d.dim_param(), s->second.first);
        }
      }
    }
    f.batched = a.rank() > 0;
    fed.push_back(f);
  }
  return fed;
}

// Rows [start, start + count) of a along axis 0.
Tensor rows(const Tensor& a, int64_t start, int64_t count) {
  Shape s = a.shape();
  size_t row_bytes = s[0] ? a.nbytes() / size_t(s[0]) : 0;
  s[0] = count;
  Tensor t(a.dtype(), s);
  if (t.nbytes()) std::memcpy(t.data(), static_cast<const uint8_t*>(a.data()) + size_t(start) * row_bytes, t.nbytes());
  return t;
}

// The graph for one batch size, in inference mode unless asked otherwise; in a world of several
// replicas, replica `rank`'s SPMD graph for its shard of the batch (Scatter in, AllGather out).
Plan compile_for(const onnx::ModelProto& m, const std::string& model_dir, const std::vector<FedInput>& fed,
                 int64_t batch, const RunOptions& opt, std::shared_ptr<DeviceBackend> device, int world = 1,
                 int rank = 0) {
  const int64_t rows = shard_rows(batch, world)[size_t(rank)];
  ImportOptions io;
  io.batch_size = rows;
  std::vector<std::string> batched;
  for (const FedInput& f : fed) {
    Shape s = f.array->shape();
    if (f.batched) {
      s[0] = rows;
      batched.push_back(f.name);
    }
    io.input_shapes[f.name] = s;
  }
  Graph g = load_graph(m, model_dir, io);
  if (!opt.train_mode) {
    inference_mode(g);
    remove_dead_nodes(g);
  }
  autocast(g, opt.mixed_precision);
  if (world > 1) {
    DataParallelOptions dp;
    dp.world_size = world;
    dp.replica = rank;
    dp.global_batch = batch;
    data_parallel_forward(g, dp, batched);
    for (ValueId& out : g.outputs) {
      const Value& v = g.value(out);
      if (v.shape.empty() || v.shape[0] != rows)
        fail("output '{}' has shape {} for {} of the batch's {} samples: its axis 0 is not the samples, so the "
             "replicas' parts cannot be gathered; run it with --devices cpu",
             v.name, shape_str(v.shape), rows, batch);
      if (v.kind != ValueKind::activation)
        fail("output '{}' is a graph input or initializer, not computed: run it with --devices cpu", v.name);
      const std::string name = v.name;
      g.value(out).name = name + "/shard";  // the gathered value keeps the output's name
      int n = g.add_node(Op::AllGather, "dp/gather/" + name, {out}, {name}, {{"rows", Attr(batch)}});
      out = g.nodes[size_t(n)].outputs[0];
    }
  }
  fuse_gelu(g);
  fuse_epilogues(g);
  fold_transposes(g);
  verify(g);
  return Plan(std::move(g), PlanOptions{.device = std::move(device)});
}

int run_command(const RunOptions& opt) {
  if (opt.batch_size < 1) fail("--batch-size must be at least 1 (got {})", opt.batch_size);
  std::map<std::string, Tensor> data = read_npz(opt.data);
  onnx::ModelProto m = load_model_proto(opt.model);
  std::string model_dir = std::filesystem::path(opt.model).parent_path().string();
  std::vector<FedInput> fed = match_inputs(m.graph(), data, opt);

  // The number of samples: axis 0 of every batched input, all equal.
  int64_t n = -1;
  const FedInput* first = nullptr;
  int64_t batch = opt.batch_size;
  for (const FedInput& f : fed) {
    if (!f.batched) continue;
    int64_t rows_f = f.array->shape()[0];
    if (n < 0) {
      n = rows_f;
      first = &f;
    } else if (rows_f != n) {
      fail("array '{}' in '{}' has {} samples (axis 0), but array '{}' has {}", f.name, opt.data, rows_f, first->name, n);
    }
    if (f.fixed_batch >= 0) batch = f.fixed_batch;
  }
  if (n < 0) n = 1, batch = 1;  // no batched inputs: one run
  if (n == 0) fail("the arrays in '{}' hold no samples (axis 0 is 0)", opt.data);
  for (const FedInput& f : fed)
    if (f.batched && f.fixed_batch >= 0 && (f.fixed_batch != batch || n % batch != 0))
      fail("the model's input '{}' has a fixed batch of {}; array '{}' with {} samples does not split into it", f.name,
           f.fixed_batch, f.name, n);
  batch = std::min(batch, n);

  const DeviceList devices = parse_devices(opt.devices, local_rank_on_host(), processes_on_host());
  const int local = int(devices.index.size());
  CommWorld world;  // empty: one replica, no collectives
  if (local > 1 || detect_launch().launched) world = make_world(local);
  const int world_size = world.empty() ? 1 : world[0]->size();
  // The batches: (first sample, count). Split over replicas, each needs a sample: a last batch
  // smaller than the world joins the one before it.
  std::vector<std::pair<int64_t, int64_t>> batches;
  for (int64_t start = 0; start < n; start += batch) batches.emplace_back(start, std::min(batch, n - start));
  if (batches.size() > 1 && batches.back().second < world_size) {
    batches[batches.size() - 2].second += batches.back().second;
    batches.pop_back();
  }
  if (batches.back().second < world_size)
    fail("{} samples cannot be split over {} replicas (each needs one): run with fewer --devices", n, world_size);
  const int64_t num_batches = int64_t(batches.size());

  // One replica's pass over every batch; replica 0 keeps the (gathered) outputs in `parts`.
  std::map<std::string, std::vector<Tensor>> parts;
  auto run_replica = [&](Communicator* comm, int local_index) {
    const int rank = comm ? comm->rank() : 0;
    std::shared_ptr<DeviceBackend> device;
    if (devices.kind != DeviceKind::cpu) {
      device = make_device_backend(devices.kind, devices.index[size_t(local_index)]);
      device->connect(comm);
    }
    std::map<int64_t, std::unique_ptr<Plan>> plans;
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto [start, count] = batches[b];
      std::unique_ptr<Plan>& plan = plans[count];
      if (!plan) plan = std::make_unique<Plan>(compile_for(m, model_dir, fed, count, opt, device, world_size, rank));
      std::map<std::string, Tensor> inputs;
      for (const FedInput& f : fed) inputs[f.name] = f.batched ? rows(*f.array, start, count) : *f.array;
      RunState state;
      state.step = uint64_t(b);
      state.sample_offset = start;
      state.batch_offset = shard_offset(count, world_size, rank);
      state.comm = comm;
      std::map<std::string, Tensor> outs = plan->run(inputs, state);
      for (auto& [name, t] : outs) {
        if (batches.size() > 1 && (t.rank() == 0 || t.shape()[0] != count))
          fail("output '{}' has shape {} for a batch of {} samples: its axis 0 is not the samples, so batches cannot be "
               "concatenated; run with --batch-size {} to process all samples at once",
               name, shape_str(t.shape()), count, n);
        if (rank == 0) parts[name].push_back(std::move(t));
      }
    }
    if (comm) comm->leave();
  };

  bool writer = true;  // this process holds replica 0, which writes the outputs
  const int host_processes = processes_on_host();
  if (devices.kind == DeviceKind::cpu) prepare_cpu_replicas(local, host_processes);
  if (world.empty()) {
    run_replica(nullptr, 0);
  } else {
    writer = world[0]->rank() == 0;
    run_replicas(world, [&](Communicator& c) {
      use_replica_threads(local, host_processes);
      size_t k = 0;
      while (world[k].get() != &c) ++k;
      run_replica(&c, int(k));
    });
  }
  if (!writer) return 0;

  std::map<std::string, Tensor> result;
  for (auto& [name, ps] : parts) {
    if (ps.size() == 1) {
      result[name] = std::move(ps[0]);
      continue;
    }
    Shape s = ps[0].shape();
    s[0] = n;
    Tensor all(ps[0].dtype(), s);
    size_t off = 0;
    for (const Tensor& p : ps) {
      if (p.nbytes()) std::memcpy(static_cast<uint8_t*>(all.data()) + off, p.data(), p.nbytes());
      off += p.nbytes();
    }
    result[name] = std::move(all);
  }
  write_npz(opt.out, result, true);
  std::string summary;
  for (const auto& [name, t] : result) summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", name, shape_str(t.shape()));
  std::printf("onnxdp: ran %lld samples in %lld batches (%s mode%s); wrote %s to %s\n", (long long)n,
              (long long)num_batches, opt.train_mode ? "training" : "inference",
              world_size > 1 ? fmt::format(", {} replicas", world_size).c_str() : "", summary.c_str(), opt.out.c_str());
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
