#include "parallel/workers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "graph/error.h"
#include "parallel/local_group.h"

namespace onnxdp {

// ---------------------------------------------------------------------------------------------
// The communicator: a star through worker 0.
//
// Every collective starts with each worker k > 0 sending worker 0 a Header naming the call; worker 0
// reads them in worker order, checks they name its own call (else every worker fails with the first
// difference), and answers each with the result. Payloads follow their header; sizes are in bytes.

namespace {

enum class Op : uint32_t { all_reduce = 1, broadcast, all_gather, barrier, idle_barrier };

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce: return "all_reduce";
    case Op::broadcast: return "broadcast";
    case Op::all_gather: return "all_gather";
    case Op::barrier: return "barrier";
    case Op::idle_barrier: return "idle_barrier";
  }
  return "?";
}

struct Header {
  uint32_t magic = 0x6f6e7864;  // "onxd": a stray byte stream is not taken for a call
  Op op = Op::barrier;
  uint64_t index = 0;  // the caller's collective number, 1-based
  int64_t count = 0;   // all_reduce: elements; broadcast: bytes
  int32_t dtype = 0;
  int32_t root = -1;
  uint64_t bytes = 0;  // all_gather: this worker's blob (may differ between workers)
};

std::string describe(const Header& h) {
  switch (h.op) {
    case Op::all_reduce:
      return fmt::format("{} #{} ({} {})", op_name(h.op), h.index, h.count, dtype_name(DType(h.dtype)));
    case Op::broadcast: return fmt::format("{} #{} ({} bytes from replica {})", op_name(h.op), h.index, h.count, h.root);
    default: return fmt::format("{} #{}", op_name(h.op), h.index);
  }
}

class WorkerCommunicator final : public Communicator {
 public:
  WorkerCommunicator(int rank, int size, std::vector<int> fds, CommOptions opts)
      : Communicator(opts), rank_(rank), size_(size), fds_(std::move(fds)) {
    const size_t want = rank == 0 ? size_t(size - 1) : 1;
    if (size < 1 || rank < 0 || rank >= size || fds_.size() != want)
      fail("worker {} of {}: expected {} socket(s) to the other workers, got {}", rank, size, want, fds_.size());
  }
  ~WorkerCommunicator() override {
    stop_comm_thread();
    for (int fd : fds_) ::close(fd);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return fmt::format("worker process {} of {}", rank_, size_); }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lk(abort_mu_);
      if (aborted_) return;
      abort_reason_ = reason;
      aborted_ = true;
    }
    // The other workers learn at once (their reads end), not when this process exits.
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  bool aborted(std::string* reason) const override {
    if (!aborted_) return false;
    std::lock_guard<std::mutex> lk(abort_mu_);
    if (reason) *reason = abort_reason_;
    return true;
  }

 protected:
  void do_all_reduce_sum(void* data, int64_t count, DType dtype) override {
    Header h = next(Op::all_reduce);
    h.count = count;
    h.dtype = int32_t(dtype);
    const size_t bytes = size_t(count) * dtype_size(dtype);
    if (rank_ != 0) {
      send(0, &h, sizeof h, h);
      send(0, data, bytes, h);
      recv(0, data, bytes, h);
      return;
    }
    // Worker 0 sums in worker order (((x0 + x1) + x2) + …): the bits of the in-process world.
    std::vector<std::vector<uint8_t>> theirs(size_t(size_ - 1), std::vector<uint8_t>(bytes));
    std::vector<void*> bufs{data};
    for (int k = 1; k < size_; ++k) {
      expect(k, h);
      recv(k, theirs[size_t(k - 1)].data(), bytes, h);
      bufs.push_back(theirs[size_t(k - 1)].data());
    }
    sum_range(bufs, {data}, 0, count, dtype);
    for (int k = 1; k < size_; ++k) send(k, data, bytes, h);
  }

  void do_broadcast(void* data, size_t bytes, int root) override {
    Header h = next(Op::broadcast);
    h.count = int64_t(bytes);
    h.root = root;
    if (rank_ != 0) {
      send(0, &h, sizeof h, h);
      if (rank_ == root) send(0, data, bytes, h);
      else recv(0, data, bytes, h);
      return;
    }
    for (int k = 1; k < size_; ++k) expect(k, h);
    if (root != 0) recv(root, data, bytes, h);
    for (int k = 1; k < size_; ++k)
      if (k != root) send(k, data, bytes, h);
  }

  void do_all_gather_bytes(const void* mine, size_t bytes, std::vector<std::vector<uint8_t>>& all) override {
    Header h = next(Op::all_gather);
    h.bytes = bytes;
    all.assign(size_t(size_), {});
    if (rank_ != 0) {
      send(0, &h, sizeof h, h);
      send(0, mine, bytes, h);
      std::vector<uint64_t> sizes(static_cast<size_t>(size_));
      recv(0, sizes.data(), sizes.size() * sizeof(uint64_t), h);
      for (int k = 0; k < size_; ++k) {
        if (sizes[size_t(k)] > (uint64_t(1) << 40)) fail("{}: {} from worker 0 is garbled", describe(), ::onnxdp::describe(h));
        all[size_t(k)].resize(sizes[size_t(k)]);
        recv(0, all[size_t(k)].data(), all[size_t(k)].size(), h);
      }
      return;
    }
    const auto* p = static_cast<const uint8_t*>(mine);
    all[0].assign(p, p + bytes);
    std::vector<uint64_t> sizes{bytes};
    for (int k = 1; k < size_; ++k) {
      const Header theirs = expect(k, h);
      all[size_t(k)].resize(theirs.bytes);
      recv(k, all[size_t(k)].data(), theirs.bytes, h);
      sizes.push_back(theirs.bytes);
    }
    for (int k = 1; k < size_; ++k) {
      send(k, sizes.data(), sizes.size() * sizeof(uint64_t), h);
      for (const auto& blob : all) send(k, blob.data(), blob.size(), h);
    }
  }

  void do_barrier() override { barrier_of(next(Op::barrier)); }
  void do_idle_barrier() override { barrier_of(next(Op::idle_barrier)); }

 private:
  Header next(Op op) {
    Header h;
    h.op = op;
    h.index = ++calls_;
    return h;
  }

  void barrier_of(const Header& h) {
    uint8_t ack = 1;
    if (rank_ != 0) {
      send(0, &h, sizeof h, h);
      recv(0, &ack, 1, h);
      return;
    }
    for (int k = 1; k < size_; ++k) expect(k, h);
    for (int k = 1; k < size_; ++k) send(k, &ack, 1, h);
  }

  // Worker 0: reads worker k's header and checks it names the same call as h (all_gather's sizes
  // may differ). Returns it.
  Header expect(int k, const Header& h) {
    Header theirs;
    recv(k, &theirs, sizeof theirs, h);
    if (theirs.magic != h.magic)
      fail("{}: worker {} sent garbled data instead of {}", describe(), k, ::onnxdp::describe(h));
    if (theirs.op != h.op || theirs.index != h.index || theirs.count != h.count || theirs.dtype != h.dtype ||
        theirs.root != h.root)
      fail("collective mismatch: worker {} called {} where worker 0 called {} (every replica must make the same "
           "collectives in the same order)",
           k, ::onnxdp::describe(theirs), ::onnxdp::describe(h));
    return theirs;
  }

  // The socket to worker `peer` (worker 0's list is in worker order; the others have one, to 0).
  int fd_of(int peer) const { return rank_ == 0 ? fds_[size_t(peer - 1)] : fds_[0]; }

  void send(int peer, const void* data, size_t bytes, const Header& h) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
      wait_ready(peer, POLLOUT, h);
      const ssize_t n = ::send(fd_of(peer), p, std::min<size_t>(bytes, 1 << 20), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) lost(peer, h, errno);
      p += n;
      bytes -= size_t(n);
    }
  }

  void recv(int peer, void* data, size_t bytes, const Header& h) {
    auto* p = static_cast<uint8_t*>(data);
    while (bytes > 0) {
      wait_ready(peer, POLLIN, h);
      const ssize_t n = ::recv(fd_of(peer), p, bytes, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) lost(peer, h, n == 0 ? 0 : errno);
      p += n;
      bytes -= size_t(n);
    }
  }

  // Polls the peer's socket until it is ready for `events`; ends on abort, and on the timeout
  // unless the call is an idle barrier (the other workers wait for worker 0's evaluation or
  // checkpoint as long as it takes; a dead worker still ends it: its socket closes).
  void wait_ready(int peer, short events, const Header& h) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      std::string reason;
      if (aborted(&reason)) fail("{} aborted: {}", ::onnxdp::describe(h), reason);
      pollfd p{fd_of(peer), events, 0};
      const int r = ::poll(&p, 1, 50);
      if (r > 0) return;  // ready, or closed / failed: the read or write says which
      if (r < 0 && errno != EINTR) fail("{}: poll failed in {}: {}", describe(), ::onnxdp::describe(h), std::strerror(errno));
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (h.op != Op::idle_barrier && waited >= options().timeout_s)
        fail("{}: worker {} did not reach {} within {}: it may have died or be stuck", describe(), peer,
             ::onnxdp::describe(h), format_seconds(options().timeout_s));
    }
  }

  [[noreturn]] void lost(int peer, const Header& h, int err) {
    std::string reason;
    if (aborted(&reason)) fail("{} aborted: {}", ::onnxdp::describe(h), reason);
    fail("{}: worker {} closed its connection during {}: it has {} (its own error, if any, is printed above)",
         describe(), peer, ::onnxdp::describe(h),
         err ? fmt::format("failed ({})", std::strerror(err)) : std::string("died, failed or finished early"));
  }

  int rank_, size_;
  std::vector<int> fds_;
  uint64_t calls_ = 0;
  mutable std::mutex abort_mu_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
};

// "5,6,7" -> {5, 6, 7}; empty on anything else.
std::vector<int> parse_fds(const char* s) {
  std::vector<int> fds;
  if (!s) return fds;
  const std::string text = s;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos) return {};
    fds.push_back(std::stoi(item));
    at = end + 1;
  }
  return fds;
}

}  // namespace

std::unique_ptr<Communicator> make_worker_communicator(int rank, int size, std::vector<int> fds, CommOptions opts) {
  return std::make_unique<WorkerCommunicator>(rank, size, std::move(fds), opts);
}

CommWorld make_worker_world(int local_replicas, CommOptions opts) {
  const LaunchInfo li = detect_launch();
  if (!li.self_launched) fail("make_worker_world: this process was not started by onnxdp as a worker");
  if (local_replicas != 1)
    fail("worker process {} of {} drives one device, but was given {} replicas", li.rank, li.size, local_replicas);
  std::vector<int> fds = parse_fds(std::getenv("ONNXDP_WORKER_FDS"));
  for (int fd : fds)
    if (::fcntl(fd, F_GETFD) < 0) fds.clear();
  if (fds.size() != size_t(li.rank == 0 ? li.size - 1 : 1))
    fail("worker process {} of {}: ONNXDP_WORKER_FDS='{}' does not name its sockets to the other workers (set only "
         "by onnxdp when it starts workers)",
         li.rank, li.size, std::getenv("ONNXDP_WORKER_FDS") ? std::getenv("ONNXDP_WORKER_FDS") : "");
  for (int fd : fds) ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // not inherited by anything this worker starts
  CommWorld world;
  world.push_back(make_worker_communicator(li.rank, li.size, std::move(fds), opts));
  return world;
}

// ---------------------------------------------------------------------------------------------
// The parent: start, watch, stop.

namespace {

std::atomic<int> g_forward_signal{0};
void remember_signal(int sig) { g_forward_signal = sig; }

std::string self_executable() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) fail("cannot find this executable (/proc/self/exe) to start worker processes: {}", std::strerror(errno));
  return std::string(buf.data(), size_t(n));
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

int worker_to_name(const std::vector<std::pair<int, int>>& ended) {
  int named = -1;
  for (size_t i = 0; i < ended.size(); ++i) {
    const int status = ended[i].second;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (named < 0 || (WIFSIGNALED(status) && !WIFSIGNALED(ended[size_t(named)].second))) named = int(i);
  }
  return named;
}

int run_worker_processes(int n, const std::vector<std::string>& argv, double grace_s) {
  if (n < 2) fail("worker processes: expected at least 2, got {}", n);
  if (argv.empty()) fail("worker processes: no command line");
  const std::string exe = self_executable();

  // Sockets: pair k - 1 joins worker 0 (end 0) and worker k (end 1).
  std::vector<std::array<int, 2>> pairs(static_cast<size_t>(n - 1));
  for (auto& p : pairs)
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.data()) != 0)
      fail("worker processes: socketpair failed: {}", std::strerror(errno));

  // Everything a child needs is made before fork (only async-signal-safe calls after it).
  std::vector<std::vector<std::string>> envs(static_cast<size_t>(n));
  std::vector<std::vector<int>> keep(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    if (k == 0)
      for (auto& p : pairs) keep[0].push_back(p[0]);
    else
      keep[size_t(k)].push_back(pairs[size_t(k - 1)][1]);
    std::string fds;
    for (int fd : keep[size_t(k)]) {
      if (!fds.empty()) fds += ',';
      fds += std::to_string(fd);
    }
    for (char** e = ::environ; *e; ++e)
      if (std::strncmp(*e, "ONNXDP_WORKER_", 14) != 0) envs[size_t(k)].push_back(*e);
    envs[size_t(k)].push_back("ONNXDP_WORKER_RANK=" + std::to_string(k));
    envs[size_t(k)].push_back("ONNXDP_WORKER_SIZE=" + std::to_string(n));
    envs[size_t(k)].push_back("ONNXDP_WORKER_FDS=" + fds);
  }
  auto pointers = [](std::vector<std::string>& v) {
    std::vector<char*> p;
    for (auto& s : v) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
  };
  std::vector<std::string> args = argv;
  args[0] = exe;
  std::vector<char*> arg_ptrs = pointers(args);
  std::vector<std::vector<char*>> env_ptrs;
  for (auto& e : envs) env_ptrs.push_back(pointers(e));

  // The parent forwards these to the workers instead of dying of them first.
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {}, old_hup {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);

  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  for (int k = 0; k < n; ++k) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      fail("worker processes: fork failed for worker {}: {}", k, std::strerror(errno));
    }
    if (pid == 0) {
      // The child: default signal actions, dies with the parent, keeps its sockets, becomes onnxdp.
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(1);
      for (int fd : keep[size_t(k)]) ::fcntl(fd, F_SETFD, 0);
      ::execve(exe.c_str(), arg_ptrs.data(), env_ptrs[size_t(k)].data());
      _exit(127);
    }
    pids[size_t(k)] = pid;
  }
  for (auto& p : pairs) ::close(p[0]), ::close(p[1]);

  // Watch: the first failure is reported and returned; the others get grace_s to end on their own.
  int running = n, first_status = 0, first_failed = -1;
  std::vector<bool> done(static_cast<size_t>(n), false);
  auto deadline = std::chrono::steady_clock::time_point::max();
  bool termed = false, killed = false;
  while (running > 0) {
    if (const int sig = g_forward_signal.exchange(0)) {
      for (int k = 0; k < n; ++k)
        if (!done[size_t(k)]) ::kill(pids[size_t(k)], sig);
    }
    // Every worker that has ended since the last look; the first failure among them is named by
    // worker_to_name. One that is no signal waits 50 ms more for a killed worker before it is.
    std::vector<std::pair<int, int>> ended;
    pid_t pid = 0;
    const auto reap = [&] {
      int status = 0;
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        int k = 0;
        while (k < n && pids[size_t(k)] != pid) ++k;
        if (k == n) continue;
        done[size_t(k)] = true;
        --running;
        ended.emplace_back(k, status);
      }
    };
    reap();
    int named = worker_to_name(ended);
    if (named >= 0 && first_failed < 0 && !WIFSIGNALED(ended[size_t(named)].second) && running > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      reap();
      named = worker_to_name(ended);
    }
    if (named >= 0 && first_failed < 0) {
      const int cause = ended[size_t(named)].first, cause_status = ended[size_t(named)].second;
      first_failed = cause;
      first_status = WIFEXITED(cause_status) ? WEXITSTATUS(cause_status) : 128 + WTERMSIG(cause_status);
      if (first_status == 0) first_status = 1;
      std::fprintf(stderr, "onnxdp: worker %d of %d (pid %d) %s%s\n", cause, n, int(pids[size_t(cause)]),
                   exit_text(cause_status).c_str(), running ? "; stopping the other workers" : "");
      deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(grace_s));
    }
    if (!ended.empty()) continue;
    if (pid < 0 && errno != EINTR) break;  // no children left
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline && !termed) {
      for (int k = 0; k < n; ++k)
        if (!done[size_t(k)]) ::kill(pids[size_t(k)], SIGTERM);
      termed = true;
      deadline = now + std::chrono::seconds(5);
    } else if (now >= deadline && !killed) {
      for (int k = 0; k < n; ++k)
        if (!done[size_t(k)]) ::kill(pids[size_t(k)], SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  return first_failed < 0 ? 0 : first_status;
}

}  // namespace onnxdp
