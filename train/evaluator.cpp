#include "train/evaluator.h"

#include <algorithm>
#include <numeric>

#include "compile/compile.h"
#include "parallel/communicator.h"

namespace onnxdp {

Evaluator::Evaluator(const std::string& path, const onnx::ModelProto& proto, const std::string& model_dir,
                     const LossOptions& lo, const TrainOptions& o, std::shared_ptr<DeviceBackend> device)
    : path_(path), proto_(proto), model_dir_(model_dir), lo_(lo), o_(o),
      data_(load_shared_dataset(path, proto, o.label, lo.kind != LossKind::none)), device_(std::move(device)) {}

Evaluator::EvalPlan& Evaluator::plan_for(int64_t rows, const std::map<std::string, Tensor>& parameters) {
  auto it = plans_.find(rows);
  if (it != plans_.end()) return it->second;
  CompileOptions co;
  co.mode = CompileMode::eval;
  co.batch = rows;
  co.import = shapes_for(data_, rows);
  co.mixed_precision = o_.mixed_precision;  // evaluated as trained
  co.loss = lo_;
  co.cpu = device_ == nullptr;
  Compiled c = compile(proto_, model_dir_, co);
  // The parameters take the trainer's bytes, so every evaluation sees the current values.
  for (ValueId p : c.g.parameters()) {
    auto t = parameters.find(c.g.value(p).name);
    if (t != parameters.end()) c.g.value(p).data = t->second;
  }
  EvalPlan& e = plans_[rows];
  e.prediction = c.prediction;
  e.loss = c.loss;
  e.plan = std::make_unique<Plan>(std::move(c.g), PlanOptions{.device = device_, .device_graph = o_.cuda_graph});
  return e;
}

Evaluator::Result Evaluator::run(const std::map<std::string, Tensor>& parameters, Communicator* comm) {
  const int64_t eb = std::min<int64_t>(256, data_.samples);
  double loss_sum = 0;
  int64_t correct_positions = 0, positions = 0;
  const bool classifier = o_.loss == LossKind::cross_entropy;
  const int world = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  for (int64_t start = 0; start < data_.samples; start += eb) {
    // This replica's rows of the batch, split as training splits a batch (graph/shards.h).
    const int64_t rows = std::min(eb, data_.samples - start);
    const int64_t b = shard_rows(rows, world)[size_t(rank)];
    if (b == 0) continue;
    EvalPlan& e = plan_for(b, parameters);
    std::vector<int64_t> idx(static_cast<size_t>(b));
    std::iota(idx.begin(), idx.end(), start + shard_offset(rows, world, rank));
    const std::map<std::string, Tensor> batch = take_rows(data_, idx);
    e.plan->execute(batch, {});
    loss_sum += double(e.plan->ref(e.loss).as<float>()[0]) * double(b);
    if (classifier) correct_positions += correct(e.plan->ref(e.prediction), batch.at(o_.label), &positions);
  }
  if (comm) {
    comm->all_reduce_sum(&loss_sum, 1, DType::f64);
    int64_t counts[2] = {correct_positions, positions};
    comm->all_reduce_sum(counts, 2, DType::i64);
    correct_positions = counts[0];
    positions = counts[1];
  }
  Result res;
  res.loss = loss_sum / double(data_.samples);
  if (classifier) res.accuracy = double(correct_positions) / double(positions);
  return res;
}

size_t Evaluator::memory_bytes() const {
  size_t bytes = 0;
  for (const auto& [rows, e] : plans_) bytes += e.plan->memory_bytes();
  return bytes;
}

int64_t Evaluator::correct(const TensorRef& logits, const Tensor& labels, int64_t* positions) {
  const std::vector<int64_t> label = labels.to_i64();
  const int64_t r = logits.rank();
  const int64_t axis = o_.class_axis < 0 ? r - 1 : o_.class_axis;
  int64_t C = logits.dim(int(axis)), inner = 1;
  for (int64_t k = axis + 1; k < r; ++k) inner *= logits.dim(int(k));
  const int64_t outer = logits.numel / (C * inner);
  const float* x = logits.as<float>();
  int64_t hits = 0;
  for (int64_t q = 0; q < outer; ++q)
    for (int64_t in = 0; in < inner; ++in) {
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (x[(q * C + c) * inner + in] > x[(q * C + best) * inner + in]) best = c;
      hits += best == label[size_t(q * inner + in)];
      ++*positions;
    }
  return hits;
}

}  // namespace onnxdp
