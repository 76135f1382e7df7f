// The CUDA device of a Plan (exec/device_backend.h): device memory, copies on the device's stream,
// and the nodes with CUDA kernels. Which rows have one, and the kernel family that runs each, is
// exec/cuda/ops.h (the op table's CUDA column): the elementwise ops (exec/cuda/elementwise.*),
// MatMul, Gemm, FusedGemm and FusedMatMul on cuBLAS / cuBLASLt (exec/cuda/gemm.*, fp32, TF32 with
// allow_tf32, f16 / bf16), the reductions and Softmax (exec/cuda/reduce.*), the groups of
// exec/cuda/kernels.h (norms and losses, tensor ops, convolutions and pooling), Transpose / Expand
// (strided copies on the elementwise kernel), and here the reshapes (device copies) and the
// collectives (NCCL). Any other node runs on the CPU kernel with copies (Plan::host_ops names them).
//
// The emulated device (DeviceKind::cuda_emulated) is this class with host memory and the kernels'
// host emulations: the same has_kernel decisions and the same kernel dispatch, run where there is
// no GPU. Its streams are host threads (exec/cuda/host_stream.h), the compute stream and the
// communication stream each a queue run in order, with events that order them as CUDA's do: a
// missing event wait, or a buffer reused before a queued all-reduce read it, fails here too. It
// checks the host side; it is no evidence that the device code works.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "exec/cuda/check.h"
#include "exec/cuda/elementwise.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/host_stream.h"
#include "exec/cuda/kernels.h"
#include "exec/cuda/optimizer.h"
#include "exec/cuda/reduce.h"
#include "exec/device_backend.h"
#include "parallel/communicator.h"
#include "graph/shards.h"

// A checked NCCL call that may be in progress on a non-blocking communicator (CudaBackend::settle).
#define ONNXDP_NCCL_SETTLE(call, ...) settle((call), #call, __FILE__, __LINE__, __VA_ARGS__)

namespace onnxdp {

namespace {

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend(int index, bool emulated) : index_(index), emulated_(emulated) {
    if (emulated_) {
      host_stream_ = std::make_unique<cuda::HostStream>(name() + " compute stream");
      host_comm_stream_ = std::make_unique<cuda::HostStream>(name() + " communication stream");
      return;
    }
    activate();
    ONNXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ONNXDP_CUDA_CHECK(cublasCreate(&blas_));
    ONNXDP_CUDA_CHECK(cublasSetStream(blas_, stream_));
    // A workspace of its own, so that cuBLAS allocates nothing while a run is recorded.
    ONNXDP_CUDA_CHECK(cudaMalloc(&blas_workspace_, kBlasWorkspace));
    ONNXDP_CUDA_CHECK(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspace));
    ONNXDP_CUDA_CHECK(cublasLtCreate(&blas_lt_));  // the epilogues; same stream, same workspace
    ONNXDP_CUDA_CHECK(cudnnCreate(&dnn_));
    ONNXDP_CUDA_CHECK(cudnnSetStream(dnn_, stream_));
    ONNXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    ONNXDP_CUDA_CHECK(cudaEventCreateWithFlags(&grads_ready_, cudaEventDisableTiming));
    ONNXDP_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    // Made here: nothing may be allocated while a step is recorded.
    ONNXDP_CUDA_CHECK(cudaMalloc(&norm_partial_, cuda::kNormBlocks * sizeof(double)));
    ONNXDP_CUDA_CHECK(cudaMalloc(&reduce_partial_, kReduceScratch * sizeof(double)));
  }
  ~CudaBackend() override {
    if (emulated_) {
      quiesce();  // a wait queued on one stream may name the other: both drain before either goes
      host_stream_.reset();
      host_comm_stream_.reset();
      return;
    }
    cudaSetDevice(index_);
    // A replica that fails (unwinding, or its world aborted) aborts its communicator: destroying
    // it would wait for operations its peers will never finish.
    if (nccl_) {
      if (std::uncaught_exceptions() > 0 || (comm_ && comm_->aborted())) ncclCommAbort(nccl_);
      else ncclCommDestroy(nccl_);
    }
    if (norm_partial_) cudaFree(norm_partial_);
    if (reduce_partial_) cudaFree(reduce_partial_);
    if (comm_done_) cudaEventDestroy(comm_done_);
    for (const WaitTimer& t : timers_) cudaEventDestroy(t.reached), cudaEventDestroy(t.done);
    if (grads_ready_) cudaEventDestroy(grads_ready_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    if (dnn_) cudnnDestroy(dnn_);
    if (blas_lt_) cublasLtDestroy(blas_lt_);
    if (blas_) cublasDestroy(blas_);
    if (blas_workspace_) cudaFree(blas_workspace_);
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
    if (emulated_) {  // cudaFree waits for the device: nothing queued may write freed memory
      quiesce();
      return std::free(p);
    }
    cudaFree(p);  // in destructors: a failure here has nobody to report to
  }

  // From pageable host memory (every host buffer here): cudaMemcpyAsync returns once the bytes
  // were staged, and writes the device memory in stream order. Emulated: staged here, queued.
  void to_device(void* dst, const void* src, size_t bytes) override {
    if (emulated_) {
      if (!bytes) return;
      auto staged = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                           static_cast<const uint8_t*>(src) + bytes);
      return host_stream_->enqueue([dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    }
    ONNXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }

  // Synchronous, as cudaMemcpy: after everything queued before it, the collectives joined.
  void to_host(void* dst, const void* src, size_t bytes) override {
    join_collectives();
    if (emulated_) {
      wait_for_host_stream();
      return void(std::memcpy(dst, src, bytes));
    }
    ONNXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    wait_for(stream_);
  }

  // By the row's kernel family (exec/cuda/ops.h); each family says whether it takes the node's
  // dtypes, shapes and attributes.
  bool has_kernel(const Graph& g, const Node& n) const override {
    switch (cuda::kernel_family(n.op)) {
      case cuda::KernelFamily::none: return false;
      case cuda::KernelFamily::elementwise: return cuda::elementwise_bounds_known(g, n) && cuda::elementwise_runs(g, n);
      case cuda::KernelFamily::copy: return cuda::copy_op_runs(g, n);
      case cuda::KernelFamily::gemm: return cuda::gemm_runs(g, n);
      case cuda::KernelFamily::reduce: return cuda::reduce_runs(g, n);
      case cuda::KernelFamily::norm: return cuda::norm_runs(g, n);
      case cuda::KernelFamily::tensor: return cuda::tensor_runs(g, n);
      case cuda::KernelFamily::conv: return cuda::conv_runs(g, n);
      case cuda::KernelFamily::reshape: return true;
      // Scatter: a copy. All-reduces and all-gathers: copies in a world of one, NCCL (or, emulated,
      // the host communicator) in a connected world of GPUs; a world not connected, or not all
      // GPUs, uses the CPU fallback.
      case cuda::KernelFamily::collective: return n.op == Op::Scatter || world_ == 1 || device_collectives_;
    }
    return false;
  }

  // What the host does for a node runs here (the stream a collective goes on, the events); the
  // kernel itself is launched on the stream or, emulated, queued there with copies of its
  // arguments (its refs and run state), as a launch copies them.
  void run(const Graph& g, KernelCtx& c) override {
    const Node& n = c.node;
    if (comm_pending_ && reads_pending(c)) join_collectives();  // a bf16 bucket's cast back
    switch (cuda::kernel_family(n.op)) {
      case cuda::KernelFamily::reshape:  // the same bytes under another shape (the Plan gives outputs their own)
        return copy(c.out(0).data, c.in(0).data, size_t(c.out(0).numel) * dtype_size(c.out(0).dtype));
      case cuda::KernelFamily::collective:
        if (n.op == Op::Scatter) return scatter(c);
        if (n.op == Op::AllReduce) return all_reduce(c);
        if (n.op == Op::AllGather) return all_gather(c);
        if (n.op == Op::ReduceScatter) return reduce_scatter(c);
        c.fail("no kernel on {}", name());
      default: break;
    }
    if (!emulated_) return kernel(g, c);
    queue(*host_stream_, [&g, node = &n, ins = c.inputs, outs = c.outputs, rs = c.run, index = c.index, this] {
      KernelCtx again{*node, ins, outs, rs, index};
      kernel(g, again);
    });
  }

  // The kernel of a node of the compute families, on the compute stream (emulated: run on its thread).
  void kernel(const Graph& g, KernelCtx& c) {
    const Node& n = c.node;
    const cuda::CudaContext cc{stream_, blas_, dnn_, emulated_};
    switch (cuda::kernel_family(n.op)) {
      case cuda::KernelFamily::none: break;
      case cuda::KernelFamily::elementwise:
        return cuda::elementwise_forward(g, n, c.inputs, c.out(0), stream_, emulated_);
      case cuda::KernelFamily::copy: return cuda::copy_op_forward(n, c.in(0), c.out(0), stream_, emulated_);
      case cuda::KernelFamily::gemm:
        if (emulated_) return cuda::gemm_emulate(n, c.inputs, c.out(0), tf32_);
        return cuda::gemm_forward(n, c.inputs, c.out(0), blas_, stream_,
                                  cuda::LtContext{blas_lt_, blas_workspace_, kBlasWorkspace});
      case cuda::KernelFamily::reduce:
        return cuda::reduce_forward(g, n, c.inputs, c.out(0), stream_, emulated_, reduce_scratch(), kReduceScratch);
      case cuda::KernelFamily::norm: return cuda::norm_forward(g, c, cc);
      case cuda::KernelFamily::tensor: return cuda::tensor_forward(g, c, cc);
      case cuda::KernelFamily::conv: return cuda::conv_forward(g, c, cc);
      case cuda::KernelFamily::reshape:
      case cuda::KernelFamily::collective: break;  // run() did them
    }
    c.fail("no kernel on {}", name());
  }

  void synchronize() override {
    join_collectives();
    if (emulated_) return wait_for_host_stream();
    wait_for(stream_);
  }

  std::string check_message(const Graph& g, const Node& n, int64_t element, int64_t value) const override {
    return cuda::tensor_check_message(g, n, element, value);
  }

  void copy_on_device(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }

  void allow_tf32(bool on) override {
    tf32_ = on;
    if (!emulated_) ONNXDP_CUDA_CHECK(cublasSetMathMode(blas_, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }

  void zero(void* dst, size_t bytes) override {
    if (!bytes) return;
    if (emulated_) return queue(*host_stream_, [=] { std::memset(dst, 0, bytes); });
    ONNXDP_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
  }

  void optimizer_step(const OptimizerUpdate* u, double* squared_norm, float* p, float* g, float* m, float* v,
                      int64_t n) override {
    join_collectives();  // the gradient buckets' all-reduces
    if (emulated_) {
      return queue(*host_stream_, [=] {
        cuda::squared_norm_emulate(g, n, squared_norm);
        cuda::optimizer_emulate(u, squared_norm, p, g, m, v, n);
      });
    }
    cuda::squared_norm_launch(g, n, norm_partial_, squared_norm, stream_);
    cuda::optimizer_launch(u, squared_norm, p, g, m, v, n, stream_);
  }

  void sharded_optimizer_step(const OptimizerUpdate* u, double* squared_norm, float* p, float* g, float* m, float* v,
                              const std::vector<int64_t>& bounds, int rank) override {
    if (!comm_)
      fail("{}: --zero-stage 1 needs every replica on a device of this kind (the parts are exchanged by the device)",
           name());
    const int64_t lo = bounds[size_t(rank)], n = bounds[size_t(rank) + 1] - lo;
    std::vector<int64_t> counts;
    for (size_t r = 0; r + 1 < bounds.size(); ++r) counts.push_back(bounds[r + 1] - bounds[r]);
    join_collectives();  // the gradient buckets' reduce-scatters
    if (emulated_) {
      Communicator* comm = comm_;
      queue(*host_stream_, [=] { cuda::squared_norm_emulate(g + lo, n, squared_norm); });
      queue_collective(*host_stream_, [=] { comm->all_reduce_sum(squared_norm, 1, DType::f64); });
      queue(*host_stream_, [=] { cuda::optimizer_emulate(u, squared_norm, p + lo, g + lo, m, v, n); });
      return queue_collective(*host_stream_, [=] { comm->all_gather_parts(p, counts, DType::f32); });
    }
    cuda::squared_norm_launch(g + lo, n, norm_partial_, squared_norm, stream_);
    ONNXDP_NCCL_SETTLE(ncclAllReduce(squared_norm, squared_norm, 1, ncclFloat64, ncclSum, nccl_, stream_), {nccl_});
    cuda::optimizer_launch(u, squared_norm, p + lo, g + lo, m, v, n, stream_);
    // The parts are uneven (the last may be short): one broadcast per owner in one group.
    ONNXDP_CUDA_CHECK(ncclGroupStart());
    for (size_t r = 0; r < counts.size(); ++r)
      if (counts[r] > 0)
        ONNXDP_CUDA_CHECK(ncclBroadcast(p + bounds[r], p + bounds[r], size_t(counts[r]), ncclFloat32, int(r), nccl_, stream_));
    ONNXDP_NCCL_SETTLE(ncclGroupEnd(), {nccl_});
  }

  bool can_capture() const override { return true; }

  void begin_capture() override {
    capturing_ = true;
    if (emulated_) {
      recorded_ = std::make_shared<std::vector<std::function<void()>>>();
      return;
    }
    // Thread-local: the replicas of this process capture on their own threads at the same time.
    ONNXDP_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  }

  std::shared_ptr<void> end_capture() override {
    join_collectives();  // the communication stream rejoins inside the capture
    capturing_ = false;
    if (emulated_) return std::move(recorded_);
    cudaGraph_t graph = nullptr;
    ONNXDP_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    auto rec = std::make_unique<Recording>();
    rec->timers = std::move(capture_timers_);
    capture_timers_.clear();
    cudaError_t e = cudaGraphInstantiate(&rec->exec, graph, 0);
    cudaGraphDestroy(graph);
    ONNXDP_CUDA_CHECK(e);
    const int device = index_;
    return std::shared_ptr<void>(rec.release(), [device](void* x) {
      auto* r = static_cast<Recording*>(x);
      cudaSetDevice(device);
      cudaGraphExecDestroy(r->exec);
      delete r;
    });
  }

  // Emulated: the recording's stream operations issued again, in order (closures queued, events
  // recorded and waited for), as a graph launch replays its nodes and their dependencies.
  void replay(void* recording) override {
    if (emulated_) {
      for (auto& issue : *static_cast<std::vector<std::function<void()>>*>(recording)) issue();
      return;
    }
    const auto* rec = static_cast<const Recording*>(recording);
    ONNXDP_CUDA_CHECK(cudaGraphLaunch(rec->exec, stream_));
    to_read_.insert(to_read_.end(), rec->timers.begin(), rec->timers.end());
  }

  void abort_capture() override {
    capturing_ = false;
    comm_pending_ = false;
    capture_timers_.clear();  // their events stay in timers_, unused
    if (emulated_) return void(recorded_.reset());
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is reported by the caller
  }

  // NCCL set-up. Every replica tells the others its kind of device, its GPU and its process; then
  // replica 0's ncclUniqueId goes to all through the host communicator (memory, sockets or MPI),
  // and the first replica of each process (one process with every GPU under --launch threads; one
  // per GPU under --launch processes or a launcher) makes the communicators of its process's GPUs
  // in one group (ncclGroupStart, ncclCommInitRankConfig per GPU, ncclGroupEnd), non-blocking and
  // polled, so that a process that died before its part makes the others fail after
  // --comm-timeout instead of waiting for ever.
  // The emulated device runs the same exchange with stand-in communicators and checks that each
  // replica received its own.
  void connect(Communicator* comm) override {
    world_ = comm ? comm->size() : 1;
    if (world_ == 1) return;
    // Device collectives only when every replica is this kind of device: a CPU replica would wait
    // in the host communicator for what the others send through NCCL.
    const std::string me = peer_bytes();
    std::vector<std::vector<uint8_t>> all;
    comm->all_gather_bytes(me.data(), me.size(), all);
    for (const auto& a : all)
      if (a.size() < 5 || a[0] != uint8_t(me[0])) return;
    comm_ = comm;
    timeout_s_ = comm->options().timeout_s;
    const int rank = comm->rank();
    std::vector<int> devices, local;  // local: the replicas of this process, in rank order
    for (int r = 0; r < world_; ++r) {
      const std::vector<uint8_t>& a = all[size_t(r)];
      int32_t d = 0;
      std::memcpy(&d, a.data() + 1, 4);
      devices.push_back(d);
      if (std::string(a.begin() + 5, a.end()) == me.substr(5)) local.push_back(r);
    }
    ncclComm_t mine = nullptr;
    ncclUniqueId id{};
    if (rank == 0 && !emulated_) ONNXDP_CUDA_CHECK(ncclGetUniqueId(&id));
    comm->broadcast(&id, sizeof id, 0);
    std::vector<ncclComm_t> comms;
    if (rank == local[0]) comms = init_group(id, local, devices);
    // The first replica of each process sends its process's communicators with everyone's.
    const size_t bytes = comms.size() * sizeof(ncclComm_t);
    comm->all_gather_bytes(comms.data(), bytes, all);
    const std::vector<uint8_t>& from = all[size_t(local[0])];
    const size_t k = size_t(std::find(local.begin(), local.end(), rank) - local.begin());
    if (from.size() != local.size() * sizeof(ncclComm_t))
      fail("{}: NCCL set-up: replica {} made {} communicators for the {} replicas of its process", name(), local[0],
           from.size() / sizeof(ncclComm_t), local.size());
    std::memcpy(&mine, from.data() + k * sizeof(ncclComm_t), sizeof mine);
    if (emulated_) {
      if (mine != stand_in(rank))
        fail("{}: NCCL set-up handed replica {} the communicator made for another replica", name(), rank);
    } else {
      nccl_ = mine;
    }
    device_collectives_ = true;
  }

 private:
  // What connect() tells the other replicas: the kind of device (1 GPU, 2 emulated), the GPU's
  // index (int32) and the process ("host:pid").
  std::string peer_bytes() const {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string b(1, char(emulated_ ? 2 : 1));
    const int32_t d = index_;
    b.append(reinterpret_cast<const char*>(&d), 4);
    return b + host + ":" + std::to_string(getpid());
  }

  // The emulated device's communicator for a rank: a value no real one has, that says whose it is.
  static ncclComm_t stand_in(int rank) { return reinterpret_cast<ncclComm_t>(uintptr_t(0x1000 + rank)); }

  // The communicators of the replicas `local` of this process (replica local[k] on GPU
  // devices[local[k]]), made in one group, non-blocking: waited for within --comm-timeout.
  std::vector<ncclComm_t> init_group(const ncclUniqueId& id, const std::vector<int>& local,
                                     const std::vector<int>& devices) {
    std::vector<ncclComm_t> comms(local.size(), nullptr);
    if (emulated_) {
      for (size_t k = 0; k < local.size(); ++k) comms[k] = stand_in(local[k]);
      return comms;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ONNXDP_CUDA_CHECK(ncclGroupStart());
    for (size_t k = 0; k < local.size(); ++k) {
      ONNXDP_CUDA_CHECK(cudaSetDevice(devices[size_t(local[k])]));
      ONNXDP_CUDA_CHECK(ncclCommInitRankConfig(&comms[k], world_, id, local[k], &config));
    }
    ONNXDP_NCCL_SETTLE(ncclGroupEnd(), comms);
    activate();
    return comms;
  }

  // An NCCL call on a non-blocking communicator may return ncclInProgress before its work is
  // queued: waits (polling) until each of `comms` is ready. An NCCL error, or --comm-timeout
  // without progress, aborts them and throws naming the call.
  void settle(ncclResult_t r, const char* call, const char* file, int line, std::vector<ncclComm_t> comms) {
    if (r != ncclInProgress) return cuda::check(r, call, file, line);
    const auto start = std::chrono::steady_clock::now();
    for (ncclComm_t c : comms) {
      for (;;) {
        ncclResult_t state = ncclSuccess;
        ONNXDP_CUDA_CHECK(ncclCommGetAsyncError(c, &state));
        if (state == ncclSuccess) break;
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (state != ncclInProgress || waited > timeout_s_) {
          for (ncclComm_t x : comms) ncclCommAbort(x);
          if (std::find(comms.begin(), comms.end(), nccl_) != comms.end()) nccl_ = nullptr;
          fail("{} ({}): {} at {}:{} {}; another replica died or stopped. Training stopped", name(),
               comm_ ? comm_->describe() : "", call, file, line,
               state != ncclInProgress ? std::string("failed: ") + ncclGetErrorString(state)
                                       : fmt::format("made no progress for {:.0f} s (--comm-timeout)", timeout_s_));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  // x [B, ...] (the global batch) -> y [rows, ...]: rows batch_offset .. batch_offset + rows.
  void scatter(KernelCtx& c) {
    const TensorRef &x = c.in(0), &y = c.out(0);
    const size_t row_bytes = x.dim(0) ? size_t(x.numel / x.dim(0)) * dtype_size(x.dtype) : 0;
    const int64_t rows = y.dim(0);
    if (c.run.batch_offset < 0 || c.run.batch_offset + rows > x.dim(0))
      c.fail("rows {}..{} are outside the global batch of {}", c.run.batch_offset, c.run.batch_offset + rows, x.dim(0));
    copy(y.data, static_cast<const uint8_t*>(x.data) + size_t(c.run.batch_offset) * row_bytes, size_t(rows) * row_bytes);
  }

  // Each output <- the sum over replicas of its input, in place in the output: a bucket laid out
  // as one range of the flat gradient buffer (all_reduce_span) is one NCCL call, otherwise one
  // NCCL group per node. async (gradient buckets): on the communication stream once the compute
  // stream has produced the inputs, so backward goes on; the compute stream waits for it before
  // anything reads the sums.
  void all_reduce(KernelCtx& c) {
    const int64_t span = world_ > 1 ? all_reduce_span(c) : 0;
    if (world_ == 1 || span || emulated_)  // in place in the outputs (no copy where they are the inputs)
      for (size_t k = 0; k < c.inputs.size(); ++k)
        copy(c.out(int(k)).data, c.in(int(k)).data, size_t(c.out(int(k)).numel) * dtype_size(c.out(int(k)).dtype));
    if (world_ == 1) return;
    if (emulated_) {
      std::vector<TensorRef> sums = c.outputs;
      if (span) sums = {TensorRef{c.out(0).data, c.out(0).dtype, nullptr, span}};
      return queue_collective(host_collective_stream(c), [comm = comm_, sums] {
        for (const TensorRef& y : sums) comm->all_reduce_sum(y.data, y.numel, y.dtype);
      });
    }
    const cudaStream_t s = collective_stream(c);
    if (span) {
      void* y = c.out(0).data;
      ONNXDP_NCCL_SETTLE(ncclAllReduce(y, y, size_t(span), nccl_type(c, c.out(0).dtype), ncclSum, nccl_, s), {nccl_});
      return;
    }
    ONNXDP_CUDA_CHECK(ncclGroupStart());
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      const TensorRef &x = c.in(int(k)), &y = c.out(int(k));
      ONNXDP_CUDA_CHECK(ncclAllReduce(x.data, y.data, size_t(y.numel), nccl_type(c, y.dtype), ncclSum, nccl_, s));
    }
    ONNXDP_NCCL_SETTLE(ncclGroupEnd(), {nccl_});
  }

  // The stream a collective node's NCCL calls go on: the compute stream, or with async=1 the
  // communication stream after the compute stream's work so far (its outputs then pending until
  // join_collectives).
  cudaStream_t collective_stream(const KernelCtx& c) { return on_comm_stream(c) ? comm_stream_ : stream_; }
  cuda::HostStream& host_collective_stream(const KernelCtx& c) {
    return on_comm_stream(c) ? *host_comm_stream_ : *host_stream_;
  }
  bool on_comm_stream(const KernelCtx& c) {
    if (c.node.i("async") == 0) return false;
    if (emulated_) {
      record(host_grads_ready_, *host_stream_);
      wait(*host_comm_stream_, host_grads_ready_);
    } else {
      ONNXDP_CUDA_CHECK(cudaEventRecord(grads_ready_, stream_));
      ONNXDP_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, grads_ready_, 0));
    }
    comm_pending_ = true;
    for (const TensorRef& y : c.outputs) pending_.push_back(y);
    return true;
  }

  // --zero-stage 1's gradient bucket: over a range of the flat gradient buffer (RunState::shards),
  // each replica receives the sums of its part: one NCCL reduce per owner in one group (the parts
  // of a bucket are uneven). Elsewhere every element is summed (all_reduce), each owner's too.
  void reduce_scatter(KernelCtx& c) {
    const FlatShards* sh = c.run.shards;
    const int64_t span = world_ > 1 && comm_ ? all_reduce_span(c) : 0;
    float* begin = static_cast<float*>(c.out(0).data);
    if (!sh || !span || c.out(0).dtype != DType::f32 || begin < sh->base || begin + span > sh->base + sh->bounds.back())
      return all_reduce(c);
    for (size_t k = 0; k < c.inputs.size(); ++k)  // in place in the outputs
      copy(c.out(int(k)).data, c.in(int(k)).data, size_t(c.out(int(k)).numel) * dtype_size(c.out(int(k)).dtype));
    const int64_t lo = begin - sh->base, hi = lo + span;
    std::vector<int64_t> counts(sh->bounds.size() - 1);
    for (size_t r = 0; r < counts.size(); ++r)
      counts[r] = std::max<int64_t>(0, std::min(hi, sh->bounds[r + 1]) - std::max(lo, sh->bounds[r]));
    if (emulated_)
      return queue_collective(host_collective_stream(c),
                              [comm = comm_, begin, counts] { comm->reduce_scatter_sum(begin, counts, DType::f32); });
    const cudaStream_t s = collective_stream(c);
    ONNXDP_CUDA_CHECK(ncclGroupStart());
    int64_t off = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > 0)
        ONNXDP_CUDA_CHECK(ncclReduce(begin + off, begin + off, size_t(counts[r]), ncclFloat32, ncclSum, int(r), nccl_, s));
      off += counts[r];
    }
    ONNXDP_NCCL_SETTLE(ncclGroupEnd(), {nccl_});
  }

  // x [rows_r, ...] on replica r -> y [rows, ...]: the replicas' shards in replica order, split as
  // the batch was (graph/shards.h): one NCCL broadcast per replica in one group (shards may
  // differ by a row, which ncclAllGather's equal counts cannot take).
  void all_gather(KernelCtx& c) {
    const TensorRef &x = c.in(0), &y = c.out(0);
    const int world = world_ == 1 ? 1 : comm_->size(), rank = world_ == 1 ? 0 : comm_->rank();
    const std::vector<int64_t> shard = shard_rows(c.node.i("rows"), world);
    if (y.dim(0) != c.node.i("rows") || x.dim(0) != shard[size_t(rank)])
      c.fail("replica {} holds {} rows; its shard of the {} gathered is {}", rank, x.dim(0), y.dim(0), shard[size_t(rank)]);
    const size_t row_bytes = y.dim(0) ? size_t(y.numel / y.dim(0)) * dtype_size(y.dtype) : 0;
    if (world == 1) return copy(y.data, x.data, size_t(x.numel) * dtype_size(x.dtype));
    uint8_t* out = static_cast<uint8_t*>(y.data);
    if (emulated_) {  // on the compute stream, as the broadcasts below
      return queue_collective(*host_stream_, [comm = comm_, node = &c.node, x, out, shard, row_bytes, world] {
        std::vector<std::vector<uint8_t>> all;
        comm->all_gather_bytes(x.data, size_t(x.numel) * dtype_size(x.dtype), all);
        uint8_t* at = out;
        for (int r = 0; r < world; ++r) {
          if (all[size_t(r)].size() != size_t(shard[size_t(r)]) * row_bytes)
            fail("{}: replica {} sent {} bytes, its shard is {} rows of {} bytes", node->describe(), r,
                 all[size_t(r)].size(), shard[size_t(r)], row_bytes);
          if (!all[size_t(r)].empty()) std::memcpy(at, all[size_t(r)].data(), all[size_t(r)].size());
          at += all[size_t(r)].size();
        }
      });
    }
    ONNXDP_CUDA_CHECK(ncclGroupStart());
    for (int r = 0; r < world; ++r) {
      const size_t bytes = size_t(shard[size_t(r)]) * row_bytes;
      ONNXDP_CUDA_CHECK(ncclBroadcast(x.data, out, bytes, ncclUint8, r, nccl_, stream_));
      out += bytes;
    }
    ONNXDP_NCCL_SETTLE(ncclGroupEnd(), {nccl_});
  }

  static ncclDataType_t nccl_type(const KernelCtx& c, DType t) {
    switch (t) {
      case DType::f32: return ncclFloat32;
      case DType::f64: return ncclFloat64;
      case DType::i32: return ncclInt32;
      case DType::i64: return ncclInt64;
      case DType::f16: return ncclFloat16;
      case DType::bf16: return ncclBfloat16;
      default: c.fail("no NCCL sum for {}", dtype_name(t));
    }
  }

  // Waits for the stream. With NCCL in it, a replica that died or hangs would leave it waiting for
  // ever: NCCL's own error, or the world's --comm-timeout without progress, aborts the
  // communicator and throws instead.
  void wait_for(cudaStream_t s) {
    if (!nccl_) return ONNXDP_CUDA_CHECK(cudaStreamSynchronize(s));
    const auto start = std::chrono::steady_clock::now();
    const double timeout_s = timeout_s_;
    for (;;) {
      cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) ONNXDP_CUDA_CHECK(e);
      ncclResult_t async = ncclSuccess;
      ONNXDP_CUDA_CHECK(ncclCommGetAsyncError(nccl_, &async));
      // A replica of this world that failed (its thread threw, run_replicas aborted the host
      // communicator): stop now, not at the timeout.
      std::string why;
      if (comm_ && comm_->aborted(&why)) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        fail("{} ({}): stopped waiting for the device: {}", name(), comm_->describe(), why);
      }
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if ((async != ncclSuccess && async != ncclInProgress) || waited > timeout_s) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        fail("{} ({}): the NCCL all-reduces {}; another replica died or stopped. Training stopped",
             name(), comm_->describe(),
             async != ncclSuccess && async != ncclInProgress
                 ? std::string("failed: ") + ncclGetErrorString(async)
                 : fmt::format("made no progress for {:.0f} s (--comm-timeout)", timeout_s));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // The compute stream waits for the all-reduces queued on the communication stream.
  void join_collectives() {
    if (!comm_pending_) return;
    if (emulated_) {
      record(host_comm_done_, *host_comm_stream_);
      wait(*host_stream_, host_comm_done_);
    } else {
      ONNXDP_CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
      time_join();
      ONNXDP_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
    }
    comm_pending_ = false;
    pending_.clear();
  }

  // comm_wait_ms on the GPU: at each join a pair of timing events, `reached` on the compute stream
  // where it starts to wait and `done` on the communication stream after the collectives; the
  // compute stream waited elapsed(reached, done) when that is positive. In a captured graph they
  // are external event-record nodes, recorded again by every replay; each recording has its own
  // pairs (Recording::timers). Whether this GPU and driver time events in graphs is tried once,
  // on a scratch stream (graph_timing_ok()); where they do not, replayed steps report 0.
  struct WaitTimer {
    cudaEvent_t reached = nullptr, done = nullptr;
  };
  struct Recording {
    cudaGraphExec_t exec = nullptr;
    std::vector<size_t> timers;  // indices into timers_
  };

  size_t new_timer() {
    WaitTimer t;
    ONNXDP_CUDA_CHECK(cudaEventCreate(&t.reached));
    ONNXDP_CUDA_CHECK(cudaEventCreate(&t.done));
    timers_.push_back(t);
    return timers_.size() - 1;
  }

  void time_join() {
    if (capturing_ && !graph_timing_ok()) return;
    size_t k;
    if (capturing_) {
      k = new_timer();
      capture_timers_.push_back(k);
    } else {
      if (loose_used_ == loose_timers_.size()) loose_timers_.push_back(new_timer());
      k = loose_timers_[loose_used_++];
      to_read_.push_back(k);
    }
    const unsigned flags = capturing_ ? cudaEventRecordExternal : cudaEventRecordDefault;
    ONNXDP_CUDA_CHECK(cudaEventRecordWithFlags(timers_[k].reached, stream_, flags));
    ONNXDP_CUDA_CHECK(cudaEventRecordWithFlags(timers_[k].done, comm_stream_, flags));
  }

  bool graph_timing_ok() {
    if (graph_timing_ >= 0) return graph_timing_ == 1;
    graph_timing_ = 0;
    cudaStream_t s = nullptr;
    cudaEvent_t a = nullptr, b = nullptr;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t x = nullptr;
    float ms = -1;
    bool ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess && cudaEventCreate(&a) == cudaSuccess &&
              cudaEventCreate(&b) == cudaSuccess &&
              cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (ok) {
      ok = cudaEventRecordWithFlags(a, s, cudaEventRecordExternal) == cudaSuccess &&
           cudaEventRecordWithFlags(b, s, cudaEventRecordExternal) == cudaSuccess;
      ok = cudaStreamEndCapture(s, &g) == cudaSuccess && ok;
    }
    ok = ok && cudaGraphInstantiate(&x, g, 0) == cudaSuccess && cudaGraphLaunch(x, s) == cudaSuccess &&
         cudaStreamSynchronize(s) == cudaSuccess && cudaEventElapsedTime(&ms, a, b) == cudaSuccess && ms >= 0;
    if (x) cudaGraphExecDestroy(x);
    if (g) cudaGraphDestroy(g);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (s) cudaStreamDestroy(s);
    cudaGetLastError();  // a failure here only means replayed steps report no wait
    graph_timing_ = ok ? 1 : 0;
    return ok;
  }

 public:
  double take_comm_wait_ms() override {
    if (emulated_) return host_stream_->take_waited_ms();
    double total = 0;
    std::sort(to_read_.begin(), to_read_.end());
    to_read_.erase(std::unique(to_read_.begin(), to_read_.end()), to_read_.end());
    for (size_t k : to_read_) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, timers_[k].reached, timers_[k].done) == cudaSuccess) {
        if (ms > 0) total += ms;
      } else {
        cudaGetLastError();  // not recorded (yet): no figure, never an error
      }
    }
    to_read_.clear();
    loose_used_ = 0;
    return total;
  }

 private:
  // Whether a node reads bytes an asynchronous collective still writes.
  bool reads_pending(const KernelCtx& c) const {
    auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
    for (const TensorRef& x : c.inputs) {
      if (!x.present() || !x.numel) continue;
      const uintptr_t a = at(x.data), b = a + size_t(x.numel) * dtype_size(x.dtype);
      for (const TensorRef& y : pending_) {
        const uintptr_t ya = at(y.data), yb = ya + size_t(y.numel) * dtype_size(y.dtype);
        if (a < yb && ya < b) return true;
      }
    }
    return false;
  }

  void copy(void* dst, const void* src, size_t bytes) {
    if (!bytes || dst == src) return;
    if (emulated_) return queue(*host_stream_, [=] { std::memcpy(dst, src, bytes); });
    ONNXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

  // ---- the emulated streams (exec/cuda/host_stream.h) ----
  // A stream operation issued now, or appended to the recording while capturing (replay issues
  // it again): as CUDA graph capture records a stream's work and its events instead of running it.
  void issue(std::function<void()> op) {
    if (capturing_) return recorded_->push_back(std::move(op));
    op();
  }
  void queue(cuda::HostStream& s, std::function<void()> work) {
    issue([&s, work = std::move(work)] { s.enqueue(work); });
  }
  void record(cuda::HostEvent& e, cuda::HostStream& s) {
    issue([&e, &s] { e = s.record(); });
  }
  void wait(cuda::HostStream& s, const cuda::HostEvent& e) {
    issue([&s, &e] { s.wait(e); });
  }
  // An emulated NCCL call on stream s. NCCL runs one communicator's operations in the order they
  // were issued, whatever their streams (the host communicator too matches calls by order): each
  // waits for the one issued before it.
  void queue_collective(cuda::HostStream& s, std::function<void()> work) {
    wait(s, host_last_collective_);
    queue(s, std::move(work));
    record(host_last_collective_, s);
  }
  // A host wait for the compute stream, as wait_for: a replica of this world that failed (its
  // thread threw, run_replicas aborted the host communicator) ends it at once. Then the
  // communication stream's error, if a collective failed (NCCL's asynchronous error): its work
  // was joined into the compute stream's, so it has ended too.
  void wait_for_host_stream() {
    auto poll = [this] {
      std::string why;
      if (comm_ && comm_->aborted(&why)) fail("{} ({}): stopped waiting for the device: {}", name(), comm_->describe(), why);
    };
    host_stream_->synchronize(poll);
    host_comm_stream_->synchronize(poll);
  }
  // Both streams drained, errors left for synchronize (a release in a destructor must not throw).
  // A replica unwinding from an error drains too, without aborting its world (run_replicas does
  // that after the unwinding, with the error): every collective it queued, the others reach as
  // well (collectives are matched in call order), or they fail, and the world is aborted then.
  void quiesce() {
    host_stream_->drain();
    host_comm_stream_->drain();
  }

  int index_;
  bool emulated_;
  cudaStream_t stream_ = nullptr;
  static constexpr size_t kBlasWorkspace = size_t(32) << 20;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t blas_lt_ = nullptr;
  void* blas_workspace_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  bool tf32_ = false;  // allow_tf32: the emulated GEMMs round their inputs as the handle's TF32 mode does
  // Collectives: world_ is 0 until connect(); device_collectives_ when every replica is a GPU.
  int world_ = 0;
  bool device_collectives_ = false;
  Communicator* comm_ = nullptr;
  double timeout_s_ = 300;  // the world's --comm-timeout
  std::vector<TensorRef> pending_;  // outputs of the asynchronous collectives queued since the last join
  ncclComm_t nccl_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t grads_ready_ = nullptr, comm_done_ = nullptr;
  bool comm_pending_ = false;
  // comm_wait_ms's timing events (time_join): every pair made; the node-by-node joins' pairs,
  // reused after each take; those of the recording being captured; those to read at the next take.
  std::vector<WaitTimer> timers_;
  std::vector<size_t> loose_timers_, capture_timers_, to_read_;
  size_t loose_used_ = 0;
  int graph_timing_ = -1;  // external timing events in graphs work: -1 not tried yet, 0 no, 1 yes
  double* norm_partial_ = nullptr;  // optimizer_step's per-block sums of the squared norm
  // The split reductions' shares (exec/cuda/reduce_launch.h): device memory, host when emulated.
  static constexpr size_t kReduceScratch = size_t(1) << 20;
  double* reduce_partial_ = nullptr;
  std::vector<double> reduce_partial_host_;
  double* reduce_scratch() {
    if (!emulated_) return reduce_partial_;
    if (reduce_partial_host_.empty()) reduce_partial_host_.resize(kReduceScratch);
    return reduce_partial_host_.data();
  }
  // Recording (begin_capture .. end_capture); emulated: the stream operations (issue()).
  bool capturing_ = false;
  std::shared_ptr<std::vector<std::function<void()>>> recorded_;
  // Emulated: the streams (stream_, comm_stream_) and events (grads_ready_, comm_done_, and the
  // last collective issued, which the next one waits for).
  std::unique_ptr<cuda::HostStream> host_stream_, host_comm_stream_;
  cuda::HostEvent host_grads_ready_, host_comm_done_, host_last_collective_;
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
