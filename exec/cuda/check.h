// Every CUDA runtime, cuBLAS, cuDNN and NCCL call is checked (DESIGN.md convention 7):
//
//   ONNXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
//   ONNXDP_CUDA_CHECK(cublasSgemm(handle, ...));
//   ONNXDP_CUDA_CHECK(cudnnConvolutionForward(...));
//   ONNXDP_CUDA_CHECK(ncclAllReduce(...));
//
// One macro for the four libraries: the status type picks the overload. A failure throws
// onnxdp::Error (graph/error.h) reading
//
//   CUDA call failed: cudaMalloc(&p, bytes) at exec/cuda/device_buffer.h:16: cudaErrorMemoryAllocation
//   (out of memory)
//
// i.e. the library, the call as written, the file (relative to the source tree) and line, the
// status's name where the library has one, and the library's own error string (for NCCL also
// ncclGetLastError's detail, for cuDNN cudnnGetLastErrorString's). ONNXDP_CUDA_CHECK_LAUNCH()
// after a kernel launch reports launch errors the same way.
//
// This header is plain C++ (no fmt, no graph headers), so .cu files compiled as C++17 use it too.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

namespace onnxdp::cuda {

// Throws onnxdp::Error with the message above. `library` is "CUDA", "cuBLAS", "cuDNN" or "NCCL";
// `name` may be null.
[[noreturn]] void check_failed(const char* library, const char* call, const char* file, int line, int status,
                               const char* name, const char* text);

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that later checks report their own
  check_failed("CUDA", call, file, line, int(e), cudaGetErrorName(e), cudaGetErrorString(e));
}

inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  check_failed("cuBLAS", call, file, line, int(s), cublasGetStatusName(s), cublasGetStatusString(s));
}

// cuDNN's detail (cudnnGetLastErrorString) is appended by check_failed's cuDNN branch.
inline void check(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  check_failed("cuDNN", call, file, line, int(s), nullptr, cudnnGetErrorString(s));
}

// ncclInProgress is not a failure (non-blocking communicators); the caller polls.
inline void check(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  check_failed("NCCL", call, file, line, int(r), nullptr, ncclGetErrorString(r));
}

}  // namespace onnxdp::cuda

#define ONNXDP_CUDA_CHECK(call) ::onnxdp::cuda::check((call), #call, __FILE__, __LINE__)
#define ONNXDP_CUDA_CHECK_LAUNCH() ::onnxdp::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
