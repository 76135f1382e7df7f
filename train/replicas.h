// The replicas of this process for --devices, each with its Communicator and device: what train
// and run share. One replica without a launcher runs on the calling thread with no Communicator
// (a world of one); otherwise every local replica runs on its own thread (MPI ranks: the
// replicas of this process in the world of all ranks).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/device_backend.h"
#include "parallel/communicator.h"

namespace onnxdp {

// comm: nullptr in a world of one; device: nullptr on the CPU, else made on the replica's own
// thread (a CUDA device is current per thread) with --tf32 as asked; local: the replica's index in
// this process (0 .. devices.index.size() - 1).
using ReplicaBody = std::function<void(Communicator* comm, std::shared_ptr<DeviceBackend> device, int local)>;

void for_each_replica(const DeviceList& devices, const CommOptions& comm, bool tf32, const ReplicaBody& body);

// The CUDA backend as this process sees it, for `onnxdp --version`: "CUDA: built; <versions>;
// N devices" (or why not built / no device), then one indented line per GPU.
std::string cuda_report();

// --devices parsed for this process (its local rank and the processes on its host). A worker
// onnxdp started itself (parallel/workers.h) takes the one device of its rank in the list.
DeviceList devices_of(const std::string& devices);

// --launch: how many worker processes `onnxdp train` starts for --devices, one per device, or 0 to
// run every replica as a thread of this process. launch: "processes" (one process per device when
// there are several), "threads" (never), "auto" (processes for real GPUs, several of them; threads
// on the CPU and the emulated device). 0 under a launcher (mpirun, srun) and in a worker.
int worker_processes_for(const std::string& devices, const std::string& launch);

// Starts n workers running the command line argv and waits for them (parallel/workers.h); the
// exit status for main.
int run_workers(int n, const std::vector<std::string>& argv);

}  // namespace onnxdp
