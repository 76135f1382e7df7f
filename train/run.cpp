#include "train/run.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "compile/compile.h"
#include "exec/plan.h"
#include "importer/onnx_io.h"
#include "train/npz.h"
#include "train/replicas.h"

namespace onnxdp {

namespace {

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

// The plan for one batch size: compile()'s infer mode (inference mode unless --train-mode); in a
// world of several replicas, replica `rank`'s SPMD graph for its shard of the batch (Scatter in,
// AllGather out).
std::unique_ptr<Plan> compile_for(const onnx::ModelProto& m, const std::string& model_dir, const std::vector<FedInput>& fed,
                 int64_t batch, const RunOptions& opt, std::shared_ptr<DeviceBackend> device, int world = 1,
                 int rank = 0) {
  const int64_t rows = shard_rows(batch, world)[size_t(rank)];
  CompileOptions co;
  co.mode = CompileMode::infer;
  co.world = world;
  co.rank = rank;
  co.batch = batch;
  co.import.batch_size = rows;
  co.train_mode = opt.train_mode;
  co.mixed_precision = opt.mixed_precision;
  co.cpu = device == nullptr;
  for (const FedInput& f : fed) {
    Shape s = f.array->shape();
    if (f.batched) {
      s[0] = rows;
      co.batch_inputs.push_back(f.name);
    }
    co.import.input_shapes[f.name] = s;
  }
  return std::make_unique<Plan>(compile(m, model_dir, co).g, PlanOptions{.device = std::move(device)});
}

// The number of samples (axis 0 of every batched input, all equal) and the batch to run them in
// (--batch-size, or the batch a model input fixes).
std::pair<int64_t, int64_t> samples_and_batch(const std::vector<FedInput>& fed, const RunOptions& opt) {
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
  return {n, std::min(batch, n)};
}

// The batches: (first sample, count). Split over replicas, each needs a sample: a last batch
// smaller than the world joins the one before it.
std::vector<std::pair<int64_t, int64_t>> split_batches(int64_t n, int64_t batch, int world) {
  std::vector<std::pair<int64_t, int64_t>> batches;
  for (int64_t start = 0; start < n; start += batch) batches.emplace_back(start, std::min(batch, n - start));
  if (batches.size() > 1 && batches.back().second < world) {
    batches[batches.size() - 2].second += batches.back().second;
    batches.pop_back();
  }
  if (batches.back().second < world)
    fail("{} samples cannot be split over {} replicas (each needs one): run with fewer --devices", n, world);
  return batches;
}

// The parts of every output (one per batch) as one array of n samples.
std::map<std::string, Tensor> concatenate(std::map<std::string, std::vector<Tensor>>& parts, int64_t n) {
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
  return result;
}

}  // namespace

RunOutput run_model(const RunOptions& opt) {
  if (opt.batch_size < 1) fail("--batch-size must be at least 1 (got {})", opt.batch_size);
  std::map<std::string, Tensor> data = read_npz(opt.data);
  onnx::ModelProto m = load_model_proto(opt.model);
  std::string model_dir = std::filesystem::path(opt.model).parent_path().string();
  std::vector<FedInput> fed = match_inputs(m.graph(), data, opt);
  const auto [n, batch] = samples_and_batch(fed, opt);

  // Each replica's pass over every batch; replica 0 keeps the (gathered) outputs in `parts`.
  RunOutput out;
  out.samples = n;
  std::map<std::string, std::vector<Tensor>> parts;
  for_each_replica(devices_of(opt.devices), {}, false, [&](Communicator* comm, std::shared_ptr<DeviceBackend> device, int) {
    const int world = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
    if (device) device->connect(comm);
    const std::vector<std::pair<int64_t, int64_t>> batches = split_batches(n, batch, world);
    std::map<int64_t, std::unique_ptr<Plan>> plans;
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto [start, count] = batches[b];
      std::unique_ptr<Plan>& plan = plans[count];
      if (!plan) plan = compile_for(m, model_dir, fed, count, opt, device, world, rank);
      std::map<std::string, Tensor> inputs;
      for (const FedInput& f : fed) inputs[f.name] = f.batched ? rows(*f.array, start, count) : *f.array;
      RunState state;
      state.step = uint64_t(b);
      state.sample_offset = start;
      state.batch_offset = shard_offset(count, world, rank);
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
    if (rank == 0) {
      out.writer = true;
      out.batches = int64_t(batches.size());
      out.world = world;
    }
    if (comm) comm->leave();
  });
  if (out.writer) out.arrays = concatenate(parts, n);
  return out;
}

}  // namespace onnxdp
