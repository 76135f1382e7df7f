// Outputs never alias inputs: every path a command writes is compared with every file it reads
// before anything is written. Two paths are the same file when both exist and are one file
// (device and inode, through links and hard links), or when their absolute normalised forms are
// equal (a file not written yet). A match is an error naming both: onnxdp never overwrites its
// own model, data or config.
#pragma once
#include <string>
#include <vector>

namespace onnxdp {

struct NamedPath {
  std::string role;  // how the user named it: "--metrics", "the model", "--data"
  std::string path;  // empty: not used this run
};

void check_outputs_apart(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

}  // namespace onnxdp
