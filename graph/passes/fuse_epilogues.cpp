// See fuse_epilogues.h.
#include "graph/passes/fuse_epilogues.h"

#include "graph/passes/rewrite.h"

namespace onnxdp {

namespace {

struct Fuser : NodeRewrite {
  int fused = 0;
  using NodeRewrite::NodeRewrite;

  // The node producing x when x is a float32 activation that node `reader` alone reads (and the
  // caller does not return), else nullptr.
  Node* sole_producer(ValueId x) {
    const Value& v = g.value(x);
    if (v.kind != ValueKind::activation || v.producer < 0 || v.dtype != DType::f32) return nullptr;
    if (readers[size_t(x)] != 1 || kept.count(x) || drop[size_t(v.producer)]) return nullptr;
    return &g.nodes[size_t(v.producer)];
  }

  // `producer` takes over node ni's output (from the producer's position, earlier, so every reader
  // still comes after it); node ni goes.
  void absorb(Node& producer, size_t ni) {
    const ValueId old = producer.outputs[0], y = g.nodes[ni].outputs[0];
    g.value(y).producer = g.value(old).producer;
    g.value(old).producer = -1;
    producer.outputs[0] = y;
    drop[ni] = true;
    ++fused;
  }

  // Add(MatMul(A, B), bias) or Add(bias, MatMul(A, B)), B [K, N], bias [N]: FusedMatMul(A, B, bias).
  void bias(size_t ni) {
    const Node& add = g.nodes[ni];
    if (add.inputs.size() != 2) return;
    for (int k = 0; k < 2; ++k) {
      Node* mm = sole_producer(add.inputs[size_t(k)]);
      if (!mm || mm->op != Op::MatMul) continue;
      const ValueId b = add.inputs[size_t(1 - k)];
      const Shape &sa = g.value(mm->inputs[0]).shape, &sb = g.value(mm->inputs[1]).shape;
      if (sa.size() < 2 || sb.size() != 2 || g.value(b).dtype != DType::f32 || g.value(b).shape != Shape{sb[1]})
        continue;
      // The MatMul reads the bias from its own position: a computed bias must exist by then.
      if (g.value(b).producer > g.value(mm->outputs[0]).producer) continue;
      mm->op = Op::FusedMatMul;
      mm->inputs.push_back(b);
      absorb(*mm, ni);
      return;
    }
  }

  // Relu(Gemm | MatMul | FusedMatMul | BatchNormalization without activation): the producer
  // applies it.
  void relu(size_t ni) {
    const Node& r = g.nodes[ni];
    if (r.inputs.size() != 1) return;
    Node* p = sole_producer(r.inputs[0]);
    if (!p) return;
    if (p->op == Op::Gemm) {
      p->op = Op::FusedGemm;
    } else if (p->op == Op::MatMul || (p->op == Op::FusedMatMul && p->s("activation").empty())) {
      const Shape &sa = g.value(p->inputs[0]).shape, &sb = g.value(p->inputs[1]).shape;
      if (sa.size() < 2 || sb.size() != 2) return;
      p->op = Op::FusedMatMul;
    } else if (p->op != Op::BatchNormalization || !p->s("activation").empty() || p->outputs[0] != r.inputs[0]) {
      return;  // not a product, nor a BatchNormalization's y
    }
    p->attrs["activation"] = Attr(std::string("Relu"));
    absorb(*p, ni);
  }
};

}  // namespace

int fuse_epilogues(Graph& g, const std::vector<ValueId>& keep) {
  Fuser f(g, keep);
  // In node order: a bias Add comes before the Relu that reads it.
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (g.nodes[ni].op == Op::Add) f.bias(ni);
    else if (g.nodes[ni].op == Op::Relu) f.relu(ni);
  }
  f.finish();
  return f.fused;
}

}  // namespace onnxdp
