// What compute devices this process sees, and the versions of the libraries behind them.
#pragma once
#include <string>

namespace onnxdp {

struct CudaInfo {
  bool built = false;        // the CUDA backend is compiled in
  int device_count = 0;      // 0 when there is no GPU or no driver
  std::string status;        // why there is no GPU, when there is none
  std::string versions;      // "CUDA runtime 13.0, driver 12.8, cuDNN 9.19.0, NCCL 2.28.9, cuBLAS 13.0.0"
  std::string devices;       // one line per GPU
};

CudaInfo cuda_info();

}  // namespace onnxdp
