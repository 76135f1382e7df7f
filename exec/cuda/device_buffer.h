// RAII device memory for the tests' run_node helpers (elementwise, gemm): cudaMalloc'd, freed at
// the end of scope; upload() makes one holding a host tensor's bytes.
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "exec/cuda/check.h"
#include "graph/tensor.h"

namespace onnxdp::cuda {

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (bytes) ONNXDP_CUDA_CHECK(cudaMalloc(&p, bytes));
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

inline std::unique_ptr<DeviceBuffer> upload(const Tensor& t) {
  auto b = std::make_unique<DeviceBuffer>(t.nbytes());
  if (t.nbytes()) ONNXDP_CUDA_CHECK(cudaMemcpy(b->p, t.data(), t.nbytes(), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace onnxdp::cuda
