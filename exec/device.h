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

// CPU threads for one of `replicas` replicas of this process when `processes_on_host` processes
// (MPI ranks) share the machine: the cores split evenly, at least one each, and no more than the
// process's CPU affinity allows (OMP_NUM_THREADS, when set, is the whole process's budget instead). Call it on each replica's thread
// before it runs a plan. BLAS itself runs on one thread; the products split among the replica's
// thread team (exec/cpu/blas.h, exec/cpu/threads.h). Returns the threads each replica gets.
int use_replica_threads(int replicas, int processes_on_host);
// Call once on the main thread before CPU replicas start: readies BLAS for as many products at
// once as the replicas' threads will run (blas_prepare, exec/cpu/blas.h).
void prepare_cpu_replicas(int replicas, int processes_on_host);

}  // namespace onnxdp
