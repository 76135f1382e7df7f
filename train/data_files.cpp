#include "train/data_files.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "graph/error.h"
#include "train/npz.h"

namespace onnxdp {

namespace fs = std::filesystem;

size_t ArrayInfo::row_bytes() const {
  size_t n = dtype_size(dtype);
  for (size_t k = 1; k < shape.size(); ++k) n *= size_t(shape[k]);
  return n;
}

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("data '{}': cannot open: {}", path, std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("data '{}' is not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("data '{}': cannot map its {} bytes: {}", path, size_, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the map keeps the file
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(size_t touched) const {
  if (!data_ || size_ <= kResidentBound) return;
  if (touched_.fetch_add(touched) + touched < kResidentBound) return;
  touched_ = 0;
  ::madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

namespace {

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t rd32(const uint8_t* p) { return uint32_t(rd16(p)) | uint32_t(rd16(p + 2)) << 16; }
uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }

// Arrays read in place from a map (.npy, stored .npz members, a folder of .npy), or held in
// memory (a deflated .npz).
class ArrayShard : public Shard {
 public:
  explicit ArrayShard(std::string path) { path_ = std::move(path); }

  void add_mapped(const std::string& name, std::shared_ptr<MappedFile> map, const uint8_t* at, const NpyLayout& l) {
    if (std::find(maps_.begin(), maps_.end(), map) == maps_.end()) {
      maps_.push_back(map);
      mapped_bytes_ += map->size();
    }
    add(name, {l.dtype, l.shape}, at + l.data_offset);
  }
  void add_held(const std::string& name, Tensor t) {
    held_bytes_ += t.nbytes();
    add(name, {t.dtype(), t.shape()}, static_cast<const uint8_t*>(t.data()));
    held_.push_back(std::move(t));
  }
  void finish() {
    if (arrays_.empty()) fail("data '{}' holds no arrays", path_);
    for (const auto& [name, a] : arrays_) {
      if (a.shape.empty()) fail("data '{}': array '{}' is a scalar; axis 0 must index samples", path_, name);
      if (name == arrays_.begin()->first) rows_ = a.shape[0];
      else if (a.shape[0] != rows_)
        fail("data '{}': array '{}' has {} samples, array '{}' has {}", path_, name, a.shape[0], arrays_.begin()->first,
             rows_);
    }
  }

  void read_row(const std::string& name, int64_t r, uint8_t* dst) const override {
    const ArrayInfo& a = arrays_.at(name);
    const size_t row = a.row_bytes();
    std::memcpy(dst, base_.at(name) + size_t(r) * row, row);
    if (a.dtype == DType::boolean)  // any nonzero byte is True in NumPy; C++ bool holds 0 or 1
      for (size_t i = 0; i < row; ++i) dst[i] = dst[i] != 0;
  }
  void release(size_t touched) const override {
    for (const auto& m : maps_) m->release(touched);
  }

 private:
  void add(const std::string& name, ArrayInfo info, const uint8_t* base) {
    if (arrays_.count(name)) fail("data '{}' holds array '{}' twice", path_, name);
    arrays_[name] = std::move(info);
    base_[name] = base;
  }
  std::map<std::string, const uint8_t*> base_;  // row 0 of each array
  std::vector<std::shared_ptr<MappedFile>> maps_;
  std::vector<Tensor> held_;
};

void add_npy_file(ArrayShard& s, const std::string& file) {
  auto map = std::make_shared<MappedFile>(file);
  const std::string name = fs::path(file).stem().string();
  NpyLayout l = parse_npy_layout(map->data(), map->size(), fmt::format("data '{}', array '{}'", file, name));
  s.add_mapped(name, map, map->data(), l);
}

// np.savez's members are stored: each one's .npy bytes lie whole in the file, found through the
// zip's central directory (zip64 included). Returns false when a member is deflated.
bool add_stored_npz(ArrayShard& s, const std::string& path) {
  {  // libzip checks the archive's consistency and says whether every member is stored
    int code = 0;
    zip_t* za = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (!za) return false;  // read_npz names what is wrong
    const zip_int64_t n = zip_get_num_entries(za, 0);
    bool stored = n >= 0;
    for (zip_int64_t i = 0; stored && i < n; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      stored = zip_stat_index(za, zip_uint64_t(i), 0, &st) == 0 && (st.valid & ZIP_STAT_COMP_METHOD) &&
               st.comp_method == ZIP_CM_STORE;
    }
    zip_discard(za);
    if (!stored) return false;
  }
  auto map = std::make_shared<MappedFile>(path);
  const uint8_t* f = map->data();
  const size_t size = map->size();
  auto bad = [&](const char* what) { fail("npz file '{}': {} (not a valid zip archive)", path, what); };
  auto need = [&](uint64_t at, uint64_t n) {
    if (at > size || n > size - at) bad("a zip record lies past the end of the file");
  };
  // The end-of-central-directory record: the last 22 bytes, or further back by its comment.
  if (size < 22) bad("too short");
  size_t eocd = size - 22;
  while (rd32(f + eocd) != 0x06054b50) {
    if (eocd == 0 || size - eocd > 22 + 65535) bad("no end-of-central-directory record");
    --eocd;
  }
  uint64_t entries = rd16(f + eocd + 10), cd = rd32(f + eocd + 16);
  if ((entries == 0xFFFF || cd == 0xFFFFFFFF) && eocd >= 20 && rd32(f + eocd - 20) == 0x07064b50) {  // zip64
    const uint64_t z = rd64(f + eocd - 20 + 8);
    need(z, 56);
    if (rd32(f + z) != 0x06064b50) bad("bad zip64 end-of-central-directory record");
    entries = rd64(f + z + 32);
    cd = rd64(f + z + 48);
  }
  uint64_t at = cd;
  for (uint64_t e = 0; e < entries; ++e) {
    need(at, 46);
    if (rd32(f + at) != 0x02014b50) bad("bad central directory entry");
    uint64_t comp = rd32(f + at + 20), local = rd32(f + at + 42);
    uint64_t full = rd32(f + at + 24);
    const size_t name_len = rd16(f + at + 28), extra_len = rd16(f + at + 30), comment_len = rd16(f + at + 32);
    need(at + 46, name_len + extra_len + comment_len);
    std::string member(reinterpret_cast<const char*>(f + at + 46), name_len);
    // The zip64 extra field holds, in this order, each of the sizes and the offset that is 0xFFFFFFFF.
    for (size_t x = 0; x + 4 <= extra_len;) {
      const uint8_t* ex = f + at + 46 + name_len + x;
      const size_t id = rd16(ex), len = rd16(ex + 2);
      if (x + 4 + len > extra_len) bad("bad extra field");
      if (id == 1) {
        size_t k = 4;
        for (uint64_t* v : {&full, &comp, &local})
          if (*v == 0xFFFFFFFF && k + 8 <= len + 4) {
            *v = rd64(ex + k);
            k += 8;
          }
      }
      x += 4 + len;
    }
    at += 46 + name_len + extra_len + comment_len;
    if (!member.empty() && member.back() == '/') continue;  // a directory entry
    if (member.size() < 5 || member.compare(member.size() - 4, 4, ".npy") != 0)
      fail("npz file '{}': member '{}' is not a .npy array", path, member);
    if (comp != full) bad("a stored member's sizes differ");
    need(local, 30);
    if (rd32(f + local) != 0x04034b50) bad("bad local file header");
    const uint64_t data = local + 30 + rd16(f + local + 26) + rd16(f + local + 28);
    need(data, full);
    const std::string name = member.substr(0, member.size() - 4);
    NpyLayout l = parse_npy_layout(f + data, size_t(full), fmt::format("npz file '{}', array '{}'", path, name));
    s.add_mapped(name, map, f + data, l);
  }
  return true;
}

// An llm.c token shard as windows of T + 1 tokens.
class TokenShard : public Shard {
 public:
  TokenShard(const std::string& path, int64_t T, const std::string& input, const std::string& label, DType dtype)
      : map_(path), T_(T), input_(input) {
    path_ = path;
    constexpr int64_t kHeader = 256 * 4;
    const uint8_t* f = map_.data();
    const size_t size = map_.size();
    if (size < size_t(kHeader))
      fail("token shard '{}' is {} bytes, shorter than its header of 256 int32 (1024 bytes)", path, size);
    const uint32_t magic = rd32(f), version = rd32(f + 4);
    const int64_t count = int32_t(rd32(f + 8));
    if (magic == 20240801)
      fail("token shard '{}' has llm.c's LLaMA-3 magic 20240801 (uint32 tokens); onnxdp reads GPT-2's uint16 shards "
           "(magic 20240520, version 1)", path);
    if (magic != 20240520)
      fail("token shard '{}': bad magic {} (llm.c's uint16 token shards start with 20240520)", path, magic);
    if (version != 1) fail("token shard '{}': version {}; onnxdp reads version 1 (uint16 tokens)", path, version);
    if (count < 0) fail("token shard '{}': negative token count {} in its header", path, count);
    const uint64_t want = uint64_t(kHeader) + 2 * uint64_t(count);
    if (size != want)
      fail("token shard '{}': its header says {} tokens ({} bytes with the header), the file has {} bytes{}", path,
           count, want, size, size < want ? " (truncated)" : "");
    if (count < T + 1)
      fail("token shard '{}' has {} tokens, fewer than one window of {} (the model's sequence length {} + 1 for the "
           "next-token label)", path, count, T + 1, T);
    tokens_ = reinterpret_cast<const uint16_t*>(f + kHeader);
    rows_ = (count - 1) / T;
    mapped_bytes_ = size;
    arrays_[input] = {dtype, {rows_, T}};
    if (!label.empty()) arrays_[label] = {dtype, {rows_, T}};
  }

  void read_row(const std::string& name, int64_t r, uint8_t* dst) const override {
    const uint16_t* w = tokens_ + r * T_ + (name == input_ ? 0 : 1);
    const bool wide = arrays_.at(name).dtype == DType::i64;
    for (int64_t t = 0; t < T_; ++t) {
      if (wide) reinterpret_cast<int64_t*>(dst)[t] = w[t];
      else reinterpret_cast<int32_t*>(dst)[t] = w[t];
    }
  }
  void release(size_t touched) const override { map_.release(touched); }

 private:
  MappedFile map_;
  const uint16_t* tokens_ = nullptr;
  int64_t T_;
  std::string input_;
};

bool only_npy_files(const fs::path& dir) {
  bool any = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".npy") return false;
    any = true;
  }
  return any;
}

}  // namespace

std::unique_ptr<Shard> open_array_shard(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("data '{}' does not exist", path);
  auto s = std::make_unique<ArrayShard>(path);
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".npy") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) add_npy_file(*s, f);
  } else if (fs::path(path).extension() == ".npy") {
    add_npy_file(*s, path);
  } else if (!add_stored_npz(*s, path)) {
    for (auto& [name, t] : read_npz(path)) s->add_held(name, std::move(t));
  }
  s->finish();
  return s;
}

std::unique_ptr<Shard> open_token_shard(const std::string& path, int64_t T, const std::string& input,
                                        const std::string& label, DType dtype) {
  return std::make_unique<TokenShard>(path, T, input, label, dtype);
}

bool is_token_shard(const std::string& path) { return fs::path(path).extension() == ".bin"; }

std::vector<std::string> expand_data_paths(const std::string& spec) {
  std::error_code ec;
  std::vector<std::string> out;
  if (spec.find_first_of("*?[") != std::string::npos && !fs::exists(spec, ec)) {
    glob_t g{};
    const int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    globfree(&g);
    if (out.empty()) fail("data '{}': no file matches the pattern", spec);
  } else if (fs::is_directory(spec, ec) && !only_npy_files(spec)) {
    for (const auto& e : fs::directory_iterator(spec)) {
      const std::string ext = e.path().extension().string();
      if (ext == ".npz" || ext == ".npy" || ext == ".bin" || (e.is_directory() && only_npy_files(e.path())))
        out.push_back(e.path().string());
    }
    if (out.empty()) fail("data folder '{}' holds no .npz, .npy or .bin files", spec);
  } else {
    if (!fs::exists(spec, ec)) fail("data '{}' does not exist", spec);
    out.push_back(spec);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace onnxdp
