#include "train/trainer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <tuple>

#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "compile/compile.h"
#include "exec/cpu/threads.h"
#include "exec/device_backend.h"
#include "exec/flat_state.h"
#include "exec/plan.h"
#include "exec/profile.h"
#include "graph/checked.h"
#include "importer/export_metadata.h"
#include "importer/onnx_io.h"
#include "importer/trainability.h"
#include "parallel/communicator.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/evaluator.h"
#include "train/loss_scaler.h"
#include "train/progress.h"
#include "train/read_ahead.h"
#include "train/outputs.h"
#include "train/replicas.h"
#include "train/tensorboard.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {

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
    if (n.op == Op::AllReduce || n.op == Op::ReduceScatter)
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

// A fingerprint of what every replica must agree on before step 1: the training graph's nodes
// (ops and names, not the shard's row counts), the parameters' shapes and the bucket plan.
std::string training_fingerprint(const Graph& g, const std::vector<Bucket>& buckets) {
  std::string s;
  for (const Node& n : g.nodes) s += fmt::format("node {} {}\n", op_name(n.op), n.name);
  for (ValueId p : g.parameters()) s += fmt::format("param {} {}\n", g.value(p).name, shape_str(g.value(p).shape));
  for (size_t b = 0; b < buckets.size(); ++b) s += fmt::format("bucket {} {} bytes\n", b, buckets[b].bytes);
  return s;
}

// The options every replica must train with, one per line (global batch, optimizer and its
// settings, schedule, seed, steps / epochs, loss, data order, precision): compared before step 1
// with the training graph, so ranks started with another --lr or --seed stop with the option named.
std::string hyper_parameters(const TrainOptions& o) {
  const OptimizerOptions& p = o.optimizer;
  std::string s;
  auto line = [&](const char* name, const auto& value) { s += fmt::format("option {} {}\n", name, value); };
  line("--batch-size (global)", o.batch_size);
  line("--grad-accum", o.grad_accum);
  line("--optimizer", int(p.kind));
  line("--lr", p.lr);
  line("--momentum", p.momentum);
  line("--nesterov", p.nesterov);
  line("--weight-decay", p.weight_decay);
  line("betas", fmt::format("{} {}", p.beta1, p.beta2));
  line("eps", p.eps);
  line("--max-grad-norm", p.max_grad_norm);
  line("--lr-schedule", int(o.schedule));
  line("--warmup-steps", o.warmup_steps);
  line("--seed", o.seed);
  line("--steps", o.steps);
  line("--epochs", o.epochs);
  line("--loss", int(o.loss));
  line("--label", o.label);
  line("--class-axis", o.class_axis);
  line("--no-shuffle", !o.shuffle);
  line("--drop-last", o.drop_last);
  line("--mixed-precision", o.mixed_precision);
  line("--loss-scale-init", o.loss_scale.init);
  line("--loss-scale-growth-interval", o.loss_scale.growth_interval);
  line("--local-bn", o.local_bn);
  line("--zero-stage", o.zero_stage);
  line("--grad-dtype", o.grad_dtype);
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

// --data, or the .npz beside the model (model.npz for model.onnx).
std::string training_data_path(const TrainOptions& o) {
  if (!o.data.empty()) return o.data;
  return (fs::path(o.model).parent_path() / fs::path(o.model).stem()).string() + ".npz";
}

// One forward/backward pass of an optimizer step: a micro-batch of b global rows out of the
// step's step_rows (b == step_rows without --grad-accum).
struct MicroBatch {
  int64_t b = 0, step_rows = 0;
  bool accumulate = false;  // --grad-accum > 1: inputs grad_accum/* carry the step's sums so far
  bool sync = true;         // the step's last micro-batch: gradient buckets all-reduce the sums
};

// compile()'s options for replica `rank` of `world` training a micro-batch mb, the shard's rows
// given by `shapes`.
CompileOptions train_compile_options(const TrainOptions& o, ImportOptions shapes, const LossOptions& lo,
                                     const std::vector<std::string>& batch_inputs, int world, int rank,
                                     const MicroBatch& mb) {
  CompileOptions co;
  co.mode = CompileMode::train;
  co.world = world;
  co.rank = rank;
  co.batch = mb.b;
  co.import = std::move(shapes);
  co.batch_inputs = batch_inputs;
  co.mixed_precision = o.mixed_precision;
  co.loss = lo;
  co.freeze = o.freeze;
  co.trainable = o.trainable;
  co.local_bn = o.local_bn;
  co.bucket_mb = o.bucket_mb;
  co.zero_stage = o.zero_stage;
  if (o.grad_dtype != "fp32" && o.grad_dtype != "bf16")
    fail("--grad-dtype {}: expected fp32 (the default) or bf16", o.grad_dtype);
  co.grad_dtype = o.grad_dtype == "bf16" ? DType::bf16 : DType::f32;
  co.step_rows = mb.step_rows;
  co.accumulate = mb.accumulate;
  co.sync = mb.sync;
  return co;
}

// A compiled step of one micro-batch size, bound to the replica's flat state.
struct TrainPlan {
  std::unique_ptr<Plan> plan;
  ValueId loss;
  std::vector<ValueId> grads;      // per trainable parameter
  std::vector<char> grad_in_flat;  // per trainable parameter: the plan writes its gradient into the flat buffer
  std::vector<int> bucket_nodes;   // the gradient buckets' AllReduce nodes
  std::vector<std::pair<ValueId, std::string>> running_stats;  // BN outputs -> parameter name
};

// What one optimizer step gives the log.
struct StepOutcome {
  float loss = 0, lr = 0, grad_norm = 0, loss_scale = 1;
  bool skipped = false;
  double seconds = 0, comm_wait_ms = 0;
  double time_s = 0;  // since the training loop started (after set-up), at the step's end
  int64_t rows = 0;
};

// One replica's training, in the parts a run goes through: load (model, data, loss), plans
// (compiled per micro-batch size, bound to the flat state), start (broadcast, optimizer, outputs,
// resume), the step loop, checkpoints, the log and the summary.
class Replica {
 public:
  Replica(const TrainOptions& options, Communicator* comm, std::shared_ptr<DeviceBackend> device, TrainResult& result)
      : o_(options), comm_(comm), device_(std::move(device)), result_(result) {}

  void train() {
    load();
    start();
    for (int64_t step = first_step_; step <= total_steps_; ++step) {
      const StepOutcome s = run_step(step, next_rows());
      result_.losses.push_back(s.loss);
      result_.grad_norms.push_back(s.grad_norm);
      result_.comm_wait_ms += s.comm_wait_ms;
      if (state_->sharded() && checkpoint_due(step)) gather_moments();  // every replica, for replica 0's checkpoint
      // Evaluation every --eval-every steps and after the last: every replica its share of the
      // held-out batches, the sums all-reduced (train/evaluator.h).
      std::optional<Evaluator::Result> ev;
      if (evaluator_ && evaluates_at(step)) {
        state_->pull();
        ev = evaluator_->run(master_, comm_);
        result_.evaluated = true;
        result_.eval_loss = ev->loss;
        result_.eval_accuracy = ev->accuracy;
      }
      if (lead_) log_step(step, s, ev);
      // Replica 0 writes a checkpoint: the others wait for it without the timeout (--comm-timeout
      // bounds a collective's wait for a peer, not replica 0's own work).
      if (comm_ && checkpoint_due(step)) comm_->idle_barrier();
    }
    finish();
  }

 private:
  // --- load: the model, its data and loss, the evaluator ---
  void load() {
    world_ = comm_ ? comm_->size() : 1;
    rank_ = comm_ ? comm_->rank() : 0;
    lead_ = rank_ == 0;
    quiet_ = o_.quiet || !lead_;
    if (device_) device_->connect(comm_);  // every replica at once, before any plan
    if (o_.per_device_batch_size > 0)
      o_.batch_size = checked_mul(o_.per_device_batch_size, world_, "--per-device-train-batch-size times the replicas");
    proto_ = load_model_proto(o_.model, &export_notes_);
    for (const std::string& w : export_warnings(proto_)) export_notes_.push_back("warning: " + w);
    for (const std::string& n : decide_trainability(proto_, {o_.freeze, o_.trainable}).notes) export_notes_.push_back(n);
    data_path_ = training_data_path(o_);
    const bool need_label = o_.loss != LossKind::none;
    data_ = load_shared_dataset(data_path_, proto_, o_.label, need_label);
    if (o_.batch_size <= 0) fail("--batch-size must be positive");
    batch_ = std::min(o_.batch_size, data_.samples);
    if (batch_ < o_.batch_size && !quiet_)  // not silently: the step is smaller than asked for
      fmt::print(stderr, "onnxdp train: the batch size {} is more than the {} samples of '{}': each step takes all {}\n",
                 o_.batch_size, data_.samples, data_path_, batch_);
    model_dir_ = fs::path(o_.model).parent_path().string();
    lo_.kind = o_.loss;
    lo_.label_name = o_.label;
    lo_.class_axis = o_.class_axis;
    if (need_label) lo_.label_dtype = data_.arrays.at(o_.label).dtype;
    for (const auto& [name, t] : data_.arrays) batch_inputs_.push_back(name);  // graph inputs and the label
    if (o_.grad_accum < 1) fail("--grad-accum must be at least 1 (got {})", o_.grad_accum);
    if (o_.zero_stage < 0 || o_.zero_stage > 1)
      fail("--zero-stage {}: onnxdp has stage 0 (every replica holds the whole optimizer state) and 1 (sharded)",
           o_.zero_stage);
    // Held-out data is checked before step 1, not after the training.
    if (!o_.eval_data.empty())
      evaluator_ = std::make_unique<Evaluator>(o_.eval_data, proto_, model_dir_, lo_, o_, device_);
  }

  // --- plans: one per micro-batch size, compiled and bound to the flat state ---
  TrainPlan build(const MicroBatch& mb) {
    const int64_t rows = shard_rows(mb.b, world_)[size_t(rank_)];
    if (rows == 0)
      fail("a {} of {} rows cannot be split over {} replicas (each needs a row); use --drop-last or a larger "
           "--batch-size", o_.grad_accum > 1 ? "micro-batch" : "batch", mb.b, world_);
    CompileOptions co = train_compile_options(o_, shapes_for(data_, rows), lo_, batch_inputs_, world_, rank_, mb);
    co.cpu = device_ == nullptr;
    Compiled c = compile(proto_, model_dir_, co);
    if (!state_) {  // the first build (the full step's plan, on every replica) makes the state
      make_state(c);
      if (o_.loss == LossKind::cross_entropy) {  // labels in range, training and held-out data, before step 1
        const Shape& logits = c.g.value(c.prediction).shape;
        const int64_t axis = o_.class_axis < 0 ? int64_t(logits.size()) - 1 : o_.class_axis;
        if (axis < 0 || axis >= int64_t(logits.size()))
          fail("--class-axis {}: the model's output has shape {}", o_.class_axis, shape_str(logits));
        check_class_labels(data_, data_path_, o_.label, logits[size_t(axis)]);
        if (evaluator_) evaluator_->check_labels(logits[size_t(axis)]);
      }
      for (const Bucket& bk : c.buckets) result_.bucket_bytes.push_back(bk.bytes);
      check_same_graph(c);
    }
    // A graph's parameters take the master tensors' bytes, so every plan updates the same buffers.
    for (ValueId p : c.g.parameters())
      if (auto it = master_.find(c.g.value(p).name); it != master_.end()) c.g.value(p).data = it->second;
    TrainPlan tp;
    tp.grads = c.grads;
    for (const Bucket& bk : c.buckets) tp.bucket_nodes.push_back(bk.node);
    tp.loss = c.loss;
    tp.running_stats = c.running_stats;
    PlanOptions po{.device = device_, .device_graph = o_.cuda_graph};
    po.changed_on_host.emplace();  // the running statistics; frozen parameters never change
    for (const auto& [v, name] : c.running_stats) po.changed_on_host->insert(name);
    GradientPlaces places = gradient_places(c.g, c.grads, trainable_);
    state_->bind(po, trainable_, places.slice, c.grads, places.in_flat, mb.sync);
    tp.grad_in_flat = places.in_flat;
    tp.plan = std::make_unique<Plan>(std::move(c.g), std::move(po));
    return tp;
  }

  TrainPlan& plan_for(int64_t b, int64_t step_rows, bool last) {
    const auto key = std::make_tuple(b, step_rows, last);
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, build({b, step_rows, o_.grad_accum > 1, last})).first;
    return it->second;
  }

  // The flat state, in the order backward produces the gradients (each bucket one range), and the
  // master tensors: the trainable ones views of the flat parameters, the others the model's.
  void make_state(const Compiled& c) {
    trainable_ = c.trainable;
    std::vector<size_t> layout = c.order;
    for (size_t i = 0; i < trainable_.size(); ++i)
      if (std::find(layout.begin(), layout.end(), i) == layout.end()) layout.push_back(i);
    std::vector<int64_t> sizes;
    for (const std::string& name : trainable_) {
      sizes.push_back(c.g.value(c.g.find(name)).data.numel());
      trainable_numel_ += sizes.back();
    }
    state_ = std::make_unique<FlatState>(sizes, layout, device_);
    if (o_.zero_stage == 1 && comm_ && world_ > 1) state_->shard(comm_);  // a world of one has nothing to shard
    for (size_t i = 0; i < trainable_.size(); ++i) {
      const Value& v = c.g.value(c.g.find(trainable_[i]));
      Tensor view = Tensor::view(state_->params(), state_->offset(i) * 4, DType::f32, v.shape);
      std::memcpy(view.data(), v.data.data(), v.data.nbytes());
      master_[v.name] = view;
    }
    for (ValueId p : c.g.parameters())
      if (!master_.count(c.g.value(p).name)) master_[c.g.value(p).name] = c.g.value(p).data;
    result_.trainable = trainable_;
    result_.frozen = c.frozen;
  }

  // Every replica must run the same training graph: compared before step 1.
  void check_same_graph(const Compiled& c) {
    if (!comm_) return;
    // The data too: every rank reads its own rows of the same order, so the files must agree.
    std::string mine = hyper_parameters(o_) +
                       fmt::format("data: {} samples in {} files\n", data_.samples, data_.shards.size()) +
                       training_fingerprint(c.g, c.buckets);
    std::vector<std::vector<uint8_t>> all;
    comm_->all_gather_bytes(mine.data(), mine.size(), all);
    for (size_t r = 0; r < all.size(); ++r) {
      std::string theirs(all[r].begin(), all[r].end());
      if (theirs != mine)
        fail("replica {} trains differently from replica {} (another model, data or options?): first difference at {}",
             r, rank_, first_difference(theirs, mine));
    }
  }

  // The epoch's last step may be shorter than full_step_ (the data's remainder, unless
  // --drop-last): each of its micro-batches must give every replica a row. Checked before step 1,
  // not when the step comes (DataParallel would hand a replica an empty batch).
  void check_epoch_end_splits() const {
    const int64_t rest = data_.samples % full_step_;
    if (o_.drop_last || rest == 0) return;
    for (const int64_t mb : {std::min(batch_, rest), last_micro(rest)})
      if (shard_rows(mb, world_)[size_t(world_ - 1)] == 0)
        fail("the last step of each epoch has {} rows (the {} samples in steps of {}): its {} of {} rows cannot be split "
             "over {} replicas (each needs a row); use --drop-last or another --batch-size", rest, data_.samples,
             full_step_, o_.grad_accum > 1 ? "micro-batch" : "batch", mb, world_);
  }

  // A step of n rows runs micro-batches of batch_ rows and a last one of the rest.
  int64_t last_micro(int64_t n) const { return n - (n - 1) / batch_ * batch_; }

  // --- start: the full step's plan, replicas made equal, optimizer, outputs, resume ---
  void start() {
    // Rows of a whole optimizer step (grad_accum * batch_, at most the data; no product that wraps).
    full_step_ = o_.grad_accum > data_.samples / batch_ ? data_.samples : o_.grad_accum * batch_;
    check_epoch_end_splits();
    TrainPlan& full = plan_for(last_micro(full_step_), full_step_, true);
    // Gradient buckets that are one range of the flat buffer: one all-reduce call each.
    result_.contiguous_buckets = full.plan->contiguous_all_reduces(full.bucket_nodes);
    if (comm_) {  // replicas start identical: replica 0's parameters and running statistics
      comm_->broadcast(state_->params().data(), state_->params().nbytes(), 0);
      for (auto& [name, t] : master_)
        if (std::find(trainable_.begin(), trainable_.end(), name) == trainable_.end()) comm_->broadcast(t.data(), t.nbytes(), 0);
    }
    const int64_t per_epoch =
        o_.drop_last ? data_.samples / full_step_ : (data_.samples + full_step_ - 1) / full_step_;
    if (per_epoch == 0) fail("--drop-last with batch size {} leaves no batch of the {} samples", full_step_, data_.samples);
    total_steps_ = o_.steps > 0 ? o_.steps : o_.epochs * per_epoch;
    // The moments of this replica's part of the flat buffers (all of them unless --zero-stage 1).
    opt_ = std::make_unique<Optimizer>(o_.optimizer, state_->shard_end() - state_->shard_begin());
    state_->set_moments(&opt_->m(), &opt_->v());
    base_lr_ = opt_->options().lr;
    if (o_.mixed_precision == "fp16") scaler_.emplace(o_.loss_scale);
    open_outputs();
    order_ = std::make_unique<SampleOrder>(data_, o_.shuffle, o_.seed);
    ahead_order_ = std::make_unique<SampleOrder>(data_, o_.shuffle, o_.seed);
    cursor_ = data_.samples;
    if (o_.resume) resume();
    if (lead_ && !o_.metrics.empty()) open_metrics();
    result_.first_step = first_step_;
    state_->push();  // the device's copies start as the host's (after the broadcast and a resume)
    t_start_ = std::chrono::steady_clock::now();
  }

  // A resumed run's metrics continue the file after the last step the checkpoint holds: the lines
  // of steps to be run again (a kill between a step's line and its checkpoint, a fallback past a
  // checkpoint that does not verify) and a partial line (a disk that filled) are cut off first.
  void open_metrics() {
    std::error_code ec;
    if (o_.resume && fs::is_regular_file(o_.metrics, ec)) {  // not a pipe or a terminal: never read those
      uint64_t keep = 0;  // bytes of the lines kept
      if (std::ifstream old(o_.metrics, std::ios::binary); old) {
        std::vector<char> line(size_t(1) << 20);  // onnxdp's lines are a few hundred bytes; longer is not one
        // Stops at a line that is too long, or has no newline (fail, eof): a partial line.
        while (old.getline(line.data(), std::streamsize(line.size())) && !old.eof()) {
          const std::string_view text(line.data(), size_t(old.gcount() - 1));  // gcount counts the newline
          const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
          if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
              j["step"].get<int64_t>() >= first_step_)
            break;
          keep += text.size() + 1;
        }
        old.close();
        fs::resize_file(o_.metrics, keep, ec);
        if (ec) fail("cannot write metrics file '{}': {}", o_.metrics, ec.message());
      }
    }
    metrics_.open(o_.metrics, o_.resume ? std::ios::app : std::ios::trunc);
    if (!metrics_) fail("cannot write metrics file '{}': {}", o_.metrics, std::strerror(errno));
  }

  void open_outputs() {
    log_every_ = o_.log_every > 0 ? o_.log_every : std::max<int64_t>(1, total_steps_ / 10);
    if (lead_ && !o_.tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(o_.tensorboard_dir);
    if (quiet_) return;
    progress_ = std::make_unique<ProgressReporter>(total_steps_, o_.progress_bar && isatty(fileno(stdout)), log_every_);
    const int64_t K = ceil_div(full_step_, batch_);  // micro-batches of a full step (--grad-accum, at most the data)
    fmt::print("onnxdp train: {} trainable tensors ({} parameters), {} frozen; {} samples, batch {}{}, {} steps\n",
               trainable_.size(), trainable_numel_, result_.frozen.size(), data_.samples, batch_,
               K > 1 ? fmt::format(" x {} micro-batches per step", K) : std::string(), total_steps_);
    for (const std::string& note : export_notes_) fmt::print("onnxdp train: {}\n", note);
    if (state_->sharded())
      fmt::print("onnxdp train: --zero-stage 1: each replica updates {} of the {} floats of the flat state and holds "
                 "their optimizer state ({:.1f} MiB, 1/{} of the {:.1f} MiB each would hold unsharded)\n",
                 state_->shard_end() - state_->shard_begin(), state_->floats(), mib(state_->moment_bytes()), world_,
                 mib(size_t(opt_->keeps_m() + opt_->keeps_v()) * size_t(state_->floats()) * sizeof(float)));
    else if (o_.zero_stage == 1)
      fmt::print("onnxdp train: --zero-stage 1 has nothing to shard in a world of one replica\n");
    // The data's memory: mapped files are read per batch (a batch's pages, given back after it);
    // only a deflated .npz is held whole.
    if (data_.shards.size() > 1 || data_.mapped_bytes() > 0)
      fmt::print("onnxdp train: data {}: {} file{}{}, {:.1f} MiB mapped and read per batch, {:.1f} MiB held in memory\n",
                 data_path_, data_.shards.size(), data_.shards.size() == 1 ? "" : "s",
                 data_.seq_len > 0 ? fmt::format(" of tokens in windows of {} + 1", data_.seq_len) : std::string(),
                 mib(data_.mapped_bytes()), mib(data_.held_bytes()));
    // The full step's plan: what runs where, and the memory it holds.
    const std::string host = device_ ? plans_.begin()->second.plan->host_ops() : std::string();
    fmt::print("onnxdp train: {} holds {:.1f} MiB per replica (activations{} {:.1f}, parameters + gradients + "
               "optimizer state {:.1f}){}{}{}\n",
               device_ ? device_->name() : std::string("the CPU"), mib(plans_bytes() + state_->bytes()),
               device_ ? " and constants" : "", mib(plans_bytes()), mib(state_->bytes()),
               !device_ ? std::string()
               : host.empty() ? std::string("; every op runs there")
                              : "; ops without a kernel there run on the CPU with copies (slow): " + host,
               device_ && o_.tf32 ? "; MatMul and Gemm in TF32" : "",
               o_.mixed_precision == "bf16"   ? "; MatMul, Gemm and convolutions in bfloat16, float32 master weights"
               : o_.mixed_precision == "fp16" ? fmt::format("; MatMul, Gemm and convolutions in float16, float32 master "
                                                            "weights, dynamic loss scale from {}", o_.loss_scale.init)
                                              : "");
  }

  // The memory a replica holds for the training (on its device, or the host): every plan made so
  // far (one per batch size: activations, and on a device its constants). With the flat state it
  // is reported at the start, in every metrics line and at the end.
  size_t plans_bytes() const {
    size_t bytes = evaluator_ ? evaluator_->memory_bytes() : 0;  // the evaluation's plans, once made
    for (const auto& [key, tp] : plans_) bytes += tp.plan->memory_bytes();
    return bytes;
  }
  static double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

  void shuffle_for(int64_t ep) { order_->set_epoch(ep); }

  // A micro-batch's place in the data: the epoch, the position of its first row in the epoch's
  // order, its global rows.
  struct BatchPlace {
    int64_t epoch = -1, position = 0, rows = 0;
    bool operator==(const BatchPlace&) const = default;
  };

  // The step after one that ended at `cursor` of `epoch`: the next full step, or what is left of
  // the epoch (a new epoch, from position 0, when nothing or, with --drop-last, too little is left).
  BatchPlace step_after(int64_t epoch, int64_t cursor) const {
    int64_t left = data_.samples - cursor;
    if (left <= 0 || (o_.drop_last && left < full_step_)) {
      ++epoch;
      cursor = 0;
      left = data_.samples;
    }
    return {epoch, cursor, std::min(full_step_, left)};
  }

  // The step's global rows (a new epoch reshuffles).
  int64_t next_rows() {
    const BatchPlace p = step_after(epoch_, cursor_);
    if (p.epoch != epoch_) {
      epoch_ = p.epoch;
      cursor_ = p.position;
      shuffle_for(epoch_);
    }
    return p.rows;
  }

  // The rows of the micro-batch at `p` that this replica reads (its Scatter's share), from
  // `order`; the others stay zero.
  std::map<std::string, Tensor> read_batch(SampleOrder& order, const BatchPlace& p) const {
    const int64_t own = shard_offset(p.rows, world_, rank_), own_rows = shard_rows(p.rows, world_)[size_t(rank_)];
    if (order.epoch() != p.epoch) order.set_epoch(p.epoch);
    std::vector<int64_t> idx(size_t(p.rows), 0);
    for (int64_t i = own; i < own + own_rows; ++i) idx[size_t(i)] = order.at(p.position + i);
    return take_rows(data_, idx, own, own + own_rows);
  }

  // The micro-batch's rows: read ahead while the one before ran, or now. Then the next one's
  // read starts in the background (train/dataset.h's reads are const: the step's thread and the
  // reader share the maps), so a step waits on the data only when reading is slower than it.
  std::map<std::string, Tensor> batch_at(int64_t step, int64_t start, int64_t mrows, int64_t step_rows) {
    const BatchPlace here{epoch_, cursor_ + start, mrows};
    std::map<std::string, Tensor> rows;
    if (ahead_.valid() && ahead_place_ == here) {
      rows = ahead_.get();  // an error of the read surfaces here
      ++result_.batches_read_ahead;
    } else {
      ahead_ = {};  // (never another place: the steps follow step_after)
      rows = read_batch(*order_, here);
    }
    BatchPlace next;
    if (start + mrows < step_rows) next = {epoch_, here.position + mrows, std::min(batch_, step_rows - start - mrows)};
    else if (step < total_steps_) {
      next = step_after(epoch_, cursor_ + step_rows);
      next.rows = std::min(batch_, next.rows);
    }
    if (next.rows > 0) {
      ahead_place_ = next;
      ahead_ = reader_.run([this, next] { return read_batch(*ahead_order_, next); });
    }
    return rows;
  }

  // --- checkpoints: the master tensors, the optimizer state under torch.optim's names, the state ---
  // "exp_avg/<parameter>" and "exp_avg_sq/<parameter>" (adam, adamw), "momentum_buffer/<parameter>"
  // (momentum).
  // The tensors given to f hold the moments of flat-buffer floats [base, base + their size).
  void for_each_state(Tensor& m, Tensor& v, const std::function<void(const std::string&, size_t, Tensor&)>& f) {
    for (size_t i = 0; i < trainable_.size(); ++i) {
      if (opt_->keeps_m()) f((opt_->keeps_v() ? "exp_avg/" : "momentum_buffer/") + trainable_[i], i, m);
      if (opt_->keeps_v()) f("exp_avg_sq/" + trainable_[i], i, v);
    }
  }
  // --zero-stage 1 before a checkpoint: every replica sends its part of the moments to replica 0.
  void gather_moments() { state_->gather_moments(opt_->keeps_m(), opt_->keeps_v(), full_m_, full_v_); }
  bool evaluates_at(int64_t step) const {  // every replica knows; only replica 0 has the evaluator
    return !o_.eval_data.empty() && ((o_.eval_every > 0 && step % o_.eval_every == 0) || step == total_steps_);
  }
  bool checkpoint_due(int64_t step) const {
    return !o_.checkpoint_dir.empty() &&
           ((o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0) || step == total_steps_);
  }

  void resume() {
    if (o_.checkpoint_dir.empty()) fail("--resume needs --checkpoint-dir");
    // The newest checkpoint that verifies (train/checkpoint.h); newer ones that do not are named.
    const std::vector<std::string> found = checkpoints_newest_first(o_.checkpoint_dir);
    if (found.empty()) {
      if (!quiet_) fmt::print("no checkpoint in {} yet: starting from step 1\n", o_.checkpoint_dir);
      return;
    }
    std::optional<Checkpoint> loaded;
    std::string rejected;
    for (const std::string& path : found) {
      try {
        loaded = load_checkpoint(path);
        last_checkpoint_ = path;
        break;
      } catch (const Error& e) {
        rejected += fmt::format("\n  {}", e.what());
      }
    }
    if (!loaded) fail("--resume: no checkpoint in '{}' verifies:{}", o_.checkpoint_dir, rejected);
    if (!rejected.empty() && lead_)
      fmt::print(stderr, "onnxdp: resuming from {}, the newest checkpoint that verifies; newer ones do not:{}\n",
                 last_checkpoint_, rejected);
    Checkpoint& c = *loaded;
    for (auto& [name, t] : master_) {
      auto it = c.model.find(name);
      if (it == c.model.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
        fail("checkpoint '{}' does not match the model: initializer '{}' is missing or has another shape", last_checkpoint_,
             name);
      std::memcpy(t.data(), it->second.data(), t.nbytes());
    }
    // Checkpoints hold whole moments: each replica takes the floats of its part (all without
    // --zero-stage 1), so a run resumes with any number of replicas.
    const int64_t lo = state_->shard_begin(), hi = state_->shard_end();
    for_each_state(opt_->m(), opt_->v(), [&](const std::string& key, size_t i, Tensor& state) {
      auto it = c.optimizer.find(key);
      const Tensor& p = master_.at(trainable_[i]);
      if (it == c.optimizer.end() || it->second.shape() != p.shape() || it->second.dtype() != DType::f32)
        fail("checkpoint '{}': optimizer state '{}' is missing or of another shape (another --optimizer?)",
             last_checkpoint_, key);
      const int64_t begin = int64_t(state_->offset(i)), end = begin + p.numel();
      const int64_t a = std::max(begin, lo), b = std::min(end, hi);
      if (a < b)
        std::memcpy(state.as<float>() + (a - lo), it->second.as<float>() + (a - begin), size_t(b - a) * sizeof(float));
    });
    opt_->set_steps_done(c.state.at("optimizer_steps").get<int64_t>());
    if (scaler_ && c.state.contains("loss_scale"))  // else a checkpoint of a run without fp16: the scale starts afresh
      scaler_->restore(c.state.at("loss_scale").get<float>(), c.state.at("loss_scale_growth_tracker").get<int64_t>());
    first_step_ = c.state.at("step").get<int64_t>() + 1;
    epoch_ = c.state.at("epoch").get<int64_t>();
    cursor_ = c.state.at("cursor").get<int64_t>();
    if (cursor_ > data_.samples)
      fail("checkpoint '{}': its data cursor {} is beyond the {} samples of the data (another --data?)", last_checkpoint_,
           cursor_, data_.samples);
    if (epoch_ >= 0) shuffle_for(epoch_);
    if (!quiet_) fmt::print("resumed from {} (step {})\n", last_checkpoint_, first_step_ - 1);
  }

  void write_checkpoint(int64_t step) {
    state_->pull();
    Checkpoint c;
    c.model = master_;
    const bool gathered = state_->sharded();  // the moments train() gathered for this checkpoint
    // Each tensor a view of the moments (no copy of the optimizer state while it is written).
    for_each_state(gathered ? full_m_ : opt_->m(), gathered ? full_v_ : opt_->v(),
                   [&](const std::string& key, size_t i, Tensor& state) {
                     c.optimizer[key] = Tensor::view(state, state_->offset(i) * sizeof(float), DType::f32,
                                                     master_.at(trainable_[i]).shape());
                   });
    c.state = {{"step", step}, {"epoch", epoch_}, {"cursor", cursor_}, {"seed", o_.seed}, {"shuffle", o_.shuffle},
               {"batch_size", batch_}, {"grad_accum", o_.grad_accum}, {"total_steps", total_steps_},
               {"optimizer_steps", opt_->steps_done()}, {"base_lr", base_lr_}, {"model", o_.model}};
    if (scaler_) {
      c.state["loss_scale"] = scaler_->scale();
      c.state["loss_scale_growth_tracker"] = scaler_->growth_tracker();
    }
    try {
      last_checkpoint_ = save_checkpoint(o_.checkpoint_dir, step, c);
    } catch (const Error& e) {
      fail("the checkpoint of step {} was not written: {}. {}", step, e.what(),
           no_checkpoint_or_last("The last good checkpoint is ") +
               (last_checkpoint_.empty() ? "" : " (--resume continues from it)."));
    }
    full_m_ = Tensor();  // --zero-stage 1: the gathered moments are held only while a checkpoint is written
    full_v_ = Tensor();
  }

  std::string no_checkpoint_or_last(const char* lead_in) const {
    return last_checkpoint_.empty() ? std::string("No checkpoint was written.")
                                    : fmt::format("{}{}", lead_in, last_checkpoint_);
  }

  // --- one optimizer step: the micro-batches, then the update ---
  StepOutcome run_step(int64_t step, int64_t rows) {
    StepOutcome s;
    s.rows = rows;
    const auto t0 = std::chrono::steady_clock::now();
    if (comm_) comm_->reset_comm_wait_ms();
    if (device_) device_->take_comm_wait_ms();  // what an evaluation or a checkpoint waited
    s.lr = scheduled_lr(o_.schedule, base_lr_, step, o_.warmup_steps, total_steps_);
    // The step's update scalars; with fp16 the gradients come scaled by the step's loss scale.
    OptimizerUpdate u = opt_->begin_step(s.lr);
    s.loss_scale = scaler_ ? scaler_->scale() : 1.0f;
    if (scaler_) {
      u.inv_scale = scaler_->inv_scale();
      u.skip_nonfinite = true;
    }
    state_->begin_step(u);
    for (int64_t start = 0; start < rows; start += batch_)  // the micro-batches (one without --grad-accum)
      s.loss = run_micro_batch(step, start, std::min(batch_, rows - start), rows, s.loss, s.loss_scale);
    cursor_ += rows;
    if (!std::isfinite(s.loss))
      fail("the loss is {} at step {} (epoch {}); training stopped.{} {}", std::isnan(s.loss) ? "NaN" : fmt::format("{}", s.loss),
           step, epoch_ + 1,
           scaler_ ? " With --mixed-precision fp16 a forward value beyond float16's range (65504) gives this; bf16 has "
                     "float32's range."
                   : "",
           no_checkpoint_or_last("The last good checkpoint is ") +
               (last_checkpoint_.empty() ? "" : " (--resume continues from it)."));
    const auto t_opt = std::chrono::steady_clock::now();
    const double squared = state_->end_step();  // of the (scaled) gradients; the update has run
    s.grad_norm = float(gradient_norm(u, squared));
    s.skipped = skips_step(u, squared);
    if (scaler_) update_loss_scale(step, s);
    const auto t_end = std::chrono::steady_clock::now();
    s.seconds = std::chrono::duration<double>(t_end - t0).count();
    s.time_s = std::chrono::duration<double>(t_end - t_start_).count();
    if (o_.profile && lead_ && step > first_step_) {
      ++profiled_steps_;
      profiled_wall_ += s.seconds;
      profiled_optimizer_ += std::chrono::duration<double>(t_end - t_opt).count();
    }
    // The host's waits for asynchronous collectives, and a device's compute stream's waits for its
    // communication stream (measured there: the host never waits for a GPU's all-reduces).
    s.comm_wait_ms = (comm_ ? comm_->comm_wait_ms() : 0.0) + (device_ ? device_->take_comm_wait_ms() : 0.0);
    samples_seen_ += rows;
    return s;
  }

  // One forward/backward pass over rows [start, start + mrows) of the step's `step_rows`; returns
  // the step's loss so far (the mean over the micro-batches run, as the last one's graph sums it).
  float run_micro_batch(int64_t step, int64_t start, int64_t mrows, int64_t step_rows, float loss_so_far,
                        float loss_scale) {
    const bool last = start + mrows == step_rows;
    TrainPlan& tp = plan_for(mrows, step_rows, last);
    // The graph's inputs hold the micro-batch's global rows; this replica reads only its own.
    std::map<std::string, Tensor> inputs = batch_at(step, start, mrows, step_rows);
    if (o_.grad_accum > 1) {  // the sums so far are in the flat gradient buffer: zero before the first micro-batch
      if (start == 0) state_->zero_grads();
      inputs["grad_accum/loss"] = Tensor::scalar_f32(start == 0 ? 0.f : loss_so_far);
    }
    if (scaler_) inputs[kLossScaleInput] = Tensor::scalar_f32(loss_scale);
    RunState rs;
    rs.seed = o_.seed;
    rs.step = uint64_t(step);
    rs.batch_offset = shard_offset(mrows, world_, rank_);
    rs.sample_offset = start;  // Dropout masks as one device's on the whole step
    rs.comm = comm_;
    rs.shards = state_->shards();
    rs.profile = o_.profile && lead_ && step > first_step_ ? &profile_ : nullptr;
    tp.plan->execute(inputs, rs);
    const float loss = tp.plan->ref(tp.loss).as<float>()[0];
    state_->collect_gradients(*tp.plan, tp.grads, tp.grad_in_flat);
    for (auto& [v, name] : tp.running_stats) {
      TensorRef r = tp.plan->ref(v);
      std::memcpy(master_.at(name).data(), r.data, master_.at(name).nbytes());
    }
    return loss;
  }

  // GradScaler.update(); a skipped step is not one of the optimizer's.
  void update_loss_scale(int64_t step, const StepOutcome& s) {
    if (s.skipped) {
      opt_->undo_step();
      ++result_.skipped_steps;
    }
    scaler_->update(!s.skipped);
    result_.loss_scales.push_back(scaler_->scale());
    if (scaler_->exhausted())
      fail("--mixed-precision fp16: the gradients were not finite at step {} even with the loss scale down to {}: "
           "they overflow without scaling (or hold a NaN); training stopped. {}", step, s.loss_scale,
           no_checkpoint_or_last("The last good checkpoint is ") + (last_checkpoint_.empty() ? "" : "."));
  }

  // --- the log: metrics.jsonl, TensorBoard, checkpoints, the progress line ---
  void log_step(int64_t step, const StepOutcome& s, const std::optional<Evaluator::Result>& ev) {
    const double samples_per_s = s.seconds > 0 ? double(s.rows) / s.seconds : 0.0;
    const double memory_mib = mib(plans_bytes() + state_->bytes());
    if (metrics_.is_open()) {
      nlohmann::json j = {{"step", step}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm},
                          {"samples_per_s", samples_per_s}, {"epoch", epoch_ + 1}, {"comm_wait_ms", s.comm_wait_ms},
                          {"memory_mib", std::round(memory_mib * 100) / 100}, {"time_s", s.time_s}};
      if (scaler_) {
        j["loss_scale"] = s.loss_scale;
        j["skipped"] = s.skipped;
      }
      if (ev) {
        j["eval_loss"] = ev->loss;
        if (ev->accuracy >= 0) j["eval_accuracy"] = ev->accuracy;
      }
      errno = 0;
      metrics_ << j.dump() << "\n";
      metrics_.flush();
      if (!metrics_)
        fail("writing metrics file '{}' failed at step {}: {}", o_.metrics, step,
             errno ? std::strerror(errno) : "the disk is full or failing");
    }
    if (tensorboard_) {
      tensorboard_->scalar("train/loss", step, s.loss);
      tensorboard_->scalar("train/learning_rate", step, s.lr);
      tensorboard_->scalar("train/grad_norm", step, s.grad_norm);
      if (scaler_) tensorboard_->scalar("train/loss_scale", step, s.loss_scale);
      tensorboard_->scalar("perf/samples_per_s", step, float(samples_per_s));
      tensorboard_->scalar("perf/comm_wait_ms", step, float(s.comm_wait_ms));
      tensorboard_->scalar("perf/memory_mib", step, float(memory_mib));
      if (ev) {
        tensorboard_->scalar("eval/loss", step, float(ev->loss));
        if (ev->accuracy >= 0) tensorboard_->scalar("eval/accuracy", step, float(ev->accuracy));
      }
      if (step % log_every_ == 0 || step == total_steps_) tensorboard_->flush();
    }
    if (checkpoint_due(step)) write_checkpoint(step);
    if (progress_) {
      progress_->update(step, s.loss, s.lr, samples_per_s);
      if (ev)
        progress_->message(ev->accuracy >= 0 ? fmt::format("eval at step {}: loss {:.4f}, accuracy {:.2f} %", step,
                                                           ev->loss, 100 * ev->accuracy)
                                             : fmt::format("eval at step {}: loss {:.4f}", step, ev->loss));
    }
  }

  // --- the end: results, the trained model, the summary ---
  void finish() {
    if (progress_) progress_->finish();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start_).count();
    result_.steps = total_steps_;
    result_.samples_per_s = secs > 0 ? double(samples_seen_) / secs : 0;
    for (const auto& [key, tp] : plans_) result_.replayed_plans += tp.plan->replays_graph();
    result_.peak_bytes = plans_bytes() + state_->bytes();
    result_.optimizer_state_bytes = state_->moment_bytes();
    result_.device_bytes = device_ ? result_.peak_bytes : 0;
    if (comm_) {  // every replica's figure, for the summary's spread and the caller
      std::vector<std::vector<uint8_t>> all;
      const uint64_t mine = result_.peak_bytes;
      comm_->all_gather_bytes(&mine, sizeof mine, all);
      for (const auto& a : all) {
        uint64_t b = 0;
        if (a.size() == sizeof b) std::memcpy(&b, a.data(), sizeof b);
        result_.replica_bytes.push_back(size_t(b));
      }
    }
    state_->pull();
    result_.parameters = master_;
    result_.world_size = world_;
    if (comm_) comm_->leave();  // the collectives are over; what follows is replica 0's alone
    if (!lead_) return;
    if (tensorboard_) {
      result_.tensorboard_dir = o_.tensorboard_dir;
      tensorboard_.reset();
    }
    result_.metrics_file = o_.metrics;
    result_.last_checkpoint = last_checkpoint_;
    if (!o_.save.empty()) {
      export_model(o_.model, o_.save, master_);
      result_.saved_model = o_.save;
    }
    if (!quiet_) print_summary(secs);
  }

  void print_summary(double secs) {
    auto megabytes = [](double bytes) { return fmt::format("{:.1f} MB", bytes / (1024.0 * 1024.0)); };
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    const TrainResult& r = result_;
    const int64_t steps_run = int64_t(r.losses.size());
    // Sub-second runs (the bundled mlp trains 705 steps in ~50 ms) in ms, not as "0.0 s".
    const std::string took = secs < 1 ? fmt::format("{:.0f} ms", secs * 1000) : fmt::format("{:.1f} s", secs);
    fmt::print("done: {} steps in {}, final loss {:.4f}, {:.0f} samples/s{}\n", steps_run, took,
               r.losses.empty() ? 0.f : r.losses.back(), r.samples_per_s,
               world_ > 1 ? fmt::format(" over {} replicas", world_) : std::string());
    if (r.evaluated) {
      if (r.eval_accuracy >= 0)
        fmt::print("eval on {}: loss {:.4f}, accuracy {:.2f} %\n", o_.eval_data, r.eval_loss, 100 * r.eval_accuracy);
      else
        fmt::print("eval on {}: loss {:.4f}\n", o_.eval_data, r.eval_loss);
    }
    fmt::print("{}memory per replica{}: {} (activations{} of {} plan{} {}, parameters + gradients + optimizer state "
               "{}); process peak RSS {}\n",
               device_ ? "device " : "", device_ ? " on " + device_->name() : std::string(),
               megabytes(double(r.peak_bytes)), device_ ? " and constants" : "", plans_.size(),
               plans_.size() == 1 ? "" : "s", megabytes(double(plans_bytes())), megabytes(double(state_->bytes())),
               megabytes(double(ru.ru_maxrss) * 1024));
    if (r.replica_bytes.size() > 1) {
      const auto [lo, hi] = std::minmax_element(r.replica_bytes.begin(), r.replica_bytes.end());
      fmt::print("memory of the {} replicas: {} to {} ({:.1f} % apart)\n", r.replica_bytes.size(), megabytes(double(*lo)),
                 megabytes(double(*hi)), *lo ? 100.0 * double(*hi - *lo) / double(*lo) : 0.0);
    }
    {  // The rest of the process's memory: the host copies outside the plans and the flat state.
      size_t frozen = 0;
      for (const auto& [name, t] : master_)
        if (std::find(trainable_.begin(), trainable_.end(), name) == trainable_.end()) frozen += t.nbytes();
      // Checkpoints write views of the optimizer state; with --zero-stage 1 replica 0 gathers it whole first.
      const size_t gathered = size_t(opt_->keeps_m() + opt_->keeps_v()) * size_t(state_->floats()) * sizeof(float);
      fmt::print("host memory besides: frozen parameters and running statistics {}, data held {} (one copy per process){}\n",
                 megabytes(double(frozen)), megabytes(double(data_.held_bytes())),
                 last_checkpoint_.empty() || !state_->sharded()
                     ? std::string()
                     : "; a checkpoint gathers the whole optimizer state on replica 0 while it writes (" +
                           megabytes(double(gathered)) + ")");
    }
    if (data_.shards.size() > 1 || data_.mapped_bytes() > 0) {  // what the data costs: a batch and the one read ahead
      size_t row = 0;
      for (const auto& [name, a] : data_.arrays) row += a.row_bytes();
      fmt::print("data: {} mapped, read a micro-batch at a time ({} per replica, and one more read ahead); {} held in "
                 "memory\n", megabytes(double(data_.mapped_bytes())),
                 megabytes(double(row * size_t(shard_rows(batch_, world_)[size_t(rank_)]))),
                 megabytes(double(data_.held_bytes())));
    }
    if (device_) fmt::print("{} of {} plans replay a recorded CUDA graph\n", r.replayed_plans, plans_.size());
    if (scaler_)
      fmt::print("float16 loss scaling: {} of {} steps skipped (gradients not finite), loss scale now {}\n",
                 r.skipped_steps, steps_run, scaler_->scale());
    if (world_ > 1)
      fmt::print("waiting on communication: {:.2f} ms per step on average ({:.1f} % of the run)\n",
                 steps_run ? r.comm_wait_ms / double(steps_run) : 0.0,
                 secs > 0 ? 100.0 * r.comm_wait_ms / 1000.0 / secs : 0.0);
    if (!r.saved_model.empty()) fmt::print("trained model: {}\n", r.saved_model);
    if (!last_checkpoint_.empty()) fmt::print("last checkpoint: {}\n", last_checkpoint_);
    if (!o_.metrics.empty()) fmt::print("metrics: {}\n", o_.metrics);
    if (!r.tensorboard_dir.empty()) fmt::print("tensorboard: tensorboard --logdir {}\n", r.tensorboard_dir);
    if (o_.profile && profiled_steps_ > 0) {
      fmt::print("profile of replica 0 over steps {}..{} ({} forward/backward passes):\n{}", first_step_ + 1,
                 first_step_ + profiled_steps_, profile_.runs, profile_.table(profiled_steps_));
      if (!profile_.shapes.empty()) fmt::print("{}", profile_.shape_table(profiled_steps_));
      fmt::print("  {:<28} {:>10.3f}\n  {:<28} {:>10.3f}\n", "optimizer (fused, flat)",
                 1e3 * (device_ ? profile_.after_run_seconds : profiled_optimizer_) / double(profiled_steps_),
                 "whole step (wall)", 1e3 * profiled_wall_ / double(profiled_steps_));
      fmt::print("BLAS alone on this machine: {:.1f} GFLOP/s (sgemm 512x512x512, {} threads{})\n", blas_sgemm_gflops(),
                 cpu_threads(), cpu_threads() == 1 ? ", by the thread's CPU time" : "");
    }
  }

  TrainOptions o_;
  Communicator* comm_;
  std::shared_ptr<DeviceBackend> device_;
  TrainResult& result_;
  int world_ = 1, rank_ = 0;
  bool lead_ = true, quiet_ = false;
  // load
  onnx::ModelProto proto_;
  std::vector<std::string> export_notes_;
  std::string data_path_;
  Dataset data_;
  int64_t batch_ = 0;  // rows of one forward/backward pass (a micro-batch with --grad-accum)
  std::string model_dir_;
  LossOptions lo_;
  std::vector<std::string> batch_inputs_;  // every array fed per step: graph inputs and the label
  std::unique_ptr<Evaluator> evaluator_;
  // plans and state
  std::map<std::tuple<int64_t, int64_t, bool>, TrainPlan> plans_;
  std::unique_ptr<FlatState> state_;
  std::map<std::string, Tensor> master_;  // every parameter by name; the trainable ones views of the flat state
  std::vector<std::string> trainable_;
  int64_t trainable_numel_ = 0;
  std::unique_ptr<Optimizer> opt_;
  float base_lr_ = 0;
  std::optional<LossScaler> scaler_;  // --mixed-precision fp16
  // the run's position
  int64_t full_step_ = 0, total_steps_ = 0, first_step_ = 1, epoch_ = -1, cursor_ = 0, samples_seen_ = 0;
  std::unique_ptr<SampleOrder> order_;        // the epoch's sample order
  std::unique_ptr<SampleOrder> ahead_order_;  // the reader's (it may be an epoch ahead)
  std::future<std::map<std::string, Tensor>> ahead_;  // the next micro-batch, being read
  BatchPlace ahead_place_;
  // Its thread (after data_ and ahead_order_, which its job reads: destroyed before them).
  ReadAhead<std::map<std::string, Tensor>> reader_;
  std::string last_checkpoint_;
  Tensor full_m_, full_v_;  // --zero-stage 1: replica 0's whole moments for a checkpoint
  // outputs
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<ProgressReporter> progress_;
  int64_t log_every_ = 1;
  std::chrono::steady_clock::time_point t_start_;
  // --profile: replica 0's kernels, from the second step on (the first pays for first touches of memory).
  Profile profile_;
  int64_t profiled_steps_ = 0;
  double profiled_wall_ = 0, profiled_optimizer_ = 0;
};

}  // namespace

// The number of replicas in this process asked for by --devices.
int local_replicas(const std::string& devices) { return int(devices_of(devices).index.size()); }

TrainingGraph training_graph(const TrainOptions& o, int world, int replica, bool last_micro, bool cpu) {
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
  const MicroBatch mb{o.batch_size, o.batch_size * std::max<int64_t>(1, o.grad_accum), o.grad_accum > 1, last_micro};
  CompileOptions co = train_compile_options(o, io, lo, batch_inputs, world, replica, mb);
  co.cpu = cpu;
  return compile(proto, fs::path(o.model).parent_path().string(), co);
}

namespace {
// Where a run's files go: --output-dir fills in what --metrics, --checkpoint-dir and --save leave
// empty, as --report-to asks; an earlier run's checkpoints are never overwritten.
// Every numeric option in its range, or an error naming it and the range: nothing is silently
// replaced. The -1 of lr and weight_decay means "the optimizer's default" (the CLI refuses a
// typed negative value before this), 0 of per_device_batch_size and steps "not given".
void check_ranges(const TrainOptions& o) {
  auto finite_at_least = [](const char* option, double v, double lo, const char* range) {
    if (!(std::isfinite(v) && v >= lo)) fail("{} {}: expected {}", option, v, range);
  };
  auto positive = [](const char* option, double v) {
    if (!(std::isfinite(v) && v > 0)) fail("{} {}: expected a finite number > 0", option, v);
  };
  auto at_least = [](const char* option, int64_t v, int64_t lo) {
    if (v < lo) fail("{} must be at least {} (got {})", option, lo, v);
  };
  if (o.optimizer.lr != -1) finite_at_least("--lr", o.optimizer.lr, 0, "a finite number >= 0");
  if (o.optimizer.weight_decay != -1) finite_at_least("--weight-decay", o.optimizer.weight_decay, 0, "a finite number >= 0");
  finite_at_least("--momentum", o.optimizer.momentum, 0, "a finite number >= 0");
  finite_at_least("--max-grad-norm", o.optimizer.max_grad_norm, 0, "a finite number >= 0 (0: no clipping)");
  if (!(o.optimizer.beta1 >= 0 && o.optimizer.beta1 < 1)) fail("beta1 {}: expected a number in [0, 1)", o.optimizer.beta1);
  if (!(o.optimizer.beta2 >= 0 && o.optimizer.beta2 < 1)) fail("beta2 {}: expected a number in [0, 1)", o.optimizer.beta2);
  finite_at_least("eps", o.optimizer.eps, 0, "a finite number >= 0");
  at_least("--batch-size", o.batch_size, 1);
  at_least("--per-device-train-batch-size", o.per_device_batch_size, 0);
  at_least("--grad-accum", o.grad_accum, 1);
  at_least("--epochs", o.epochs, 1);
  at_least("--steps", o.steps, 0);
  at_least("--warmup-steps", o.warmup_steps, 0);
  at_least("--checkpoint-every", o.checkpoint_every, 0);
  at_least("--eval-every", o.eval_every, 0);
  at_least("--log-every", o.log_every, 0);
  positive("--bucket-mb", o.bucket_mb);
  positive("--comm-timeout", o.comm_timeout_s);
}

TrainOptions resolve_outputs(TrainOptions o) {
  // Options checked before anything is written.
  check_ranges(o);
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
  const std::string metrics_role = o.metrics.empty() ? "--output-dir's metrics.jsonl" : "--metrics";
  const std::string save_role = o.save.empty() ? "--output-dir's trained model.onnx" : "--save";
  if (!o.output_dir.empty()) {
    const fs::path d = o.output_dir;
    if (o.metrics.empty() && jsonl) o.metrics = (d / "metrics.jsonl").string();
    if (o.tensorboard_dir.empty() && tensorboard) o.tensorboard_dir = (d / "tensorboard").string();
    if (o.checkpoint_dir.empty()) o.checkpoint_dir = d.string();
    if (o.save.empty()) o.save = (d / "model.onnx").string();
  }
  // Nothing written may be a file the run reads (--output-dir set to the model's own folder, say).
  std::vector<NamedPath> inputs = {{"the model", o.model}, {"--data", training_data_path(o)},
                                   {"--eval-data", o.eval_data}, {"--config", o.config_file}};
  for (const std::string& spec : {training_data_path(o), o.eval_data}) {  // every shard of a folder or glob
    if (spec.empty()) continue;
    std::vector<std::string> shards;
    try {
      shards = expand_data_paths(spec);
    } catch (const Error&) {  // the data's load names what is wrong
    }
    for (const std::string& f : shards) inputs.push_back({spec == o.eval_data ? "--eval-data" : "--data", f});
  }
  check_outputs_apart({{metrics_role, o.metrics}, {save_role, o.save}}, inputs);
  if (!o.output_dir.empty()) {
    const fs::path d = o.output_dir;
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
  const DeviceList devices = devices_of(o.devices);
  const bool says = !o.quiet && detect_launch().rank == 0;
  if (!devices.why_cpu.empty() && says) fmt::print(stderr, "onnxdp: no GPU ({}): training on the CPU\n", devices.why_cpu);
  if (o.tf32 && devices.kind == DeviceKind::cpu && says)
    fmt::print(stderr, "onnxdp: --tf32 applies to GPUs; the CPU computes in fp32\n");
  CommOptions copts;
  copts.timeout_s = o.comm_timeout_s;
  std::vector<TrainResult> results(devices.index.size());
  for_each_replica(devices, copts, o.tf32, [&](Communicator* comm, std::shared_ptr<DeviceBackend> device, int local) {
    Replica(o, comm, std::move(device), results[size_t(local)]).train();
  });
  // This process's first replica reports (replica 0 of the world under MPI rank 0).
  return results[0];
}

}  // namespace onnxdp
