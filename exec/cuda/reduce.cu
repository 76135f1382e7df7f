// CUDA kernels of the reductions and Softmax / LogSoftmax and their Grads: one thread per output
// (per column for the Softmax family along a dim other than the last; one warp per row along the
// last) running the loop bodies of exec/cuda/reduce_launch.h, which the host emulation runs too.
#include <cuda_runtime.h>

#include <algorithm>

#include "exec/cuda/check.h"
#include "exec/cuda/launch.h"
#include "exec/cuda/reduce_launch.h"

namespace onnxdp::cuda {

namespace {

template <class E>
__global__ void reduce_kernel(ReduceLaunch l) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < l.n_out; o += int64_t(gridDim.x) * blockDim.x)
    reduce_one<E>(l, o);
}

template <class E>
__global__ void reduce_part_kernel(ReduceLaunch l) {
  const int64_t n = l.n_out * l.parts;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    reduce_part<E>(l, i);
}

template <class E>
__global__ void reduce_finish_kernel(ReduceLaunch l) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < l.n_out; o += int64_t(gridDim.x) * blockDim.x)
    reduce_finish<E>(l, o);
}

// f(E{}) with E the element type of l.
template <class F>
void with_type(const ReduceLaunch& l, F&& f) {
  switch (l.type) {
    case RdType::f32: return f(RdF32{});
    case RdType::f64: return f(RdF64{});
    case RdType::f16: return f(RdF16{});
    case RdType::bf16: return f(RdBf16{});
  }
}

template <class T>
__global__ void softmax_kernel(SoftmaxLaunch l) {
  const int64_t cols = l.outer * l.inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x)
    softmax_one<T>(l, c);
}

// The butterfly of reduce_launch.h across a warp: every lane ends with the same value.
template <class T>
__device__ T warp_max(T v) {
  for (int d = kLanes / 2; d > 0; d /= 2) v = lane_max_of(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}
__device__ double warp_sum(double v) {
  for (int d = kLanes / 2; d > 0; d /= 2) v = v + __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

static_assert(kThreads % kLanes == 0, "a block holds whole warps");

// One warp per row (inner == 1). kThreads is a multiple of kLanes, so a warp's lanes share `row`
// and all take part in every shuffle.
template <class T>
__global__ void softmax_rows_kernel(SoftmaxLaunch l) {
  const int k = int(threadIdx.x % kLanes);
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / kLanes;
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes; row < l.outer; row += warps) {
    const T mx = l.grad ? T(0) : warp_max(lane_row_max<T>(l, row, k));
    const double sum = warp_sum(lane_row_sum<T>(l, row, k, mx));
    lane_row_write<T>(l, row, k, mx, sum);
  }
}

// The butterfly on the host: v[k] combined with v[k ^ d], own value first, for every lane at once.
template <class V, class F>
void butterfly(V (&v)[kLanes], F combine) {
  for (int d = kLanes / 2; d > 0; d /= 2) {
    V next[kLanes];
    for (int k = 0; k < kLanes; ++k) next[k] = combine(v[k], v[k ^ d]);
    for (int k = 0; k < kLanes; ++k) v[k] = next[k];
  }
}

template <class T>
void softmax_rows_emulate(const SoftmaxLaunch& l) {
  for (int64_t row = 0; row < l.outer; ++row) {
    T mx[kLanes];
    double sum[kLanes];
    for (int k = 0; k < kLanes; ++k) mx[k] = l.grad ? T(0) : lane_row_max<T>(l, row, k);
    if (!l.grad) butterfly(mx, [](T a, T b) { return lane_max_of(a, b); });
    for (int k = 0; k < kLanes; ++k) sum[k] = lane_row_sum<T>(l, row, k, mx[k]);
    butterfly(sum, [](double a, double b) { return a + b; });
    for (int k = 0; k < kLanes; ++k) lane_row_write<T>(l, row, k, mx[k], sum[k]);
  }
}


}  // namespace

void reduce_launch(const ReduceLaunch& l, void* stream) {
  if (l.n_out == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  with_type(l, [&](auto e) {
    using E = decltype(e);
    if (l.parts <= 1) {
      reduce_kernel<E><<<blocks_for(l.n_out), kThreads, 0, s>>>(l);
      return;
    }
    reduce_part_kernel<E><<<blocks_for(l.n_out * l.parts), kThreads, 0, s>>>(l);
    ONNXDP_CUDA_CHECK_LAUNCH();
    reduce_finish_kernel<E><<<blocks_for(l.n_out), kThreads, 0, s>>>(l);
  });
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void reduce_emulate(const ReduceLaunch& l) {
  with_type(l, [&](auto e) {
    using E = decltype(e);
    if (l.parts <= 1) {
      for (int64_t o = 0; o < l.n_out; ++o) reduce_one<E>(l, o);
      return;
    }
    for (int64_t i = 0; i < l.n_out * l.parts; ++i) reduce_part<E>(l, i);
    for (int64_t o = 0; o < l.n_out; ++o) reduce_finish<E>(l, o);
  });
}

void softmax_launch(const SoftmaxLaunch& l, void* stream) {
  const int64_t cols = l.outer * l.inner;
  if (cols == 0 || l.n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (l.inner == 1) {
    if (l.f64) softmax_rows_kernel<double><<<blocks_for(l.outer * kLanes), kThreads, 0, s>>>(l);
    else softmax_rows_kernel<float><<<blocks_for(l.outer * kLanes), kThreads, 0, s>>>(l);
  } else if (l.f64) {
    softmax_kernel<double><<<blocks_for(cols), kThreads, 0, s>>>(l);
  } else {
    softmax_kernel<float><<<blocks_for(cols), kThreads, 0, s>>>(l);
  }
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void softmax_emulate(const SoftmaxLaunch& l) {
  if (l.n == 0) return;
  if (l.inner == 1) return l.f64 ? softmax_rows_emulate<double>(l) : softmax_rows_emulate<float>(l);
  for (int64_t c = 0; c < l.outer * l.inner; ++c) {
    if (l.f64) softmax_one<double>(l, c);
    else softmax_one<float>(l, c);
  }
}

}  // namespace onnxdp::cuda
