// CUDA device discovery and library versions. Without a GPU, cudaGetDeviceCount returns an error
// (e.g. "driver version is insufficient"); any error there means "no GPU".
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <string>

#include "exec/device.h"

namespace onnxdp {

CudaInfo cuda_info() {
  CudaInfo info;
  info.built = true;
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  size_t cudnn = cudnnGetVersion();
  int nccl = 0;
  ncclGetVersion(&nccl);
  int cublas = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas);
  int cublas_minor = 0;
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  info.versions = "CUDA runtime " + ver(runtime) + ", driver " + (driver ? ver(driver) : std::string("none")) +
                  ", cuDNN " + std::to_string(cudnn / 10000) + "." + std::to_string((cudnn % 10000) / 100) + "." +
                  std::to_string(cudnn % 100) + ", NCCL " + std::to_string(nccl / 10000) + "." +
                  std::to_string((nccl % 10000) / 100) + "." + std::to_string(nccl % 100) + ", cuBLAS " +
                  std::to_string(cublas) + "." + std::to_string(cublas_minor);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.status = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error
    return info;
  }
  info.device_count = count;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    info.devices += "cuda:" + std::to_string(d) + " " + p.name + " (sm_" + std::to_string(p.major) +
                    std::to_string(p.minor) + ", " + std::to_string(p.totalGlobalMem >> 20) + " MiB)\n";
  }
  if (count == 0) info.status = "no CUDA device";
  return info;
}

}  // namespace onnxdp
