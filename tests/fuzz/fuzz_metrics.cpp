// Fuzz target: bytes as a metrics.jsonl through read_metrics_log and the SVG `onnxdp plot` draws.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_util.h"
#include "train/plot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = onnxdp::fuzz::write_input("metrics.jsonl", data, size);
  onnxdp::fuzz::expect_clean([&] { onnxdp::metrics_svg(onnxdp::read_metrics_log(path)); });
  return 0;
}
