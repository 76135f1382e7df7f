// CUDA kernels of the tensor ops: one thread per output element running the loop bodies of
// exec/cuda/tensor_ops_launch.h, which the host emulations below run too. GatherGrad sorts its
// indices with cub's stable radix sort so that its sums need no float atomics (deterministic,
// bit-identical to the CPU kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <numeric>
#include <vector>

#include "exec/cuda/check.h"
#include "exec/cuda/launch.h"
#include "exec/cuda/tensor_ops_launch.h"

namespace onnxdp::cuda {

namespace {

// Grid-stride loops: enough blocks to fill any GPU, each thread looping over the rest.

#define ONNXDP_TS_LOOP(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <class U>
__global__ void copy_kernel(CopyLaunch l) {
  ONNXDP_TS_LOOP(i, l.numel) copy_one<U>(l, i);
}
template <class U>
__global__ void gather_kernel(GatherLaunch l) {
  ONNXDP_TS_LOOP(k, gather_items(l)) gather_one<U>(l, k);
}
__global__ void bad_value_kernel(unsigned long long* checks, int node, const void* idx, bool idx64) {
  record_bad_value(checks, node, idx, idx64);
}
__global__ void gather_grad_key_kernel(GatherGradLaunch l) {
  ONNXDP_TS_LOOP(i, l.n) gather_grad_key(l, i);
}
__global__ void gather_grad_start_kernel(GatherGradLaunch l) {
  ONNXDP_TS_LOOP(r, l.dim + 1) gather_grad_start(l, r);
}
template <class T>
__global__ void gather_grad_kernel(GatherGradLaunch l) {
  ONNXDP_TS_LOOP(k, l.outer * l.dim * l.inner) gather_grad_one<T>(l, k);
}
__global__ void cast_kernel(CastLaunch l) {
  ONNXDP_TS_LOOP(i, l.numel) cast_one(l, i);
}
template <class U>
__global__ void pad_kernel(PadLaunch l) {
  ONNXDP_TS_LOOP(i, l.numel) pad_one<U>(l, i);
}
template <class U>
__global__ void trilu_kernel(TriluLaunch l) {
  ONNXDP_TS_LOOP(i, l.numel) trilu_one<U>(l, i);
}
template <class T>
__global__ void dropout_kernel(DropoutLaunch l) {
  ONNXDP_TS_LOOP(j, l.numel) dropout_one<T>(l, j);
}

// Runs STMT with U the unsigned type of `bytes` bytes (the element copied).
#define ONNXDP_TS_BY_SIZE(bytes, ...)                  \
  switch (bytes) {                                     \
    case 1: { using U = uint8_t; __VA_ARGS__; } break;   \
    case 2: { using U = uint16_t; __VA_ARGS__; } break;  \
    case 4: { using U = uint32_t; __VA_ARGS__; } break;  \
    default: { using U = uint64_t; __VA_ARGS__; } break; \
  }

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Bits needed for keys in [0, dim): the radix sort looks at no more.
int key_bits(int64_t dim) {
  int b = 1;
  while (b < 32 && (int64_t(1) << b) < dim) ++b;
  return b;
}

}  // namespace

void copy_launch(const CopyLaunch& l, void* stream) {
  if (l.numel == 0) return;
  ONNXDP_TS_BY_SIZE(l.esize, copy_kernel<U><<<blocks_for(l.numel), kThreads, 0, as_stream(stream)>>>(l));
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void copy_emulate(const CopyLaunch& l) {
  ONNXDP_TS_BY_SIZE(l.esize, for (int64_t i = 0; i < l.numel; ++i) copy_one<U>(l, i));
}

void gather_launch(const GatherLaunch& l, void* stream) {
  const int64_t total = gather_items(l);
  if (total == 0) return;
  ONNXDP_TS_BY_SIZE(l.esize, gather_kernel<U><<<blocks_for(total), kThreads, 0, as_stream(stream)>>>(l));
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void gather_emulate(const GatherLaunch& l) {
  ONNXDP_TS_BY_SIZE(l.esize, for (int64_t k = 0; k < gather_items(l); ++k) gather_one<U>(l, k));
}

void bad_value_launch(unsigned long long* checks, int node, const void* idx, bool idx64, void* stream) {
  bad_value_kernel<<<1, 1, 0, as_stream(stream)>>>(checks, node, idx, idx64);
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void bad_value_emulate(unsigned long long* checks, int node, const void* idx, bool idx64) {
  record_bad_value(checks, node, idx, idx64);
}

size_t gather_grad_sort_bytes(int64_t n, int64_t dim) {
  if (n == 0) return 0;
  size_t bytes = 0;
  ONNXDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                                    static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                                    static_cast<uint32_t*>(nullptr), n, 0, key_bits(dim)));
  return bytes;
}

void gather_grad_launch(const GatherGradLaunch& l, void* sort_temp, size_t sort_temp_bytes, void* stream) {
  cudaStream_t s = as_stream(stream);
  if (l.n > 0) {
    gather_grad_key_kernel<<<blocks_for(l.n), kThreads, 0, s>>>(l);
    ONNXDP_CUDA_CHECK_LAUNCH();
    size_t bytes = sort_temp_bytes;
    ONNXDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, bytes, l.keys, l.sorted_keys, l.pos, l.sorted_pos, l.n, 0,
                                                      key_bits(l.dim), s));
  }
  gather_grad_start_kernel<<<blocks_for(l.dim + 1), kThreads, 0, s>>>(l);
  ONNXDP_CUDA_CHECK_LAUNCH();
  const int64_t total = l.outer * l.dim * l.inner;
  if (total == 0) return;
  if (l.f64) gather_grad_kernel<double><<<blocks_for(total), kThreads, 0, s>>>(l);
  else gather_grad_kernel<float><<<blocks_for(total), kThreads, 0, s>>>(l);
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void gather_grad_emulate(const GatherGradLaunch& l) {
  for (int64_t i = 0; i < l.n; ++i) gather_grad_key(l, i);
  // The device's stable radix sort by key, as a stable sort of the positions.
  std::vector<uint32_t> order(size_t(l.n));
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return l.keys[a] < l.keys[b]; });
  for (int64_t e = 0; e < l.n; ++e) {
    l.sorted_keys[e] = l.keys[order[size_t(e)]];
    l.sorted_pos[e] = l.pos[order[size_t(e)]];
  }
  for (int64_t r = 0; r <= l.dim; ++r) gather_grad_start(l, r);
  for (int64_t k = 0; k < l.outer * l.dim * l.inner; ++k) {
    if (l.f64) gather_grad_one<double>(l, k);
    else gather_grad_one<float>(l, k);
  }
}

void cast_launch(const CastLaunch& l, void* stream) {
  if (l.numel == 0) return;
  cast_kernel<<<blocks_for(l.numel), kThreads, 0, as_stream(stream)>>>(l);
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void cast_emulate(const CastLaunch& l) {
  for (int64_t i = 0; i < l.numel; ++i) cast_one(l, i);
}

void pad_launch(const PadLaunch& l, void* stream) {
  if (l.numel == 0) return;
  ONNXDP_TS_BY_SIZE(l.esize, pad_kernel<U><<<blocks_for(l.numel), kThreads, 0, as_stream(stream)>>>(l));
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void pad_emulate(const PadLaunch& l) {
  ONNXDP_TS_BY_SIZE(l.esize, for (int64_t i = 0; i < l.numel; ++i) pad_one<U>(l, i));
}

void trilu_launch(const TriluLaunch& l, void* stream) {
  if (l.numel == 0) return;
  ONNXDP_TS_BY_SIZE(l.esize, trilu_kernel<U><<<blocks_for(l.numel), kThreads, 0, as_stream(stream)>>>(l));
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void trilu_emulate(const TriluLaunch& l) {
  ONNXDP_TS_BY_SIZE(l.esize, for (int64_t i = 0; i < l.numel; ++i) trilu_one<U>(l, i));
}

void dropout_launch(const DropoutLaunch& l, void* stream) {
  if (l.numel == 0) return;
  if (l.f64) dropout_kernel<double><<<blocks_for(l.numel), kThreads, 0, as_stream(stream)>>>(l);
  else dropout_kernel<float><<<blocks_for(l.numel), kThreads, 0, as_stream(stream)>>>(l);
  ONNXDP_CUDA_CHECK_LAUNCH();
}

void dropout_emulate(const DropoutLaunch& l) {
  for (int64_t j = 0; j < l.numel; ++j) {
    if (l.f64) dropout_one<double>(l, j);
    else dropout_one<float>(l, j);
  }
}

}  // namespace onnxdp::cuda
