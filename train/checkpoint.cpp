#include "train/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/error.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {
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
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot write '{}'", path);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), std::streamsize(header.size()));
  for (const auto& [name, t] : tensors) f.write(static_cast<const char*>(t.data()), std::streamsize(t.nbytes()));
  f.flush();
  if (!f) fail("writing '{}' failed (disk full?)", path);
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

std::string save_checkpoint(const std::string& dir, int64_t step, const Checkpoint& c) {
  fs::create_directories(dir);
  fs::path final_dir = fs::path(dir) / ("checkpoint-" + std::to_string(step));
  fs::path tmp = fs::path(dir) / (".checkpoint-" + std::to_string(step) + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_safetensors((tmp / "model.safetensors").string(), c.model);
  write_safetensors((tmp / "optimizer.safetensors").string(), c.optimizer);
  {
    std::ofstream f(tmp / "trainer_state.json", std::ios::trunc);
    f << c.state.dump(2) << "\n";
    if (!f) fail("writing '{}' failed", (tmp / "trainer_state.json").string());
  }
  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  return final_dir.string();
}

std::string latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  int64_t best = -1;
  std::string path;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("checkpoint-", 0) != 0 || !e.is_directory()) continue;
    int64_t s;
    try {
      size_t pos = 0;
      s = std::stoll(n.substr(11), &pos);
      if (pos != n.size() - 11) continue;
    } catch (...) {
      continue;
    }
    if (!fs::exists(e.path() / "trainer_state.json")) continue;
    if (s > best) best = s, path = e.path().string();
  }
  return path;
}

Checkpoint load_checkpoint(const std::string& path) {
  Checkpoint c;
  c.model = read_safetensors((fs::path(path) / "model.safetensors").string());
  c.optimizer = read_safetensors((fs::path(path) / "optimizer.safetensors").string());
  std::ifstream f(fs::path(path) / "trainer_state.json");
  try {
    c.state = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("checkpoint '{}': bad trainer_state.json: {}", path, e.what());
  }
  return c;
}

}  // namespace onnxdp
