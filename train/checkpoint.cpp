#include "train/checkpoint.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "graph/error.h"
#include "graph/input_file.h"

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

// The safetensors format caps its JSON header at 100 MB; onnxdp's headers are a few KiB.
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

std::map<std::string, Tensor> read_safetensors(const std::string& path) {
  // Checkpoint tensors are as large as the model: the file's size is the limit that matters, and
  // every size below is checked against it before anything is allocated.
  const uint64_t size = input_file_size(path, "safetensors file", UINT64_MAX, "safetensors files");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open '{}'", path);
  uint64_t n = 0;
  if (size < 8 || !f.read(reinterpret_cast<char*>(&n), 8) || n > size - 8)
    fail("'{}' is not a safetensors file (its header length does not fit in its {} bytes)", path, size);
  if (n > kMaxSafetensorsHeader) fail("'{}': safetensors header of {} bytes is past the format's 100 MB", path, n);
  std::string header(size_t(n), '\0');
  if (!f.read(header.data(), std::streamsize(n))) fail("'{}': reading its {}-byte header failed", path, n);
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    fail("'{}': bad safetensors header: {}", path, e.what());
  }
  if (!h.is_object()) fail("'{}': bad safetensors header: not a JSON object", path);
  std::map<std::string, Tensor> out;
  const uint64_t base = 8 + n, data_bytes = size - base;
  for (auto& item : h.items()) {
    const std::string name = item.key();
    const nlohmann::json& e = item.value();
    if (name == "__metadata__") continue;
    DType dt;
    Shape shape;
    uint64_t b = 0, en = 0;
    // Types are checked before any get<>: nlohmann converts a float or a negative number to an
    // integer type silently (and a float out of its range is undefined behaviour).
    auto bad_entry = [&](const char* why) { fail("'{}': bad entry for '{}': {}", path, name, why); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      bad_entry("not an object with dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) bad_entry("dtype is not a string");
    dt = st_dtype_from(e["dtype"].get<std::string>(), path);
    if (!e["shape"].is_array()) bad_entry("shape is not an array");
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX)) bad_entry("shape holds a value that is not a dimension");
      shape.push_back(d.get<int64_t>());
    }
    const auto& offsets = e["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      bad_entry("data_offsets is not two non-negative integers");
    b = offsets[0].get<uint64_t>();
    en = offsets[1].get<uint64_t>();
    int64_t numel;
    try {
      numel = shape_numel(shape);  // negative dims and more than 2^62 elements are errors
    } catch (const Error& ex) {
      fail("'{}': tensor '{}': {}", path, name, ex.what());
    }
    // The bytes the shape needs must be the bytes its offsets span, inside the file.
    if (en < b || en > data_bytes)
      fail("'{}': tensor '{}' has data_offsets [{}, {}] outside the file's {} data bytes", path, name, b, en, data_bytes);
    if (uint64_t(numel) > (en - b) / dtype_size(dt) || en - b != uint64_t(numel) * dtype_size(dt))
      fail("'{}': tensor '{}' is {} {} but its data_offsets [{}, {}] span {} bytes", path, name, st_dtype(dt),
           shape_str(shape), b, en, en - b);
    Tensor t(dt, shape);
    f.seekg(std::streamoff(base + b));
    if (!f.read(static_cast<char*>(t.data()), std::streamsize(t.nbytes())))
      fail("'{}': reading tensor '{}' failed", path, name);
    out[name] = std::move(t);
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
    // A few hundred bytes when onnxdp writes it; 16 MiB leaves room for any state to come.
    const std::string text = read_input_file((dir / "trainer_state.json").string(), "checkpoint state file", 16 * kMiB, "trainer_state.json files");
    try {
      c.state = nlohmann::json::parse(text);
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
  // fp16 runs' loss scale, read as a float: a positive finite float (a double past float's range
  // would be undefined behaviour to convert), with its growth tracker.
  if (c.state.contains("loss_scale")) {
    const nlohmann::json& scale = c.state["loss_scale"];
    if (!scale.is_number() || !(scale.get<double>() > 0 && scale.get<double>() <= double(FLT_MAX)))
      fail("checkpoint '{}': trainer_state.json's 'loss_scale' is {}, not a positive float", path, scale.dump());
    integer("loss_scale_growth_tracker", 0);
  }
  if (c.state.contains("files")) {
    const nlohmann::json& files = c.state["files"];
    for (const char* name : kTensorFiles) {
      if (!files.is_object() || !files.contains(name) || !files[name].is_object() || !files[name].contains("bytes") ||
          !files[name]["bytes"].is_number_unsigned() || !files[name].contains("fnv1a64") ||
          !files[name]["fnv1a64"].is_string())
        fail("checkpoint '{}': trainer_state.json records no checksum of {}", path, name);
      const uint64_t want_bytes = files[name]["bytes"].get<uint64_t>();
      const std::string want_sum = files[name]["fnv1a64"].get<std::string>();
      if (!fs::exists(dir / name)) fail("checkpoint '{}': {} is missing", path, name);
      // A regular file of the recorded size, before its bytes are read.
      const uint64_t size = input_file_size((dir / name).string(), "checkpoint tensor file", UINT64_MAX, "checkpoint tensor files");
      uint64_t bytes = size;
      const std::string sum = size == want_bytes ? file_checksum(dir / name, &bytes) : std::string("not computed");
      if (bytes != want_bytes || sum != want_sum)
        fail("checkpoint '{}': {} is not the file that was written ({} bytes, checksum {}; recorded {} bytes, {})", path,
             name, bytes, sum, want_bytes, want_sum);
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
