// Host side of the CUDA reductions and Softmax: a node becomes a ReduceLaunch / SoftmaxLaunch
// (exec/cuda/reduce_launch.h). The kept / reduced split is the CPU kernel's (exec/cpu/reduce_dims.h).
#include "exec/cuda/reduce.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "exec/cpu/reduce_dims.h"
#include "exec/cuda/check.h"
#include "exec/cuda/kernels.h"
#include "exec/cuda/reduce_launch.h"
#include "graph/shape_helpers.h"

namespace onnxdp::cuda {

namespace {

bool float_type(DType t) { return t == DType::f32 || t == DType::f64; }
bool is_softmax(Op op) {
  return op == Op::Softmax || op == Op::LogSoftmax || op == Op::SoftmaxGrad || op == Op::LogSoftmaxGrad;
}
bool reduce_type(DType t, RdType* out) {
  switch (t) {
    case DType::f32: *out = RdType::f32; return true;
    case DType::f64: *out = RdType::f64; return true;
    case DType::f16: *out = RdType::f16; return true;
    case DType::bf16: *out = RdType::bf16; return true;
    default: return false;
  }
}

// The constant axes of a reduction (input 1), or nullopt when absent.
std::vector<int64_t> axes_of(const Graph& g, const Node& n) {
  const Tensor& a = g.value(n.inputs[1]).data;
  return a.to_i64();
}

}  // namespace

bool reduce_runs(const Graph& g, const Node& n) {
  if (kernel_family(n.op) != KernelFamily::reduce || !n.has_input(0)) return false;
  // SoftmaxGrad's mask (graph/passes/fuse_masked_softmax.h) is fused for the CPU backend only.
  if (n.op == Op::SoftmaxGrad && n.has_input(2)) return false;
  if (is_softmax(n.op)) return float_type(g.value(n.inputs[0]).dtype);
  RdType t;
  if (!reduce_type(g.value(n.inputs[0]).dtype, &t)) return false;
  if (n.has_input(1) && g.value(n.inputs[1]).data.empty()) return false;  // axes computed at run time
  std::vector<int64_t> axes;
  if (n.has_input(1)) axes = axes_of(g, n);
  std::vector<char> red = reduced_dims(int64_t(g.value(n.inputs[0]).shape.size()), n.has_input(1) ? &axes : nullptr,
                                       n.i("noop_with_empty_axes") != 0, n);
  ReduceDims kept, reduced;
  split_dims(g.value(n.inputs[0]).shape, red, kept, reduced);
  return kept.size.size() <= size_t(kRdMaxRank) && reduced.size.size() <= size_t(kRdMaxRank);
}

int64_t reduce_parts(int64_t n_out, int64_t n_red, size_t scratch_doubles) {
  // A thread per output is enough while there are many outputs or few elements each; past that,
  // shares of about kShare elements, as many as the scratch holds.
  constexpr int64_t kShare = 256, kManyOutputs = 1 << 16, kMaxParts = 1024;
  if (n_out <= 0 || n_out >= kManyOutputs || n_red < 2 * kShare) return 1;
  int64_t parts = std::min(n_red / kShare, kMaxParts);
  parts = std::min<int64_t>(parts, int64_t(scratch_doubles) / n_out);
  return std::max<int64_t>(parts, 1);
}

void reduce_forward(const Graph& g, const Node& n, const std::vector<TensorRef>& in, const TensorRef& out,
                    void* stream, bool emulate, double* scratch, size_t scratch_doubles) {
  const bool grad = n.op == Op::SoftmaxGrad || n.op == Op::LogSoftmaxGrad;
  const TensorRef& x = in.at(grad ? 1 : 0);  // the Grads' (dy, y): y has the shape
  const bool f64 = x.dtype == DType::f64;
  if (is_softmax(n.op)) {
    SoftmaxLaunch l;
    l.log = n.op == Op::LogSoftmax || n.op == Op::LogSoftmaxGrad;
    l.grad = grad;
    l.dy = grad ? in.at(0).data : nullptr;
    l.f64 = f64;
    const int64_t axis = normalize_axis(n.i("axis"), x.rank(), n);
    l.outer = l.inner = 1;
    l.n = x.dim(int(axis));
    for (int d = 0; d < axis; ++d) l.outer *= x.dim(d);
    for (int d = int(axis) + 1; d < x.rank(); ++d) l.inner *= x.dim(d);
    l.in = x.data;
    l.out = out.data;
    if (x.numel == 0) return;
    return emulate ? softmax_emulate(l) : softmax_launch(l, stream);
  }
  std::vector<int64_t> axes;
  if (n.has_input(1)) axes = axes_of(g, n);
  std::vector<char> red = reduced_dims(x.rank(), n.has_input(1) ? &axes : nullptr, n.i("noop_with_empty_axes") != 0, n);
  bool any = false;
  for (char r : red) any = any || r;
  if (!any && x.numel == out.numel) {  // noop_with_empty_axes (or a scalar): the identity
    const size_t bytes = size_t(x.numel) * dtype_size(x.dtype);
    if (!bytes) return;
    if (emulate) return void(std::memcpy(out.data, x.data, bytes));
    ONNXDP_CUDA_CHECK(cudaMemcpyAsync(out.data, x.data, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
    return;
  }
  ReduceDims kept, reduced;
  split_dims(*x.shape, red, kept, reduced);
  if (kept.size.size() > size_t(kRdMaxRank) || reduced.size.size() > size_t(kRdMaxRank))
    fail("{}: CUDA reductions take at most {} kept and {} reduced dims after merging", n.describe(), kRdMaxRank,
         kRdMaxRank);
  ReduceLaunch l;
  l.kind = n.op == Op::ReduceSum    ? RdKind::sum
           : n.op == Op::ReduceMean ? RdKind::mean
           : n.op == Op::ReduceMax  ? RdKind::max
                                    : RdKind::min;
  if (!reduce_type(x.dtype, &l.type)) fail("{}: no CUDA reduction for {}", n.describe(), dtype_name(x.dtype));
  l.nk = int(kept.size.size());
  l.nr = int(reduced.size.size());
  l.n_out = l.n_red = 1;
  for (int d = 0; d < l.nk; ++d) {
    l.kept_size[d] = kept.size[size_t(d)], l.kept_stride[d] = kept.stride[size_t(d)];
    l.n_out *= l.kept_size[d];
  }
  for (int d = 0; d < l.nr; ++d) {
    l.red_size[d] = reduced.size[size_t(d)], l.red_stride[d] = reduced.stride[size_t(d)];
    l.n_red *= l.red_size[d];
  }
  l.in = x.data;
  l.out = out.data;
  l.parts = scratch ? reduce_parts(l.n_out, l.n_red, scratch_doubles) : 1;
  l.partial = l.parts > 1 ? scratch : nullptr;
  if (out.numel != l.n_out) fail("{}: {} outputs expected from the reduced dims, the output has {}", n.describe(), l.n_out, out.numel);
  emulate ? reduce_emulate(l) : reduce_launch(l, stream);
}

}  // namespace onnxdp::cuda
