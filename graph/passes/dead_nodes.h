// Removes the nodes whose outputs neither a graph output nor a kept node reads.
#pragma once
#include "graph/graph.h"

namespace onnxdp {

void remove_dead_nodes(Graph& g);

}  // namespace onnxdp
