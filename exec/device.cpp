#include "exec/device.h"

#include "exec/cpu/blas.h"
#include "exec/cpu/threads.h"
#include "exec/device_backend.h"
#include "graph/error.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace onnxdp {

#ifndef ONNXDP_HAVE_CUDA
CudaInfo cuda_info() {
  CudaInfo info;
  info.status = "onnxdp was built without CUDA (-DONNXDP_CUDA=OFF)";
  return info;
}

std::shared_ptr<DeviceBackend> make_device_backend(DeviceKind, int) {
  fail("this onnxdp was built without CUDA (-DONNXDP_CUDA=OFF): use --devices cpu or cpu:N");
}
#endif

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 && n < 1 << 20 ? int(n) : 0;
}
}  // namespace

namespace {
// "N" in 1..1024, else -1.
int count_of(const std::string& s) {
  if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  int n = std::stoi(s);
  return n >= 1 && n <= 1024 ? n : -1;
}
}  // namespace

DeviceList parse_devices(const std::string& devices, int local_rank, int local_size) {
  DeviceList d;
  auto cpu = [&](int n) {
    for (int k = 0; k < n; ++k) d.index.push_back(k);
    return d;
  };
  if (devices == "cpu") return cpu(1);
  if (devices.rfind("cpu:", 0) == 0) {
    if (int n = count_of(devices.substr(4)); n > 0) return cpu(n);
    fail("--devices {}: expected cpu:N with N replicas from 1 to 1024", devices);
  }
  if (devices == "cuda-emulated" || devices.rfind("cuda-emulated:", 0) == 0) {
    int n = devices.size() > 13 ? count_of(devices.substr(14)) : 1;
    if (n < 0) fail("--devices {}: expected cuda-emulated:N with N replicas from 1 to 1024", devices);
    d.kind = DeviceKind::cuda_emulated;
    return cpu(n);
  }
  const bool cuda = devices == "cuda" || devices.rfind("cuda:", 0) == 0;
  if (!cuda && devices != "auto")
    fail("--devices '{}' is not understood: use auto, cpu, cpu:N (N replicas), cuda (every GPU) or cuda:0,1,...",
         devices);
  const CudaInfo info = cuda_info();
  if (devices == "auto" && info.device_count == 0) {
    d.why_cpu = info.status.empty() ? "no GPU found" : info.status;
    return cpu(1);
  }
  if (info.device_count == 0) fail("--devices {}: no GPU is usable here ({})", devices, info.status);
  d.kind = DeviceKind::cuda;
  if (devices == "cuda" || devices == "auto") {
    if (local_size <= 1) return cpu(info.device_count);  // this process drives every GPU
    // Under a launcher each process takes the GPU of its local rank (DDP's one process per GPU).
    if (local_rank >= info.device_count)
      fail("--devices {}: this machine runs {} processes of the job but has {} GPU{}: local rank {} has none "
           "(start at most one process per GPU, or name GPUs with cuda:i,j)",
           devices, local_size, info.device_count, info.device_count == 1 ? "" : "s", local_rank);
    d.index.push_back(local_rank);
    return d;
  }
  std::string list = devices.substr(5);
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos)
      fail("--devices {}: '{}' is not a GPU index (expected cuda:0,1,...)", devices, item);
    const int k = std::stoi(item);
    if (k >= info.device_count)
      fail("--devices {}: there is no cuda:{} (this machine has {} GPU{})", devices, k, info.device_count,
           info.device_count == 1 ? "" : "s");
    for (int seen : d.index)
      if (seen == k) fail("--devices {}: cuda:{} is named twice", devices, k);
    d.index.push_back(k);
    start = end + 1;
  }
  d.index = gpus_of_process(d.index, local_rank, local_size, devices);
  return d;
}

std::vector<int> gpus_of_process(const std::vector<int>& named, int local_rank, int local_size,
                                 const std::string& devices) {
  if (local_size <= 1) return named;  // this process drives every GPU named
  const int per = int(named.size()) / local_size;
  if (per == 0 || int(named.size()) % local_size != 0)
    fail("--devices {}: this machine runs {} processes of the job, which cannot share {} GPU{} evenly (name a "
         "multiple of {} GPUs, or use --devices cuda for one GPU per process)",
         devices, local_size, named.size(), named.size() == 1 ? "" : "s", local_size);
  return std::vector<int>(named.begin() + local_rank * per, named.begin() + (local_rank + 1) * per);
}

namespace {
int threads_per_replica(int replicas, int processes) {
  // The machine's cores split among the processes, but no more than this one may run on (a rank
  // bound to a core or a socket by its launcher, taskset, a cpuset).
  const int machine = int(std::max(1u, std::thread::hardware_concurrency()));
  const int cores = std::min(available_cores(), std::max(1, machine / std::max(1, processes)));
  const int per_process = env_int("OMP_NUM_THREADS") ? env_int("OMP_NUM_THREADS") : cores;
  return std::max(1, per_process / std::max(1, replicas));
}
}  // namespace

int use_replica_threads(int replicas, int processes) {
  const int each = threads_per_replica(replicas, processes);
  set_cpu_threads(each);  // this thread's kernels; BLAS runs on one (exec/cpu/blas.h)
  return each;
}

void prepare_cpu_replicas(int replicas, int processes) {
  blas_prepare(replicas * threads_per_replica(replicas, processes));
}

}  // namespace onnxdp
