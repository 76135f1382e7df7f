#include "train/outputs.h"

#include <filesystem>

#include "graph/error.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    const bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return ca.lexically_normal() == cb.lexically_normal();
}

}  // namespace

void check_outputs_apart(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (const NamedPath& out : outputs) {
    if (out.path.empty()) continue;
    for (const NamedPath& in : inputs)
      if (!in.path.empty() && same_file(out.path, in.path))
        fail("{} '{}' is {} '{}': onnxdp would overwrite its own input; write it elsewhere", out.role, out.path, in.role,
             in.path);
  }
}

}  // namespace onnxdp
