#include "parallel/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "graph/error.h"
#include "parallel/local_group.h"
#include "parallel/workers.h"

namespace onnxdp {

// ---------------------------------------------------------------------------------------------
// Communicator: validation, the communication thread, wait time.

Communicator::Communicator(CommOptions opts) : opts_(opts) {
  if (!(opts_.timeout_s > 0)) fail("communicator timeout must be positive, got {}", opts_.timeout_s);
}

Communicator::~Communicator() {
  // Derived classes call stop_comm_thread() first; this only covers one that did not.
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Communicator::stop_comm_thread() {
  bool pending;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending = busy_ || !queue_.empty();
  }
  // Peers must not wait out the timeout for collectives this replica will never finish.
  if (pending) abort(fmt::format("{} was destroyed with all-reduces in flight", describe()));
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Communicator::check_usable() const {
  if (!failed_.empty()) fail("{}: unusable after an earlier error: {}", describe(), failed_);
}

template <class F>
void Communicator::run_blocking(F&& f) {
  {
    // Collectives keep one order: the asynchronous ones queued before this call go first.
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
    check_usable();
  }
  try {
    f();
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (failed_.empty()) failed_ = e.what();
    }
    abort(e.what());
    throw;
  }
}

void Communicator::all_reduce_sum(void* data, int64_t count, DType dtype) {
  check_reduce_dtype(dtype);
  if (count < 0) fail("all_reduce_sum: negative count {}", count);
  if (count > 0 && !data) fail("all_reduce_sum: null buffer for {} elements", count);
  run_blocking([&] { do_all_reduce_sum(data, count, dtype); });
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size()) fail("broadcast: root {} is not a replica of a world of {}", root, size());
  if (bytes > 0 && !data) fail("broadcast: null buffer for {} bytes", bytes);
  run_blocking([&] { do_broadcast(data, bytes, root); });
}

void Communicator::all_gather_bytes(const void* mine, size_t bytes, std::vector<std::vector<uint8_t>>& all) {
  if (bytes > 0 && !mine) fail("all_gather_bytes: null buffer for {} bytes", bytes);
  run_blocking([&] { do_all_gather_bytes(mine, bytes, all); });
}

void Communicator::barrier() {
  run_blocking([&] { do_barrier(); });
}

void Communicator::idle_barrier() {
  run_blocking([&] { do_idle_barrier(); });
}

namespace {
// The elements of all parts; refuses negative counts and a world mismatch.
int64_t parts_total(const char* what, const std::vector<int64_t>& counts, int world, const void* data) {
  if (int(counts.size()) != world) fail("{}: {} parts for a world of {}", what, counts.size(), world);
  int64_t total = 0;
  for (int64_t n : counts) {
    if (n < 0) fail("{}: negative count {}", what, n);
    total += n;
  }
  if (total > 0 && !data) fail("{}: null buffer for {} elements", what, total);
  return total;
}
}  // namespace

void Communicator::reduce_scatter_sum(void* data, const std::vector<int64_t>& counts, DType dtype) {
  check_reduce_dtype(dtype);
  parts_total("reduce_scatter_sum", counts, size(), data);
  run_blocking([&] { do_reduce_scatter_sum(data, counts, dtype); });
}

void Communicator::all_gather_parts(void* data, const std::vector<int64_t>& counts, DType dtype) {
  parts_total("all_gather_parts", counts, size(), data);
  run_blocking([&] { do_all_gather_parts(data, counts, dtype); });
}

void Communicator::do_reduce_scatter_sum(void* data, const std::vector<int64_t>& counts, DType dtype) {
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  do_all_reduce_sum(data, total, dtype);
}

void Communicator::do_all_gather_parts(void* data, const std::vector<int64_t>& counts, DType dtype) {
  const size_t es = dtype_size(dtype);
  size_t off = 0;
  for (int r = 0; r < size(); ++r) {
    do_broadcast(static_cast<char*>(data) + off, size_t(counts[size_t(r)]) * es, r);
    off += size_t(counts[size_t(r)]) * es;
  }
}

Communicator::Handle Communicator::start_reduce_scatter_sum(void* data, std::vector<int64_t> counts, DType dtype) {
  check_reduce_dtype(dtype);
  const int64_t total = parts_total("start_reduce_scatter_sum", counts, size(), data);
  return enqueue(Task{0, data, total, dtype, std::move(counts)});
}

Communicator::Handle Communicator::enqueue(Task t) {
  std::lock_guard<std::mutex> lk(mu_);
  check_usable();
  if (!thread_.joinable()) thread_ = std::thread([this] { comm_thread_main(); });
  t.id = next_id_++;
  const uint64_t id = t.id;
  queue_.push_back(std::move(t));
  results_[id] = Result{};
  cv_.notify_all();
  return Handle{id};
}

Communicator::Handle Communicator::start_all_reduce_sum(void* data, int64_t count, DType dtype) {
  check_reduce_dtype(dtype);
  if (count < 0) fail("start_all_reduce_sum: negative count {}", count);
  if (count > 0 && !data) fail("start_all_reduce_sum: null buffer for {} elements", count);
  return enqueue(Task{0, data, count, dtype, {}});
}

void Communicator::comm_thread_main() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop requested and nothing left
    Task t = queue_.front();
    queue_.pop_front();
    busy_ = true;
    std::string failed = failed_;
    lk.unlock();
    std::exception_ptr error;
    if (!failed.empty()) {
      error = std::make_exception_ptr(
          Error(fmt::format("{}: unusable after an earlier error: {}", describe(), failed)));
    } else {
      try {
        if (t.counts.empty()) do_all_reduce_sum(t.data, t.count, t.dtype);
        else do_reduce_scatter_sum(t.data, t.counts, t.dtype);
      } catch (const std::exception& e) {
        error = std::current_exception();
        {
          std::lock_guard<std::mutex> g(mu_);
          if (failed_.empty()) failed_ = e.what();
        }
        abort(e.what());
      } catch (...) {
        error = std::current_exception();
        std::lock_guard<std::mutex> g(mu_);
        if (failed_.empty()) failed_ = "unknown exception in an all-reduce";
      }
    }
    lk.lock();
    auto it = results_.find(t.id);
    if (it != results_.end()) {
      it->second.done = true;
      it->second.error = error;
    }
    busy_ = false;
    cv_.notify_all();
  }
}

void Communicator::wait(Handle h) {
  if (h.id == 0) return;
  auto t0 = std::chrono::steady_clock::now();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = results_.find(h.id);
    if (it == results_.end()) {
      if (h.id >= next_id_) fail("wait: handle {} was never started on {}", h.id, describe());
      return;  // already waited
    }
    // Bounded: every queued all-reduce obeys the timeout, and after an error the rest fail at once.
    cv_.wait(lk, [&] { return it->second.done; });
    error = it->second.error;
    results_.erase(it);
  }
  wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  if (error) std::rethrow_exception(error);
}

void Communicator::wait_all() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [id, r] : results_) ids.push_back(id);
  }
  std::exception_ptr first;
  for (uint64_t id : ids) {
    try {
      wait(Handle{id});
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void Communicator::leave() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
  }
  do_leave();
}

double Communicator::comm_wait_ms() const { return wait_ns_.load() / 1e6; }
void Communicator::reset_comm_wait_ms() { wait_ns_ = 0; }

// ---------------------------------------------------------------------------------------------
// In-process world: replicas are threads; one LocalGroup holds their rendezvous.

namespace {

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<LocalGroup> group, int rank, CommOptions opts)
      : Communicator(opts), group_(std::move(group)), rank_(rank) {}
  ~InProcessCommunicator() override {
    stop_comm_thread();
    group_->leave(rank_, true);
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string describe() const override { return fmt::format("in-process replica {} of {}", rank_, size()); }
  void abort(const std::string& reason) override { group_->abort(reason); }
  bool aborted(std::string* reason) const override { return group_->aborted(reason); }

 protected:
  void do_all_reduce_sum(void* data, int64_t count, DType dtype) override {
    CollectiveCall c = next("all_reduce");
    c.count = count;
    c.dtype = dtype;
    c.data = data;
    group_->arrive(rank_, c);
    int n = size();
    if (n == 1) {
      group_->sync(rank_);
      return;
    }
    // Each replica sums its slice of the elements over all replicas, in replica order, and writes
    // the sum into every replica's buffer: the result is the same bits everywhere.
    std::vector<void*> bufs(n);
    for (int j = 0; j < n; ++j) bufs[j] = group_->call(j).data;
    int64_t lo, hi;
    reduce_slice(count, n, rank_, &lo, &hi);
    sum_range(bufs, bufs, lo, hi, dtype);
    group_->sync(rank_);
  }

  // As do_all_reduce_sum's slices, each replica summing its slice of the range, but each element
  // written only into the buffer of the replica whose part holds it: the same bits, 1/N the writes.
  void do_reduce_scatter_sum(void* data, const std::vector<int64_t>& counts, DType dtype) override {
    int64_t count = 0;
    for (int64_t n : counts) count += n;
    CollectiveCall c = next("reduce_scatter");
    c.count = count;
    c.dtype = dtype;
    c.data = data;
    group_->arrive(rank_, c);
    const int n = size();
    if (n > 1) {
      std::vector<void*> bufs(n);
      for (int j = 0; j < n; ++j) bufs[j] = group_->call(j).data;
      int64_t lo, hi;
      reduce_slice(count, n, rank_, &lo, &hi);
      int64_t part_lo = 0;
      for (int owner = 0; owner < n; ++owner) {
        const int64_t part_hi = part_lo + counts[size_t(owner)];
        const int64_t a = std::max(lo, part_lo), b = std::min(hi, part_hi);
        if (a < b) sum_range(bufs, {bufs[owner]}, a, b, dtype);
        part_lo = part_hi;
      }
    }
    group_->sync(rank_);
  }

  // Every replica copies the other replicas' parts out of their buffers.
  void do_all_gather_parts(void* data, const std::vector<int64_t>& counts, DType dtype) override {
    CollectiveCall c = next("all_gather_parts");
    c.count = 0;
    for (int64_t k : counts) c.count += k;
    c.data = data;
    group_->arrive(rank_, c);
    const size_t es = dtype_size(dtype);
    size_t off = 0;
    for (int j = 0; j < size(); ++j) {
      const size_t bytes = size_t(counts[size_t(j)]) * es;
      if (j != rank_ && bytes) std::memcpy(static_cast<char*>(data) + off, static_cast<const char*>(group_->call(j).data) + off, bytes);
      off += bytes;
    }
    group_->sync(rank_);
  }

  void do_broadcast(void* data, size_t bytes, int root) override {
    CollectiveCall c = next("broadcast");
    c.count = static_cast<int64_t>(bytes);
    c.root = root;
    c.data = data;
    group_->arrive(rank_, c);
    const void* src = group_->call(root).data;
    if (rank_ != root && bytes) std::memmove(data, src, bytes);
    group_->sync(rank_);
  }

  void do_all_gather_bytes(const void* mine, size_t bytes, std::vector<std::vector<uint8_t>>& all) override {
    CollectiveCall c = next("all_gather");
    c.cdata = mine;
    c.bytes = bytes;
    group_->arrive(rank_, c);
    all.assign(size(), {});
    for (int j = 0; j < size(); ++j) {
      const auto* p = static_cast<const uint8_t*>(group_->call(j).cdata);
      all[j].assign(p, p + group_->call(j).bytes);
    }
    group_->sync(rank_);
  }

  void do_barrier() override {
    group_->arrive(rank_, next("barrier"));
    group_->sync(rank_);
  }

  void do_idle_barrier() override {
    CollectiveCall c = next("idle_barrier");
    c.untimed = true;
    group_->arrive(rank_, c);
    group_->sync(rank_);
  }

  void do_leave() override { group_->leave(rank_, true); }
  void do_rejoin() override { group_->leave(rank_, false); }

 private:
  CollectiveCall next(const char* op) {
    CollectiveCall c;
    c.op = op;
    c.index = ++calls_;
    return c;
  }

  std::shared_ptr<LocalGroup> group_;
  int rank_;
  uint64_t calls_ = 0;  // collectives this replica made (asynchronous ones included)
};

int env_int(const char* name, bool* present) {
  const char* v = std::getenv(name);
  *present = v && *v;
  if (!*present) return 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30)) fail("environment variable {}={} is not a process count or rank", name, v);
  return static_cast<int>(x);
}

}  // namespace

CommWorld make_in_process_world(int n, CommOptions opts) {
  if (n < 1) fail("a world needs at least one replica, got {}", n);
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(fmt::format("replica {}", i));
  auto group = std::make_shared<LocalGroup>(n, opts, names);
  CommWorld world;
  for (int i = 0; i < n; ++i) world.push_back(std::make_unique<InProcessCommunicator>(group, i, opts));
  return world;
}

int slurm_tasks_on_node(const std::string& list, int node) {
  int first = 0;  // the index of the node the current item starts at
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(at, end - at);
    int count = 0, repeat = 1;
    if (std::sscanf(item.c_str(), "%d(x%d)", &count, &repeat) < 1 || count < 0 || repeat < 1) return 0;
    if (node < first + repeat) return node >= first ? count : 0;
    first += repeat;
    at = end + 1;
  }
  return 0;
}

LaunchInfo detect_launch() {
  LaunchInfo li;
  bool has_size, has_rank, has_local, has_local_size;
  // The first of these names that is set: the local rank and local size.
  auto local = [&](std::initializer_list<const char*> ranks, std::initializer_list<const char*> sizes) {
    for (const char* r : ranks)
      if (int v = env_int(r, &has_local); has_local) {
        li.local_rank = v;
        break;
      }
    for (const char* s : sizes)
      if (int v = env_int(s, &has_local_size); has_local_size) {
        li.local_size = std::max(1, v);
        break;
      }
  };
  // Slurm's local rank and the node's task count (srun, also under --mpi=pmi2).
  auto slurm_local = [&] {
    local({"SLURM_LOCALID"}, {"SLURM_NTASKS_PER_NODE"});
    if (!has_local_size) {
      bool has_node;
      const int node = env_int("SLURM_NODEID", &has_node);
      for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
        if (const char* v = std::getenv(name); v && *v)
          if (int n = slurm_tasks_on_node(v, node); n > 0) {
            li.local_size = n;
            break;
          }
    }
  };
  // onnxdp's own worker processes (parallel/workers.h): every worker on this machine.
  int size = env_int("ONNXDP_WORKER_SIZE", &has_size);
  int rank = env_int("ONNXDP_WORKER_RANK", &has_rank);
  if (has_size) {
    li.launched = li.self_launched = true, li.rank = rank, li.size = size;
    li.local_rank = rank, li.local_size = std::max(1, size);
    li.launcher = fmt::format("onnxdp worker processes (ONNXDP_WORKER_SIZE={})", size);
    if (!has_rank || li.size < 1 || li.rank >= li.size)
      fail("launcher environment is inconsistent: {} says rank {} of {}", li.launcher,
           has_rank ? std::to_string(rank) : std::string("(none)"), size);
    return li;
  }
  // Open MPI's mpirun/mpiexec.
  size = env_int("OMPI_COMM_WORLD_SIZE", &has_size);
  rank = env_int("OMPI_COMM_WORLD_RANK", &has_rank);
  if (has_size) {
    li.launched = true, li.rank = rank, li.size = size;
    li.launcher = fmt::format("Open MPI (OMPI_COMM_WORLD_SIZE={})", size);
    local({"OMPI_COMM_WORLD_LOCAL_RANK"}, {"OMPI_COMM_WORLD_LOCAL_SIZE"});
  } else {
    // PMI: MPICH's Hydra, MVAPICH, srun --mpi=pmi2.
    size = env_int("PMI_SIZE", &has_size);
    rank = env_int("PMI_RANK", &has_rank);
    if (has_size) {
      li.launched = true, li.rank = rank, li.size = size;
      li.launcher = fmt::format("PMI (PMI_SIZE={})", size);
      local({"MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK"}, {"MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"});
      if (!has_local && !has_local_size) slurm_local();
    } else {
      // srun sets SLURM_STEP_ID and SLURM_STEP_NUM_TASKS for each task; a batch script alone has
      // SLURM_NTASKS and SLURM_PROCID too but is one process, not a launch.
      bool in_step;
      env_int("SLURM_STEP_ID", &in_step);
      size = env_int("SLURM_STEP_NUM_TASKS", &has_size);
      if (!has_size && in_step) size = env_int("SLURM_NTASKS", &has_size);
      rank = env_int("SLURM_PROCID", &has_rank);
      if (has_size) {
        li.launched = true, li.rank = rank, li.size = size;
        li.launcher = fmt::format("Slurm srun ({} tasks)", size);
        slurm_local();
      }
    }
  }
  if (li.launched && (li.size < 1 || li.rank >= li.size))
    fail("launcher environment is inconsistent: {} says rank {} of {}", li.launcher, li.rank, li.size);
  if (li.launched && (li.local_size > li.size || li.local_rank >= li.local_size))
    fail("launcher environment is inconsistent: {} says local rank {} of {} processes on this machine ({} in all)",
         li.launcher, li.local_rank, li.local_size, li.size);
  return li;
}

#if !ONNXDP_HAVE_MPI
bool mpi_built() { return false; }
CommWorld make_mpi_world(int, CommOptions) {
  fail("this onnxdp was built without MPI (CMake did not find it): install libopenmpi-dev and rebuild");
}
#endif

CommWorld make_world(int local_replicas, CommOptions opts) {
  LaunchInfo li = detect_launch();
  if (li.self_launched) return make_worker_world(local_replicas, opts);
  if (li.launched) {
    if (mpi_built()) return make_mpi_world(local_replicas, opts);
    if (li.size > 1)
      fail("started as rank {} of {} by {}, but this onnxdp was built without MPI: the processes could not "
           "talk to each other (install libopenmpi-dev and rebuild, or run without the launcher)",
           li.rank, li.size, li.launcher);
  }
  return make_in_process_world(local_replicas, opts);
}

void run_replicas(CommWorld& world, const std::function<void(Communicator&)>& body) {
  std::mutex mu;
  std::exception_ptr first;
  // A world may run several times (e.g. once per phase): replicas that left the last run come back.
  for (auto& c : world) c->rejoin();
  std::vector<std::thread> threads;
  threads.reserve(world.size());
  for (size_t i = 0; i < world.size(); ++i) {
    threads.emplace_back([&, i] {
      Communicator& comm = *world[i];
      try {
        body(comm);
        // Peers still waiting for this replica in a collective fail at once, not at the timeout.
        comm.leave();
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
        }
        comm.abort(fmt::format("replica {} failed: {}", comm.rank(), e.what()));
      } catch (...) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
        }
        comm.abort(fmt::format("replica {} failed with an unknown exception", comm.rank()));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace onnxdp
