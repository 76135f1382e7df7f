#include "graph/passes/dead_nodes.h"

namespace onnxdp {

void remove_dead_nodes(Graph& g) {
  std::vector<char> used(g.values.size(), 0);
  for (ValueId o : g.outputs) used[size_t(o)] = 1;
  std::vector<char> keep(g.nodes.size(), 0);
  for (size_t ni = g.nodes.size(); ni-- > 0;) {
    const Node& n = g.nodes[ni];
    for (ValueId o : n.outputs)
      if (o != kNoValue && used[size_t(o)]) keep[ni] = 1;
    if (keep[ni])
      for (ValueId in : n.inputs)
        if (in != kNoValue) used[size_t(in)] = 1;
  }
  std::vector<Node> kept;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    if (keep[ni]) kept.push_back(std::move(g.nodes[ni]));
  g.nodes = std::move(kept);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (ValueId o : g.nodes[ni].outputs)
      if (o != kNoValue) g.value(o).producer = int(ni);
}

}  // namespace onnxdp
