// The failure path of exec/cuda/check.h.
#include "exec/cuda/check.h"

#include <cstring>
#include <string>

#include "graph/error.h"

namespace onnxdp::cuda {

namespace {

// __FILE__ relative to the source tree: this file is <root>/exec/cuda/check.cpp.
std::string source_relative(const char* file) {
  static const std::string root = [] {
    std::string self = __FILE__;
    const std::string tail = "exec/cuda/check.cpp";
    return self.size() >= tail.size() && self.compare(self.size() - tail.size(), tail.size(), tail) == 0
               ? self.substr(0, self.size() - tail.size())
               : std::string();
  }();
  std::string f = file ? file : "?";
  if (!root.empty() && f.compare(0, root.size(), root) == 0) f.erase(0, root.size());
  return f;
}

}  // namespace

void check_failed(const char* library, const char* call, const char* file, int line, int status, const char* name,
                  const char* text) {
  std::string msg = fmt::format("{} call failed: {} at {}:{}: ", library, call, source_relative(file), line);
  if (name && *name) msg += fmt::format("{} ({})", name, text ? text : "");
  else msg += fmt::format("{} (status {})", text ? text : "unknown error", status);
  if (std::strcmp(library, "NCCL") == 0) {
    const char* detail = ncclGetLastError(nullptr);
    if (detail && *detail) msg += fmt::format(": {}", detail);
  } else if (std::strcmp(library, "cuDNN") == 0) {
    char detail[512] = {0};
    cudnnGetLastErrorString(detail, sizeof detail);
    if (detail[0]) msg += fmt::format(": {}", detail);
  }
  throw Error(msg);
}

}  // namespace onnxdp::cuda
