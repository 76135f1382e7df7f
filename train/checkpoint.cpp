#include "train/checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "graph/error.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {
// Why a stream's write failed: errno of the failed write (ENOSPC: "No space left on device").
std::string write_error() { return errno ? std::strerror(errno) : "the disk is full or failing"; }

const char* st_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}
DType st_dtype_from(const std::string& s, const std::string& path) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::i8, DType::u8, DType::boolean})
    if (s == st_dtype(t)) return t;
  fail("safetensors '{}': unsupported dtype '{}'", path, s);
}
}  // namespace

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  size_t off = 0;
  for (const auto& [name, t] : tensors) {
    h[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {off, off + t.nbytes()}}};
    off += t.nbytes();
  }
  std::string header = h.dump();
  while ((header.size() + 8) % 8) header += ' ';
  errno = 0;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot write '{}': {}", path, std::strerror(errno));
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), std::streamsize(header.size()));
  for (const auto& [name, t] : tensors) f.write(static_cast<const char*>(t.data()), std::streamsize(t.nbytes()));
  f.flush();
  if (!f) fail("writing '{}' failed: {}", path, write_error());
}

std::map<std::string, Tensor> read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open '{}'", path);
  uint64_t n = 0;
  f.seekg(0, std::ios::end);
  uint64_t size = uint64_t(f.tellg());
  f.seekg(0);
  if (size < 8 || !f.read(reinterpret_cast<char*>(&n), 8) || n > size - 8) fail("'{}' is not a safetensors file", path);
  std::string header(size_t(n), '\0');
  f.read(header.data(), std::streamsize(n));
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    fail("'{}': bad safetensors header: {}", path, e.what());
  }
  std::map<std::string, Tensor> out;
  const uint64_t base = 8 + n;
  for (auto& [name, e] : h.items()) {
    if (name == "__metadata__") continue;
    try {
      Tensor t(st_dtype_from(e.at("dtype").get<std::string>(), path), e.at("shape").get<Shape>());
      uint64_t b = e.at("data_offsets").at(0).get<uint64_t>(), en = e.at("data_offsets").at(1).get<uint64_t>();
      if (en < b || en - b != t.nbytes() || base + en > size) fail("'{}': tensor '{}' has bad offsets", path, name);
      f.seekg(std::streamoff(base + b));
      f.read(static_cast<char*>(t.data()), std::streamsize(t.nbytes()));
      out[name] = std::move(t);
    } catch (const nlohmann::json::exception& ex) {
      fail("'{}': bad entry for '{}': {}", path, name, ex.what());
    }
  }
  return out;
}

namespace {

// FNV-1a, 64 bits, of a file's bytes: what trainer_state.json records per tensor file.
std::string file_checksum(const fs::path& path, uint64_t* bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read '{}'", path.string());
  uint64_t h = 0xcbf29ce484222325ull, n = 0;
  std::vector<char> buf(size_t(1) << 20);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize got = f.gcount();
    for (std::streamsize i = 0; i < got; ++i) h = (h ^ uint8_t(buf[size_t(i)])) * 0x100000001b3ull;
    n += uint64_t(got);
  }
  *bytes = n;
  return fmt::format("{:016x}", h);
}

// The file's (or folder's) bytes on the disk before what follows.
void sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}' to sync it: {}", path.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("writing '{}' failed (fsync: {})", path.string(), std::strerror(err));
}

const char* const kTensorFiles[] = {"model.safetensors", "optimizer.safetensors"};

// The checkpoint's files into the temporary folder tmp, each on the disk before the next step.
void write_checkpoint_files(const fs::path& tmp, const Checkpoint& c) {
  write_safetensors((tmp / "model.safetensors").string(), c.model);
  write_safetensors((tmp / "optimizer.safetensors").string(), c.optimizer);
  nlohmann::json state = c.state;
  for (const char* name : kTensorFiles) {
    sync_path(tmp / name);
    uint64_t bytes = 0;
    const std::string sum = file_checksum(tmp / name, &bytes);
    state["files"][name] = {{"bytes", bytes}, {"fnv1a64", sum}};
  }
  {
    errno = 0;
    std::ofstream f(tmp / "trainer_state.json", std::ios::trunc);
    f << state.dump(2) << "\n";
    f.flush();
    if (!f) fail("writing '{}' failed: {}", (tmp / "trainer_state.json").string(), write_error());
  }
  sync_path(tmp / "trainer_state.json");
  sync_path(tmp);
}

}  // namespace

std::string save_checkpoint(const std::string& dir, int64_t step, const Checkpoint& c) {
  fs::create_directories(dir);
  fs::path final_dir = fs::path(dir) / ("checkpoint-" + std::to_string(step));
  fs::path tmp = fs::path(dir) / (".checkpoint-" + std::to_string(step) + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    write_checkpoint_files(tmp, c);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // a failed write (a full disk) gives its space back; the older checkpoints stay
    throw;
  }
  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  sync_path(dir);
  return final_dir.string();
}

std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("checkpoint-", 0) != 0 || !e.is_directory()) continue;
    int64_t s;
    try {
      size_t pos = 0;
      s = std::stoll(n.substr(11), &pos);
      if (pos != n.size() - 11) continue;
    } catch (...) {
      continue;
    }
    if (fs::exists(e.path() / "trainer_state.json")) found.emplace_back(s, e.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

std::string latest_checkpoint(const std::string& dir) {
  const std::vector<std::string> found = checkpoints_newest_first(dir);
  return found.empty() ? std::string() : found.front();
}

Checkpoint load_checkpoint(const std::string& path) {
  Checkpoint c;
  const fs::path dir(path);
  {
    std::ifstream f(dir / "trainer_state.json");
    try {
      c.state = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
      fail("checkpoint '{}': bad trainer_state.json: {}", path, e.what());
    }
  }
  auto integer = [&](const char* key, int64_t lo) {
    if (!c.state.is_object() || !c.state.contains(key) || !c.state[key].is_number_integer() ||
        c.state[key].get<int64_t>() < lo)
      fail("checkpoint '{}': trainer_state.json has no integer '{}' >= {}", path, key, lo);
  };
  integer("step", 1);
  integer("epoch", -1);
  integer("cursor", 0);
  integer("optimizer_steps", 0);
  if (c.state.contains("files")) {
    for (const char* name : kTensorFiles) {
      const nlohmann::json& want = c.state["files"][name];
      if (!want.is_object() || !want.contains("bytes") || !want.contains("fnv1a64"))
        fail("checkpoint '{}': trainer_state.json records no checksum of {}", path, name);
      uint64_t bytes = 0;
      if (!fs::exists(dir / name)) fail("checkpoint '{}': {} is missing", path, name);
      const std::string sum = file_checksum(dir / name, &bytes);
      if (bytes != want["bytes"].get<uint64_t>() || sum != want["fnv1a64"].get<std::string>())
        fail("checkpoint '{}': {} is not the file that was written ({} bytes, checksum {}; recorded {} bytes, {})", path,
             name, bytes, sum, want["bytes"].get<uint64_t>(), want["fnv1a64"].get<std::string>());
    }
  }
  c.model = read_safetensors((dir / "model.safetensors").string());
  c.optimizer = read_safetensors((dir / "optimizer.safetensors").string());
  for (const auto* part : {&c.model, &c.optimizer})
    for (const auto& [name, t] : *part) {
      if (t.dtype() != DType::f32) continue;
      const float* x = t.as<float>();
      for (int64_t i = 0; i < t.numel(); ++i)
        if (!std::isfinite(x[i]))
          fail("checkpoint '{}': tensor '{}' holds {} at element {}", path, name, x[i], i);
    }
  return c;
}

}  // namespace onnxdp
