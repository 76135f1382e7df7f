// A training or evaluation dataset: the arrays the model needs (its graph inputs and the label),
// axis 0 the sample, checked against the model's inputs before step 1. Its rows come from one
// file or from shards (train/data_files.h: .npz, .npy, folders of them, llm.c token shards),
// concatenated in file-name order, and are read a batch at a time: memory-mapped files are never
// copied whole (only a deflated .npz is held in memory).
#pragma once
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "graph/tensor.h"
#include "importer/importer.h"
#include "train/data_files.h"

namespace onnxdp {

struct Dataset {
  std::string path;                          // as given (--data, --eval-data)
  std::map<std::string, ArrayInfo> arrays;   // graph inputs + label, shape[0] = samples
  int64_t samples = 0;
  std::vector<std::shared_ptr<const Shard>> shards;  // in file-name order
  std::vector<int64_t> first;                // shard k's rows are samples first[k] .. first[k + 1]
  int64_t seq_len = 0;                       // token shards: the windows' T (the model's sequence length)
  // Set by check_class_labels where the labels are too many to check before step 1: every batch
  // read checks its label rows against `classes`.
  int64_t classes = 0;
  std::string label;
  size_t mapped_bytes() const;  // of the files mapped (read per batch)
  size_t held_bytes() const;    // held in memory (deflated .npz)
};

// Reads `path` (a file, a folder or a glob of shards) and checks the arrays the model m needs
// (dtype, rank, fixed dims, equal sample counts, shards alike); every problem names the file and
// the array. need_label: the label array `label` must be there too. Token shards (.bin) give the
// model's one token input [batch, T] (T from the model: a fixed dim 1) and, with need_label,
// `label` the next tokens, both of the token input's dtype.
Dataset load_dataset(const std::string& path, const onnx::ModelProto& m, const std::string& label, bool need_label);
// The same, read once per process: the replicas of one process (threads) that ask for the same
// files, label and model inputs while an earlier one's Dataset is alive get a copy of it that
// shares its shards (the arrays' bytes, read-only: each replica reads its own rows), instead of
// reading and holding the data once each.
Dataset load_shared_dataset(const std::string& path, const onnx::ModelProto& m, const std::string& label,
                            bool need_label);

// Rows `idx` of every array, a batch of idx.size() rows of which only rows [own_begin, own_end)
// are read (a replica's share: the graph's Scatter takes its rows from the global batch; the
// others stay zero); own_end < 0: all. The mapped pages read are given back after the batch.
std::map<std::string, Tensor> take_rows(const Dataset& d, const std::vector<int64_t>& idx, int64_t own_begin = 0,
                                        int64_t own_end = -1);

// cross_entropy: every value of the label array in [0, classes), else an error naming the data,
// the position, the value and the class count (a label out of range would otherwise select no
// class and train on a loss of 0 for that position). Labels up to `limit` bytes (256 MiB) are
// checked here, before step 1; beyond, each batch's as it is read (d.classes).
void check_class_labels(Dataset& d, const std::string& path, const std::string& label, int64_t classes,
                        uint64_t limit = uint64_t(256) << 20);

// Import options for batches of `batch` rows of d: every array's shape with axis 0 = batch.
ImportOptions shapes_for(const Dataset& d, int64_t batch);

// An epoch's order of the samples. Shuffled: the shards in an order drawn from (seed, epoch),
// each shard's rows in an order drawn from (seed, epoch, shard), the shards one after another;
// one file of up to block_rows rows is one shuffle of all its rows (the order onnxdp drew before
// shards). A shard of more rows is read as blocks of block_rows rows: the blocks in an order drawn
// from (seed, epoch, shard), each block's rows shuffled. It holds one block's row order at a time
// (8 bytes a row) and a shard's block order, whatever the data's size.
class SampleOrder {
 public:
  SampleOrder(const Dataset& d, bool shuffle, uint64_t seed, int64_t block_rows = int64_t(1) << 20);
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  int64_t at(int64_t position);  // the sample at `position` (0 .. samples) of the epoch

 private:
  const Dataset& d_;
  bool shuffle_;
  uint64_t seed_;
  int64_t block_rows_;
  int64_t epoch_ = 0;
  std::vector<int64_t> shard_order_;  // shards in the epoch's order
  std::vector<int64_t> start_;        // the position where each of them starts
  int64_t blocks_of_ = -1;            // the shard whose block order blocks_ holds
  std::vector<int64_t> blocks_;       // its blocks in their order
  std::vector<int64_t> block_start_;  // the shard-local position where each of them starts
  int64_t cached_ = -1, cached_block_ = -1;  // the shard and block whose row order rows_ holds
  std::vector<int64_t> rows_;
};

}  // namespace onnxdp
