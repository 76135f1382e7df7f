// CUDA kernels of LayerNormalization(Grad), BatchNormalization(Grad) and the two losses (and their
// Grads): one block of l.lanes threads per reduced row running the bodies of
// exec/cuda/norm_launch.h, whose lanes' double partials meet in a shared-memory tree; the *_emulate
// functions run the same bodies on the host, lane by lane.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "exec/cuda/check.h"
#include "exec/cuda/launch.h"
#include "exec/cuda/norm_launch.h"

namespace onnxdp::cuda {

namespace {

// Rows r = blockIdx.x, + gridDim.x, ...: every thread of a block walks the same rows (the bodies'
// barriers need the whole block).
#define NM_ROWS_KERNEL(name, Launch, body)                                          \
  template <class T>                                                                \
  __global__ void name(Launch l, int64_t rows) {                                    \
    __shared__ double part[2 * kNmMaxLanes];                                        \
    NmBlock b;                                                                      \
    b.lanes = int(blockDim.x);                                                      \
    b.part = part;                                                                  \
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) body<T>(l, r, b);        \
  }

NM_ROWS_KERNEL(ln_row_kernel, LnLaunch, ln_row)
NM_ROWS_KERNEL(ln_grad_row_kernel, LnLaunch, ln_grad_row)
NM_ROWS_KERNEL(ln_grad_column_kernel, LnLaunch, ln_grad_column)
NM_ROWS_KERNEL(bn_channel_kernel, BnLaunch, bn_channel)
NM_ROWS_KERNEL(bn_grad_channel_kernel, BnLaunch, bn_grad_channel)
NM_ROWS_KERNEL(sce_position_kernel, LossLaunch, sce_position)
NM_ROWS_KERNEL(sce_grad_position_kernel, LossLaunch, sce_grad_position)
#undef NM_ROWS_KERNEL

template <class T>
__global__ void loss_reduce_kernel(LossLaunch l) {
  __shared__ double part[2 * kNmMaxLanes];
  NmBlock b;
  b.lanes = int(blockDim.x);
  b.part = part;
  loss_reduce<T>(l, b);
}

__global__ void loss_weight_sum_kernel(LossLaunch l) {
  __shared__ double part[2 * kNmMaxLanes];
  NmBlock b;
  b.lanes = int(blockDim.x);
  b.part = part;
  loss_weight_sum(l, b);
}

template <class T>
__global__ void nll_pick_kernel(LossLaunch l) {
  const int64_t P = l.N * l.D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < P; i += int64_t(gridDim.x) * blockDim.x)
    loss_pick<T>(l, i, 0.0);
}

template <class T>
__global__ void nll_grad_kernel(LossLaunch l) {
  const int64_t n = l.N * l.C * l.D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    nll_grad_one<T>(l, e);
}

unsigned row_blocks(int64_t rows) { return unsigned(std::min<int64_t>(rows, 1 << 20)); }

// The host's NmBlock: the lanes' partials in a local array.
struct HostBlock {
  double part[2 * kNmMaxLanes];
  NmBlock b;
  explicit HostBlock(int lanes) {
    b.lanes = lanes;
    b.part = part;
  }
};

}  // namespace

namespace {

template <class T>
void ln_launch_t(const LnLaunch& l, bool grad, cudaStream_t s) {
  if (l.outer > 0) {
    if (grad) ln_grad_row_kernel<T><<<row_blocks(l.outer), l.lanes, 0, s>>>(l, l.outer);
    else ln_row_kernel<T><<<row_blocks(l.outer), l.lanes, 0, s>>>(l, l.outer);
    ONNXDP_CUDA_CHECK_LAUNCH();
  }
  if (grad && (l.dscale.p || l.dbias.p) && l.inner > 0) {
    ln_grad_column_kernel<T><<<row_blocks(l.inner), nm_lanes(l.outer), 0, s>>>(l, l.inner);
    ONNXDP_CUDA_CHECK_LAUNCH();
  }
}

template <class T>
void ln_emulate_t(const LnLaunch& l, bool grad) {
  HostBlock h(l.lanes);
  for (int64_t r = 0; r < l.outer; ++r) {
    if (grad) ln_grad_row<T>(l, r, h.b);
    else ln_row<T>(l, r, h.b);
  }
  if (grad && (l.dscale.p || l.dbias.p)) {
    HostBlock hc(nm_lanes(l.outer));
    for (int64_t j = 0; j < l.inner; ++j) ln_grad_column<T>(l, j, hc.b);
  }
}

template <class T>
void bn_launch_t(const BnLaunch& l, bool grad, cudaStream_t s) {
  if (grad) bn_grad_channel_kernel<T><<<row_blocks(l.C), l.lanes, 0, s>>>(l, l.C);
  else bn_channel_kernel<T><<<row_blocks(l.C), l.lanes, 0, s>>>(l, l.C);
  ONNXDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void bn_emulate_t(const BnLaunch& l, bool grad) {
  HostBlock h(l.lanes);
  for (int64_t ch = 0; ch < l.C; ++ch) {
    if (grad) bn_grad_channel<T>(l, ch, h.b);
    else bn_channel<T>(l, ch, h.b);
  }
}

// Forward: the positions' terms (SCE: a block per position; NLL: a thread per position), then for
// sum / mean one block adds them. Grad: for mean one block adds the weights first.
template <class T>
void loss_launch_t(const LossLaunch& l, bool softmax, bool grad, cudaStream_t s) {
  const int64_t P = l.N * l.D;
  if (grad) {
    if (l.reduction == NmReduction::mean) {
      loss_weight_sum_kernel<<<1, kNmMaxLanes, 0, s>>>(l);
      ONNXDP_CUDA_CHECK_LAUNCH();
    }
    if (softmax && P > 0) {
      sce_grad_position_kernel<T><<<row_blocks(P), l.lanes, 0, s>>>(l, P);
      ONNXDP_CUDA_CHECK_LAUNCH();
    } else if (!softmax && P * l.C > 0) {
      nll_grad_kernel<T><<<blocks_for(P * l.C), kThreads, 0, s>>>(l);
      ONNXDP_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  if (P > 0) {
    if (softmax) sce_position_kernel<T><<<row_blocks(P), l.lanes, 0, s>>>(l, P);
    else nll_pick_kernel<T><<<blocks_for(P), kThreads, 0, s>>>(l);
    ONNXDP_CUDA_CHECK_LAUNCH();
  }
  if (l.reduction != NmReduction::none) {
    loss_reduce_kernel<T><<<1, kNmMaxLanes, 0, s>>>(l);
    ONNXDP_CUDA_CHECK_LAUNCH();
  }
}

template <class T>
void loss_emulate_t(const LossLaunch& l, bool softmax, bool grad) {
  const int64_t P = l.N * l.D;
  HostBlock h(l.lanes), one(kNmMaxLanes);
  if (grad) {
    if (l.reduction == NmReduction::mean) loss_weight_sum(l, one.b);
    if (softmax)
      for (int64_t i = 0; i < P; ++i) sce_grad_position<T>(l, i, h.b);
    else
      for (int64_t e = 0; e < P * l.C; ++e) nll_grad_one<T>(l, e);
    return;
  }
  if (softmax)
    for (int64_t i = 0; i < P; ++i) sce_position<T>(l, i, h.b);
  else
    for (int64_t i = 0; i < P; ++i) loss_pick<T>(l, i, 0.0);
  if (l.reduction != NmReduction::none) loss_reduce<T>(l, one.b);
}

}  // namespace

void ln_launch(const LnLaunch& l, bool grad, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  l.f64 ? ln_launch_t<double>(l, grad, s) : ln_launch_t<float>(l, grad, s);
}
void ln_emulate(const LnLaunch& l, bool grad) { l.f64 ? ln_emulate_t<double>(l, grad) : ln_emulate_t<float>(l, grad); }

void bn_launch(const BnLaunch& l, bool grad, void* stream) {
  if (l.C == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  l.f64 ? bn_launch_t<double>(l, grad, s) : bn_launch_t<float>(l, grad, s);
}
void bn_emulate(const BnLaunch& l, bool grad) { l.f64 ? bn_emulate_t<double>(l, grad) : bn_emulate_t<float>(l, grad); }

void loss_launch(const LossLaunch& l, bool softmax, bool grad, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  l.f64 ? loss_launch_t<double>(l, softmax, grad, s) : loss_launch_t<float>(l, softmax, grad, s);
}
void loss_emulate(const LossLaunch& l, bool softmax, bool grad) {
  l.f64 ? loss_emulate_t<double>(l, softmax, grad) : loss_emulate_t<float>(l, softmax, grad);
}

}  // namespace onnxdp::cuda
