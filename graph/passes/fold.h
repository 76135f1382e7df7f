// Shape inference with constant folding, in one sweep in topological order: each node's shape
// rule runs, and a node whose inputs are all known (Constant nodes, integer initializers, shapes
// of statically shaped values) is run at once by `run` (the CPU kernels: exec/kernel.h's
// run_node, which graph/ does not link) and becomes a constant. This turns the shape arithmetic
// exporters emit (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Range, ConstantOfShape ...)
// into constants, so the shapes after it are static.
#pragma once
#include <functional>
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

// Runs node n of g on the given input tensors (nullptr for an absent optional input) and returns
// its outputs.
using NodeRunner = std::function<std::vector<Tensor>(const Graph& g, const Node& n, const std::vector<const Tensor*>& inputs)>;

void infer_and_fold(Graph& g, const NodeRunner& run);

}  // namespace onnxdp
