#include "train/dataset.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>

#include "importer/onnx_io.h"

namespace onnxdp {

namespace {

// The model's graph inputs that are not initializers.
std::vector<const onnx::ValueInfoProto*> model_inputs(const onnx::ModelProto& m) {
  std::map<std::string, bool> initializer;
  for (const auto& i : m.graph().initializer()) initializer[i.name()] = true;
  std::vector<const onnx::ValueInfoProto*> out;
  for (const auto& vi : m.graph().input())
    if (!initializer.count(vi.name())) out.push_back(&vi);
  return out;
}

DType input_dtype(const onnx::ValueInfoProto& vi) {
  DType want;
  const int et = vi.type().tensor_type().elem_type();
  if (!dtype_from_onnx(et, &want)) fail("model input '{}' has unsupported type {}", vi.name(), onnx_type_name(et));
  return want;
}

// Token shards feed the model's one input of token ids [batch, T]: T is its fixed dim 1.
int64_t sequence_length(const std::string& path, const std::vector<const onnx::ValueInfoProto*>& inputs) {
  std::string names;
  for (const auto* vi : inputs) names += (names.empty() ? "" : ", ") + vi->name();
  if (inputs.size() != 1)
    fail("data '{}' is token shards: they feed a model with one input of token ids [batch, T]; this model has {} "
         "inputs ({})", path, inputs.size(), names);
  const auto& vi = *inputs[0];
  const DType dt = input_dtype(vi);
  if (dt != DType::i64 && dt != DType::i32)
    fail("data '{}' is token shards: model input '{}' is {}, not token ids (int64 or int32)", path, vi.name(),
         dtype_name(dt));
  const auto& shp = vi.type().tensor_type().shape();
  if (shp.dim_size() != 2)
    fail("data '{}' is token shards: model input '{}' has rank {}, token ids are [batch, T]", path, vi.name(),
         shp.dim_size());
  if (!shp.dim(1).has_dim_value() || shp.dim(1).dim_value() <= 0)
    fail("data '{}' is token shards: the model's sequence length cannot be determined: input '{}' has dim 1 '{}', not "
         "a fixed size (export the model with a fixed sequence length)", path, vi.name(),
         shp.dim(1).has_dim_param() ? shp.dim(1).dim_param() : std::string("?"));
  return shp.dim(1).dim_value();
}

// Checks n label rows at `rows` (per_sample values each); sample(i) says where row i is from.
template <class Where>
void check_label_rows(const uint8_t* rows, DType dt, int64_t n, int64_t per_sample, const std::string& path,
                      const std::string& label, int64_t classes, Where where) {
  for (int64_t i = 0; i < n * per_sample; ++i) {
    const int64_t l = dt == DType::i64 ? reinterpret_cast<const int64_t*>(rows)[i]
                                       : int64_t(reinterpret_cast<const int32_t*>(rows)[i]);
    if (l >= 0 && l < classes) continue;
    fail("data '{}': label array '{}' holds {} at {}{}, outside the model's {} classes [0, {}){}", path, label, l,
         where(i / per_sample), per_sample > 1 ? fmt::format(" (element {})", i % per_sample) : std::string(), classes,
         classes,
         l == -100 ? " (-100 is PyTorch's ignore_index: onnxdp's --loss cross_entropy ignores no label; drop those "
                     "positions or use a model whose ONNX loss has ignore_index)"
                   : "");
  }
}

int64_t shard_of(const Dataset& d, int64_t sample) {
  return int64_t(std::upper_bound(d.first.begin(), d.first.end(), sample) - d.first.begin()) - 1;
}

// "sample 12", and for shards "sample 12 (shard 'b.npz', row 2)".
std::string sample_name(const Dataset& d, int64_t sample) {
  if (d.shards.size() == 1) return fmt::format("sample {}", sample);
  const int64_t k = shard_of(d, sample);
  return fmt::format("sample {} (shard '{}', row {})", sample, d.shards[size_t(k)]->path(), sample - d.first[size_t(k)]);
}

}  // namespace

size_t Dataset::mapped_bytes() const {
  size_t n = 0;
  for (const auto& s : shards) n += s->mapped_bytes();
  return n;
}

size_t Dataset::held_bytes() const {
  size_t n = 0;
  for (const auto& s : shards) n += s->held_bytes();
  return n;
}

Dataset load_shared_dataset(const std::string& path, const onnx::ModelProto& m, const std::string& label,
                            bool need_label) {
  // What the loaded arrays depend on: the files, the label, and the model's inputs (names, types).
  std::string key = path + '\0' + label + '\0' + (need_label ? "1" : "0");
  for (const onnx::ValueInfoProto& v : m.graph().input()) key += '\0' + v.SerializeAsString();
  // An entry: the dataset without its shards, and the shards as long as a replica holds them.
  struct Loaded {
    Dataset meta;
    std::vector<std::weak_ptr<const Shard>> shards;
  };
  static std::mutex mu;
  static std::map<std::string, Loaded> loaded;
  std::lock_guard<std::mutex> lk(mu);  // the other replicas wait for the first one's read
  auto alive = [](const Loaded& l, std::vector<std::shared_ptr<const Shard>>* out) {
    for (const auto& w : l.shards) {
      auto s = w.lock();
      if (!s) return false;
      if (out) out->push_back(std::move(s));
    }
    return true;
  };
  for (auto it = loaded.begin(); it != loaded.end();)  // forget what no replica holds any more
    it = alive(it->second, nullptr) ? std::next(it) : loaded.erase(it);
  if (auto it = loaded.find(key); it != loaded.end()) {
    Dataset d = it->second.meta;
    if (alive(it->second, &d.shards)) return d;
  }
  Dataset d = load_dataset(path, m, label, need_label);
  Loaded l{d, {}};
  l.meta.shards.clear();
  for (const auto& s : d.shards) l.shards.push_back(s);
  loaded[key] = std::move(l);
  return d;
}

Dataset load_dataset(const std::string& path, const onnx::ModelProto& m, const std::string& label, bool need_label) {
  Dataset d;
  d.path = path;
  const std::vector<std::string> files = expand_data_paths(path);
  const std::vector<const onnx::ValueInfoProto*> inputs = model_inputs(m);
  const bool tokens = is_token_shard(files[0]);
  for (const std::string& f : files)
    if (is_token_shard(f) != tokens)
      fail("data '{}' mixes token shards (.bin) and arrays: '{}' and '{}'", path, files[0], f);
  if (tokens) {
    d.seq_len = sequence_length(path, inputs);
    if (need_label && label == inputs[0]->name())
      fail("data '{}' is token shards: the label '{}' cannot also be the model's token input", path, label);
    for (const std::string& f : files)
      d.shards.push_back(open_token_shard(f, d.seq_len, inputs[0]->name(), need_label ? label : "", input_dtype(*inputs[0])));
  } else {
    for (const std::string& f : files) d.shards.push_back(open_array_shard(f));
  }
  const std::map<std::string, ArrayInfo>& all = d.shards[0]->arrays();
  std::vector<std::string> names;
  for (const auto* vip : inputs) {
    const auto& vi = *vip;
    auto it = all.find(vi.name());
    if (it == all.end()) {
      std::string have;
      for (const auto& [k, v] : all) have += (have.empty() ? "" : ", ") + k;
      fail("data '{}' has no array '{}' for the model input of that name (arrays: {})", path, vi.name(), have);
    }
    const DType want = input_dtype(vi);
    if (it->second.dtype != want)
      fail("data '{}': array '{}' is {}, the model input expects {}", path, vi.name(), dtype_name(it->second.dtype),
           dtype_name(want));
    const auto& shp = vi.type().tensor_type().shape();
    const Shape& have = it->second.shape;
    if (int(have.size()) != shp.dim_size())
      fail("data '{}': array '{}' has shape {} (rank {}), the model input has rank {}", path, vi.name(),
           shape_str(have), have.size(), shp.dim_size());
    for (int k = 1; k < shp.dim_size(); ++k)
      if (shp.dim(k).has_dim_value() && shp.dim(k).dim_value() != have[size_t(k)])
        fail("data '{}': array '{}' has shape {}, the model input needs dim {} = {}", path, vi.name(), shape_str(have), k,
             shp.dim(k).dim_value());
    names.push_back(vi.name());
  }
  if (need_label) {
    if (!all.count(label)) fail("data '{}' has no label array '{}' (use --label NAME)", path, label);
    names.push_back(label);
  }
  // Every shard holds the same arrays: dtype and every dim but the rows.
  d.first = {0};
  for (const auto& s : d.shards) {
    for (const std::string& n : names) {
      const ArrayInfo& a = all.at(n);
      auto it = s->arrays().find(n);
      if (it == s->arrays().end())
        fail("data '{}': shard '{}' has no array '{}' (shard '{}' has it)", path, s->path(), n, d.shards[0]->path());
      const ArrayInfo& b = it->second;
      if (b.dtype != a.dtype || b.shape.size() != a.shape.size() ||
          !std::equal(b.shape.begin() + 1, b.shape.end(), a.shape.begin() + 1))
        fail("data '{}': array '{}' is {} {} in shard '{}' but {} {} in shard '{}' (shards must agree but in the "
             "number of rows)", path, n, dtype_name(b.dtype), shape_str(b.shape), s->path(), dtype_name(a.dtype),
             shape_str(a.shape), d.shards[0]->path());
    }
    d.first.push_back(d.first.back() + s->rows());
  }
  d.samples = d.first.back();
  for (const std::string& n : names) {
    d.arrays[n] = all.at(n);
    d.arrays[n].shape[0] = d.samples;
  }
  if (d.samples == 0) fail("data '{}' has no samples", path);
  return d;
}

std::map<std::string, Tensor> take_rows(const Dataset& d, const std::vector<int64_t>& idx, int64_t own_begin,
                                        int64_t own_end) {
  if (own_end < 0) own_end = int64_t(idx.size());
  std::map<std::string, Tensor> out;
  for (const auto& [name, a] : d.arrays) {
    Shape s = a.shape;
    s[0] = int64_t(idx.size());
    out.emplace(name, Tensor(a.dtype, s));
  }
  // The bytes of each shard's pages the rows may have touched: a row counts a page at least (rows
  // read in a shuffled order each land on pages of their own).
  constexpr size_t kPage = 4096;
  size_t row_pages = 0;
  for (const auto& [name, t] : out) row_pages += std::max(d.arrays.at(name).row_bytes(), kPage);
  std::vector<size_t> touched(d.shards.size(), 0);
  for (int64_t i = own_begin; i < own_end; ++i) {
    const int64_t k = shard_of(d, idx[size_t(i)]);
    const Shard& s = *d.shards[size_t(k)];
    for (auto& [name, t] : out) {
      const size_t row = d.arrays.at(name).row_bytes();
      s.read_row(name, idx[size_t(i)] - d.first[size_t(k)], t.as<uint8_t>() + size_t(i) * row);
    }
    touched[size_t(k)] += row_pages;
  }
  for (size_t k = 0; k < touched.size(); ++k)
    if (touched[k] > 0) d.shards[k]->release(touched[k]);
  if (d.classes > 0 && own_end > own_begin) {  // labels checked as they are read
    const Tensor& t = out.at(d.label);
    const size_t row = d.arrays.at(d.label).row_bytes();
    check_label_rows(t.as<uint8_t>() + size_t(own_begin) * row, t.dtype(), own_end - own_begin,
                     int64_t(row / dtype_size(t.dtype())), d.path, d.label, d.classes,
                     [&](int64_t i) { return sample_name(d, idx[size_t(own_begin + i)]); });
  }
  return out;
}

ImportOptions shapes_for(const Dataset& d, int64_t batch) {
  ImportOptions io;
  io.batch_size = batch;
  for (const auto& [name, a] : d.arrays) {
    Shape s = a.shape;
    s[0] = batch;
    io.input_shapes[name] = s;
  }
  return io;
}

void check_class_labels(Dataset& d, const std::string& path, const std::string& label, int64_t classes,
                        uint64_t limit) {
  const ArrayInfo& a = d.arrays.at(label);
  if (a.dtype != DType::i64 && a.dtype != DType::i32)
    fail("data '{}': label array '{}' is {}; --loss cross_entropy takes class indices (int64 or int32)", path, label,
         dtype_name(a.dtype));
  const size_t row = a.row_bytes();
  if (uint64_t(d.samples) * row > limit) {  // too many to read before step 1: checked per batch
    d.classes = classes;
    d.label = label;
    return;
  }
  std::vector<uint8_t> buf(row);
  for (size_t k = 0; k < d.shards.size(); ++k) {
    const Shard& s = *d.shards[k];
    for (int64_t r = 0; r < s.rows(); ++r) {
      s.read_row(label, r, buf.data());
      check_label_rows(buf.data(), a.dtype, 1, int64_t(row / dtype_size(a.dtype)), path, label, classes,
                       [&](int64_t) { return sample_name(d, d.first[k] + r); });
    }
    s.release(s.mapped_bytes());  // every row read
  }
}

SampleOrder::SampleOrder(const Dataset& d, bool shuffle, uint64_t seed, int64_t block_rows)
    : d_(d), shuffle_(shuffle), seed_(seed), block_rows_(std::max<int64_t>(1, block_rows)) {
  set_epoch(0);
}

void SampleOrder::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  cached_ = cached_block_ = blocks_of_ = -1;
  shard_order_.resize(d_.shards.size());
  std::iota(shard_order_.begin(), shard_order_.end(), 0);
  if (shuffle_ && shard_order_.size() > 1) {
    std::mt19937_64 rng((seed_ * 1000003ull + uint64_t(epoch)) ^ 0x5348415244ull);  // "SHARD"
    std::shuffle(shard_order_.begin(), shard_order_.end(), rng);
  }
  start_ = {0};
  for (int64_t s : shard_order_) start_.push_back(start_.back() + d_.shards[size_t(s)]->rows());
}

int64_t SampleOrder::at(int64_t position) {
  const size_t k = size_t(std::upper_bound(start_.begin(), start_.end(), position) - start_.begin()) - 1;
  const int64_t s = shard_order_[k], local = position - start_[k];
  const int64_t first = d_.first[size_t(s)], rows = d_.shards[size_t(s)]->rows();
  if (!shuffle_) return first + local;
  // Shard 0's draw is the whole data's draw when there is one file.
  const uint64_t shard_seed = seed_ * 1000003ull + uint64_t(epoch_) + uint64_t(s) * 0x9E3779B97F4A7C15ull;
  int64_t block = 0, in_block = local;
  if (rows > block_rows_) {  // a large shard: its blocks in a drawn order, then each block's rows
    if (blocks_of_ != s) {
      const int64_t n = (rows + block_rows_ - 1) / block_rows_;
      blocks_.resize(size_t(n));
      std::iota(blocks_.begin(), blocks_.end(), 0);
      std::mt19937_64 rng(shard_seed ^ 0x424c4f434bull);  // "BLOCK"
      std::shuffle(blocks_.begin(), blocks_.end(), rng);
      block_start_ = {0};
      for (int64_t b : blocks_) block_start_.push_back(block_start_.back() + std::min(block_rows_, rows - b * block_rows_));
      blocks_of_ = s;
    }
    const size_t j = size_t(std::upper_bound(block_start_.begin(), block_start_.end(), local) - block_start_.begin()) - 1;
    block = blocks_[j];
    in_block = local - block_start_[j];
  }
  if (cached_ != s || cached_block_ != block) {
    rows_.resize(size_t(std::min(block_rows_, rows - block * block_rows_)));
    std::iota(rows_.begin(), rows_.end(), 0);
    std::mt19937_64 rng(shard_seed + uint64_t(block) * 0xD1B54A32D192ED03ull);
    std::shuffle(rows_.begin(), rows_.end(), rng);
    cached_ = s;
    cached_block_ = block;
  }
  return first + block * block_rows_ + rows_[size_t(in_block)];
}

}  // namespace onnxdp
