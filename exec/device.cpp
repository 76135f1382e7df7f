#include "exec/device.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include <unistd.h>

namespace onnxdp {

#ifndef ONNXDP_HAVE_CUDA
CudaInfo cuda_info() {
  CudaInfo info;
  info.status = "onnxdp was built without CUDA (-DONNXDP_CUDA=OFF)";
  return info;
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

void prefer_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // returns only when it failed: then run on as we are
}

int processes_on_host() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_NTASKS_PER_NODE"})
    if (int n = env_int(name)) return n;
  return 1;
}

int use_replica_threads(int replicas, int processes) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const int per_process = env_int("OMP_NUM_THREADS") ? env_int("OMP_NUM_THREADS") : std::max(1, cores / std::max(1, processes));
  const int each = std::max(1, per_process / std::max(1, replicas));
  omp_set_num_threads(each);  // this thread's parallel regions
  openblas_set_num_threads(replicas > 1 ? 1 : each);
  return each;
}

}  // namespace onnxdp
