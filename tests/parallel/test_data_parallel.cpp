// The data-parallel rewrite: graph-pass tests on the rewritten graph's nodes, and N replicas
// training exactly as one device on the same global batch.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "graph/autodiff.h"
#include "graph/passes/loss.h"
#include "parallel/data_parallel.h"
#include "compile/compile.h"
#include "tests/train_util.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::check_same_training;
using onnxdp::test::momentum_run;

namespace {

std::string model_path(const std::string& name) { return std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/model.onnx"; }

int count_ops(const Graph& g, Op op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

// The training graph of a model as the trainer builds it, for replica `rank` of `world`.
struct Built {
  Graph g;
  std::vector<ValueId> params, grads;
  std::vector<Bucket> buckets;
};
Built build(const std::string& model, const std::string& input, Shape sample, int world, int rank, int64_t batch,
            double first_mb = 1, double bucket_mb = 25) {
  int64_t rows = shard_rows(batch, world)[size_t(rank)];
  ImportOptions io;
  sample.insert(sample.begin(), rows);
  io.input_shapes[input] = sample;
  Built b;
  b.g = load_graph(model_path(model), io);
  LossOptions lo;
  lo.global_batch = world > 1 ? batch : 0;
  ValueId loss = add_loss(b.g, lo);
  DataParallelOptions dp;
  dp.world_size = world;
  dp.replica = rank;
  dp.global_batch = batch;
  dp.first_bucket_mb = first_mb;
  dp.bucket_mb = bucket_mb;
  data_parallel_forward(b.g, dp, {input, "label"});
  for (ValueId p : b.g.parameters())
    if (b.g.value(p).name.find("running") == std::string::npos && b.g.value(p).name.find("causal") == std::string::npos)
      b.params.push_back(p);
  b.grads = autodiff(b.g, loss, b.params);
  b.buckets = data_parallel_gradients(b.g, b.grads, dp);
  b.g.outputs = b.grads;
  verify(b.g);
  return b;
}

}  // namespace

TEST_CASE("data parallel: shards split like DataParallel") {
  CHECK(shard_rows(64, 2) == std::vector<int64_t>{32, 32});
  CHECK(shard_rows(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(shard_offset(10, 4, 2) == 6);
}

TEST_CASE("data parallel: a world of one is left unchanged") {
  Built one = build("mlp", "x", {64}, 1, 0, 32);
  CHECK(count_ops(one.g, Op::Scatter) == 0);
  CHECK(count_ops(one.g, Op::AllReduce) == 0);
  CHECK(one.buckets.empty());
}

TEST_CASE("data parallel: Scatter per batch input, every gradient in exactly one bucket, in production order") {
  // Small caps force several buckets on the mlp (fc1.weight alone is 32 KB).
  Built b = build("mlp", "x", {64}, 2, 1, 65, 0.01, 0.04);
  CHECK(count_ops(b.g, Op::Scatter) == 2);  // x and label
  for (const Node& n : b.g.nodes)
    if (n.op == Op::Scatter) CHECK(n.i("rows") == 32);  // 65 = 33 + 32: replica 1 takes 32
  REQUIRE(b.buckets.size() >= 2);
  std::multiset<ValueId> seen;
  for (const Bucket& bk : b.buckets) {
    const Node& ar = b.g.nodes[size_t(bk.node)];
    CHECK(ar.op == Op::AllReduce);
    CHECK(ar.i("async") == 1);
    for (ValueId in : ar.inputs) seen.insert(in);
    // Within its cap, unless it holds a single gradient larger than the cap.
    size_t cap = size_t((&bk == &b.buckets[0] ? 0.01 : 0.04) * 1024 * 1024);
    CHECK((bk.bytes <= cap || bk.grads.size() == 1));
    // Right after the node producing its last gradient.
    int last = -1;
    for (ValueId in : ar.inputs) last = std::max(last, b.g.value(in).producer);
    CHECK(bk.node == last + 1);
  }
  CHECK(seen.size() == b.params.size());
  CHECK(std::set<ValueId>(seen.begin(), seen.end()).size() == seen.size());
  for (size_t i = 1; i < b.buckets.size(); ++i) CHECK(b.buckets[i - 1].node < b.buckets[i].node);
  // Every gradient the trainer reads is a bucket's output.
  for (ValueId gid : b.grads) CHECK(b.g.nodes[size_t(b.g.value(gid).producer)].op == Op::AllReduce);
}

TEST_CASE("data parallel: frozen parameters get no bucket") {
  Built all = build("mlp", "x", {64}, 2, 0, 64);
  size_t grads_all = 0;
  for (const Bucket& bk : all.buckets) grads_all += bk.grads.size();
  CHECK(grads_all == all.params.size());
  CHECK(grads_all == 6);
}

TEST_CASE("data parallel: BatchNormalization statistics are reduced over the global batch") {
  Built b = build("cnn", "x", {1, 8, 8}, 2, 0, 16);
  CHECK(count_ops(b.g, Op::BatchNormalization) == 0);
  // Two BN layers: sum and squared-deviation all-reduces each in forward, and their gradients.
  int stats = 0;
  for (const Node& n : b.g.nodes)
    if (n.op == Op::AllReduce && n.i("async") == 0) ++stats;
  CHECK(stats >= 4);
}

namespace {
void check_replicas_equal_one_device(const std::string& model, int64_t batch, int64_t steps) {
  TrainOptions o = momentum_run(model, batch, steps, 3);
  TrainResult one = train(o);
  for (const char* dev : {"cpu:2", "cpu:4"}) {
    CAPTURE(dev);
    o.devices = dev;
    TrainResult n = train(o);
    CHECK(n.world_size == std::stoi(std::string(dev).substr(4)));
    check_same_training(one, n, 1e-5, 1e-5, 1e-7);
    // The flat gradient buffer is laid out in bucket order: every bucket is one all-reduce call.
    CHECK(!n.bucket_bytes.empty());
    CHECK(n.contiguous_buckets == int(n.bucket_bytes.size()));
  }
}
}  // namespace

TEST_CASE("data parallel: mlp on cpu:2 and cpu:4 trains as one device (uneven last batch)") {
  // 1500 samples in batches of 97: the 16th batch has 45 rows (45 = 12+11+11+11 on 4 replicas).
  check_replicas_equal_one_device("mlp", 97, 20);
}

TEST_CASE("data parallel: tiny_lm on cpu:2 and cpu:4 trains as one device") {
  check_replicas_equal_one_device("tiny_lm", 30, 20);  // 30 rows: 8 + 8 + 7 + 7 on 4 replicas
}

TEST_CASE("data parallel: mlp_dynamo on cpu:2 and cpu:4 trains as one device") {
  check_replicas_equal_one_device("mlp_dynamo", 97, 20);
}

TEST_CASE("data parallel: cnn (global BatchNorm, Dropout) on cpu:2 and cpu:4 trains as one device") {
  check_replicas_equal_one_device("cnn", 50, 20);
}

TEST_CASE("gradient accumulation: no gradient all-reduce before the last micro-batch") {
  TrainOptions o;
  o.model = model_path("mlp");
  o.batch_size = 32;
  o.grad_accum = 2;
  auto count_inputs = [](const Graph& g) {
    int n = 0;
    for (ValueId i : g.inputs) n += g.value(i).name.rfind("grad_accum/", 0) == 0;
    return n;
  };
  TrainingGraph early = training_graph(o, 2, 0, false), last = training_graph(o, 2, 0, true);
  CHECK(early.buckets.empty());
  for (const Node& n : early.g.nodes) CHECK_MESSAGE(n.op != Op::AllReduce, n.name);
  REQUIRE(!last.buckets.empty());
  // One accumulator input per trainable parameter, and one for the loss.
  CHECK(count_inputs(early.g) == int(early.trainable.size()) + 1);
  CHECK(count_inputs(last.g) == int(last.trainable.size()) + 1);
  // The last micro-batch's buckets all-reduce the sums (gradient + accumulator), each Add placed
  // right after the node producing its gradient, not at the end of backward.
  for (const Bucket& b : last.buckets) {
    const Node& ar = last.g.nodes[size_t(b.node)];
    for (ValueId in : ar.inputs) {
      const Node& add = last.g.nodes[size_t(last.g.value(in).producer)];
      CHECK(add.op == Op::Add);
      CHECK(last.g.value(add.inputs[1]).name.rfind("grad_accum/", 0) == 0);
      const int grad_producer = last.g.value(add.inputs[0]).producer;
      CHECK(last.g.value(in).producer == grad_producer + 1);
    }
  }
  // Without --grad-accum there are no accumulator inputs.
  o.grad_accum = 1;
  CHECK(count_inputs(training_graph(o, 2, 0).g) == 0);
}

namespace {
// K micro-batches of b rows per step, on 1, 2 or 4 replicas, equal one device with batch K*b.
void check_accumulation_equals_one_batch(const std::string& model, int64_t step_rows, int64_t steps) {
  TrainOptions o = momentum_run(model, step_rows, steps, 5);
  TrainResult one = train(o);
  struct Config {
    const char* devices;
    int64_t k;
  };
  for (Config c : {Config{"cpu", 2}, Config{"cpu:2", 3}, Config{"cpu:4", 4}}) {
    CAPTURE(c.devices);
    CAPTURE(c.k);
    TrainOptions a = o;
    a.devices = c.devices;
    a.grad_accum = c.k;
    a.batch_size = (step_rows + c.k - 1) / c.k;
    TrainResult r = train(a);
    check_same_training(one, r, 1e-5, 1e-5, 1e-7);
    CHECK(r.contiguous_buckets == int(r.bucket_bytes.size()));
  }
}
}  // namespace

TEST_CASE("gradient accumulation: mlp, K micro-batches equal one batch of K times the rows (uneven last step)") {
  // 1500 samples, steps of 96 rows: step 16 has 60 (48+12 for K=2, 32+28 for K=3, 24+24+12 for K=4).
  check_accumulation_equals_one_batch("mlp", 96, 20);
}

TEST_CASE("gradient accumulation: tiny_lm and mlp_dynamo equal one batch") {
  check_accumulation_equals_one_batch("tiny_lm", 24, 10);
  check_accumulation_equals_one_batch("mlp_dynamo", 96, 10);
}
