// `onnxdp --version`: the version, and the CUDA backend as this process sees it.
#include <cstdio>

#include "cli/commands.h"
#include "train/replicas.h"

namespace onnxdp::cli {

void print_version() {
  std::printf("onnxdp %s\n%s", ONNXDP_VERSION, cuda_report().c_str());
}

}  // namespace onnxdp::cli
