// Appends the training loss to a forward graph, built from ordinary ops so that autodiff and
// every backend handle it like the rest of the model.
#pragma once
#include <string>

#include "graph/graph.h"

namespace onnxdp {

enum class LossKind { cross_entropy, mse, bce_with_logits, l1, none };
LossKind loss_kind_from_name(const std::string& s);

struct LossOptions {
  LossKind kind = LossKind::cross_entropy;
  std::string label_name = "label";  // the new graph input holding the targets
  DType label_dtype = DType::i64;    // as the data gives it
  int64_t class_axis = -1;           // cross_entropy: -1 = class-last [..., C]; 1 = ONNX-style [N, C, d1...]
  // Rows of the global batch when this graph holds only a replica's shard: the loss is then this
  // shard's share of the global mean (its sum over the global count), so the replicas' losses and
  // gradients add up exactly to one device's. 0: the graph holds the whole batch.
  int64_t global_batch = 0;
  double shard_fraction = 1;  // `none` on a shard: the model's own mean loss is weighted by rows / global rows
};

// Adds the label input (not for `none`) and the loss nodes on the graph's first output; returns
// the scalar loss value: the mean over every position (cross_entropy) or element.
ValueId add_loss(Graph& g, const LossOptions& options);

}  // namespace onnxdp
