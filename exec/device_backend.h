// A device a Plan runs on other than the host CPU: its memory, the copies to and from it, and the
// kernels it has (exec/cuda/backend.cpp). A Plan given one keeps every activation in one device
// arena laid out by the same static memory plan as on the CPU, and the parameters and constants in
// a second device buffer. A node the device has no kernel for runs the CPU kernel (the reference)
// on host copies of its inputs, and its outputs are copied back: correct but slow, and the plan
// says which ops did (Plan::host_ops), so a user sees what is not on the GPU yet.
//
//   auto dev = make_device_backend(DeviceKind::cuda, 0);
//   Plan p(std::move(g), {.device = dev});
//   p.execute(inputs, rs);
//   float loss = p.ref(loss_id).as<float>()[0];   // ref() copies the value to the host first
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "exec/kernel.h"
#include "exec/optimizer_update.h"

namespace onnxdp {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string name() const = 0;  // "cuda:0", "cuda-emulated:0"
  // Makes the device current on the calling thread (each replica runs on its own thread).
  virtual void activate() = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Ordered with the kernels on the device's stream; to_host returns once the bytes are there.
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  // Whether node n of g has a kernel here (its dtypes, shapes and attributes included).
  virtual bool has_kernel(const Graph& g, const Node& n) const = 0;
  // Runs n; the refs of c hold device pointers. Only called when has_kernel(g, n).
  virtual void run(const Graph& g, KernelCtx& c) = 0;
  // The error for what node n recorded in its plan's check slots (exec/run_scalars.h): bad element
  // `element` of its input, holding `value`; the text the CPU kernel fails with.
  virtual std::string check_message(const Graph& g, const Node& n, int64_t element, int64_t value) const = 0;
  // Device to device, ordered with the kernels.
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // Zero bytes, ordered with the kernels.
  virtual void zero(void* dst, size_t bytes) = 0;
  // MatMul and Gemm may use TF32 tensor cores (--tf32): inputs with 10 mantissa bits, fp32
  // accumulation. Off (the default): fp32 throughout. Convolutions stay fp32 either way.
  virtual void allow_tf32(bool on) = 0;
  // Waits for everything queued on the device.
  virtual void synchronize() = 0;
  // After synchronize(): milliseconds the compute stream waited for the communication stream's
  // collectives since the last call (the device's part of the metric comm_wait_ms: communication
  // not hidden behind compute). 0 where it cannot be measured.
  virtual double take_comm_wait_ms() { return 0.0; }

  // The fused optimizer over flat device buffers of n floats, queued on the device (and recorded
  // like run() between begin_capture and end_capture): the gradient's squared global norm in
  // double into *squared_norm, then exec/optimizer_update.h's update of every element with the
  // step's scalars at u and the clipping factor of that norm. u and squared_norm are device
  // memory: the caller writes u (to_device) before the step and reads the norm after it.
  virtual void optimizer_step(const OptimizerUpdate* u, double* squared_norm, float* p, float* g, float* m, float* v,
                              int64_t n) = 0;
  // --zero-stage 1 (exec/flat_state.h), queued and recorded alike: optimizer_step over this
  // replica's part [bounds[rank], bounds[rank + 1]) of the flat buffers p and g (m and v hold that
  // part only) with the squared norm summed over the replicas' parts, then every other part of p
  // received from its owner. Needs the device's own collectives (connect); throws otherwise.
  virtual void sharded_optimizer_step(const OptimizerUpdate* u, double* squared_norm, float* p, float* g, float* m,
                                      float* v, const std::vector<int64_t>& bounds, int rank) = 0;
  // Joins the world of replicas that comm belongs to (nullptr: a world of one); every replica calls
  // it at once, before its plans are made. Until then collectives run through the CPU fallback.
  virtual void connect(Communicator* comm) = 0;

  // Whole-run recording (CUDA graphs): between begin_capture() and end_capture() run() records
  // instead of running; replay() runs a recording with the arguments it was recorded with. No
  // copy to or from the host may happen in between. Emulated: the kernel calls in a list.
  virtual bool can_capture() const = 0;
  virtual void begin_capture() = 0;
  virtual std::shared_ptr<void> end_capture() = 0;
  virtual void replay(void* recording) = 0;
  // Ends a capture that failed part way (an error thrown between begin and end): nothing of it ran.
  virtual void abort_capture() = 0;
};

enum class DeviceKind {
  cpu,
  cuda,
  // The CUDA backend's host side (memory plan, copies, which nodes run where, kernel dispatch,
  // cuBLAS argument mapping) with device memory and kernels replaced by host memory and host
  // emulations of the kernels: what tests check where there is no GPU. Nothing it runs is
  // evidence that the device code works.
  cuda_emulated,
};

// What --devices names for this process: the kind and the device index of each local replica.
// "cpu", "cpu:N" (N replicas), "cuda" (every GPU; under a launcher one per process, by local rank),
// "cuda:0,2" (those GPUs), "cuda-emulated[:N]", "auto" (every GPU, or the CPU when there is none).
struct DeviceList {
  DeviceKind kind = DeviceKind::cpu;
  std::vector<int> index;  // one per local replica (cpu: 0, 1, ...)
  std::string why_cpu;     // auto on the CPU: the reason there is no GPU
};
// local_rank / local_size: this process among the job's processes on this machine (the launcher's,
// parallel/communicator.h's detect_launch): under a launcher each takes its share of "cuda:i,j".
DeviceList parse_devices(const std::string& devices, int local_rank = 0, int local_size = 1);
// The GPUs process local_rank of local_size takes of those `named` in --devices `devices`: its
// contiguous share (all of them for a process alone on its machine); an uneven split is an error.
std::vector<int> gpus_of_process(const std::vector<int>& named, int local_rank, int local_size,
                                 const std::string& devices);

// The backend of one device; throws a clear error where the device cannot be used (no GPU, no
// driver, index out of range, onnxdp built without CUDA).
std::shared_ptr<DeviceBackend> make_device_backend(DeviceKind kind, int index);

}  // namespace onnxdp
