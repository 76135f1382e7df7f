// Shared by the CUDA tests (tests/gpu/): whether a GPU is there to run the suite "gpu" cases.
#pragma once
#include <doctest/doctest.h>

#include "exec/cuda/elementwise.h"  // cuda::device_count

namespace onnxdp::test {

// True when a GPU is there; otherwise prints "no GPU: <reason> -- CUDA kernel test SKIPPED"
// (CTest's gpu.cuda_kernels reports Skipped on that line) for the caller to return.
inline bool have_gpu() {
  cuda::DeviceCount d = cuda::device_count();
  if (d.count > 0) return true;
  MESSAGE("no GPU: " << d.reason << " -- CUDA kernel test SKIPPED");
  return false;
}

}  // namespace onnxdp::test
