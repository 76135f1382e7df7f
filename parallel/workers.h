// Worker processes that onnxdp starts itself: `onnxdp train --devices cuda` on a machine with N GPUs
// (or any --devices list with --launch processes) becomes N processes, one per device, as torchrun
// would start them, from the one command the user typed (DDP's architecture, DataParallel's command).
//
// The parent process only starts and watches: it makes one socket pair between worker 0 (the hub)
// and each other worker, starts the workers as copies of its own command line with
// ONNXDP_WORKER_RANK / ONNXDP_WORKER_SIZE / ONNXDP_WORKER_FDS in their environment (the sockets are
// inherited: no address, no port, nothing on disk), forwards SIGINT / SIGTERM / SIGHUP to them, and
// exits with the first failing worker's status after stopping the others. A worker's
// parallel/communicator.h detect_launch() reports the launch (LaunchInfo::self_launched) and
// make_world() gives it a WorkerCommunicator over those sockets: the host-side collectives (loss
// sums, the NCCL id, checkpoints' barriers; on cuda-emulated the gradients too) go through worker 0,
// which sums in worker order, so every worker gets the same bits.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"

namespace onnxdp {

// Starts n workers running argv (argv[0] is replaced by this executable) and waits for them all.
// Returns 0 when every worker exited 0, else the first failure's exit status (128 + signal for a
// worker killed by a signal; of failures seen together, the one worker_to_name names), having
// said on stderr which worker failed and how. grace_s: how long the other workers may take to end
// on their own (they see the failed worker's sockets close) before they are sent SIGTERM, then
// SIGKILL.
int run_worker_processes(int n, const std::vector<std::string>& argv, double grace_s = 15.0);

// Of workers that ended between two looks of run_worker_processes, as (worker, wait status) in
// the order waitpid gave them, the one its report names: the first killed by a signal, else the
// first that failed; -1 when all exited 0. (A worker whose peer is killed ends on its own with
// status 1 within milliseconds, and waitpid may give it first: the killed one is the cause.)
int worker_to_name(const std::vector<std::pair<int, int>>& ended);

// The world of a worker started by run_worker_processes: one replica per worker (local_replicas
// must be 1), over the inherited sockets named by ONNXDP_WORKER_FDS.
CommWorld make_worker_world(int local_replicas, CommOptions opts);

// The same communicator over sockets the caller made (tests): rank r of fds.size() + 1 when r is
// 0 (fds[k-1] reaches worker k), else rank r with fds = {the socket to worker 0}. Takes the fds.
std::unique_ptr<Communicator> make_worker_communicator(int rank, int size, std::vector<int> fds, CommOptions opts);

}  // namespace onnxdp
