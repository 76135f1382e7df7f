// Shape inference with constant folding, in one sweep in topological order: each node's shape
// rule runs, and a node whose inputs are all known (Constant nodes, integer initializers, shapes
// of statically shaped values) is run at once with its CPU kernel and becomes a constant. This
// turns the shape arithmetic exporters emit (Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
// Range, ConstantOfShape ...) into constants, so the shapes after it are static.
#pragma once
#include "graph/graph.h"

namespace onnxdp {

void infer_and_fold(Graph& g);
// Removes nodes whose outputs nothing uses.
void remove_dead_nodes(Graph& g);

}  // namespace onnxdp
