// CUDA kernels of the pooling ops: one thread per item (exec/cuda/conv_launch.h) running the loop
// bodies the host emulation runs too. The convolutions are cuDNN's (exec/cuda/conv.cpp).
#include <cuda_runtime.h>

#include <algorithm>

#include "exec/cuda/check.h"
#include "exec/cuda/launch.h"
#include "exec/cuda/conv_launch.h"

namespace onnxdp::cuda {

namespace {

template <class T>
__global__ void pool_kernel(PoolLaunch l, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    pool_one<T>(l, i);
}

// MaxPool on the integer types: the only kind they run.
template <class T>
__global__ void pool_max_kernel(PoolLaunch l, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    pool_max_one<T>(l, i);
}


}  // namespace

void pool_launch(const PoolLaunch& l, void* stream) {
  const int64_t n = l.items();
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (l.type) {
    case PoolType::f32: pool_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(l, n); break;
    case PoolType::f64: pool_kernel<double><<<blocks_for(n), kThreads, 0, s>>>(l, n); break;
    case PoolType::i8: pool_max_kernel<int8_t><<<blocks_for(n), kThreads, 0, s>>>(l, n); break;
    case PoolType::u8: pool_max_kernel<uint8_t><<<blocks_for(n), kThreads, 0, s>>>(l, n); break;
  }
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void pool_emulate(const PoolLaunch& l) {
  const int64_t n = l.items();
  for (int64_t i = 0; i < n; ++i) {
    switch (l.type) {
      case PoolType::f32: pool_one<float>(l, i); break;
      case PoolType::f64: pool_one<double>(l, i); break;
      case PoolType::i8: pool_max_one<int8_t>(l, i); break;
      case PoolType::u8: pool_max_one<uint8_t>(l, i); break;
    }
  }
}

}  // namespace onnxdp::cuda
