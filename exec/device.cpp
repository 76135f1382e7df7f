#include "exec/device.h"

namespace onnxdp {

#ifndef ONNXDP_HAVE_CUDA
CudaInfo cuda_info() {
  CudaInfo info;
  info.status = "onnxdp was built without CUDA (-DONNXDP_CUDA=OFF)";
  return info;
}
#endif

}  // namespace onnxdp
