// The CUDA device of a Plan (exec/device_backend.h): device memory, copies on the device's stream,
// and the nodes with CUDA kernels: MatMul and Gemm on cuBLAS (exec/cuda/gemm.*, fp32; the handle's
// default math mode, no TF32), the elementwise ops (exec/cuda/elementwise.*), the reductions and
// Softmax (exec/cuda/reduce.*), Transpose / Expand (strided copies on the elementwise kernel) and
// the reshapes (device copies). Every other node runs on the CPU kernel with copies (Plan::host_ops
// names them).
//
// The emulated device (DeviceKind::cuda_emulated) is this class with host memory and the kernels'
// host emulations: the same has_kernel decisions and the same kernel dispatch, run where there is
// no GPU. It checks the host side; it is no evidence that the device code works.
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <cstdlib>
#include <cstring>

#include "exec/cuda/check.h"
#include "exec/cuda/elementwise.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/reduce.h"
#include "exec/device_backend.h"

namespace onnxdp {

namespace {

// Ops whose output is their input's bytes under another shape.
bool is_reshape(Op op) {
  return op == Op::Reshape || op == Op::Flatten || op == Op::Squeeze || op == Op::Unsqueeze;
}

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend(int index, bool emulated) : index_(index), emulated_(emulated) {
    if (emulated_) return;
    activate();
    ONNXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ONNXDP_CUDA_CHECK(cublasCreate(&blas_));
    ONNXDP_CUDA_CHECK(cublasSetStream(blas_, stream_));
  }
  ~CudaBackend() override {
    if (emulated_) return;
    cudaSetDevice(index_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return (emulated_ ? "cuda-emulated:" : "cuda:") + std::to_string(index_); }

  void activate() override {
    if (!emulated_) ONNXDP_CUDA_CHECK(cudaSetDevice(index_));
  }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (emulated_) {
      p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
      if (!p) fail("{}: out of host memory for {} bytes", name(), bytes);
      std::memset(p, 0xA5, bytes);  // like fresh device memory: never zero by promise
      return p;
    }
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      fail("{}: out of GPU memory allocating {} MiB ({} MiB free of {} MiB): lower --batch-size", name(),
           bytes >> 20, free_b >> 20, total_b >> 20);
    }
    ONNXDP_CUDA_CHECK(e);
    return p;
  }

  void release(void* p) override {
    if (!p) return;
    if (emulated_) return std::free(p);
    cudaFree(p);  // in destructors: a failure here has nobody to report to
  }

  void to_device(void* dst, const void* src, size_t bytes) override {
    if (emulated_) return void(std::memcpy(dst, src, bytes));
    ONNXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }

  void to_host(void* dst, const void* src, size_t bytes) override {
    if (emulated_) return void(std::memcpy(dst, src, bytes));
    ONNXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    ONNXDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  bool has_kernel(const Graph& g, const Node& n) const override {
    if (cuda::is_elementwise(n.op)) {
      if (n.op == Op::Clip)  // the bounds are read on the host: constants only
        for (size_t k = 1; k < n.inputs.size(); ++k)
          if (n.has_input(int(k)) && g.value(n.inputs[k]).data.empty()) return false;
      return cuda::elementwise_runs(g, n);
    }
    if (cuda::is_reduce(n.op)) return cuda::reduce_runs(g, n);
    if (n.op == Op::MatMul || n.op == Op::Gemm) return cuda::gemm_runs(g, n);
    if (is_reshape(n.op)) return true;
    return cuda::copy_op_runs(g, n);
  }

  void run(const Graph& g, KernelCtx& c) override {
    const Node& n = c.node;
    if (cuda::is_elementwise(n.op)) {
      std::vector<cuda::DeviceRef> ins;
      cuda::ClipBounds clip;
      for (size_t k = 0; k < c.inputs.size(); ++k) {
        if (n.op == Op::Clip && k > 0) {
          if (n.has_input(int(k))) (k == 1 ? clip.lo : clip.hi) = &g.value(n.inputs[k]).data;
          continue;
        }
        ins.push_back(device_ref(c.inputs[k]));
      }
      const cuda::DeviceRef out = device_ref(c.out(0));
      if (emulated_) cuda::elementwise_emulate_forward(n, ins, out, clip);
      else cuda::elementwise_forward(n, ins, out, clip, stream_);
      return;
    }
    if (cuda::is_reduce(n.op)) return cuda::reduce_forward(g, n, c.inputs, c.out(0), stream_, emulated_);
    if (n.op == Op::MatMul || n.op == Op::Gemm) {
      if (emulated_) return cuda::gemm_emulate(n, c.inputs, c.out(0));
      return cuda::gemm_forward(n, c.inputs, c.out(0), blas_, stream_);
    }
    if (is_reshape(n.op)) {  // the same bytes under another shape (the Plan gives outputs their own)
      const size_t bytes = size_t(c.out(0).numel) * dtype_size(c.out(0).dtype);
      if (!bytes) return;
      if (emulated_) return void(std::memcpy(c.out(0).data, c.in(0).data, bytes));
      ONNXDP_CUDA_CHECK(cudaMemcpyAsync(c.out(0).data, c.in(0).data, bytes, cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    if (cuda::copy_op_runs(g, n)) return cuda::copy_op_forward(n, device_ref(c.in(0)), device_ref(c.out(0)), stream_, emulated_);
    c.fail("no kernel on {}", name());
  }

  void synchronize() override {
    if (!emulated_) ONNXDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  static cuda::DeviceRef device_ref(const TensorRef& t) { return {t.data, t.dtype, t.shape, t.numel}; }

  int index_;
  bool emulated_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

std::shared_ptr<DeviceBackend> make_device_backend(DeviceKind kind, int index) {
  if (kind == DeviceKind::cuda_emulated) return std::make_shared<CudaBackend>(index, true);
  if (kind != DeviceKind::cuda) fail("make_device_backend: the CPU has no device backend (a Plan without one runs there)");
  cuda::DeviceCount d = cuda::device_count();
  if (d.count == 0) fail("--devices cuda:{}: no GPU is usable here ({})", index, d.reason);
  if (index < 0 || index >= d.count)
    fail("--devices cuda:{}: this machine has {} GPU{} (cuda:0{})", index, d.count, d.count == 1 ? "" : "s",
         d.count == 1 ? "" : " to cuda:" + std::to_string(d.count - 1));
  return std::make_shared<CudaBackend>(index, false);
}

}  // namespace onnxdp
