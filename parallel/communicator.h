// Communicator: the collectives every replica of an SPMD training graph uses. One object per
// replica; replicas are numbered 0..size()-1 across the whole world (all processes, all threads).
//
// Implementations (same interface, chosen by make_world):
//   - in-process: N replicas as threads of one process (`--devices cpu:N`), make_in_process_world;
//   - MPI: one process per MPI rank, each with L local replicas (`mpirun -np 2 … --devices cpu:2` is
//     a world of 4, replica = mpi_rank * L + local_index); local replicas meet in memory, their
//     leader (local index 0) talks MPI to the other processes (parallel/mpi/, built when CMake finds
//     MPI; ONNXDP_HAVE_MPI=1);
//   - NCCL: later, behind this same interface.
//
// Rules every implementation keeps:
//   - Collectives are matched by call order: every replica must call the same collectives, with the
//     same counts and dtypes, in the same order. Replicas that share a process check this and
//     name the first difference; across MPI processes a mismatch ends in an MPI error or the
//     timeout (compare graph hashes with all_gather_bytes before step 1). Never a hang.
//   - Every blocking call obeys CommOptions::timeout_s. When it expires, or a peer is known to have
//     failed (abort), the call throws onnxdp::Error naming the collective, e.g.
//     "replica 1 did not reach all_reduce #12 within 300 s: it may have died or be stuck".
//     After an error the communicator is unusable: every later call throws at once.
//   - all_reduce_sum gives bit-identical results on every replica (replicas stay identical):
//     in-process, element i is summed in replica order 0,1,…,N-1 by one thread and copied to all;
//     under MPI, local replicas first (in local order), then MPI_Iallreduce across processes.
//   - Asynchronous all-reduces (start_all_reduce_sum) run in call order on one communication thread
//     per replica, so buckets launched as backward produces them are reduced while compute goes on.
//     A blocking collective first waits until the communication thread is idle, so blocking and
//     asynchronous collectives keep one order.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "graph/dtype.h"
#include "parallel/spin_condition.h"

namespace onnxdp {

struct CommOptions {
  // Seconds a blocking call waits for its peers before it throws (the CLI's --comm-timeout).
  double timeout_s = 300.0;
};

class Communicator {
 public:
  // An asynchronous all-reduce in flight; pass to wait(). Default-constructed: nothing (wait is a no-op).
  struct Handle {
    uint64_t id = 0;
  };

  explicit Communicator(CommOptions opts);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Global replica index and count.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "in-process replica 1 of 4", "MPI rank 1 of 2, local replica 0 of 2 (replica 2 of 4)".
  virtual std::string describe() const = 0;

  // data[0..count) <- sum over replicas of data[0..count), in place. dtype: f32, f64, i64, i32.
  void all_reduce_sum(void* data, int64_t count, DType dtype);
  // data[0..bytes) <- root's data[0..bytes).
  void broadcast(void* data, size_t bytes, int root);
  // all[r] <- replica r's mine (sizes may differ between replicas). Used to compare graph hashes.
  void all_gather_bytes(const void* mine, size_t bytes, std::vector<std::vector<uint8_t>>& all);
  // Returns when every replica has called barrier().
  void barrier();
  // A barrier without the timeout (an abort or a replica that finished still ends it): where the
  // other replicas wait while replica 0 does work of its own, an evaluation or a checkpoint, for as
  // long as that takes, instead of timing out in the next step's collectives.
  void idle_barrier();

  // --zero-stage 1. data[0 .. sum of counts) is cut into the replicas' parts in replica order (part
  // r: counts[r] elements after the parts before it); every replica passes the same counts.
  // reduce_scatter_sum: afterwards this replica's part holds the sum over replicas (the bits
  // all_reduce_sum gives); the other parts hold unspecified values (this replica's own or sums).
  void reduce_scatter_sum(void* data, const std::vector<int64_t>& counts, DType dtype);
  // all_gather_parts: afterwards every part r holds replica r's part r (in place).
  void all_gather_parts(void* data, const std::vector<int64_t>& counts, DType dtype);

  // Asynchronous all_reduce_sum: queued on this replica's communication thread (in call order) and
  // returns at once. data must stay valid and untouched until wait() returns for the handle.
  Handle start_all_reduce_sum(void* data, int64_t count, DType dtype);
  // Asynchronous reduce_scatter_sum, queued in the same order as the all-reduces.
  Handle start_reduce_scatter_sum(void* data, std::vector<int64_t> counts, DType dtype);
  // Blocks until the handle's all-reduce is done; rethrows its error. The time spent blocked here is
  // added to comm_wait_ms(). Each handle may be waited once; waiting a finished one returns at once.
  void wait(Handle h);
  // Waits for every all-reduce started and not yet waited (their errors are rethrown).
  void wait_all();

  // Milliseconds callers spent blocked in wait()/wait_all() since construction or the last reset
  // (the metric comm_wait_ms: communication not hidden behind compute).
  double comm_wait_ms() const;
  void reset_comm_wait_ms();

  // Makes this communicator's pending and future calls, and those of every replica that shares
  // memory with it (the in-process world, the local replicas of an MPI rank), fail promptly with
  // `reason`. Called by the replica runner when a replica thread dies. Idempotent.
  virtual void abort(const std::string& reason) = 0;
  // Whether abort() was called on this communicator or one sharing memory with it (and why): a
  // wait outside the communicator (a GPU stream's) polls it so that a dead replica ends it too.
  virtual bool aborted(std::string* reason = nullptr) const = 0;
  // This replica will make no more collectives (its work is done): waits until its communication
  // thread is idle, then replicas sharing memory with it that wait for it in a collective fail at
  // once ("replica 1 has finished … and will not reach all_reduce #12") instead of at the timeout.
  void leave();
  // Undoes leave(): the replica will make collectives again (a new run of the same world).
  // run_replicas calls it for every replica before it starts them.
  void rejoin() { do_rejoin(); }

  const CommOptions& options() const { return opts_; }

 protected:
  // The collectives themselves, called on one thread at a time (the caller's or the
  // communication thread's, never both). Arguments are already validated.
  virtual void do_all_reduce_sum(void* data, int64_t count, DType dtype) = 0;
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  virtual void do_all_gather_bytes(const void* mine, size_t bytes, std::vector<std::vector<uint8_t>>& all) = 0;
  virtual void do_barrier() = 0;
  virtual void do_idle_barrier() = 0;
  // Defaults from the collectives above: an all-reduce of the whole range (every part gets its
  // sums; the bytes of an all-reduce), and one broadcast per part. An implementation may do better.
  virtual void do_reduce_scatter_sum(void* data, const std::vector<int64_t>& counts, DType dtype);
  virtual void do_all_gather_parts(void* data, const std::vector<int64_t>& counts, DType dtype);
  virtual void do_leave() {}
  virtual void do_rejoin() {}

  // Called by the destructor of a derived class before its members go: stops the communication
  // thread (aborting pending work when there is any, so peers are not left waiting).
  void stop_comm_thread();

 private:
  struct Task {
    uint64_t id;
    void* data;
    int64_t count;
    DType dtype;
    std::vector<int64_t> counts;  // a reduce-scatter's parts; empty: an all-reduce
  };
  struct Result {
    bool done = false;
    std::exception_ptr error;
  };

  void check_usable() const;
  // Queues t (its id assigned here) on the communication thread, started with the first call.
  Handle enqueue(Task t);
  // Runs f (a collective) on the caller's thread after the communication thread went idle;
  // records the first error so later calls fail at once.
  template <class F>
  void run_blocking(F&& f);
  void comm_thread_main();

  CommOptions opts_;
  // State shared with the communication thread.
  mutable std::mutex mu_;
  SpinCondition cv_;  // a task was queued, finished, or stop was requested
  std::deque<Task> queue_;
  std::map<uint64_t, Result> results_;  // started and not yet waited
  bool busy_ = false;                   // the communication thread runs a task
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::string failed_;  // first error of any collective: the communicator is unusable after it
  std::thread thread_;  // started with the first asynchronous call

  std::atomic<int64_t> wait_ns_{0};
};

using CommWorld = std::vector<std::unique_ptr<Communicator>>;

// N replicas in this process: element r is replica r. Each replica's calls must come from its own
// thread (run_replicas does this).
CommWorld make_in_process_world(int n, CommOptions opts = {});

// How this process was started: by an MPI launcher (mpirun/mpiexec of Open MPI, Hydra, srun), or
// alone. Read from the environment only, no MPI call.
struct LaunchInfo {
  bool launched = false;  // started by a launcher (even a world of 1 process)
  int rank = 0;           // process rank and count the launcher announced
  int size = 1;
  int local_rank = 0;     // this process's index among the job's processes on this machine
  int local_size = 1;     // how many of the job's processes run on this machine
  std::string launcher;  // "Open MPI (OMPI_COMM_WORLD_SIZE=2)", "PMI (PMI_SIZE=2)", "Slurm (...)", ""
  // Started by onnxdp itself as one of its worker processes (parallel/workers.h): one device each,
  // the workers' own sockets instead of MPI.
  bool self_launched = false;
};
// The one place launchers' variables are read: onnxdp's own workers (ONNXDP_WORKER_RANK / _SIZE,
// parallel/workers.h), Open MPI (OMPI_COMM_WORLD_*), PMI (Hydra: PMI_*,
// MPI_LOCALRANKID / MPI_LOCALNRANKS; MVAPICH's MV2_COMM_WORLD_LOCAL_*), Slurm's srun (SLURM_PROCID,
// SLURM_LOCALID, the node's task count from SLURM_NTASKS_PER_NODE, else SLURM_STEP_TASKS_PER_NODE /
// SLURM_TASKS_PER_NODE at SLURM_NODEID).
LaunchInfo detect_launch();
// Slurm's compressed per-node task counts ("2(x3),1": three nodes of 2 tasks, then one of 1): the
// count of node `node`; 0 when the list does not say.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

// True when this build can run multi-process worlds (CMake found MPI).
bool mpi_built();

// L replicas in this process, part of an MPI world of (MPI processes × L) replicas. Initialises MPI
// (thread level MPI_THREAD_SERIALIZED) unless already initialised; it is finalised at exit unless a
// collective failed (a process that exits with requests in flight must not wait in MPI_Finalize).
// Every process must ask for the same L. One MPI world per process at a time (MPI is used from one
// thread at a time). Throws when built without MPI.
CommWorld make_mpi_world(int local_replicas, CommOptions opts = {});

// The world for `--devices cpu:L`: an MPI world when this process was started by a launcher (even
// of one process), else an in-process world of L replicas. A launch of several processes in a build
// without MPI is an error (it would silently train independent models).
CommWorld make_world(int local_replicas, CommOptions opts = {});

// Runs body(comm) for every communicator of `world` on its own thread and joins them. When a body
// throws, the world is aborted with "replica R failed: WHAT" so the others fail promptly, and the
// first error (the root cause) is rethrown once all threads ended.
void run_replicas(CommWorld& world, const std::function<void(Communicator&)>& body);

}  // namespace onnxdp
