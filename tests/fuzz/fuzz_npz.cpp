// Fuzz target: bytes as an .npz file through read_npz (zip directory, .npy headers, inflation).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_util.h"
#include "train/npz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = onnxdp::fuzz::write_input("data.npz", data, size);
  onnxdp::fuzz::expect_clean([&] { onnxdp::read_npz(path); });
  return 0;
}
