// Gradient rules of the collectives (see graph/autodiff.h).
#include "graph/autodiff.h"

namespace onnxdp {

// Scatter's input is the host's global batch: never trained.
void grad_Scatter(GradCtx& c) { no_gradient(c); }

// y = sum over replicas of x_r: every replica's x_r feeds every replica's y, so
// d loss / d x_r = sum over replicas of d loss / d y, an AllReduce of the incoming gradients.
void grad_AllReduce(GradCtx& c) {
  std::vector<ValueId> dys;
  std::vector<int> ks;
  for (int k = 0; k < int(c.node.inputs.size()); ++k)
    if (c.needs(k)) {
      ValueId d = c.dy(k);
      if (d == kNoValue) {
        const Value& o = c.graph.value(c.out_id(k));
        d = c.constant(Tensor(o.dtype, o.shape));
      }
      dys.push_back(d);
      ks.push_back(k);
    }
  std::vector<ValueId> r = c.emit_n(Op::AllReduce, dys, {}, int(dys.size()));
  for (size_t i = 0; i < ks.size(); ++i) c.add(ks[i], r[i]);
}

void grad_AllGather(GradCtx& c) { gradient_missing(c); }

// Inserted after autodiff, on gradients (parallel/data_parallel.h): never differentiated.
void grad_ReduceScatter(GradCtx& c) { gradient_missing(c); }

}  // namespace onnxdp
