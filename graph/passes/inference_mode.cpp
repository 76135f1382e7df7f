#include "graph/passes/inference_mode.h"

#include <set>

namespace onnxdp {

namespace {

void trim_absent(std::vector<ValueId>& v) {
  while (!v.empty() && v.back() == kNoValue) v.pop_back();
}

}  // namespace

void inference_mode(Graph& g) {
  const std::set<ValueId> graph_outputs(g.outputs.begin(), g.outputs.end());
  // Nodes are in topological order: only nodes after `from` can read a value node `from` makes.
  auto used_after = [&](size_t from, ValueId v) {
    if (graph_outputs.count(v)) return true;
    for (size_t k = from + 1; k < g.nodes.size(); ++k)
      for (ValueId in : g.nodes[k].inputs)
        if (in == v) return true;
    return false;
  };
  auto replace_uses_after = [&](size_t from, ValueId old_v, ValueId new_v) {
    for (size_t k = from + 1; k < g.nodes.size(); ++k)
      for (ValueId& in : g.nodes[k].inputs)
        if (in == old_v) in = new_v;
  };
  // `out` keeps its name (a graph output is fetched by name) and now copies `src`.
  auto identity = [&](const Node& from, ValueId src, ValueId out) {
    Node id;
    id.name = (from.name.empty() ? std::string(op_name(from.op)) : from.name) + "/inference_mode/" + g.value(out).name;
    id.op = Op::Identity;
    id.inputs = {src};
    id.outputs = {out};
    return id;
  };

  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    Node& n = g.nodes[ni];
    if (n.op == Op::BatchNormalization && n.i("training_mode") != 0) {
      n.attrs.erase("training_mode");  // the default, 0: normalise with the running statistics
      std::vector<Node> copies;
      // Outputs 1/2 (running mean / var) would be the updated statistics; in inference mode they
      // are the statistics as given (inputs 3/4).
      for (size_t k = 1; k < n.outputs.size() && k <= 2; ++k) {
        ValueId o = n.outputs[k];
        if (o == kNoValue) continue;
        ValueId stat = n.inputs.at(k + 2);
        replace_uses_after(ni, o, stat);
        if (graph_outputs.count(o)) copies.push_back(identity(n, stat, o));
        else g.value(o).producer = -1;
        n.outputs[k] = kNoValue;
      }
      trim_absent(n.outputs);
      kept.push_back(std::move(n));
      for (Node& c : copies) kept.push_back(std::move(c));
      continue;
    }
    if (n.op == Op::Dropout) {
      n.attrs.erase("training_mode");
      if (n.inputs.size() > 2) n.inputs.resize(2);  // input 2 is training_mode
      trim_absent(n.inputs);
      bool mask_used = n.outputs.size() > 1 && n.outputs[1] != kNoValue && used_after(ni, n.outputs[1]);
      if (mask_used) {  // an inference-mode Dropout: output = input, mask all true
        kept.push_back(std::move(n));
        continue;
      }
      if (n.outputs.size() > 1 && n.outputs[1] != kNoValue) g.value(n.outputs[1]).producer = -1;
      ValueId in = n.inputs.at(0), out = n.outputs.at(0);
      if (out == kNoValue) continue;
      replace_uses_after(ni, out, in);
      if (graph_outputs.count(out)) {
        kept.push_back(identity(n, in, out));
      } else {
        g.value(out).producer = -1;
      }
      continue;
    }
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  index_producers(g);
}

}  // namespace onnxdp
