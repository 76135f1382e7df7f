// The MPI world: one process per MPI rank, each with L local replicas (threads). Replica number
// = mpi_rank * L + local_index. A collective is hierarchical:
//   1. the local replicas meet in memory (LocalGroup) and reduce/collect into the leader's buffer
//      (local replica 0), each summing its slice of the elements in local order;
//   2. the leader runs the MPI collective with the other processes' leaders (non-blocking MPI call,
//      polled with MPI_Test so the timeout and the local abort flag can end it);
//   3. the local replicas copy the leader's result.
// Every replica therefore holds the leader's bits, and the leaders hold MPI's result, which Open
// MPI's reduction algorithms give identically to every rank (each element is summed once, or by a
// tree whose partners add the same two values); tests/parallel/mpi_check.cpp checks this bitwise.
//
// Built only when CMake finds MPI (cmake/mpi.cmake defines ONNXDP_HAVE_MPI=1).
// The C API only: Open MPI's and MPICH's mpi.h otherwise pull in the deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "graph/error.h"
#include "graph/tensor.h"
#include "parallel/communicator.h"
#include "parallel/local_group.h"

namespace onnxdp {

namespace {

// Process-wide MPI state. Never destroyed: the atexit handler may run after static destructors.
struct MpiProcess {
  std::mutex mu;
  bool initialized_by_us = false;
  std::atomic<bool> failed{false};  // a collective failed: requests may be in flight
};
MpiProcess& mpi_process() {
  static MpiProcess* p = new MpiProcess();
  return *p;
}

[[noreturn]] void mpi_fail(int rc, const char* call, const char* file, int line) {
  mpi_process().failed = true;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "unknown error");
  fail("MPI call failed: {} returned {} ({}) at {}:{}", call, rc, text, file, line);
}

// Every MPI call goes through this: it names the call, file and line when it fails.
#define MPI_CHECK(call)                                              \
  do {                                                               \
    int mpi_check_rc_ = (call);                                      \
    if (mpi_check_rc_ != MPI_SUCCESS)                                \
      mpi_fail(mpi_check_rc_, #call, __FILE__, __LINE__);            \
  } while (0)

void finalize_at_exit() {
  MpiProcess& p = mpi_process();
  if (!p.initialized_by_us) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failed collective, requests are still in flight and a peer may be gone: MPI_Finalize
  // could wait forever. Exit without it; the launcher sees the abnormal exit and ends the job.
  if (finalized || p.failed) return;
  MPI_Finalize();
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    default: check_reduce_dtype(dtype);
  }
  return MPI_DATATYPE_NULL;
}

// MPI counts are int: large buffers go in pieces of at most this many elements.
constexpr int64_t kMaxMpiCount = int64_t(1) << 30;

// What the local replicas of this process share.
struct MpiWorld {
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD, errors returned (not fatal)
  int mpi_rank = 0, mpi_size = 1, local = 1;
  CommOptions opts;
  std::shared_ptr<LocalGroup> group;

  ~MpiWorld() {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized && !mpi_process().failed) MPI_Comm_free(&comm);
  }

  std::string who() const {
    return local == 1 ? fmt::format("MPI rank {} of {}", mpi_rank, mpi_size)
                      : fmt::format("MPI rank {} of {} (replicas {}-{})", mpi_rank, mpi_size, mpi_rank * local,
                                    mpi_rank * local + local - 1);
  }

  // Polls req until done; throws on timeout or when the local group was aborted.
  // untimed: no deadline (an idle barrier); an abort still ends the wait.
  void wait(MPI_Request& req, const std::string& what, bool untimed = false) {
    auto start = std::chrono::steady_clock::now();
    auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(untimed ? 3.2e8 : opts.timeout_s));
    for (;;) {
      int done = 0;
      MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done) return;
      std::string reason;
      if (group->aborted(&reason)) {
        mpi_process().failed = true;
        fail("{} aborted: {}", what, reason);
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        mpi_process().failed = true;
        fail("{}: another MPI process did not reach {} within {}: it may have died or be stuck", who(), what,
             format_seconds(opts.timeout_s));
      }
      // Open MPI progresses only inside MPI calls: poll hard for a moment, then gently.
      if (now - start < std::chrono::milliseconds(5))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiWorld> world, int local_index)
      : Communicator(world->opts), w_(std::move(world)), local_(local_index) {}
  ~MpiCommunicator() override {
    stop_comm_thread();
    w_->group->leave(local_, true);
  }

  int rank() const override { return w_->mpi_rank * w_->local + local_; }
  int size() const override { return w_->mpi_size * w_->local; }
  std::string describe() const override {
    return fmt::format("replica {} of {} (MPI rank {} of {}, local replica {} of {})", rank(), size(), w_->mpi_rank,
                       w_->mpi_size, local_, w_->local);
  }
  void abort(const std::string& reason) override {
    mpi_process().failed = true;
    w_->group->abort(reason);
  }
  bool aborted(std::string* reason) const override { return w_->group->aborted(reason); }

 protected:
  void do_all_reduce_sum(void* data, int64_t count, DType dtype) override {
    CollectiveCall c = next("all_reduce");
    c.count = count;
    c.dtype = dtype;
    c.data = data;
    LocalGroup& g = *w_->group;
    g.arrive(local_, c);
    int L = w_->local;
    if (L > 1) {
      // Local sum into the leader's buffer, each local replica its slice, in local order.
      std::vector<void*> bufs(L);
      for (int j = 0; j < L; ++j) bufs[j] = g.call(j).data;
      int64_t lo, hi;
      reduce_slice(count, L, local_, &lo, &hi);
      sum_range(bufs, {bufs[0]}, lo, hi, dtype);
      g.sync(local_);
    }
    leader_phase(c, [&] {
      if (dtype == DType::bf16) {  // MPI has no bfloat16 sum: the processes' sums travel as float
        uint16_t* h = static_cast<uint16_t*>(data);
        std::vector<float> f(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) f[size_t(i)] = bf16_to_f32(h[i]);
        for (int64_t off = 0; off < count; off += kMaxMpiCount) {
          MPI_Request req;
          MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, f.data() + off, static_cast<int>(std::min(kMaxMpiCount, count - off)),
                                   MPI_FLOAT, MPI_SUM, w_->comm, &req));
          w_->wait(req, describe_call(c));
        }
        for (int64_t i = 0; i < count; ++i) h[i] = f32_to_bf16(f[size_t(i)]);
        return;
      }
      MPI_Datatype type = mpi_type(dtype);
      size_t elem = dtype_size(dtype);
      for (int64_t off = 0; off < count; off += kMaxMpiCount) {
        int n = static_cast<int>(std::min(kMaxMpiCount, count - off));
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * elem, n, type, MPI_SUM, w_->comm,
                                 &req));
        w_->wait(req, describe_call(c));
      }
    });
    if (L > 1) {
      if (local_ != 0 && count) std::memcpy(data, g.call(0).data, count * dtype_size(dtype));
      g.sync(local_);
    }
  }

  void do_broadcast(void* data, size_t bytes, int root) override {
    CollectiveCall c = next("broadcast");
    c.count = static_cast<int64_t>(bytes);
    c.root = root;
    c.data = data;
    LocalGroup& g = *w_->group;
    g.arrive(local_, c);
    int L = w_->local;
    int root_rank = root / L, root_local = root % L;
    leader_phase(c, [&] {
      // The leader's buffer carries the root's bytes into MPI.
      if (w_->mpi_rank == root_rank && root_local != 0 && bytes) std::memcpy(data, g.call(root_local).data, bytes);
      for (size_t off = 0; off < bytes; off += kMaxMpiCount) {
        int n = static_cast<int>(std::min<size_t>(kMaxMpiCount, bytes - off));
        MPI_Request req;
        MPI_CHECK(MPI_Ibcast(static_cast<char*>(data) + off, n, MPI_BYTE, root_rank, w_->comm, &req));
        w_->wait(req, describe_call(c));
      }
    });
    if (L > 1) {
      if (local_ != 0 && rank() != root && bytes) std::memcpy(data, g.call(0).data, bytes);
      g.sync(local_);
    }
  }

  void do_all_gather_bytes(const void* mine, size_t bytes, std::vector<std::vector<uint8_t>>& all) override {
    CollectiveCall c = next("all_gather");
    c.cdata = mine;
    c.bytes = bytes;
    LocalGroup& g = *w_->group;
    g.arrive(local_, c);
    int L = w_->local, P = w_->mpi_size;
    leader_phase(c, [&] {
      // This process's blob: L sizes (uint64), then the L inputs in local order.
      std::vector<uint8_t> blob(L * sizeof(uint64_t));
      for (int j = 0; j < L; ++j) {
        uint64_t sz = g.call(j).bytes;
        std::memcpy(blob.data() + j * sizeof(uint64_t), &sz, sizeof sz);
        const auto* p = static_cast<const uint8_t*>(g.call(j).cdata);
        blob.insert(blob.end(), p, p + sz);
      }
      uint64_t my_size = blob.size();
      std::vector<uint64_t> sizes(P);
      MPI_Request req;
      MPI_CHECK(MPI_Iallgather(&my_size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, w_->comm, &req));
      w_->wait(req, describe_call(c));
      std::vector<int> counts(P), displs(P);
      uint64_t total = 0;
      for (int p = 0; p < P; ++p) {
        if (total + sizes[p] > INT_MAX) fail("{}: all_gather of {} bytes in all is too large for MPI", who(), total + sizes[p]);
        counts[p] = static_cast<int>(sizes[p]);
        displs[p] = static_cast<int>(total);
        total += sizes[p];
      }
      std::vector<uint8_t> everything(total);
      MPI_CHECK(MPI_Iallgatherv(blob.data(), static_cast<int>(my_size), MPI_BYTE, everything.data(), counts.data(),
                                displs.data(), MPI_BYTE, w_->comm, &req));
      w_->wait(req, describe_call(c));
      g.gathered.assign(P * L, {});
      for (int p = 0; p < P; ++p) {
        const uint8_t* base = everything.data() + displs[p];
        size_t at = L * sizeof(uint64_t);
        for (int j = 0; j < L; ++j) {
          uint64_t sz;
          std::memcpy(&sz, base + j * sizeof(uint64_t), sizeof sz);
          g.gathered[p * L + j].assign(base + at, base + at + sz);
          at += sz;
        }
      }
    });
    all = g.gathered;
    g.sync(local_);
  }

  void do_barrier() override {
    CollectiveCall c = next("barrier");
    w_->group->arrive(local_, c);
    leader_phase(c, [&] {
      MPI_Request req;
      MPI_CHECK(MPI_Ibarrier(w_->comm, &req));
      w_->wait(req, describe_call(c));
    });
  }

  void do_idle_barrier() override {
    CollectiveCall c = next("idle_barrier");
    c.untimed = true;
    w_->group->arrive(local_, c);
    leader_phase(c, [&] {
      MPI_Request req;
      MPI_CHECK(MPI_Ibarrier(w_->comm, &req));
      w_->wait(req, describe_call(c), true);
    });
  }

  void do_leave() override { w_->group->leave(local_, true); }
  void do_rejoin() override { w_->group->leave(local_, false); }

 private:
  CollectiveCall next(const char* op) {
    CollectiveCall c;
    c.op = op;
    c.index = ++calls_;
    return c;
  }

  std::string who() const { return w_->who(); }

  // The leader runs f (the MPI part) while the other local replicas wait; a failure of the leader
  // aborts the local group with its message, so they report the leader's reason.
  template <class F>
  void leader_phase(const CollectiveCall& c, F&& f) {
    if (local_ == 0) {
      try {
        f();
      } catch (const std::exception& e) {
        abort(e.what());
        throw;
      }
    }
    // The leader's own waits are bounded by the timeout; the others wait longer so the leader's
    // message (which names the MPI side) is the one they report.
    if (w_->local > 1) w_->group->sync(local_, w_->opts.timeout_s + 5.0);
  }

  std::shared_ptr<MpiWorld> w_;
  int local_;
  uint64_t calls_ = 0;
};

}  // namespace

bool mpi_built() { return true; }

CommWorld make_mpi_world(int local_replicas, CommOptions opts) {
  if (local_replicas < 1) fail("an MPI process needs at least one local replica, got {}", local_replicas);
  MpiProcess& p = mpi_process();
  auto w = std::make_shared<MpiWorld>();
  w->opts = opts;
  w->local = local_replicas;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    int initialized = 0, finalized = 0;
    MPI_CHECK(MPI_Initialized(&initialized));
    MPI_CHECK(MPI_Finalized(&finalized));
    if (finalized) fail("MPI was already finalized in this process: a second MPI world cannot be made");
    if (!initialized) {
      int provided = 0;
      MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      p.initialized_by_us = true;
      std::atexit(finalize_at_exit);
      // Errors come back as codes that MPI_CHECK reports, instead of aborting the job.
      MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    }
    // Collectives run on the caller's thread or the communication thread, one at a time.
    int level = 0;
    MPI_CHECK(MPI_Query_thread(&level));
    if (level < MPI_THREAD_SERIALIZED)
      fail("the MPI library gives thread level {}, onnxdp needs MPI_THREAD_SERIALIZED ({})", level,
           MPI_THREAD_SERIALIZED);
  }
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w->mpi_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w->mpi_size));

  LaunchInfo li = detect_launch();
  if (li.launched && li.size != w->mpi_size)
    fail("started as rank {} of {} by {}, but MPI_Init made a world of {} process(es): this MPI library "
         "cannot talk to the launcher (with Slurm use srun --mpi=pmix, or mpirun)",
         li.rank, li.size, li.launcher, w->mpi_size);

  std::vector<std::string> names;
  for (int j = 0; j < local_replicas; ++j)
    names.push_back(fmt::format("replica {} (local replica {} of MPI rank {})", w->mpi_rank * local_replicas + j, j,
                                w->mpi_rank));
  w->group = std::make_shared<LocalGroup>(local_replicas, opts, names);

  // Our own communicator, so onnxdp's collectives never match anyone else's; made non-blocking so
  // a missing process ends in the timeout, not a hang.
  MPI_Request req;
  MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &w->comm, &req));
  w->wait(req, "MPI_Comm_idup (making the world)");
  MPI_CHECK(MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN));

  // Every process must hold the same number of local replicas (replica numbering depends on it).
  std::vector<int> locals(w->mpi_size);
  MPI_CHECK(MPI_Iallgather(&local_replicas, 1, MPI_INT, locals.data(), 1, MPI_INT, w->comm, &req));
  w->wait(req, "the exchange of local replica counts");
  for (int r = 0; r < w->mpi_size; ++r)
    if (locals[r] != local_replicas)
      fail("every MPI process must run the same number of local replicas: MPI rank {} has {}, MPI rank {} has {}",
           w->mpi_rank, local_replicas, r, locals[r]);

  CommWorld world;
  for (int j = 0; j < local_replicas; ++j) world.push_back(std::make_unique<MpiCommunicator>(w, j));
  return world;
}

}  // namespace onnxdp
