// The files a dataset is read from. Each file is a shard: rows (axis 0) of named arrays, read a
// row at a time, so that a batch costs its own rows' memory whatever the file's size.
//
//   NAME.npy              one array NAME, memory-mapped
//   .npz, stored members  (np.savez) every member memory-mapped in place
//   .npz, deflated        (np.savez_compressed) read whole into memory, as read_npz does
//   a folder of .npy      one shard: an unpacked .npz (np.savez's members as files)
//   .bin                  llm.c's token shard: a header of 256 int32 (magic 20240520, version 1,
//                         the token count), then the uint16 tokens; read as windows of T + 1
//                         tokens (open_token_shard)
//
// Every problem (a truncated file, a bad header, a member that is not .npy) is an Error naming
// the file and the array.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace onnxdp {

// An array of a shard or dataset: its dtype and shape, axis 0 the rows.
struct ArrayInfo {
  DType dtype = DType::f32;
  Shape shape;
  size_t row_bytes() const;
};

// A read-only memory map of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // After a read of at most `touched` bytes of its pages (a batch's rows, each counted as a page
  // at least): drops the pages read so far from this process (the kernel's page cache may keep
  // them) once those reads reach kResidentBound since the last drop, so that the resident memory
  // of a map stays under about that bound. A map no larger than the bound is never dropped: its
  // pages are read again batch after batch, and dropping them each batch cost a TLB flush across
  // the process's threads (a tenth of the mlp's step on a 2-core VM).
  void release(size_t touched) const;
  static constexpr size_t kResidentBound = size_t(8) << 20;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  mutable std::atomic<size_t> touched_{0};  // since the last drop (the reader and the step may both read)
};

class Shard {
 public:
  virtual ~Shard() = default;
  const std::string& path() const { return path_; }
  int64_t rows() const { return rows_; }
  const std::map<std::string, ArrayInfo>& arrays() const { return arrays_; }
  // Row r of array `name` into dst (that array's row_bytes()).
  virtual void read_row(const std::string& name, int64_t r, uint8_t* dst) const = 0;
  // After a batch that read at most `touched` bytes of this shard's pages: give back the mapped
  // pages read (MappedFile::release).
  virtual void release(size_t touched) const {}
  size_t mapped_bytes() const { return mapped_bytes_; }  // of files mapped, read per batch
  size_t held_bytes() const { return held_bytes_; }      // held in memory (deflated .npz)

 protected:
  std::string path_;
  int64_t rows_ = 0;
  std::map<std::string, ArrayInfo> arrays_;
  size_t mapped_bytes_ = 0, held_bytes_ = 0;
};

// A .npy file, a .npz file or a folder of .npy files; every array needs the same number of rows.
std::unique_ptr<Shard> open_array_shard(const std::string& path);

// An llm.c token shard read as windows of T + 1 tokens (window i starts at token i * T): array
// `input` [windows, T] = tokens[i*T, i*T + T), and, unless `label` is empty, array `label`
// [windows, T] = tokens[i*T + 1, i*T + T + 1), both of dtype `dtype` (int64 or int32).
std::unique_ptr<Shard> open_token_shard(const std::string& path, int64_t T, const std::string& input,
                                        const std::string& label, DType dtype);

// --data's files, in name order: a file; a folder (its .npz, .npy and .bin files, or, where it
// holds only .npy files, the folder itself as one shard); a glob pattern (* ? [...]) of files or
// folders. Fails when nothing matches.
std::vector<std::string> expand_data_paths(const std::string& spec);

// Whether `path` is an llm.c token shard (by its .bin extension).
bool is_token_shard(const std::string& path);

}  // namespace onnxdp
