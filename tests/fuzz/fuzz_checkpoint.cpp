// Fuzz target: bytes as a checkpoint folder through load_checkpoint (trainer_state.json, its
// recorded sizes and checksums, both safetensors files, the finite-value check). The input holds
// the three files one after the other, split by kSeparator:
//   trainer_state.json <sep> model.safetensors <sep> optimizer.safetensors
// A file whose part is missing is not written (so missing files are fuzzed too). make_seeds.py
// writes seeds in this form.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_util.h"
#include "train/checkpoint.h"

namespace {
constexpr std::string_view kSeparator = "\n#onnxdp-fuzz-next-file#\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnxdp;
  static const std::filesystem::path dir = fuzz::scratch() / "checkpoint-1";
  std::filesystem::create_directories(dir);
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t at = 0;
  for (const char* name : {"trainer_state.json", "model.safetensors", "optimizer.safetensors"}) {
    std::error_code ec;
    std::filesystem::remove(dir / name, ec);
    if (at > in.size()) continue;
    size_t end = in.find(kSeparator, at);
    if (end == std::string_view::npos) end = in.size();
    fuzz::write_input(std::string("checkpoint-1/") + name, data + at, end - at);
    at = end + kSeparator.size();
  }
  fuzz::expect_clean([&] { load_checkpoint(dir.string()); });
  return 0;
}
