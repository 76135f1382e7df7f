// --data's sources (train/data_files.h, train/dataset.h): .npy and stored .npz read through a
// memory map, deflated .npz held, folders and globs of shards as one dataset, llm.c token shards
// as windows of T + 1 tokens; their errors; the epoch order (deterministic, shard by shard); a
// replica's share of a batch; memory that stays one batch's; training a token-shard LM and
// resuming it exactly. The expected values are the ones the test writes into the files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "importer/onnx_io.h"
#include "tests/test_util.h"
#include "train/dataset.h"
#include "train/npz.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::test::contains;
using onnxdp::test::error_of;
using onnxdp::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string sample_model(const std::string& name) { return std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/model.onnx"; }

// A .npy file as NumPy's format 1.0 lays it out: magic, version, header length, the header dict
// padded with spaces to a multiple of 64 bytes with '\n', then the C-order data.
void write_npy(const std::string& path, const std::string& descr, const Shape& shape, const void* data, size_t bytes) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  else if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {char(dict.size() & 0xff), char(dict.size() >> 8)};
  f.write(len, 2);
  f << dict;
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

// x [n, 64] with x[i][j] = (first + i) * 100 + j; label [n] = (first + i) % 10.
std::map<std::string, Tensor> mlp_rows(int64_t first, int64_t n) {
  Tensor x(DType::f32, {n, 64}), label(DType::i64, {n});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 64; ++j) x.as<float>()[i * 64 + j] = float((first + i) * 100 + j);
    label.as<int64_t>()[i] = (first + i) % 10;
  }
  return {{"x", x}, {"label", label}};
}

// llm.c's token shard: 256 int32 (magic, version, count, then zeros), then uint16 tokens.
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                       int32_t version = 1, int64_t claimed = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = int32_t(claimed >= 0 ? claimed : int64_t(tokens.size()));
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

// Tokens first, first + 1, ... mod 32 (tiny_lm's vocabulary).
std::vector<uint16_t> counting_tokens(int64_t first, int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = uint16_t((first + i) % 32);
  return t;
}

float x_at(const std::map<std::string, Tensor>& b, int64_t row, int64_t j) { return b.at("x").as<float>()[row * 64 + j]; }

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

TEST_CASE("data: .npy files and a stored .npz are mapped, a deflated .npz is held, rows read back") {
  TempDir tmp("onnxdp_data");
  const onnx::ModelProto mlp = load_model_proto(sample_model("mlp"));
  auto rows = mlp_rows(0, 20);
  fs::create_directory(tmp.path / "unpacked");
  write_npy(tmp.file("unpacked/x.npy"), "<f4", {20, 64}, rows["x"].data(), rows["x"].nbytes());
  write_npy(tmp.file("unpacked/label.npy"), "<i8", {20}, rows["label"].data(), rows["label"].nbytes());
  write_npz(tmp.file("stored.npz"), rows, false);
  write_npz(tmp.file("deflated.npz"), rows, true);
  for (const char* name : {"unpacked", "stored.npz", "deflated.npz"}) {
    CAPTURE(name);
    Dataset d = load_dataset(tmp.file(name), mlp, "label", true);
    CHECK(d.samples == 20);
    CHECK(d.shards.size() == 1);
    const bool deflated = std::string(name) == "deflated.npz";
    CHECK((d.mapped_bytes() > 0) == !deflated);
    CHECK(d.held_bytes() == (deflated ? size_t(20 * 64 * 4 + 20 * 8) : 0));
    auto b = take_rows(d, {7, 3, 19});
    CHECK(b.at("x").shape() == Shape{3, 64});
    CHECK(x_at(b, 0, 5) == 705.f);
    CHECK(x_at(b, 1, 63) == 363.f);
    CHECK(x_at(b, 2, 0) == 1900.f);
    CHECK(b.at("label").as<int64_t>()[0] == 7);
    CHECK(b.at("label").as<int64_t>()[2] == 9);
  }
  // A lone .npy is one array named after its file.
  const std::string one = tmp.file("unpacked/x.npy");
  CHECK(contains(error_of([&] { load_dataset(one, mlp, "label", true); }), "has no label array 'label'"));
  Dataset d = load_dataset(one, mlp, "label", false);
  CHECK(d.arrays.size() == 1);
  // A truncated .npy names the file and says so.
  const std::string bytes = onnxdp::test::read_text(one);
  std::ofstream(tmp.file("cut.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  const std::string cut = error_of([&] { load_dataset(tmp.file("cut.npy"), mlp, "label", false); });
  CHECK(contains(cut, "cut.npy"));
  CHECK(contains(cut, "(truncated)"));
}

TEST_CASE("data: the replicas of a process share one read of the data while one holds it") {
  TempDir tmp("onnxdp_data_shared");
  const onnx::ModelProto mlp = load_model_proto(sample_model("mlp"));
  write_npz(tmp.file("a.npz"), mlp_rows(0, 20), true);
  write_npz(tmp.file("b.npz"), mlp_rows(0, 10), true);
  std::optional<Dataset> first, second;
  std::thread t1([&] { first = load_shared_dataset(tmp.file("a.npz"), mlp, "label", true); });
  std::thread t2([&] { second = load_shared_dataset(tmp.file("a.npz"), mlp, "label", true); });
  t1.join();
  t2.join();
  REQUIRE(first->shards.size() == 1);
  CHECK(first->shards[0].get() == second->shards[0].get());  // one copy of the bytes for both
  CHECK(first->held_bytes() == size_t(20 * 64 * 4 + 20 * 8));
  auto b = take_rows(*second, {7});
  CHECK(x_at(b, 0, 5) == 705.f);
  const Dataset other = load_shared_dataset(tmp.file("b.npz"), mlp, "label", true);
  CHECK(other.shards[0].get() != first->shards[0].get());
  CHECK(other.samples == 10);
  // Another label request is another dataset (its arrays differ).
  CHECK(load_shared_dataset(tmp.file("a.npz"), mlp, "label", false).shards[0].get() != first->shards[0].get());
  // Once no replica holds it, the next run reads the file again (a changed file is seen).
  first.reset();
  second.reset();
  write_npz(tmp.file("a.npz"), mlp_rows(0, 12), true);
  CHECK(load_shared_dataset(tmp.file("a.npz"), mlp, "label", true).samples == 12);
}

TEST_CASE("data: a folder or a glob of shards is one dataset, rows in file-name order, shards must agree") {
  TempDir tmp("onnxdp_data");
  const onnx::ModelProto mlp = load_model_proto(sample_model("mlp"));
  fs::create_directory(tmp.path / "shards");
  write_npz(tmp.file("shards/part-1.npz"), mlp_rows(10, 5), false);  // rows 10..14
  write_npz(tmp.file("shards/part-0.npz"), mlp_rows(0, 10), true);   // rows 0..9, deflated
  fs::create_directory(tmp.path / "shards/part-2");                   // an unpacked .npz: rows 15..17
  auto last = mlp_rows(15, 3);
  write_npy(tmp.file("shards/part-2/x.npy"), "<f4", {3, 64}, last["x"].data(), last["x"].nbytes());
  write_npy(tmp.file("shards/part-2/label.npy"), "<i8", {3}, last["label"].data(), last["label"].nbytes());
  for (const std::string& spec : {tmp.file("shards"), tmp.file("shards/part-*")}) {
    CAPTURE(spec);
    Dataset d = load_dataset(spec, mlp, "label", true);
    REQUIRE(d.shards.size() == 3);
    CHECK(d.samples == 18);
    CHECK(d.first == std::vector<int64_t>{0, 10, 15, 18});
    std::vector<int64_t> all(18);
    std::iota(all.begin(), all.end(), 0);
    auto b = take_rows(d, all);
    for (int64_t i = 0; i < 18; ++i) {
      CAPTURE(i);
      CHECK(x_at(b, i, 1) == float(i * 100 + 1));
      CHECK(b.at("label").as<int64_t>()[i] == i % 10);
    }
  }
  // A shard whose array has other trailing dims, another dtype, or lacks an array is named.
  fs::create_directory(tmp.path / "bad");
  write_npz(tmp.file("bad/a.npz"), mlp_rows(0, 4));
  auto wide = mlp_rows(0, 4);
  wide["x"] = Tensor(DType::f32, {4, 32});
  write_npz(tmp.file("bad/b.npz"), wide);
  std::string e = error_of([&] { load_dataset(tmp.file("bad"), mlp, "label", true); });
  CHECK(contains(e, "array 'x' is f32 [4, 32] in shard '" + tmp.file("bad/b.npz")));
  CHECK(contains(e, "shards must agree"));
  auto other = mlp_rows(0, 4);
  other["label"] = Tensor(DType::i32, {4});
  write_npz(tmp.file("bad/b.npz"), other);
  CHECK(contains(error_of([&] { load_dataset(tmp.file("bad"), mlp, "label", true); }), "array 'label' is i32"));
  other.erase("label");
  write_npz(tmp.file("bad/b.npz"), other);
  CHECK(contains(error_of([&] { load_dataset(tmp.file("bad"), mlp, "label", true); }),
                 "shard '" + tmp.file("bad/b.npz") + "' has no array 'label'"));
  CHECK(contains(error_of([&] { load_dataset(tmp.file("nothing-*.npz"), mlp, "label", true); }),
                 "no file matches the pattern"));
  // Labels out of range name the sample, its shard and row.
  auto wrong = mlp_rows(0, 4);
  wrong["label"].as<int64_t>()[2] = 10;
  write_npz(tmp.file("bad/b.npz"), wrong);
  Dataset d = load_dataset(tmp.file("bad"), mlp, "label", true);
  CHECK(contains(error_of([&] { check_class_labels(d, d.path, "label", 10); }),
                 "holds 10 at sample 6 (shard '" + tmp.file("bad/b.npz") + "', row 2)"));
}

TEST_CASE("data: llm.c token shards are windows of T + 1 tokens: the input and the next-token label") {
  TempDir tmp("onnxdp_data");
  const onnx::ModelProto lm = load_model_proto(sample_model("tiny_lm"));  // tokens i64 [batch, 16]
  write_token_shard(tmp.file("train_000.bin"), counting_tokens(0, 50));   // (50 - 1) / 16 = 3 windows
  write_token_shard(tmp.file("train_001.bin"), counting_tokens(7, 17));   // exactly one window
  Dataset d = load_dataset(tmp.file("train_*.bin"), lm, "label", true);
  CHECK(d.seq_len == 16);
  CHECK(d.samples == 4);
  CHECK(d.arrays.at("tokens").dtype == DType::i64);
  CHECK(d.arrays.at("label").shape == Shape{4, 16});
  auto b = take_rows(d, {2, 3});
  for (int64_t t = 0; t < 16; ++t) {
    CAPTURE(t);
    CHECK(b.at("tokens").as<int64_t>()[t] == (32 + t) % 32);      // window 2 of shard 0 starts at token 32
    CHECK(b.at("label").as<int64_t>()[t] == (33 + t) % 32);
    CHECK(b.at("tokens").as<int64_t>()[16 + t] == (7 + t) % 32);  // shard 1's one window
    CHECK(b.at("label").as<int64_t>()[16 + t] == (8 + t) % 32);
  }
  // A replica reads only its rows of the batch: the others stay zero.
  auto mine = take_rows(d, {2, 3}, 1, 2);
  CHECK(mine.at("tokens").as<int64_t>()[1] == 0);
  CHECK(mine.at("tokens").as<int64_t>()[17] == 8);

  const auto err = [&](const std::string& file) { return error_of([&] { load_dataset(file, lm, "label", true); }); };
  write_token_shard(tmp.file("magic.bin"), counting_tokens(0, 40), 12345);
  CHECK(contains(err(tmp.file("magic.bin")), "bad magic 12345"));
  write_token_shard(tmp.file("llama.bin"), counting_tokens(0, 40), 20240801, 7);
  CHECK(contains(err(tmp.file("llama.bin")), "LLaMA-3 magic"));
  write_token_shard(tmp.file("version.bin"), counting_tokens(0, 40), 20240520, 2);
  CHECK(contains(err(tmp.file("version.bin")), "version 2"));
  write_token_shard(tmp.file("cut.bin"), counting_tokens(0, 40), 20240520, 1, 100);
  CHECK(contains(err(tmp.file("cut.bin")), "header says 100 tokens (1224 bytes with the header), the file has 1104 "
                                           "bytes (truncated)"));
  std::ofstream(tmp.file("short.bin"), std::ios::binary) << "tiny";
  CHECK(contains(err(tmp.file("short.bin")), "shorter than its header"));
  write_token_shard(tmp.file("small.bin"), counting_tokens(0, 16));
  CHECK(contains(err(tmp.file("small.bin")), "has 16 tokens, fewer than one window of 17"));
  fs::create_directory(tmp.path / "mixed");
  write_token_shard(tmp.file("mixed/a.bin"), counting_tokens(0, 40));
  write_npz(tmp.file("mixed/b.npz"), mlp_rows(0, 4));
  CHECK(contains(err(tmp.file("mixed")), "mixes token shards (.bin) and arrays"));
  // The sequence length comes from the model's token input; a model without one is refused.
  CHECK(contains(error_of([&] { load_dataset(tmp.file("train_000.bin"), load_model_proto(sample_model("mlp")), "label", true); }),
                 "model input 'x' is f32, not token ids"));
  onnx::ModelProto symbolic = lm;
  symbolic.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_param("T");
  CHECK(contains(error_of([&] { load_dataset(tmp.file("train_000.bin"), symbolic, "label", true); }),
                 "the model's sequence length cannot be determined: input 'tokens' has dim 1 'T'"));
  // A token beyond the vocabulary is a label out of range, named with its shard.
  auto tokens = counting_tokens(0, 50);
  tokens[20] = 40;
  write_token_shard(tmp.file("vocab.bin"), tokens);
  Dataset v = load_dataset(tmp.file("vocab.bin"), lm, "label", true);
  CHECK(contains(error_of([&] { check_class_labels(v, v.path, "label", 32); }), "holds 40 at sample 1 (element 3)"));
}

TEST_CASE("data: the epoch order is a permutation drawn from seed and epoch, shard by shard") {
  TempDir tmp("onnxdp_data");
  const onnx::ModelProto lm = load_model_proto(sample_model("tiny_lm"));
  const char* names[] = {"s0.bin", "s1.bin", "s2.bin", "s3.bin"};
  for (int k = 0; k < 4; ++k) write_token_shard(tmp.file(names[k]), counting_tokens(k, 16 * (5 + k) + 1));
  Dataset d = load_dataset(tmp.file("s*.bin"), lm, "label", true);
  REQUIRE(d.samples == 5 + 6 + 7 + 8);
  auto epoch = [&](uint64_t seed, int64_t ep, bool shuffle) {
    SampleOrder o(d, shuffle, seed);
    o.set_epoch(ep);
    std::vector<int64_t> v;
    for (int64_t p = 0; p < d.samples; ++p) v.push_back(o.at(p));
    return v;
  };
  const auto a = epoch(3, 1, true);
  CHECK(a == epoch(3, 1, true));
  CHECK(a != epoch(3, 2, true));
  CHECK(a != epoch(4, 1, true));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(size_t(d.samples));
  std::iota(all.begin(), all.end(), 0);
  CHECK(sorted == all);
  CHECK(epoch(3, 1, false) == all);
  // Each shard's windows come together (a shard at a time), in a shuffled order of the shards.
  std::vector<int64_t> shard_seq;
  for (int64_t s : a) {
    const int64_t k = int64_t(std::upper_bound(d.first.begin(), d.first.end(), s) - d.first.begin()) - 1;
    if (shard_seq.empty() || shard_seq.back() != k) shard_seq.push_back(k);
  }
  CHECK(shard_seq.size() == 4);
  std::set<std::vector<int64_t>> shard_orders;
  for (int64_t ep = 0; ep < 6; ++ep) {
    std::vector<int64_t> seq;
    for (int64_t s : epoch(3, ep, true)) {
      const int64_t k = int64_t(std::upper_bound(d.first.begin(), d.first.end(), s) - d.first.begin()) - 1;
      if (seq.empty() || seq.back() != k) seq.push_back(k);
    }
    shard_orders.insert(seq);
  }
  CHECK(shard_orders.size() > 1);
  // Shards larger than a block (7 rows here) are read as blocks in a drawn order, each block's
  // rows shuffled: still every sample once, each block's rows together.
  auto blocked = [&](int64_t ep) {
    SampleOrder o(d, true, 3, 7);
    o.set_epoch(ep);
    std::vector<int64_t> v;
    for (int64_t p = 0; p < d.samples; ++p) v.push_back(o.at(p));
    return v;
  };
  const auto bl = blocked(1);
  CHECK(bl == blocked(1));
  CHECK(bl != blocked(2));
  sorted = bl;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == all);
  int64_t block_runs = 0, last = -1;  // maximal runs of one (shard, block of 7 rows)
  for (int64_t s : bl) {
    const int64_t k = int64_t(std::upper_bound(d.first.begin(), d.first.end(), s) - d.first.begin()) - 1;
    const int64_t key = k * 100 + (s - d.first[size_t(k)]) / 7;
    block_runs += key != last;
    last = key;
  }
  CHECK(block_runs == 1 + 1 + 1 + 2);  // shards of 5, 6, 7 rows are one block each; 8 rows are 7 + 1
  // One file keeps the order onnxdp drew before shards existed: std::shuffle of 0..n-1 with
  // mt19937_64(seed * 1000003 + epoch), so runs and checkpoints of earlier versions go on alike.
  const onnx::ModelProto mlp = load_model_proto(sample_model("mlp"));
  write_npz(tmp.file("one.npz"), mlp_rows(0, 30));
  Dataset one = load_dataset(tmp.file("one.npz"), mlp, "label", true);
  SampleOrder o(one, true, 7);
  o.set_epoch(2);
  std::vector<int64_t> before(30);
  std::iota(before.begin(), before.end(), 0);
  std::mt19937_64 rng(7 * 1000003ull + 2);
  std::shuffle(before.begin(), before.end(), rng);
  for (int64_t p = 0; p < 30; ++p) CHECK(o.at(p) == before[size_t(p)]);
}

TEST_CASE("data: a mapped file much larger than a batch is read with the memory of a batch") {
  TempDir tmp("onnxdp_data");
  const onnx::ModelProto mlp = load_model_proto(sample_model("mlp"));
  // 96 MiB of rows: x [393216, 64] f32 in an unpacked .npz, written a block at a time.
  const int64_t n = 393216;
  fs::create_directory(tmp.path / "big");
  {
    std::vector<float> block(size_t(4096 * 64), 0.5f);
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n) + ", 64), }";
    while ((10 + dict.size() + 1) % 64) dict += ' ';
    dict += '\n';
    std::ofstream f(tmp.file("big/x.npy"), std::ios::binary);
    f.write("\x93NUMPY\x01\x00", 8);
    const char len[2] = {char(dict.size() & 0xff), char(dict.size() >> 8)};
    f.write(len, 2);
    f << dict;
    for (int64_t i = 0; i < n; i += 4096) f.write(reinterpret_cast<const char*>(block.data()), std::streamsize(block.size() * 4));
    std::vector<int64_t> labels(size_t(n), 3);
    write_npy(tmp.file("big/label.npy"), "<i8", {n}, labels.data(), labels.size() * 8);
  }
  Dataset d = load_dataset(tmp.file("big"), mlp, "label", true);
  REQUIRE(d.samples == n);
  CHECK(d.mapped_bytes() > size_t(96) << 20);
  const long before = rss_kib();
  double sum = 0;
  std::vector<int64_t> idx(256);
  for (int64_t start = 0; start < n; start += 256) {
    std::iota(idx.begin(), idx.end(), start);
    auto b = take_rows(d, idx);
    sum += double(x_at(b, 255, 63));
  }
  const long grown = rss_kib() - before;
  CHECK(sum == 0.5 * double(n / 256));
  CAPTURE(grown);
  CHECK(grown < 16 * 1024);  // every row was read: without the release the 96 MiB stay resident (checked: 98380 KiB)
}

TEST_CASE("data: a tiny LM trains on token shards, stopped and resumed it sees the same batches") {
  TempDir tmp("onnxdp_data");
  std::mt19937 gen(5);
  for (int k = 0; k < 3; ++k) {  // arithmetic progressions mod 32 with random starts and strides
    std::vector<uint16_t> t;
    for (int64_t i = 0; i < 16 * 40 + 1; ++i) {
      if (i % 48 == 0) t.push_back(uint16_t(gen() % 32));
      else t.push_back(uint16_t((t.back() + 1 + k) % 32));
    }
    write_token_shard(tmp.file("train_00" + std::to_string(k) + ".bin"), t);
  }
  write_token_shard(tmp.file("val_000.bin"), counting_tokens(3, 16 * 8 + 1));
  auto base = [&](const std::string& run) {
    TrainOptions o;
    o.model = sample_model("tiny_lm");
    o.data = tmp.file("train_*.bin");
    o.eval_data = tmp.file("val_000.bin");
    o.batch_size = 16;  // 120 windows: 8 steps an epoch (the 8th of 8 rows); 14 steps cross into the second
    o.steps = 14;
    o.seed = 11;
    o.quiet = true;
    o.optimizer.lr = 3e-3;
    o.checkpoint_dir = tmp.file(run);
    o.checkpoint_every = 5;
    return o;
  };
  const TrainResult straight = train(base("a"));
  REQUIRE(straight.losses.size() == 14);
  CHECK(straight.batches_read_ahead == 13);  // every step's rows but the first's were read while the step before ran
  CHECK(straight.losses.back() < straight.losses.front());
  CHECK(straight.evaluated);
  CHECK(straight.eval_loss > 0);
  // Stopped after step 10 (mid second epoch, its checkpoint written), as a kill would leave it:
  // the run of 14 steps cut short (the constant lr does not depend on the total).
  TrainOptions stop = base("b");
  stop.steps = 10;
  train(stop);
  TrainOptions resumed = base("b");
  resumed.resume = true;
  const TrainResult r = train(resumed);
  CHECK(r.first_step == 11);
  CHECK(r.batches_read_ahead == 3);
  REQUIRE(r.losses.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(r.losses[i] == straight.losses[10 + i]);
  }
  // Two replicas (each reading its rows) train as one.
  TrainOptions two = base("c");
  two.devices = "cpu:2";
  two.checkpoint_dir.clear();
  const TrainResult t = train(two);
  REQUIRE(t.losses.size() == 14);
  for (size_t i = 0; i < 14; ++i) CHECK(t.losses[i] == doctest::Approx(straight.losses[i]).epsilon(1e-5));
}

TEST_CASE("data: the background reader follows micro-batches and epochs, a bad label it reads stops the step that uses it") {
  TempDir tmp("onnxdp_data");
  auto tokens = counting_tokens(0, 16 * 30 + 1);  // 30 windows
  write_token_shard(tmp.file("a.bin"), tokens);
  TrainOptions o;
  o.model = sample_model("tiny_lm");
  o.data = tmp.file("a.bin");
  o.batch_size = 4;
  o.grad_accum = 3;  // steps of 12 rows: 12, 12, 6, then the next epoch
  o.steps = 5;
  o.quiet = true;
  const TrainResult r = train(o);
  CHECK(r.batches_read_ahead == 3 + 3 + 2 + 3 + 3 - 1);
  // A bad token: label element 4 of window 29 (tokens 465 .. 480). Checked before step 1 here;
  // labels past the limit are checked as each batch is read, naming the same place.
  tokens[16 * 29 + 5] = 33;
  write_token_shard(tmp.file("a.bin"), tokens);
  CHECK(contains(error_of([&] { train(o); }), "holds 33 at sample 29 (element 4)"));
  const onnx::ModelProto lm = load_model_proto(sample_model("tiny_lm"));
  Dataset d = load_dataset(tmp.file("a.bin"), lm, "label", true);
  check_class_labels(d, d.path, "label", 32, 0);  // a limit of 0 bytes: every batch checks its own
  CHECK(d.classes == 32);
  CHECK_NOTHROW(take_rows(d, {0, 28}));
  CHECK(contains(error_of([&] { take_rows(d, {0, 29}); }), "holds 33 at sample 29 (element 4)"));
  CHECK_NOTHROW(take_rows(d, {0, 29}, 0, 1));  // another replica's row is not read, nor checked
}
