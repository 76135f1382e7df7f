// Checkpoints: checkpoint-STEP/ with model.safetensors, optimizer.safetensors and
// trainer_state.json, written into a temporary folder and renamed, so a kill at any moment leaves
// the last complete checkpoint intact.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "graph/tensor.h"

namespace onnxdp {

// safetensors: 8-byte little-endian header length, JSON header, then the tensors' bytes.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors);
std::map<std::string, Tensor> read_safetensors(const std::string& path);

struct Checkpoint {
  std::map<std::string, Tensor> model;      // parameters and running statistics by initializer name
  std::map<std::string, Tensor> optimizer;  // optimizer state
  nlohmann::json state;                     // step, epoch, data cursor, seed, schedule, ...
};

// Writes dir/checkpoint-<step>/ atomically; returns its path.
std::string save_checkpoint(const std::string& dir, int64_t step, const Checkpoint& c);
// The newest complete checkpoint folder under dir, or "" when there is none.
std::string latest_checkpoint(const std::string& dir);
Checkpoint load_checkpoint(const std::string& path);

}  // namespace onnxdp
