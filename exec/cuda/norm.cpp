// Host side of the CUDA normalisations and losses (exec/cuda/kernels.h's norm group): a node
// becomes an LnLaunch / BnLaunch / LossLaunch (exec/cuda/norm_launch.h, which says how the kernels
// reduce). Runs f32 and f64 (x / y / dy / dx of one dtype; the per-channel and per-class parameters
// and the statistics outputs f32 or f64 each, as the CPU kernels), int64 or int32 labels.
//
//   LayerNormalization       any axis; Scale and B broadcasting to x.shape[axis:] (at most 8 dims
//                            when they broadcast); Mean / InvStdDev outputs optional
//   LayerNormalizationGrad   dx, dscale, dbias (each optional)
//   BatchNormalization       inference and training mode (running mean / var outputs, the var
//                            unbiased with unbiased_running_var), x [N, C, ...]
//   BatchNormalizationGrad   dx, dscale, dbias (each optional); relu_y optional (Relu's backward first)
//   SoftmaxCrossEntropyLoss(Grad), NegativeLogLikelihoodLoss(Grad)
//                            x [N, C, d..] with C > 0, weights optional, ignore_index, reduction
//                            none / sum / mean
//
// Scratch (the loss terms of a reduced loss, the total weight for the mean's gradient, the row
// statistics for LayerNormalizationGrad's dscale / dbias) is allocated stream-ordered
// (cudaMallocAsync / cudaFreeAsync on the context's stream), host vectors when emulated.
#include <cuda_runtime.h>

#include <vector>

#include "exec/cuda/check.h"
#include "exec/cuda/kernels.h"
#include "exec/cuda/norm_launch.h"
#include "graph/shape_helpers.h"

namespace onnxdp::cuda {

namespace {

bool is_float(DType t) { return t == DType::f32 || t == DType::f64; }
bool is_label(DType t) { return t == DType::i64 || t == DType::i32; }

// Scratch doubles for one node's kernels, released in order on the stream.
class Scratch {
 public:
  Scratch(size_t n, const CudaContext& cc) : cc_(cc) {
    if (n == 0) return;
    if (cc.emulate) {
      host_.resize(n);
      p_ = host_.data();
      return;
    }
    void* p = nullptr;
    ONNXDP_CUDA_CHECK(cudaMallocAsync(&p, n * sizeof(double), static_cast<cudaStream_t>(cc.stream)));
    p_ = static_cast<double*>(p);
  }
  ~Scratch() {
    if (p_ && !cc_.emulate) cudaFreeAsync(p_, static_cast<cudaStream_t>(cc_.stream));  // unwinding: not checked
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  double* data() const { return p_; }
  // Frees after the kernels queued so far (checked; the destructor frees only on errors).
  void release() {
    if (p_ && !cc_.emulate) ONNXDP_CUDA_CHECK(cudaFreeAsync(p_, static_cast<cudaStream_t>(cc_.stream)));
    p_ = nullptr;
  }

 private:
  CudaContext cc_;
  std::vector<double> host_;
  double* p_ = nullptr;
};

NmIn in_of(const TensorRef& t) { return {t.data, t.dtype == DType::f64}; }
NmOut out_of(const KernelCtx& c, int k) {
  if (!c.has_out(k)) return {};
  return {c.out(k).data, c.out(k).dtype == DType::f64};
}

const Value& input(const Graph& g, const Node& n, int k) { return g.value(n.inputs[size_t(k)]); }

bool float_input(const Graph& g, const Node& n, int k) { return n.has_input(k) && is_float(input(g, n, k).dtype); }

// The present outputs are float.
bool float_outputs(const Graph& g, const Node& n) {
  for (ValueId v : n.outputs)
    if (v != kNoValue && !is_float(g.value(v).dtype)) return false;
  return true;
}

// Scale / B of shape s broadcast to the normalised shape `norm`; false when it cannot be (the shape
// rule's check) or needs more than kNmMaxRank dims.
bool bcast_of(const Shape& s, const Shape& norm, NmBcast& b) {
  const size_t r = norm.size();
  if (s.size() > r) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const int64_t d = s[s.size() - 1 - i];
    if (d != 1 && d != norm[r - 1 - i]) return false;
  }
  b.present = true;
  b.direct = shape_numel(s) == shape_numel(norm);  // then the same elements in the same order
  if (b.direct) return true;
  if (r > size_t(kNmMaxRank)) return false;
  b.rank = int(r);
  const size_t off = r - s.size();
  int64_t stride = 1;
  for (size_t i = r; i-- > 0;) {
    b.size[i] = norm[i];
    b.stride[i] = 0;
    if (i >= off) {
      const int64_t d = s[i - off];
      b.stride[i] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  return true;
}

bool ln_runs(const Graph& g, const Node& n, bool grad) {
  const int xk = grad ? 1 : 0, sk = grad ? 2 : 1;
  if (!float_input(g, n, xk) || !float_input(g, n, sk) || !float_outputs(g, n)) return false;
  if (grad && (!float_input(g, n, 0) || input(g, n, 0).dtype != input(g, n, xk).dtype)) return false;
  const Shape& xs = input(g, n, xk).shape;
  if (xs.empty()) return false;
  const int64_t axis = normalize_axis(n.i("axis"), int64_t(xs.size()), n);
  const Shape norm(xs.begin() + axis, xs.end());
  NmBcast b;
  if (!bcast_of(input(g, n, sk).shape, norm, b)) return false;
  if (!grad && n.has_input(2) && (!float_input(g, n, 2) || !bcast_of(input(g, n, 2).shape, norm, b))) return false;
  return true;
}

bool bn_runs(const Graph& g, const Node& n, bool grad) {
  const int xk = grad ? 1 : 0;
  if (!float_input(g, n, xk) || !float_outputs(g, n)) return false;
  const Shape& xs = input(g, n, xk).shape;
  if (xs.size() < 2) return false;
  if (grad && (!float_input(g, n, 0) || input(g, n, 0).dtype != input(g, n, 1).dtype)) return false;
  if (grad && n.has_input(3) && (input(g, n, 3).dtype != input(g, n, 1).dtype || input(g, n, 3).shape != xs))
    return false;
  for (int k = grad ? 2 : 1; k < (grad ? 3 : 5); ++k)
    if (!float_input(g, n, k) || shape_numel(input(g, n, k).shape) != xs[1]) return false;
  return true;
}

// Scores (or log-probabilities, or dx's shape) xs, labels at input lk, weights at input wk.
bool loss_runs(const Graph& g, const Node& n, const Shape& xs, int lk, int wk) {
  if (xs.size() < 2 || xs[1] <= 0 || !float_outputs(g, n)) return false;
  if (!n.has_input(lk) || !is_label(input(g, n, lk).dtype)) return false;
  const int64_t D = shape_numel(Shape(xs.begin() + 2, xs.end()));
  if (shape_numel(input(g, n, lk).shape) != xs[0] * D) return false;
  if (n.has_input(wk) && (!float_input(g, n, wk) || shape_numel(input(g, n, wk).shape) != xs[1])) return false;
  const std::string& r = n.s("reduction");
  return r == "none" || r == "sum" || r == "mean";
}

void layer_norm(const Graph&, KernelCtx& c, const CudaContext& cc, bool grad) {
  const Node& n = c.node;
  const TensorRef& x = c.in(grad ? 1 : 0);
  const int64_t axis = normalize_axis(n.i("axis"), x.rank(), n);
  const Shape norm(x.shape->begin() + axis, x.shape->end());
  LnLaunch l;
  l.f64 = x.dtype == DType::f64;
  l.inner = shape_numel(norm);
  l.outer = l.inner ? x.numel / l.inner : 0;
  l.lanes = nm_lanes(l.inner);
  l.eps = n.f("epsilon");
  l.x = x.data;
  const int sk = grad ? 2 : 1;
  if (!bcast_of(*c.in(sk).shape, norm, l.scale)) c.fail("Scale does not broadcast to the normalised shape");
  l.scale.v = in_of(c.in(sk));
  if (!grad && c.has_in(2)) {
    if (!bcast_of(*c.in(2).shape, norm, l.bias)) c.fail("B does not broadcast to the normalised shape");
    l.bias.v = in_of(c.in(2));
  }
  if (!grad) {
    l.y = c.out(0).data;
    l.mean = out_of(c, 1);
    l.inv = out_of(c, 2);
    return cc.emulate ? ln_emulate(l, false) : ln_launch(l, false, cc.stream);
  }
  l.dy = c.in(0).data;
  l.y = c.has_out(0) ? c.out(0).data : nullptr;
  l.dscale = out_of(c, 1);
  l.dbias = out_of(c, 2);
  const bool params = l.dscale.p || l.dbias.p;
  Scratch stats(params ? size_t(2 * l.outer) : 0, cc);
  l.stats = stats.data();
  cc.emulate ? ln_emulate(l, true) : ln_launch(l, true, cc.stream);
  stats.release();
}

void batch_norm(const Graph&, KernelCtx& c, const CudaContext& cc, bool grad) {
  const Node& n = c.node;
  const TensorRef& x = c.in(grad ? 1 : 0);
  BnLaunch l;
  l.f64 = x.dtype == DType::f64;
  l.N = x.dim(0);
  l.C = x.dim(1);
  l.S = l.N * l.C != 0 ? x.numel / (l.N * l.C) : 0;
  l.lanes = nm_lanes(l.N * l.S);
  l.eps = n.f("epsilon");
  l.x = x.data;
  l.y = c.has_out(0) ? c.out(0).data : nullptr;
  if (grad) {
    l.dy = c.in(0).data;
    if (c.has_in(3)) l.relu_y = c.in(3).data;
    l.scale = in_of(c.in(2));
    l.dscale = out_of(c, 1);
    l.dbias = out_of(c, 2);
  } else {
    l.training = n.i("training_mode") != 0;
    l.relu = n.s("activation") == "Relu";
    l.momentum = n.f("momentum");
    const double M = double(l.N * l.S);  // M = 1: no unbiased variance, the biased one (exec/cpu/norm.cpp)
    l.var_factor = n.i("unbiased_running_var") != 0 && M > 1 ? M / (M - 1) : 1.0;
    l.scale = in_of(c.in(1));
    l.bias = in_of(c.in(2));
    l.mean = in_of(c.in(3));
    l.var = in_of(c.in(4));
    l.out_mean = out_of(c, 1);
    l.out_var = out_of(c, 2);
    if (!l.y) c.fail("output 0 (Y) is absent");
  }
  cc.emulate ? bn_emulate(l, grad) : bn_launch(l, grad, cc.stream);
}

// SCE / NLL and their grads. Inputs: forward (x, labels, weights?); SCE grad (dy, scores, labels,
// weights?); NLL grad (dy, labels, x_shape, weights?).
void loss(const Graph&, KernelCtx& c, const CudaContext& cc, bool softmax, bool grad) {
  const Node& n = c.node;
  const int xk = grad ? (softmax ? 1 : -1) : 0, lk = grad ? (softmax ? 2 : 1) : 1, wk = grad ? 3 : 2;
  const TensorRef& shape_ref = xk >= 0 ? c.in(xk) : c.out(0);
  LossLaunch l;
  l.f64 = (grad ? c.out(0) : c.in(0)).dtype == DType::f64;
  l.N = shape_ref.dim(0);
  l.C = shape_ref.dim(1);
  l.D = l.N * l.C != 0 ? shape_ref.numel / (l.N * l.C) : 1;
  l.lanes = nm_lanes(l.C);
  if (xk >= 0) l.x = c.in(xk).data;
  l.labels = c.in(lk).data;
  l.labels_i32 = c.in(lk).dtype == DType::i32;
  if (c.has_in(wk)) l.weights = in_of(c.in(wk));
  l.has_ignore = n.has("ignore_index");
  l.ignore = l.has_ignore ? n.i("ignore_index") : 0;
  const std::string& r = n.s("reduction");
  l.reduction = r == "none" ? NmReduction::none : r == "sum" ? NmReduction::sum : NmReduction::mean;
  l.out = c.out(0).data;
  const int64_t P = l.N * l.D;
  size_t scratch = 0;
  if (grad) {
    l.dy = in_of(c.in(0));
    if (l.reduction == NmReduction::mean) scratch = 1;
  } else {
    if (softmax && c.has_out(1)) l.log_prob = c.out(1).data;
    if (l.reduction != NmReduction::none) scratch = size_t(2 * P);
  }
  // The reduced loss reads its terms even when there are none (the 0 / 0 mean): keep a pointer.
  Scratch s(scratch ? scratch : (!grad && l.reduction != NmReduction::none ? 1 : 0), cc);
  if (grad) l.wsum = s.data();
  else l.terms = s.data();
  cc.emulate ? loss_emulate(l, softmax, grad) : loss_launch(l, softmax, grad, cc.stream);
  s.release();
}

}  // namespace

bool norm_runs(const Graph& g, const Node& n) {
  switch (n.op) {
    case Op::LayerNormalization: return ln_runs(g, n, false);
    case Op::LayerNormalizationGrad: return ln_runs(g, n, true);
    case Op::BatchNormalization: return bn_runs(g, n, false);
    case Op::BatchNormalizationGrad: return bn_runs(g, n, true);
    case Op::SoftmaxCrossEntropyLoss:
    case Op::NegativeLogLikelihoodLoss:
      return float_input(g, n, 0) && loss_runs(g, n, input(g, n, 0).shape, 1, 2);
    case Op::SoftmaxCrossEntropyLossGrad:
      return float_input(g, n, 0) && float_input(g, n, 1) && input(g, n, 0).dtype == input(g, n, 1).dtype &&
             loss_runs(g, n, input(g, n, 1).shape, 2, 3);
    case Op::NegativeLogLikelihoodLossGrad:
      return float_input(g, n, 0) && !n.outputs.empty() && n.outputs[0] != kNoValue &&
             g.value(n.outputs[0]).dtype == input(g, n, 0).dtype && loss_runs(g, n, g.value(n.outputs[0]).shape, 1, 3);
    default: return false;
  }
}

void norm_forward(const Graph& g, KernelCtx& c, const CudaContext& cc) {
  switch (c.node.op) {
    case Op::LayerNormalization: return layer_norm(g, c, cc, false);
    case Op::LayerNormalizationGrad: return layer_norm(g, c, cc, true);
    case Op::BatchNormalization: return batch_norm(g, c, cc, false);
    case Op::BatchNormalizationGrad: return batch_norm(g, c, cc, true);
    case Op::SoftmaxCrossEntropyLoss: return loss(g, c, cc, true, false);
    case Op::NegativeLogLikelihoodLoss: return loss(g, c, cc, false, false);
    case Op::SoftmaxCrossEntropyLossGrad: return loss(g, c, cc, true, true);
    case Op::NegativeLogLikelihoodLossGrad: return loss(g, c, cc, false, true);
    default: c.fail("no CUDA kernel in the norm group");
  }
}

}  // namespace onnxdp::cuda
