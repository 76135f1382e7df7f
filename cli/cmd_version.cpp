// `onnxdp --version`: the version, and the CUDA backend as this process sees it.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "exec/device.h"

namespace onnxdp::cli {

void print_version() {
  std::printf("onnxdp %s\n", ONNXDP_VERSION);
  CudaInfo cuda = cuda_info();
  if (!cuda.built) {
    std::printf("CUDA: not built (%s)\n", cuda.status.c_str());
    return;
  }
  std::string line = "CUDA: built; " + cuda.versions + "; ";
  if (cuda.device_count > 0)
    line += std::to_string(cuda.device_count) + (cuda.device_count == 1 ? " device" : " devices");
  else
    line += "no device (" + (cuda.status.empty() ? std::string("none found") : cuda.status) + ")";
  std::printf("%s\n", line.c_str());
  // One line per GPU, indented under the summary.
  size_t start = 0;
  while (start < cuda.devices.size()) {
    size_t end = cuda.devices.find('\n', start);
    if (end == std::string::npos) end = cuda.devices.size();
    if (end > start) std::printf("  %s\n", cuda.devices.substr(start, end - start).c_str());
    start = end + 1;
  }
}

}  // namespace onnxdp::cli
