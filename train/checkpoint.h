// Checkpoints: checkpoint-STEP/ with model.safetensors, optimizer.safetensors and
// trainer_state.json, written into a temporary folder, every file flushed and fsynced, then the
// folder renamed into place (and its parent fsynced), so a kill or a full disk at any moment leaves
// the last complete checkpoint intact. trainer_state.json records each tensor file's size and
// checksum ("files"); loading verifies them, so flipped bytes or a truncated file are found.
#pragma once
#include <map>
#include <string>
#include <vector>

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
// Every checkpoint folder under dir (checkpoint-<step> holding trainer_state.json), newest first.
std::vector<std::string> checkpoints_newest_first(const std::string& dir);
// Reads and verifies a checkpoint: trainer_state.json parses, with step >= 1, epoch >= -1 and a
// cursor >= 0 as integers; each tensor file has the size and checksum the state records (a
// checkpoint of an onnxdp that recorded none is read unchecked); every float tensor is finite.
// Throws an Error naming the file and what is wrong.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace onnxdp
