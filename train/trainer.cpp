#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "exec/cpu/threads.h"
#include "exec/device.h"
#include "exec/device_backend.h"
#include "exec/plan.h"
#include "exec/profile.h"
#include "graph/autodiff.h"
#include "graph/passes/autocast.h"
#include "graph/passes/fold_transposes.h"
#include "graph/passes/fuse_gelu.h"
#include "graph/passes/fuse_epilogues.h"
#include "graph/passes/inference_mode.h"
#include "importer/onnx_io.h"
#include "importer/export_metadata.h"
#include "importer/trainability.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "train/checkpoint.h"
#include "train/loss_scaler.h"
#include "train/npz.h"
#include "train/pipeline.h"
#include "train/progress.h"
#include "train/tensorboard.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {

struct Dataset {
  std::map<std::string, Tensor> arrays;  // graph inputs + label, axis 0 = sample
  int64_t samples = 0;
};

// Checks the arrays the model needs before step 1 and returns them.
Dataset load_dataset(const std::string& path, const onnx::ModelProto& m, const std::string& label, bool need_label) {
  std::map<std::string, Tensor> all = read_npz(path);
  Dataset d;
  std::vector<std::string> names;
  std::map<std::string, bool> initializer;
  for (const auto& i : m.graph().initializer()) initializer[i.name()] = true;
  for (const auto& vi : m.graph().input()) {
    if (initializer.count(vi.name())) continue;
    auto it = all.find(vi.name());
    if (it == all.end()) {
      std::string have;
      for (const auto& [k, v] : all) have += (have.empty() ? "" : ", ") + k;
      fail("data '{}' has no array '{}' for the model input of that name (arrays: {})", path, vi.name(), have);
    }
    DType want;
    int et = vi.type().tensor_type().elem_type();
    if (!dtype_from_onnx(et, &want)) fail("model input '{}' has unsupported type {}", vi.name(), onnx_type_name(et));
    if (it->second.dtype() != want)
      fail("data '{}': array '{}' is {}, the model input expects {}", path, vi.name(), dtype_name(it->second.dtype()), dtype_name(want));
    const auto& shp = vi.type().tensor_type().shape();
    if (it->second.rank() != shp.dim_size())
      fail("data '{}': array '{}' has shape {} (rank {}), the model input has rank {}", path, vi.name(),
           shape_str(it->second.shape()), it->second.rank(), shp.dim_size());
    for (int k = 1; k < shp.dim_size(); ++k)
      if (shp.dim(k).has_dim_value() && shp.dim(k).dim_value() != it->second.shape()[size_t(k)])
        fail("data '{}': array '{}' has shape {}, the model input needs dim {} = {}", path, vi.name(),
             shape_str(it->second.shape()), k, shp.dim(k).dim_value());
    names.push_back(vi.name());
  }
  if (need_label) {
    if (!all.count(label)) fail("data '{}' has no label array '{}' (use --label NAME)", path, label);
    names.push_back(label);
  }
  for (const auto& n : names) {
    const Tensor& t = all.at(n);
    if (t.rank() == 0) fail("data '{}': array '{}' is a scalar; axis 0 must index samples", path, n);
    if (d.arrays.empty()) d.samples = t.shape()[0];
    else if (t.shape()[0] != d.samples)
      fail("data '{}': array '{}' has {} samples, others have {}", path, n, t.shape()[0], d.samples);
    d.arrays[n] = t;
  }
  if (d.samples == 0) fail("data '{}' has no samples", path);
  return d;
}

// Rows `idx` of every array.
std::map<std::string, Tensor> take_rows(const Dataset& d, const std::vector<int64_t>& idx) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : d.arrays) {
    Shape s = t.shape();
    s[0] = int64_t(idx.size());
    Tensor b(t.dtype(), s);
    size_t row = t.nbytes() / size_t(t.shape()[0]);
    for (size_t i = 0; i < idx.size(); ++i)
      std::memcpy(b.as<uint8_t>() + i * row, t.as<uint8_t>() + size_t(idx[i]) * row, row);
    out[name] = std::move(b);
  }
  return out;
}

ImportOptions shapes_for(const Dataset& d, int64_t batch) {
  ImportOptions io;
  io.batch_size = batch;
  for (const auto& [name, t] : d.arrays) {
    Shape s = t.shape();
    s[0] = batch;
    io.input_shapes[name] = s;
  }
  return io;
}

// A graph's parameters take the master tensors' bytes, so every plan updates the same buffers.
void share_parameters(Graph& g, const std::map<std::string, Tensor>& master) {
  for (ValueId p : g.parameters()) {
    auto it = master.find(g.value(p).name);
    if (it != master.end()) g.value(p).data = it->second;
  }
}

// Held-out evaluation with the current parameters: the mean loss over the samples and, for
// cross_entropy, the accuracy over every classified position. Plans per batch size are kept.
class Evaluator {
 public:
  Evaluator(const std::string& path, const onnx::ModelProto& proto, const std::string& model_dir, const LossOptions& lo,
            const TrainOptions& o, bool need_label, std::shared_ptr<DeviceBackend> device)
      : proto_(proto), model_dir_(model_dir), lo_(lo), o_(o), need_label_(need_label),
        data_(load_dataset(path, proto, o.label, need_label)), device_(std::move(device)) {}

  struct Result {
    double loss = 0, accuracy = -1;  // accuracy < 0: not a classifier
  };
  Result run(const std::map<std::string, Tensor>& parameters) {
    const int64_t eb = std::min<int64_t>(256, data_.samples);
    double loss_sum = 0;
    int64_t correct = 0, positions = 0;
    const bool classifier = o_.loss == LossKind::cross_entropy;
    for (int64_t start = 0; start < data_.samples; start += eb) {
      const int64_t b = std::min(eb, data_.samples - start);
      if (!plans_.count(b)) {
        Graph g = load_graph(proto_, model_dir_, shapes_for(data_, b));
        fuse_gelu(g);
        inference_mode(g);
        autocast(g, o_.mixed_precision);  // evaluated as trained
        ValueId out = g.outputs[0];
        ValueId loss = need_label_ ? add_loss(g, lo_) : out;
        share_parameters(g, parameters);
        g.outputs = {out, loss};
        fuse_epilogues(g);
        fold_transposes(g);
        verify(g);
        plans_[b] = std::make_unique<Plan>(std::move(g), PlanOptions{.device = device_, .device_graph = o_.cuda_graph});
        outs_[b] = {out, loss};
      }
      std::vector<int64_t> idx(static_cast<size_t>(b));
      std::iota(idx.begin(), idx.end(), start);
      Plan& p = *plans_[b];
      p.execute(take_rows(data_, idx), {});
      loss_sum += double(p.ref(outs_[b].second).as<float>()[0]) * double(b);
      if (!classifier) continue;
      TensorRef logits = p.ref(outs_[b].first);
      const std::vector<int64_t>& lab = labels();
      const int64_t r = logits.rank();
      const int64_t axis = o_.class_axis < 0 ? r - 1 : o_.class_axis;
      int64_t C = logits.dim(int(axis)), inner = 1;
      for (int64_t k = axis + 1; k < r; ++k) inner *= logits.dim(int(k));
      const int64_t outer = logits.numel / (C * inner);
      const int64_t per_sample = outer * inner / b;
      const float* x = logits.as<float>();
      for (int64_t q = 0; q < outer; ++q)
        for (int64_t in = 0; in < inner; ++in) {
          int64_t best = 0;
          for (int64_t c = 1; c < C; ++c)
            if (x[(q * C + c) * inner + in] > x[(q * C + best) * inner + in]) best = c;
          correct += best == lab[size_t(start * per_sample + q * inner + in)];
          ++positions;
        }
    }
    Result res;
    res.loss = loss_sum / double(data_.samples);
    if (classifier) res.accuracy = double(correct) / double(positions);
    return res;
  }

 private:
  const std::vector<int64_t>& labels() {
    if (labels_.empty()) labels_ = data_.arrays.at(o_.label).to_i64();
    return labels_;
  }
  const onnx::ModelProto& proto_;
  std::string model_dir_;
  LossOptions lo_;
  const TrainOptions& o_;
  bool need_label_;
  Dataset data_;
  std::vector<int64_t> labels_;
  std::shared_ptr<DeviceBackend> device_;
  std::map<int64_t, std::unique_ptr<Plan>> plans_;
  std::map<int64_t, std::pair<ValueId, ValueId>> outs_;
};

struct TrainPlan {
  std::unique_ptr<Plan> plan;
  ValueId loss;
  std::vector<ValueId> grads;  // per trainable parameter
  std::vector<char> grad_in_flat;  // per trainable parameter: the plan writes its gradient into the flat buffer
  std::vector<int> bucket_nodes;   // the gradient buckets' AllReduce nodes
  std::vector<std::pair<ValueId, std::string>> running_stats;  // BN outputs -> parameter name
};

// The values of a step's graph that live in trainable tensor i's slice of the flat gradient
// buffer (Plan's `bound`): its gradient (the all-reduced one with buckets); the all-reduce's input
// when nothing else reads it, so the sum is made in place and a bucket is one call over one range;
// with --grad-accum the accumulator input, added to in place. `in_flat[i]`: whether gradient i is
// there; one that is not (a value that is also another gradient, say) is copied after the run.
struct GradientPlaces {
  std::map<std::string, size_t> slice;  // value name -> trainable index
  std::vector<char> in_flat;
};
GradientPlaces gradient_places(const Graph& g, const std::vector<ValueId>& grads, const std::vector<std::string>& names) {
  std::vector<int> uses = count_readers(g);
  for (ValueId o : g.outputs) ++uses[size_t(o)];
  GradientPlaces p;
  p.in_flat.assign(grads.size(), 0);
  std::vector<char> taken(g.values.size(), 0);
  auto place = [&](ValueId v, size_t i) {
    if (v == kNoValue || g.value(v).producer < 0 || taken[size_t(v)]) return false;
    taken[size_t(v)] = 1;
    p.slice[g.value(v).name] = i;
    return true;
  };
  std::map<ValueId, size_t> grad_index;
  for (size_t i = 0; i < grads.size(); ++i)
    if ((p.in_flat[i] = place(grads[i], i))) grad_index[grads[i]] = i;
  for (const Node& n : g.nodes)
    if (n.op == Op::AllReduce)
      for (size_t k = 0; k < n.outputs.size(); ++k)
        if (auto it = grad_index.find(n.outputs[k]); it != grad_index.end() && uses[size_t(n.inputs[k])] == 1)
          place(n.inputs[k], it->second);
  for (const Node& n : g.nodes) {
    // --grad-accum: Add(gradient, grad_accum/<name>) writes the sum over the accumulator's slice.
    if (n.op == Op::Add && n.has_input(1) && g.value(n.inputs[1]).name.rfind("grad_accum/", 0) == 0) {
      const Value& acc = g.value(n.inputs[1]);
      const auto it = std::find(names.begin(), names.end(), acc.name.substr(11));
      if (it == names.end()) continue;  // the loss's accumulator, fed by value
      const size_t i = size_t(it - names.begin());
      auto out = p.slice.find(g.value(n.outputs[0]).name);
      if (out == p.slice.end() || out->second != i)
        fail("internal: the accumulated gradient of '{}' is not in its slice of the flat buffer", names[i]);
      p.slice[acc.name] = i;
    }
  }
  return p;
}

}  // namespace

// The number of replicas in this process asked for by --devices.
int local_replicas(const std::string& devices) {
  return int(parse_devices(devices, local_rank_on_host(), processes_on_host()).index.size());
}

// A fingerprint of what every replica must agree on before step 1: the training graph's nodes
// (ops and names, not the shard's row counts), the parameters' shapes and the bucket plan.
std::string training_fingerprint(const Graph& g, const std::vector<Bucket>& buckets) {
  std::string s;
  for (const Node& n : g.nodes) s += fmt::format("node {} {}\n", op_name(n.op), n.name);
  for (ValueId p : g.parameters()) s += fmt::format("param {} {}\n", g.value(p).name, shape_str(g.value(p).shape));
  for (size_t b = 0; b < buckets.size(); ++b) s += fmt::format("bucket {} {} bytes\n", b, buckets[b].bytes);
  return s;
}

// Names the first line where two fingerprints differ.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0, line = 1;
  while (i < a.size() && i < b.size() && a[i] == b[i]) line += a[i++] == '\n';
  auto line_at = [](const std::string& s, size_t at) {
    size_t st = s.rfind('\n', at == 0 ? 0 : at - 1);
    st = st == std::string::npos ? 0 : st + 1;
    return s.substr(st, s.find('\n', st) - st);
  };
  return fmt::format("line {}: '{}' vs '{}'", line, line_at(a, i), line_at(b, i));
}

// One forward/backward pass of an optimizer step: a micro-batch of b global rows out of the
// step's step_rows (b == step_rows without --grad-accum).
struct MicroBatch {
  int64_t b = 0, step_rows = 0;
  bool accumulate = false;  // --grad-accum > 1: inputs grad_accum/* carry the step's sums so far
  bool sync = true;         // the step's last micro-batch: gradient buckets all-reduce the sums
};

// The training graph of replica `rank` of `world` for a micro-batch of mb.b global rows (forward at
// the shard's rows given by `shapes`, loss, data-parallel rewrite, backward, gradient accumulation,
// gradient buckets), its outputs: the loss (the step's mean, summed so far), the gradients of the
// trainable parameters, and the BatchNormalization running statistics.
TrainingGraph make_training_graph(const onnx::ModelProto& proto, const std::string& model_dir, const ImportOptions& shapes,
                                  LossOptions lo, const TrainOptions& o, const std::vector<std::string>& batch_inputs,
                                  int world, int rank, const MicroBatch& mb) {
  const int64_t b = mb.b;
  // Which initializers train: one decision for every command (importer/trainability.h).
  const Trainability decision = decide_trainability(proto, {o.freeze, o.trainable});
  TrainingGraph tg;
  Graph& g = tg.g;
  g = load_graph(proto, model_dir, shapes);
  fuse_gelu(g);  // before autodiff: Gelu's gradient is one node
  const int64_t rows = shard_rows(b, world)[size_t(rank)];
  // Running statistics: BatchNormalization inputs 3/4, updated from its training-mode outputs.
  // They are updated as PyTorch does, running_var with the unbiased batch variance (ONNX's op, as
  // `onnxdp run` and the conformance tests run it, takes the biased one): graph/op_table.h. Each
  // micro-batch of --grad-accum updates them with its own statistics, as in PyTorch.
  std::map<ValueId, bool> stats;
  for (Node& n : g.nodes)
    if (n.op == Op::BatchNormalization) {
      for (int k = 3; k < 5; ++k) stats[n.inputs[size_t(k)]] = true;
      if (!n.i("training_mode")) continue;
      n.attrs["unbiased_running_var"] = Attr(int64_t(1));
      for (int k = 1; k < 3; ++k)
        if (k < int(n.outputs.size()) && n.outputs[size_t(k)] != kNoValue)
          tg.running_stats.emplace_back(n.outputs[size_t(k)], g.value(n.inputs[size_t(k + 2)]).name);
    }
  autocast(g, o.mixed_precision);
  if (world > 1 || mb.step_rows != b) {  // this graph's rows are a share of the step's mean
    lo.global_batch = mb.step_rows;
    lo.shard_fraction = double(rows) / double(mb.step_rows);
  }
  ValueId loss = add_loss(g, lo);
  // Trainable: what the decision says trains, or has no gradient path to an output by the
  // proto's reading (the loss's autodiff decides those), and reaches the loss.
  std::vector<ValueId> candidates;
  for (ValueId p : g.parameters()) {
    const Value& v = g.value(p);
    const InitializerRole* role = decision.find(v.name);
    using Why = InitializerRole::Why;
    std::string why = role && role->why != Why::trains && role->why != Why::unreached ? role->reason
                      : stats.count(p) ? "BatchNormalization running statistic"
                      : v.dtype != DType::f32 ? fmt::format("{} (onnxdp trains f32 parameters)", dtype_name(v.dtype))
                                              : "";
    if (why.empty()) {
      candidates.push_back(p);
    } else {
      tg.frozen.push_back(v.name);
      tg.frozen_reason[v.name] = why;
    }
  }
  Graph probe = g;
  std::vector<ValueId> probe_grads = autodiff(probe, loss, candidates);
  std::vector<ValueId> wrt;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& name = g.value(candidates[i]).name;
    if (probe_grads[i] == kNoValue) {
      tg.frozen.push_back(name);
      tg.frozen_reason[name] = "no gradient path to the loss";
    } else {
      tg.trainable.push_back(name);
      wrt.push_back(candidates[i]);
    }
  }
  if (tg.trainable.empty()) fail("the model has no trainable parameters that reach the loss");
  DataParallelOptions dp;
  dp.world_size = world;
  dp.replica = rank;
  dp.global_batch = b;
  dp.local_bn = o.local_bn;
  dp.bucket_mb = o.bucket_mb;
  dp.first_bucket_mb = std::min(dp.first_bucket_mb, o.bucket_mb);  // never larger than the others
  data_parallel_forward(g, dp, batch_inputs);
  ValueId seed = kNoValue;  // --mixed-precision fp16: backward of loss * amp/loss_scale, fed every step
  if (o.mixed_precision == "fp16") {
    Value in;
    in.name = kLossScaleInput;
    in.shape = g.value(loss).shape;
    in.kind = ValueKind::input;
    seed = g.add_value(std::move(in));
    g.inputs.push_back(seed);
  }
  tg.grads = autodiff(g, loss, wrt, seed);
  std::vector<ValueId> read_after = tg.grads;  // with the loss and statistics: outputs later
  read_after.push_back(loss);
  for (const auto& [v, name] : tg.running_stats) read_after.push_back(v);
  fuse_epilogues(g, read_after);  // before the passes that keep node indices
  fold_transposes(g, read_after);
  if (mb.accumulate) accumulate_gradients(g, tg.grads, tg.trainable, loss);
  tg.order = production_order(g, tg.grads);
  if (mb.sync) tg.buckets = data_parallel_gradients(g, tg.grads, dp);
  if (world > 1 && mb.sync) {  // the step's loss over the global batch, for the metrics
    int idx = g.add_node(Op::AllReduce, "dp/loss", {loss}, {"dp/loss"}, {{"async", Attr(int64_t(1))}});
    loss = g.nodes[size_t(idx)].outputs[0];
  }
  tg.loss = loss;
  g.outputs = {loss};
  for (ValueId gr : tg.grads) g.outputs.push_back(gr);
  for (auto& [v, name] : tg.running_stats) g.outputs.push_back(v);
  verify(g);
  return tg;
}

TrainingGraph training_graph(const TrainOptions& o, int world, int replica, bool last_micro) {
  onnx::ModelProto proto = load_model_proto(o.model);
  const int64_t rows = shard_rows(o.batch_size, world)[size_t(replica)];
  if (rows == 0) fail("a batch of {} rows cannot be split over {} replicas", o.batch_size, world);
  ImportOptions io;
  io.batch_size = rows;
  std::vector<std::string> batch_inputs;
  std::map<std::string, bool> init;
  for (const auto& i : proto.graph().initializer()) init[i.name()] = true;
  for (const auto& vi : proto.graph().input())
    if (!init.count(vi.name())) batch_inputs.push_back(vi.name());
  LossOptions lo;
  lo.kind = o.loss;
  lo.label_name = o.label;
  lo.class_axis = o.class_axis;
  lo.label_dtype = o.loss == LossKind::cross_entropy ? DType::i64 : DType::f32;
  if (o.loss != LossKind::none) batch_inputs.push_back(o.label);
  MicroBatch mb;
  mb.b = o.batch_size;
  mb.step_rows = o.batch_size * std::max<int64_t>(1, o.grad_accum);
  mb.accumulate = o.grad_accum > 1;
  mb.sync = last_micro;
  return make_training_graph(proto, std::filesystem::path(o.model).parent_path().string(), io, lo, o, batch_inputs,
                             world, replica, mb);
}

void train_replica(const TrainOptions& options, Communicator* comm, std::shared_ptr<DeviceBackend> device,
                   TrainResult& result) {
  const int world = comm ? comm->size() : 1;
  const int rank = comm ? comm->rank() : 0;
  const bool lead = rank == 0;
  const bool quiet = options.quiet || !lead;
  if (device) device->connect(comm);  // every replica at once, before any plan
  TrainOptions o = options;
  if (o.per_device_batch_size > 0) o.batch_size = o.per_device_batch_size * world;
  std::vector<std::string> export_notes;
  onnx::ModelProto proto = load_model_proto(o.model, &export_notes);
  for (const std::string& w : export_warnings(proto)) export_notes.push_back("warning: " + w);
  for (const std::string& n : decide_trainability(proto, {o.freeze, o.trainable}).notes) export_notes.push_back(n);
  std::string data_path = o.data;
  if (data_path.empty()) data_path = (fs::path(o.model).parent_path() / fs::path(o.model).stem()).string() + ".npz";
  const bool need_label = o.loss != LossKind::none;
  Dataset data = load_dataset(data_path, proto, o.label, need_label);
  if (o.batch_size <= 0) fail("--batch-size must be positive");
  const int64_t batch = std::min(o.batch_size, data.samples);
  const std::string model_dir = fs::path(o.model).parent_path().string();

  LossOptions lo;
  lo.kind = o.loss;
  lo.label_name = o.label;
  lo.class_axis = o.class_axis;
  if (need_label) lo.label_dtype = data.arrays.at(o.label).dtype();

  // Master parameters: trainable ones are views into one flat buffer.
  std::map<std::string, Tensor> master;
  std::vector<std::string> trainable;
  std::vector<size_t> offset;  // element offset of each trainable parameter in the flat buffer
  int64_t trainable_numel = 0;  // their elements (the flat buffers also hold alignment gaps)
  Tensor flat_params, flat_grads;
  // With a device, the flat parameters, gradients and optimizer state live there and the fused
  // optimizer runs there; flat_params and the optimizer's m, v are brought up to date only when the
  // host reads them (evaluation, checkpoints, the end).
  std::shared_ptr<void> dev_params, dev_grads, dev_m, dev_v;
  std::shared_ptr<void> dev_step, dev_norm;  // the step's OptimizerUpdate, the gradient's squared norm
  auto device_buffer = [&](size_t bytes) {
    return std::shared_ptr<void>(device->alloc(std::max<size_t>(bytes, 4)), [d = device](void* p) {
      d->activate();
      d->release(p);
    });
  };

  std::vector<std::string> batch_inputs;  // every array fed per step: graph inputs and the label
  for (const auto& [name, t] : data.arrays) batch_inputs.push_back(name);

  if (o.grad_accum < 1) fail("--grad-accum must be at least 1 (got {})", o.grad_accum);
  // Held-out data is checked before step 1, not after the training.
  std::unique_ptr<Evaluator> evaluator;
  if (lead && !o.eval_data.empty())
    evaluator = std::make_unique<Evaluator>(o.eval_data, proto, model_dir, lo, o, need_label, device);
  const int64_t K = o.grad_accum;

  // The plan for a micro-batch of mb.b global rows: this replica's shard of them, with the collectives.
  auto build = [&](const MicroBatch& mb) {
    TrainPlan tp;
    const int64_t b = mb.b;
    const int64_t rows = shard_rows(b, world)[size_t(rank)];
    if (rows == 0)
      fail("a {} of {} rows cannot be split over {} replicas (each needs a row); use --drop-last or a larger "
           "--batch-size", K > 1 ? "micro-batch" : "batch", b, world);
    TrainingGraph tg = make_training_graph(proto, model_dir, shapes_for(data, rows), lo, o, batch_inputs, world, rank, mb);
    Graph& g = tg.g;
    const bool first = master.empty();
    if (first) {  // the first build makes the flat parameter buffer
      trainable = tg.trainable;
      // In the order backward produces the gradients (each bucket one range), each tensor at a
      // multiple of the plan's alignment; the gaps stay zero.
      std::vector<size_t> layout = tg.order;
      for (size_t i = 0; i < trainable.size(); ++i)
        if (std::find(layout.begin(), layout.end(), i) == layout.end()) layout.push_back(i);
      constexpr size_t kFloatsAligned = kPlanAlign / sizeof(float);
      size_t total = 0;
      offset.assign(trainable.size(), 0);
      for (size_t i : layout) {
        offset[i] = total;
        const size_t n = size_t(g.value(g.find(trainable[i])).data.numel());
        total += (n + kFloatsAligned - 1) / kFloatsAligned * kFloatsAligned;
        trainable_numel += int64_t(n);
      }
      flat_params = Tensor(DType::f32, {int64_t(total)});
      flat_grads = Tensor(DType::f32, {int64_t(total)});
      for (size_t i = 0; i < trainable.size(); ++i) {
        const Value& v = g.value(g.find(trainable[i]));
        Tensor view = Tensor::view(flat_params, offset[i] * 4, DType::f32, v.shape);
        std::memcpy(view.data(), v.data.data(), v.data.nbytes());
        master[v.name] = view;
      }
      for (ValueId p : g.parameters())
        if (!master.count(g.value(p).name)) master[g.value(p).name] = g.value(p).data;
      result.trainable = trainable;
      result.frozen = tg.frozen;
      if (device) {
        dev_params = device_buffer(flat_params.nbytes());
        dev_grads = device_buffer(flat_grads.nbytes());
        device->zero(dev_grads.get(), flat_grads.nbytes());  // the gaps between tensors stay zero
      }
    }
    share_parameters(g, master);
    tp.grads = tg.grads;
    for (const Bucket& bk : tg.buckets) tp.bucket_nodes.push_back(bk.node);
    tp.loss = tg.loss;
    tp.running_stats = tg.running_stats;
    if (first) {  // the full step's plan, built first on every replica
      for (const Bucket& bk : tg.buckets) result.bucket_bytes.push_back(bk.bytes);
      if (comm) {  // every replica must run the same training graph: compare before step 1
        std::string mine = training_fingerprint(g, tg.buckets);
        std::vector<std::vector<uint8_t>> all;
        comm->all_gather_bytes(mine.data(), mine.size(), all);
        for (size_t r = 0; r < all.size(); ++r) {
          std::string theirs(all[r].begin(), all[r].end());
          if (theirs != mine)
            fail("replica {} builds a different training graph than replica {} (another model, data or options?): "
                 "first difference at {}", r, rank, first_difference(theirs, mine));
        }
      }
    }
    PlanOptions po{.device = device, .device_graph = o.cuda_graph};
    if (dev_params)  // the trainable parameters are the flat device buffer's slices
      for (size_t i = 0; i < trainable.size(); ++i) po.bound[trainable[i]] = static_cast<float*>(dev_params.get()) + offset[i];
    po.changed_on_host.emplace();  // the running statistics; frozen parameters never change
    for (const auto& [v, name] : tg.running_stats) po.changed_on_host->insert(name);
    GradientPlaces places = gradient_places(g, tg.grads, trainable);
    float* grads_base = device ? static_cast<float*>(dev_grads.get()) : flat_grads.as<float>();
    for (const auto& [name, i] : places.slice) po.bound[name] = grads_base + offset[i];
    tp.grad_in_flat = places.in_flat;
    if (device)  // on the device, after the nodes and recorded with them: the step's gradients to the flat buffer, the optimizer
      po.after_run = [&, grads = tg.grads, in_flat = places.in_flat, update = mb.sync](Plan& p) {
        for (size_t i = 0; i < grads.size(); ++i)
          if (!in_flat[i])
            device->copy_on_device(static_cast<float*>(dev_grads.get()) + offset[i], p.device_data(grads[i]),
                                   size_t(master.at(trainable[i]).numel()) * 4);
        if (update)
          device->optimizer_step(static_cast<const OptimizerUpdate*>(dev_step.get()), static_cast<double*>(dev_norm.get()),
                                 static_cast<float*>(dev_params.get()), static_cast<float*>(dev_grads.get()),
                                 static_cast<float*>(dev_m.get()), static_cast<float*>(dev_v.get()), flat_params.numel());
      };
    tp.plan = std::make_unique<Plan>(std::move(g), std::move(po));
    return tp;
  };

  std::map<std::tuple<int64_t, int64_t, bool>, TrainPlan> plans;
  auto plan_for = [&](int64_t b, int64_t step_rows, bool last) -> TrainPlan& {
    MicroBatch mb;
    mb.b = b;
    mb.step_rows = step_rows;
    mb.accumulate = K > 1;
    mb.sync = last;
    auto key = std::make_tuple(b, step_rows, last);
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, build(mb)).first;
    return it->second;
  };
  // A step of n rows runs micro-batches of `batch` rows and a last one of the rest.
  auto last_micro = [&](int64_t n) { return n - (n - 1) / batch * batch; };
  const int64_t full_step = std::min(K * batch, data.samples);  // rows of a whole optimizer step
  {  // how many gradient buckets of the full step are one range of the flat buffer (one all-reduce call)
    TrainPlan& full = plan_for(last_micro(full_step), full_step, true);
    const Graph& g = full.plan->graph();
    RunState none;
    for (int node : full.bucket_nodes) {
      const Node& n = g.nodes[size_t(node)];
      KernelCtx c{n, {}, {}, none};
      for (ValueId out : n.outputs) {
        TensorRef r{nullptr, g.value(out).dtype, &g.value(out).shape, shape_numel(g.value(out).shape)};
        r.data = device ? full.plan->device_data(out) : full.plan->ref(out).data;
        c.outputs.push_back(r);
      }
      result.contiguous_buckets += all_reduce_span(c) > 0;
    }
  }
  if (comm) {  // replicas start identical: replica 0's parameters and running statistics
    comm->broadcast(flat_params.data(), flat_params.nbytes(), 0);
    for (auto& [name, t] : master)
      if (std::find(trainable.begin(), trainable.end(), name) == trainable.end()) comm->broadcast(t.data(), t.nbytes(), 0);
  }

  const int64_t per_epoch = o.drop_last ? data.samples / full_step : (data.samples + full_step - 1) / full_step;
  if (per_epoch == 0) fail("--drop-last with batch size {} leaves no batch of the {} samples", full_step, data.samples);
  const int64_t total_steps = o.steps > 0 ? o.steps : o.epochs * per_epoch;
  Optimizer opt(o.optimizer, flat_params.numel());
  const float base_lr = opt.options().lr;
  std::optional<LossScaler> scaler;  // --mixed-precision fp16
  if (o.mixed_precision == "fp16") scaler.emplace(o.loss_scale);

  std::ofstream metrics;
  if (lead && !o.metrics.empty()) {
    metrics.open(o.metrics, o.resume ? std::ios::app : std::ios::trunc);
    if (!metrics) fail("cannot write metrics file '{}'", o.metrics);
  }
  const int64_t log_every = o.log_every > 0 ? o.log_every : std::max<int64_t>(1, total_steps / 10);
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (lead && !o.tensorboard_dir.empty()) tensorboard = std::make_unique<TensorBoardWriter>(o.tensorboard_dir);
  std::unique_ptr<ProgressReporter> progress;
  if (!quiet) progress = std::make_unique<ProgressReporter>(total_steps, o.progress_bar && isatty(fileno(stdout)), log_every);
  if (!quiet)
    fmt::print("onnxdp train: {} trainable tensors ({} parameters), {} frozen; {} samples, batch {}{}, {} steps\n",
               trainable.size(), trainable_numel, result.frozen.size(), data.samples, batch,
               K > 1 ? fmt::format(" x {} micro-batches per step", K) : std::string(), total_steps);
  if (!quiet)
    for (const std::string& note : export_notes) fmt::print("onnxdp train: {}\n", note);
  // The memory a replica holds for the training (on its device, or the host): the flat parameters,
  // gradients and optimizer state, and every plan made so far (one per batch size: activations,
  // and on a device its constants). Reported at the start, in every metrics line and at the end.
  const size_t state_bytes = flat_params.nbytes() + flat_grads.nbytes() + (opt.m().size() + opt.v().size()) * 4;
  auto plans_bytes = [&] {
    size_t bytes = 0;
    for (const auto& [key, tp] : plans) bytes += device ? tp.plan->device_bytes() : tp.plan->arena_bytes();
    return bytes;
  };
  auto mib = [](size_t bytes) { return double(bytes) / (1024.0 * 1024.0); };
  if (!quiet) {  // the full step's plan: what runs where, and the memory it holds
    const std::string host = device ? plans.begin()->second.plan->host_ops() : std::string();
    fmt::print("onnxdp train: {} holds {:.1f} MiB per replica (activations{} {:.1f}, parameters + gradients + "
               "optimizer state {:.1f}){}{}{}\n",
               device ? device->name() : std::string("the CPU"), mib(plans_bytes() + state_bytes),
               device ? " and constants" : "", mib(plans_bytes()), mib(state_bytes),
               !device ? std::string()
               : host.empty() ? std::string("; every op runs there")
                              : "; ops without a kernel there run on the CPU with copies (slow): " + host,
               device && o.tf32 ? "; MatMul and Gemm in TF32" : "",
               o.mixed_precision == "bf16"   ? "; MatMul, Gemm and convolutions in bfloat16, float32 master weights"
               : o.mixed_precision == "fp16" ? fmt::format("; MatMul, Gemm and convolutions in float16, float32 master weights, "
                                                           "dynamic loss scale from {}", o.loss_scale.init)
                                             : "");
  }

  std::vector<int64_t> order(static_cast<size_t>(data.samples));
  auto shuffle_for = [&](int64_t ep) {
    std::iota(order.begin(), order.end(), 0);
    if (o.shuffle) {
      std::mt19937_64 rng(o.seed * 1000003ull + uint64_t(ep));
      std::shuffle(order.begin(), order.end(), rng);
    }
  };
  // The optimizer's state per tensor, under torch.optim's names: "exp_avg/<parameter>" and
  // "exp_avg_sq/<parameter>" (adam, adamw), "momentum_buffer/<parameter>" (momentum).
  auto for_each_state = [&](const std::function<void(const std::string&, size_t, std::vector<float>&)>& f) {
    const bool adam = !opt.v().empty();
    for (size_t i = 0; i < trainable.size(); ++i) {
      if (!opt.m().empty()) f((adam ? "exp_avg/" : "momentum_buffer/") + trainable[i], i, opt.m());
      if (adam) f("exp_avg_sq/" + trainable[i], i, opt.v());
    }
  };
  int64_t epoch = -1, cursor = data.samples, first_step = 1;
  std::string last_checkpoint;
  if (o.resume) {
    if (o.checkpoint_dir.empty()) fail("--resume needs --checkpoint-dir");
    last_checkpoint = latest_checkpoint(o.checkpoint_dir);
    if (last_checkpoint.empty()) {
      if (!quiet) fmt::print("no checkpoint in {} yet: starting from step 1\n", o.checkpoint_dir);
    } else {
      Checkpoint c = load_checkpoint(last_checkpoint);
      for (auto& [name, t] : master) {
        auto it = c.model.find(name);
        if (it == c.model.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
          fail("checkpoint '{}' does not match the model: initializer '{}' is missing or has another shape", last_checkpoint, name);
        std::memcpy(t.data(), it->second.data(), t.nbytes());
      }
      for_each_state([&](const std::string& key, size_t i, std::vector<float>& state) {
        auto it = c.optimizer.find(key);
        const Tensor& p = master.at(trainable[i]);
        if (it == c.optimizer.end() || it->second.shape() != p.shape() || it->second.dtype() != DType::f32)
          fail("checkpoint '{}': optimizer state '{}' is missing or of another shape (another --optimizer?)",
               last_checkpoint, key);
        std::memcpy(state.data() + offset[i], it->second.data(), p.nbytes());
      });
      opt.set_steps_done(c.state.at("optimizer_steps").get<int64_t>());
      if (scaler && c.state.contains("loss_scale"))  // else a checkpoint of a run without fp16: the scale starts afresh
        scaler->restore(c.state.at("loss_scale").get<float>(), c.state.at("loss_scale_growth_tracker").get<int64_t>());
      first_step = c.state.at("step").get<int64_t>() + 1;
      epoch = c.state.at("epoch").get<int64_t>();
      cursor = c.state.at("cursor").get<int64_t>();
      if (epoch >= 0) shuffle_for(epoch);
      if (!quiet) fmt::print("resumed from {} (step {})\n", last_checkpoint, first_step - 1);
    }
  }
  result.first_step = first_step;
  // The device's copies of the parameters and optimizer state start as the host's (after the
  // broadcast from replica 0 and a resume); pull_state brings the host's up to date.
  if (device) {
    dev_m = device_buffer(opt.m().size() * 4);
    dev_v = device_buffer(opt.v().size() * 4);
    dev_step = device_buffer(sizeof(OptimizerUpdate));
    dev_norm = device_buffer(sizeof(double));
    device->to_device(dev_params.get(), flat_params.data(), flat_params.nbytes());
    if (!opt.m().empty()) device->to_device(dev_m.get(), opt.m().data(), opt.m().size() * 4);
    if (!opt.v().empty()) device->to_device(dev_v.get(), opt.v().data(), opt.v().size() * 4);
  }
  auto pull_state = [&] {
    if (!device) return;
    device->to_host(flat_params.data(), dev_params.get(), flat_params.nbytes());
    if (!opt.m().empty()) device->to_host(opt.m().data(), dev_m.get(), opt.m().size() * 4);
    if (!opt.v().empty()) device->to_host(opt.v().data(), dev_v.get(), opt.v().size() * 4);
  };
  auto write_checkpoint = [&](int64_t step) {
    pull_state();
    Checkpoint c;
    c.model = master;
    for_each_state([&](const std::string& key, size_t i, std::vector<float>& state) {
      const Tensor& p = master.at(trainable[i]);
      Tensor t(DType::f32, p.shape());
      std::memcpy(t.data(), state.data() + offset[i], p.nbytes());
      c.optimizer[key] = std::move(t);
    });
    c.state = {{"step", step}, {"epoch", epoch}, {"cursor", cursor}, {"seed", o.seed}, {"shuffle", o.shuffle},
               {"batch_size", batch}, {"grad_accum", K}, {"total_steps", total_steps}, {"optimizer_steps", opt.steps_done()},
               {"base_lr", base_lr}, {"model", o.model}};
    if (scaler) {
      c.state["loss_scale"] = scaler->scale();
      c.state["loss_scale_growth_tracker"] = scaler->growth_tracker();
    }
    last_checkpoint = save_checkpoint(o.checkpoint_dir, step, c);
  };
  auto t_start = std::chrono::steady_clock::now();
  int64_t samples_seen = 0;
  // --profile: replica 0's kernels, from step 2 on (step 1 pays for first touches of memory).
  Profile profile;
  int64_t profiled_steps = 0;
  double profiled_wall = 0, profiled_optimizer = 0;
  for (int64_t step = first_step; step <= total_steps; ++step) {
    int64_t left = data.samples - cursor;
    if (left <= 0 || (o.drop_last && left < full_step)) {
      ++epoch;
      cursor = 0;
      shuffle_for(epoch);
      left = data.samples;
    }
    const int64_t b = std::min(full_step, left);  // the step's global rows
    auto t0 = std::chrono::steady_clock::now();
    if (comm) comm->reset_comm_wait_ms();
    const float lr = scheduled_lr(o.schedule, base_lr, step, o.warmup_steps, total_steps);
    // The step's update; on a device its scalars are read there by the optimizer at the end of the
    // last micro-batch. With fp16 the gradients come scaled by the step's loss scale.
    OptimizerUpdate u = opt.begin_step(lr);
    const float loss_scale = scaler ? scaler->scale() : 1.0f;
    if (scaler) {
      u.inv_scale = scaler->inv_scale();
      u.skip_nonfinite = true;
    }
    if (device) device->to_device(dev_step.get(), &u, sizeof u);
    float loss = 0;
    for (int64_t start = 0; start < b; start += batch) {  // the micro-batches (one without --grad-accum)
      const int64_t mrows = std::min(batch, b - start);
      const bool last = start + mrows == b;
      TrainPlan& tp = plan_for(mrows, b, last);
      std::vector<int64_t> idx(order.begin() + cursor + start, order.begin() + cursor + start + mrows);
      std::map<std::string, Tensor> inputs = take_rows(data, idx);
      if (K > 1) {  // the sums so far are in the flat gradient buffer: zero before the first micro-batch
        if (start == 0 && device) device->zero(dev_grads.get(), flat_grads.nbytes());
        else if (start == 0) std::memset(flat_grads.data(), 0, flat_grads.nbytes());
        Tensor l(DType::f32, {});
        l.as<float>()[0] = start == 0 ? 0.f : loss;
        inputs["grad_accum/loss"] = std::move(l);
      }
      if (scaler) {
        Tensor s(DType::f32, {});
        s.as<float>()[0] = loss_scale;
        inputs[kLossScaleInput] = std::move(s);
      }
      RunState rs;
      rs.seed = o.seed;
      rs.step = uint64_t(step);
      rs.batch_offset = shard_offset(mrows, world, rank);
      rs.sample_offset = start;  // Dropout masks as one device's on the whole step
      rs.comm = comm;
      rs.profile = o.profile && lead && step > first_step ? &profile : nullptr;
      tp.plan->execute(inputs, rs);
      loss = tp.plan->ref(tp.loss).as<float>()[0];
      for (size_t i = 0; i < trainable.size() && !device; ++i)  // gradients the plan could not write in place
        if (!tp.grad_in_flat[i])
          std::memcpy(flat_grads.as<float>() + offset[i], tp.plan->ref(tp.grads[i]).data,
                      size_t(master.at(trainable[i]).numel()) * 4);
      for (auto& [v, name] : tp.running_stats) {
        TensorRef r = tp.plan->ref(v);
        std::memcpy(master.at(name).data(), r.data, master.at(name).nbytes());
      }
    }
    cursor += b;
    if (!std::isfinite(loss))
      fail("the loss is {} at step {} (epoch {}); training stopped.{} {}", loss, step, epoch + 1,
           scaler ? " With --mixed-precision fp16 a forward value beyond float16's range (65504) gives this; bf16 has "
                    "float32's range."
                  : "",
           last_checkpoint.empty() ? std::string("No checkpoint was written.")
                                   : "The last good checkpoint is " + last_checkpoint + " (--resume continues from it).");
    auto t_opt = std::chrono::steady_clock::now();
    double squared = 0;  // of the (scaled) gradients
    if (device) device->to_host(&squared, dev_norm.get(), sizeof squared);  // the last run updated the parameters there
    else squared = opt.apply(u, flat_params.as<float>(), flat_grads.as<float>());
    const float gnorm = float(gradient_norm(u, squared));
    const bool skipped = skips_step(u, squared);
    if (scaler) {  // GradScaler.update(); a skipped step is not one of the optimizer's
      if (skipped) {
        opt.undo_step();
        ++result.skipped_steps;
      }
      scaler->update(!skipped);
      result.loss_scales.push_back(scaler->scale());
      if (scaler->exhausted())
        fail("--mixed-precision fp16: the gradients were not finite at step {} even with the loss scale down to {}: "
             "they overflow without scaling (or hold a NaN); training stopped. {}", step, loss_scale,
             last_checkpoint.empty() ? std::string("No checkpoint was written.")
                                     : "The last good checkpoint is " + last_checkpoint + ".");
    }
    const auto t_end = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(t_end - t0).count();
    if (o.profile && lead && step > first_step) {
      ++profiled_steps;
      profiled_wall += dt;
      profiled_optimizer += std::chrono::duration<double>(t_end - t_opt).count();
    }
    const double samples_per_s = dt > 0 ? double(b) / dt : 0.0;
    const double comm_wait = comm ? comm->comm_wait_ms() : 0.0;
    samples_seen += b;
    result.comm_wait_ms += comm_wait;
    result.losses.push_back(loss);
    if (!lead) continue;
    // Evaluation every --eval-every steps, and after the last step when --eval-data is given.
    std::optional<Evaluator::Result> ev;
    if (evaluator && ((o.eval_every > 0 && step % o.eval_every == 0) || step == total_steps)) {
      pull_state();
      ev = evaluator->run(master);
      result.evaluated = true;
      result.eval_loss = ev->loss;
      result.eval_accuracy = ev->accuracy;
    }
    if (metrics.is_open()) {
      nlohmann::json j = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm},
                          {"samples_per_s", samples_per_s}, {"epoch", epoch + 1}, {"comm_wait_ms", comm_wait},
                          {"memory_mib", std::round(mib(plans_bytes() + state_bytes) * 100) / 100}};
      if (scaler) {
        j["loss_scale"] = loss_scale;
        j["skipped"] = skipped;
      }
      if (ev) {
        j["eval_loss"] = ev->loss;
        if (ev->accuracy >= 0) j["eval_accuracy"] = ev->accuracy;
      }
      metrics << j.dump() << "\n";
      metrics.flush();
    }
    if (tensorboard) {
      tensorboard->scalar("train/loss", step, loss);
      tensorboard->scalar("train/learning_rate", step, lr);
      tensorboard->scalar("train/grad_norm", step, gnorm);
      if (scaler) tensorboard->scalar("train/loss_scale", step, loss_scale);
      tensorboard->scalar("perf/samples_per_s", step, float(samples_per_s));
      tensorboard->scalar("perf/comm_wait_ms", step, float(comm_wait));
      tensorboard->scalar("perf/memory_mib", step, float(mib(plans_bytes() + state_bytes)));
      if (ev) {
        tensorboard->scalar("eval/loss", step, float(ev->loss));
        if (ev->accuracy >= 0) tensorboard->scalar("eval/accuracy", step, float(ev->accuracy));
      }
      if (step % log_every == 0 || step == total_steps) tensorboard->flush();
    }
    if (!o.checkpoint_dir.empty() && ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || step == total_steps))
      write_checkpoint(step);
    if (progress) {
      progress->update(step, loss, lr, samples_per_s);
      if (ev)
        progress->message(ev->accuracy >= 0
                              ? fmt::format("eval at step {}: loss {:.4f}, accuracy {:.2f} %", step, ev->loss, 100 * ev->accuracy)
                              : fmt::format("eval at step {}: loss {:.4f}", step, ev->loss));
    }
  }
  if (progress) progress->finish();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  result.steps = total_steps;
  result.samples_per_s = secs > 0 ? double(samples_seen) / secs : 0;
  for (const auto& [key, tp] : plans) result.replayed_plans += tp.plan->replays_graph();
  const size_t activations = plans_bytes();
  result.peak_bytes = activations + state_bytes;
  result.device_bytes = device ? result.peak_bytes : 0;

  pull_state();
  result.parameters = master;
  result.world_size = world;
  if (comm) comm->leave();  // the collectives are over; what follows is replica 0's alone
  if (!lead) return;
  if (tensorboard) {
    result.tensorboard_dir = o.tensorboard_dir;
    tensorboard.reset();
  }
  result.metrics_file = o.metrics;
  result.last_checkpoint = last_checkpoint;
  if (!o.save.empty()) {
    std::map<std::string, Tensor> values;
    for (const auto& [name, t] : master) values[name] = t;
    export_model(o.model, o.save, values);
    result.saved_model = o.save;
  }
  if (quiet) return;
  // The end-of-run summary.
  auto mb = [](double bytes) { return fmt::format("{:.1f} MB", bytes / (1024.0 * 1024.0)); };
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const int64_t steps_run = int64_t(result.losses.size());
  // Sub-second runs (the bundled mlp trains 705 steps in ~50 ms) in ms, not as "0.0 s".
  const std::string took = secs < 1 ? fmt::format("{:.0f} ms", secs * 1000) : fmt::format("{:.1f} s", secs);
  fmt::print("done: {} steps in {}, final loss {:.4f}, {:.0f} samples/s{}\n", steps_run, took,
             result.losses.empty() ? 0.f : result.losses.back(), result.samples_per_s,
             world > 1 ? fmt::format(" over {} replicas", world) : std::string());
  if (result.evaluated) {
    if (result.eval_accuracy >= 0)
      fmt::print("eval on {}: loss {:.4f}, accuracy {:.2f} %\n", o.eval_data, result.eval_loss, 100 * result.eval_accuracy);
    else
      fmt::print("eval on {}: loss {:.4f}\n", o.eval_data, result.eval_loss);
  }
  fmt::print("{}memory per replica{}: {} (activations{} of {} plan{} {}, parameters + gradients + optimizer state {}); "
             "process peak RSS {}\n",
             device ? "device " : "", device ? " on " + device->name() : std::string(), mb(double(result.peak_bytes)),
             device ? " and constants" : "", plans.size(), plans.size() == 1 ? "" : "s", mb(double(activations)),
             mb(double(state_bytes)), mb(double(ru.ru_maxrss) * 1024));
  if (device) fmt::print("{} of {} plans replay a recorded CUDA graph\n", result.replayed_plans, plans.size());
  if (scaler)
    fmt::print("float16 loss scaling: {} of {} steps skipped (gradients not finite), loss scale now {}\n",
               result.skipped_steps, steps_run, scaler->scale());
  if (world > 1)
    fmt::print("waiting on communication: {:.2f} ms per step on average ({:.1f} % of the run)\n",
               steps_run ? result.comm_wait_ms / double(steps_run) : 0.0,
               secs > 0 ? 100.0 * result.comm_wait_ms / 1000.0 / secs : 0.0);
  if (!result.saved_model.empty()) fmt::print("trained model: {}\n", result.saved_model);
  if (!last_checkpoint.empty()) fmt::print("last checkpoint: {}\n", last_checkpoint);
  if (!o.metrics.empty()) fmt::print("metrics: {}\n", o.metrics);
  if (!result.tensorboard_dir.empty()) fmt::print("tensorboard: tensorboard --logdir {}\n", result.tensorboard_dir);
  if (o.profile && profiled_steps > 0) {
    fmt::print("profile of replica 0 over steps {}..{} ({} forward/backward passes):\n{}", first_step + 1,
               first_step + profiled_steps, profile.runs, profile.table(profiled_steps));
    fmt::print("  {:<28} {:>10.3f}\n  {:<28} {:>10.3f}\n", "optimizer (fused, flat)",
               1e3 * (device ? profile.after_run_seconds : profiled_optimizer) / double(profiled_steps),
               "whole step (wall)", 1e3 * profiled_wall / double(profiled_steps));
    fmt::print("BLAS alone on this machine: {:.1f} GFLOP/s (sgemm 512x512x512, {} threads)\n", blas_sgemm_gflops(),
               cpu_threads());
  }
}

namespace {
// Where a run's files go: --output-dir fills in what --metrics, --checkpoint-dir and --save leave
// empty, as --report-to asks; an earlier run's checkpoints are never overwritten.
TrainOptions resolve_outputs(TrainOptions o) {
  // Options checked before anything is written.
  if (o.mixed_precision != "no" && o.mixed_precision != "bf16" && o.mixed_precision != "fp16")
    fail("--mixed-precision '{}': expected no, bf16 or fp16", o.mixed_precision);
  if (o.mixed_precision == "fp16") (void)LossScaler(o.loss_scale);  // fails on a bad --loss-scale-* value
  bool jsonl = false, tensorboard = false;
  std::string rest = o.report_to;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    if (item == "jsonl") jsonl = true;
    else if (item == "tensorboard") tensorboard = true;
    else if (item != "none" && !item.empty())
      fail("--report-to '{}': '{}' is not one of jsonl, tensorboard, none", o.report_to, item);
  }
  if (!o.output_dir.empty()) {
    const fs::path d = o.output_dir;
    if (o.metrics.empty() && jsonl) o.metrics = (d / "metrics.jsonl").string();
    if (o.tensorboard_dir.empty() && tensorboard) o.tensorboard_dir = (d / "tensorboard").string();
    if (o.checkpoint_dir.empty()) o.checkpoint_dir = d.string();
    if (o.save.empty()) o.save = (d / "model.onnx").string();
    std::error_code ec;
    if (detect_launch().rank == 0) fs::create_directories(d, ec);  // other ranks write nothing
    if (ec) fail("cannot create the output folder '{}': {}", o.output_dir, ec.message());
  }
  if (o.eval_every > 0 && o.eval_data.empty()) fail("--eval-every needs --eval-data FILE.npz");
  if (!o.checkpoint_dir.empty() && !o.resume) {
    std::string earlier = latest_checkpoint(o.checkpoint_dir);
    if (!earlier.empty())
      fail("'{}' already holds checkpoints of an earlier run ({}): pass --resume to continue it, or choose another "
           "--output-dir / --checkpoint-dir", o.checkpoint_dir, earlier);
  }
  return o;
}
}  // namespace

TrainResult train(const TrainOptions& options) {
  const TrainOptions o = resolve_outputs(options);
  const DeviceList devices = parse_devices(o.devices, local_rank_on_host(), processes_on_host());
  const int local = int(devices.index.size());
  if (!devices.why_cpu.empty() && !o.quiet && detect_launch().rank == 0)
    fmt::print(stderr, "onnxdp: no GPU ({}): training on the CPU\n", devices.why_cpu);
  // Each replica's device, made on the replica's own thread (a CUDA device is current per thread).
  if (o.tf32 && devices.kind == DeviceKind::cpu && !o.quiet && detect_launch().rank == 0)
    fmt::print(stderr, "onnxdp: --tf32 applies to GPUs; the CPU computes in fp32\n");
  auto device_of = [&](int k) -> std::shared_ptr<DeviceBackend> {
    if (devices.kind == DeviceKind::cpu) return nullptr;
    std::shared_ptr<DeviceBackend> d = make_device_backend(devices.kind, devices.index[size_t(k)]);
    d->allow_tf32(o.tf32);
    return d;
  };
  CommOptions copts;
  copts.timeout_s = o.comm_timeout_s;
  LaunchInfo launch = detect_launch();
  const int host_processes = processes_on_host();
  if (devices.kind == DeviceKind::cpu) prepare_cpu_replicas(local, host_processes);
  if (local == 1 && !launch.launched) {
    TrainResult r;
    train_replica(o, nullptr, device_of(0), r);
    return r;
  }
  CommWorld world = make_world(local, copts);
  std::vector<TrainResult> results(world.size());
  run_replicas(world, [&](Communicator& c) {
    use_replica_threads(local, host_processes);
    size_t k = 0;
    while (world[k].get() != &c) ++k;
    train_replica(o, &c, device_of(int(k)), results[k]);
  });
  // This process's first replica reports (replica 0 of the world under MPI rank 0).
  return results[0];
}

}  // namespace onnxdp
