// Reverse-mode autodiff as a graph-to-graph transformation. Each op's gradient rule
// (graph/gradients_<category>.cpp, `grad_<Op>`) emits ordinary nodes computing the gradients of
// the inputs that need them from the gradients of its outputs; gradients reaching a value along
// several paths accumulate with add-or-set.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

struct GradCtx {
  Graph& graph;
  Node node;                               // a copy: the rule appends nodes to graph
  std::vector<ValueId> out_grads;          // per output: its gradient, or kNoValue
  std::vector<char> wants;                 // per input: does the loss need its gradient
  std::map<ValueId, ValueId>& grads;       // value -> accumulated gradient
  int& counter;                            // for unique names

  const Value& in(int k) const { return graph.value(node.inputs.at(size_t(k))); }
  ValueId in_id(int k) const { return node.inputs.at(size_t(k)); }
  ValueId out_id(int k) const { return node.outputs.at(size_t(k)); }
  ValueId dy(int k = 0) const { return k < int(out_grads.size()) ? out_grads[size_t(k)] : kNoValue; }
  bool needs(int k) const { return k < int(wants.size()) && wants[size_t(k)]; }

  // Appends a node with one output (or `n_out` outputs) and returns its first output.
  ValueId emit(Op op, std::vector<ValueId> inputs, std::map<std::string, Attr> attrs = {}, int n_out = 1);
  std::vector<ValueId> emit_n(Op op, std::vector<ValueId> inputs, std::map<std::string, Attr> attrs, int n_out);
  ValueId constant(Tensor t);
  ValueId scalar(float v, DType t);  // a 0-d constant of dtype t
  ValueId ints(const std::vector<int64_t>& v);
  // Sums a gradient over the axes along which the input was broadcast, to the input's shape.
  ValueId reduce_to(ValueId grad, const Shape& target);
  // Adds g to input k's gradient (add-or-set); g must have input k's shape.
  void add(int k, ValueId g);

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(node.describe() + ": gradient: " + fmt::format(f, std::forward<Args>(args)...));
  }
};

using GradRule = void (*)(GradCtx&);
GradRule grad_rule(Op op);
// An op whose outputs do not depend differentiably on its inputs (Shape, Equal, ...): its rule
// is `no_gradient`. An op whose gradient onnxdp has not written yet uses `gradient_missing`,
// which fails naming the node when the loss needs it.
void no_gradient(GradCtx&);
void gradient_missing(GradCtx&);

// Appends to g the nodes computing d loss / d v for each v in wrt. Returns, per v, its gradient
// value (kNoValue if the loss does not depend on it). loss must be a scalar. `seed`: the gradient
// backward starts from, a value of the loss's dtype and shape (--mixed-precision fp16 passes the
// loss scale, so every gradient is that of scale * loss); kNoValue: 1.
std::vector<ValueId> autodiff(Graph& g, ValueId loss, const std::vector<ValueId>& wrt, ValueId seed = kNoValue);

}  // namespace onnxdp
