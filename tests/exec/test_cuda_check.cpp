// exec/cuda/check.h: a failing CUDA runtime, cuBLAS, cuDNN or NCCL call throws onnxdp::Error
// naming the library, the call as written, the file and line, and the library's own error text.
// The calls chosen fail with and without a GPU (null handles, invalid arguments, 4 EiB allocations),
// so these run on every machine; cudaGetDeviceCount and cublasCreate are checked both ways (they
// fail only where there is no GPU or driver).
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include <string>

#include "exec/cuda/check.h"
#include "graph/error.h"
#include "tests/test_util.h"

using namespace onnxdp;

namespace {

using onnxdp::test::error_of;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE("cuda") {

TEST_CASE("cuda check: CUDA runtime failure names call, file, line and cudaGetErrorString") {
  void* p = nullptr;
  const size_t too_much = size_t(1) << 62;  // no GPU has 4 EiB: fails with or without a driver
  cudaError_t direct = cudaMalloc(&p, too_much);
  cudaGetLastError();
  REQUIRE(direct != cudaSuccess);
  const int line = __LINE__ + 1;
  std::string msg = error_of([&] { ONNXDP_CUDA_CHECK(cudaMalloc(&p, too_much)); });
  INFO(msg);
  CHECK(has(msg, "CUDA call failed: cudaMalloc(&p, too_much)"));
  CHECK(has(msg, "tests/exec/test_cuda_check.cpp:" + std::to_string(line)));
  CHECK(has(msg, cudaGetErrorName(direct)));
  CHECK(has(msg, cudaGetErrorString(direct)));
  // An ordinary error (out of memory on a GPU) was cleared: the next call's status is its own.
  // Without a driver every runtime call keeps failing with the initialisation error.
  if (direct == cudaErrorMemoryAllocation) CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("cuda check: cudaGetDeviceCount fails exactly when there is no GPU") {
  int n = -1;
  cudaError_t direct = cudaGetDeviceCount(&n);
  cudaGetLastError();
  std::string msg = error_of([&] { ONNXDP_CUDA_CHECK(cudaGetDeviceCount(&n)); });
  if (direct == cudaSuccess) {
    CHECK(msg.empty());
    MESSAGE("this machine has " << n << " GPU(s): the no-driver branch did not run");
  } else {
    INFO(msg);
    CHECK(has(msg, "CUDA call failed: cudaGetDeviceCount(&n) at tests/exec/test_cuda_check.cpp:"));
    CHECK(has(msg, cudaGetErrorString(direct)));  // e.g. "CUDA driver version is insufficient ..."
  }
}

TEST_CASE("cuda check: ONNXDP_CUDA_CHECK_LAUNCH reports the pending error as a kernel launch's") {
  // Nothing was launched. On a GPU nothing is pending and nothing is thrown; without a driver the
  // runtime's initialisation error is pending and is reported like a launch failure.
  cudaError_t pending = cudaPeekAtLastError();
  const int line = __LINE__ + 1;
  std::string msg = error_of([] { ONNXDP_CUDA_CHECK_LAUNCH(); });
  if (pending == cudaSuccess) {
    CHECK(msg.empty());
  } else {
    INFO(msg);
    CHECK(has(msg, "CUDA call failed: kernel launch at tests/exec/test_cuda_check.cpp:" + std::to_string(line)));
    CHECK(has(msg, cudaGetErrorString(pending)));
  }
}

TEST_CASE("cuda check: cuBLAS failure names the status and cublasGetStatusString") {
  float alpha = 1, beta = 0;
  // A null handle fails on every machine: CUBLAS_STATUS_NOT_INITIALIZED.
  cublasStatus_t direct = cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, nullptr, 1, nullptr, 1,
                                      &beta, nullptr, 1);
  REQUIRE(direct != CUBLAS_STATUS_SUCCESS);
  std::string msg = error_of([&] {
    ONNXDP_CUDA_CHECK(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, nullptr, 1, nullptr, 1, &beta,
                                  nullptr, 1));
  });
  INFO(msg);
  CHECK(has(msg, "cuBLAS call failed: cublasSgemm(nullptr, CUBLAS_OP_N"));
  CHECK(has(msg, "tests/exec/test_cuda_check.cpp:"));
  CHECK(has(msg, cublasGetStatusName(direct)));
  CHECK(has(msg, cublasGetStatusString(direct)));
}

TEST_CASE("cuda check: cublasCreate fails exactly when there is no GPU") {
  int n = 0;
  const bool gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  cublasHandle_t h = nullptr;
  std::string msg = error_of([&] { ONNXDP_CUDA_CHECK(cublasCreate(&h)); });
  if (gpu) {
    CHECK(msg.empty());
    if (h) cublasDestroy(h);
  } else {
    INFO(msg);
    CHECK(has(msg, "cuBLAS call failed: cublasCreate(&h) at tests/exec/test_cuda_check.cpp:"));
    CHECK(has(msg, "CUBLAS_STATUS_"));
  }
}

TEST_CASE("cuda check: cuDNN failure names the call and cudnnGetErrorString") {
  // A null handle: CUDNN_STATUS_BAD_PARAM on every machine.
  cudnnStatus_t direct = cudnnSetStream(nullptr, nullptr);
  REQUIRE(direct != CUDNN_STATUS_SUCCESS);
  std::string msg = error_of([&] { ONNXDP_CUDA_CHECK(cudnnSetStream(nullptr, nullptr)); });
  INFO(msg);
  CHECK(has(msg, "cuDNN call failed: cudnnSetStream(nullptr, nullptr) at tests/exec/test_cuda_check.cpp:"));
  CHECK(has(msg, cudnnGetErrorString(direct)));
}

TEST_CASE("cuda check: NCCL failure names the call, ncclGetErrorString and NCCL's last error") {
  int count = 0;
  // A null communicator: ncclInvalidArgument on every machine, before NCCL touches CUDA.
  ncclResult_t direct = ncclCommCount(nullptr, &count);
  REQUIRE(direct == ncclInvalidArgument);
  std::string msg = error_of([&] { ONNXDP_CUDA_CHECK(ncclCommCount(nullptr, &count)); });
  INFO(msg);
  CHECK(has(msg, "NCCL call failed: ncclCommCount(nullptr, &count) at tests/exec/test_cuda_check.cpp:"));
  CHECK(has(msg, ncclGetErrorString(direct)));
  CHECK(has(msg, "comm argument is NULL"));  // ncclGetLastError's detail
  // Every status code has its own string.
  CHECK(std::string(ncclGetErrorString(ncclInvalidArgument)) != ncclGetErrorString(ncclUnhandledCudaError));
  // Success and "in progress" are not failures.
  CHECK(error_of([] { ONNXDP_CUDA_CHECK(ncclSuccess); }).empty());
  CHECK(error_of([] { ONNXDP_CUDA_CHECK(ncclInProgress); }).empty());
}

}  // TEST_SUITE("cuda")

#endif  // ONNXDP_HAVE_CUDA
