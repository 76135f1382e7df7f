// The kernels' thread teams (exec/cpu/threads.h).
#include "exec/cpu/threads.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace onnxdp {

namespace {

using Clock = std::chrono::steady_clock;

int default_threads() {
  static const int threads = [] {
    if (const char* v = std::getenv("OMP_NUM_THREADS")) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && n > 0) return int(std::min(n, 4096L));
    }
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return threads;
}

thread_local int tl_threads = 0;  // 0: default_threads()
thread_local bool tl_in_share = false;

// Waits until `value` differs from `seen` and returns it: watching it for kThreadSpin, yielding
// the core between looks, then asleep (counted in `sleepers`, so that a changer knows to wake it).
uint32_t await_change(const std::atomic<uint32_t>& value, uint32_t seen, std::atomic<int>& sleepers) {
  const auto spin_until = Clock::now() + kThreadSpin;
  for (int i = 1;; ++i) {
    const uint32_t now = value.load(std::memory_order_acquire);
    if (now != seen) return now;
    if (i % 16 == 0 && Clock::now() >= spin_until) break;
    std::this_thread::yield();
  }
  // The changer stores the value, then reads `sleepers`; this counts itself in `sleepers`, then
  // reads the value (all sequentially consistent): one of the two sees the other's write.
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  uint32_t now;
  while ((now = value.load(std::memory_order_seq_cst)) == seen) value.wait(seen, std::memory_order_seq_cst);
  sleepers.fetch_sub(1, std::memory_order_relaxed);
  return now;
}

void wake_sleepers(std::atomic<uint32_t>& value, const std::atomic<int>& sleepers) {
  if (sleepers.load(std::memory_order_seq_cst) > 0) value.notify_all();
}

// A thread's helpers. A call is posted by filling in the job and advancing `epoch_`; every helper
// (taking part or not) then counts itself in `done_`, and the caller returns when all have, so
// the next call can reuse the job's fields.
class Team {
 public:
  explicit Team(int threads) {
    helpers_.reserve(size_t(threads - 1));
    for (int w = 1; w < threads; ++w) helpers_.emplace_back([this, w] { helper(w); });
  }
  ~Team() {
    stop_ = true;
    post();
    for (std::thread& h : helpers_) h.join();
  }
  int size() const { return int(helpers_.size()) + 1; }

  void run(int n, void (*share)(const void*, int, int), const void* ctx) {
    share_ = share;
    ctx_ = ctx;
    n_ = n;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    post();
    tl_in_share = true;
    try {
      share(ctx, 0, n);
    } catch (...) {
      keep_error();
    }
    tl_in_share = false;
    const uint32_t all = uint32_t(helpers_.size());
    for (uint32_t d = done_.load(std::memory_order_acquire); d != all;) d = await_change(done_, d, caller_sleeping_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void post() {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    wake_sleepers(epoch_, sleepers_);
  }
  void keep_error() {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  void helper(int w) {
    tl_in_share = true;  // a helper runs only shares: its own run_shares calls run inline
    uint32_t seen = 0;
    for (;;) {
      seen = await_change(epoch_, seen, sleepers_);
      if (stop_) return;
      if (w < n_) {
        try {
          share_(ctx_, w, n_);
        } catch (...) {
          keep_error();
        }
      }
      done_.fetch_add(1, std::memory_order_seq_cst);
      wake_sleepers(done_, caller_sleeping_);
    }
  }

  std::vector<std::thread> helpers_;
  // The job, written by the caller before it advances epoch_, read by helpers after they see it.
  void (*share_)(const void*, int, int) = nullptr;
  const void* ctx_ = nullptr;
  int n_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex error_mutex_;
  std::atomic<uint32_t> epoch_{0}, done_{0};
  std::atomic<int> sleepers_{0}, caller_sleeping_{0};
};

thread_local std::unique_ptr<Team> tl_team;

// A child of fork() has only the thread that forked: that thread's team, if it had one, lists
// helpers that do not exist there. The child forgets it (without joining) and builds a new one.
void forget_team_in_child() { (void)tl_team.release(); }
const bool fork_handler = (pthread_atfork(nullptr, nullptr, forget_team_in_child), true);

}  // namespace

int cpu_threads() { return tl_threads > 0 ? tl_threads : default_threads(); }

void set_cpu_threads(int threads) { tl_threads = std::max(1, threads); }

bool in_thread_share() { return tl_in_share; }

namespace detail {
void run_shares(int threads, void (*share)(const void*, int, int), const void* ctx) {
  const int size = cpu_threads(), n = std::min(threads, size);
  if (n < 2 || tl_in_share) {
    struct InShare {  // restores the flag however the share ends
      bool before = tl_in_share;
      InShare() { tl_in_share = true; }
      ~InShare() { tl_in_share = before; }
    } in_share;
    return share(ctx, 0, 1);
  }
  if (!tl_team || tl_team->size() != size) {
    tl_team.reset();
    tl_team = std::make_unique<Team>(size);
  }
  tl_team->run(n, share, ctx);
}
}  // namespace detail

}  // namespace onnxdp
