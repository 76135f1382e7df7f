// CUDA kernels of the fused optimizer (exec/cuda/optimizer.h).
#include <cuda_runtime.h>

#include "exec/cuda/check.h"
#include "exec/cuda/launch.h"
#include "exec/cuda/optimizer.h"

namespace onnxdp::cuda {

namespace {

__global__ void squared_norm_blocks(const float* g, int64_t n, double* partial) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += double(g[i]) * double(g[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (int(threadIdx.x) < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void squared_norm_total(const double* partial, int blocks, double* out) {
  double acc = 0;
  for (int b = 0; b < blocks; ++b) acc += partial[b];
  *out = acc;
}

__global__ void update_kernel(const OptimizerUpdate* step, const double* squared_norm, float* p, float* g, float* m,
                              float* v, int64_t n) {
  const OptimizerUpdate u = *step;
  if (skips_step(u, *squared_norm)) return;
  const float clip = clip_factor(u, *squared_norm);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    optimizer_update(u, clip, p, g, m, v, i);
}

}  // namespace

void squared_norm_launch(const float* g, int64_t n, double* partial, double* out, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  squared_norm_blocks<<<kNormBlocks, kThreads, 0, s>>>(g, n, partial);
  ONNXDP_CUDA_CHECK_LAUNCH();
  squared_norm_total<<<1, 1, 0, s>>>(partial, kNormBlocks, out);
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void squared_norm_emulate(const float* g, int64_t n, double* out) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += double(g[i]) * double(g[i]);
  *out = acc;
}

void optimizer_launch(const OptimizerUpdate* u, const double* squared_norm, float* p, float* g, float* m, float* v,
                      int64_t n, void* stream) {
  if (n == 0) return;
  update_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(u, squared_norm, p, g, m, v, n);
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void optimizer_emulate(const OptimizerUpdate* u, const double* squared_norm, float* p, float* g, float* m, float* v,
                       int64_t n) {
  if (skips_step(*u, *squared_norm)) return;
  const float clip = clip_factor(*u, *squared_norm);
  for (int64_t i = 0; i < n; ++i) optimizer_update(*u, clip, p, g, m, v, i);
}

}  // namespace onnxdp::cuda
