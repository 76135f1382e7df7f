// The kernels' thread teams (exec/cpu/threads.h).
#include "exec/cpu/threads.h"

#include <pthread.h>
#include <sched.h>

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

constexpr int kMaxThreads = 4096;  // a team's size, and a call's share count, fit in 16 bits

int default_threads() {
  static const int threads = [] {
    if (const char* v = std::getenv("OMP_NUM_THREADS")) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n > 0) return int(std::min<long>(n, kMaxThreads));  // as exec/device.cpp reads it
    }
    return available_cores();
  }();
  return threads;
}

thread_local int tl_threads = 0;  // 0: default_threads()
thread_local bool tl_in_share = false;

// Waits until `value` differs from `seen` and returns it: watching it for kThreadSpin (with
// `spin`), yielding the core between looks, then asleep (counted in `sleepers`, so that a changer
// knows to wake it).
uint32_t await_change(const std::atomic<uint32_t>& value, uint32_t seen, std::atomic<int>& sleepers, bool spin) {
  if (spin) {
    const auto spin_until = Clock::now() + kThreadSpin;
    for (int i = 1;; ++i) {
      const uint32_t now = value.load(std::memory_order_acquire);
      if (now != seen) return now;
      if (i % 16 == 0 && Clock::now() >= spin_until) break;
      std::this_thread::yield();
    }
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

// A thread's helpers. A call fills in the job and publishes it in `next_`: the call's number, the
// next share not yet claimed, and the share count. Whoever runs shares (a helper, or the caller
// once its own share 0 is done) claims the next one there, so a helper that is slow to wake (asleep,
// or waiting for a core) leaves its share to the others instead of holding up the call. A share is
// only claimed while its call is the current one, and the call returns only when every claimed
// share has finished, so the job's fields are stable while anyone reads them.
class Team {
 public:
  Team(int threads, bool spin) : spin_(spin) {
    helpers_.reserve(size_t(threads - 1));
    for (int w = 1; w < threads; ++w) helpers_.emplace_back([this] { helper(); });
  }
  ~Team() {
    stop_.store(true, std::memory_order_relaxed);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    epoch_.notify_all();
    for (std::thread& h : helpers_) h.join();
  }
  int size() const { return int(helpers_.size()) + 1; }

  void run(int n, void (*share)(const void*, int, int), const void* ctx) {
    share_ = share;
    ctx_ = ctx;
    error_ = nullptr;
    finished_.store(0, std::memory_order_relaxed);
    const uint32_t call = ++calls_;
    next_.store(pack(call, 1, uint32_t(n)), std::memory_order_release);
    epoch_.store(call, std::memory_order_seq_cst);
    wake_sleepers(epoch_, sleepers_);
    tl_in_share = true;
    run_share(0, n);
    int t, count;
    while (claim(call, &t, &count)) {
      run_share(t, count);
      finished_.fetch_add(1, std::memory_order_release);
    }
    tl_in_share = false;
    const uint32_t others = uint32_t(n - 1);
    for (uint32_t d = finished_.load(std::memory_order_acquire); d != others;)
      d = await_change(finished_, d, caller_sleeping_, true);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static uint64_t pack(uint32_t call, uint32_t next, uint32_t n) {
    return uint64_t(call) << 32 | uint64_t(next) << 16 | uint64_t(n);
  }
  // Claims the next share of call `call`: its index into *t and the share count into *n; false
  // when that call has none left (or is over).
  bool claim(uint32_t call, int* t, int* n) {
    uint64_t cur = next_.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t next = uint32_t(cur >> 16) & 0xffffu, count = uint32_t(cur) & 0xffffu;
      if (uint32_t(cur >> 32) != call || next >= count) return false;
      if (next_.compare_exchange_weak(cur, pack(call, next + 1, count), std::memory_order_acq_rel)) {
        *t = int(next);
        *n = int(count);
        return true;
      }
    }
  }
  void run_share(int t, int n) {
    try {
      share_(ctx_, t, n);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  void helper() {
    tl_in_share = true;  // a helper runs only shares: its own run_shares calls run inline
    uint32_t seen = 0;
    for (;;) {
      seen = await_change(epoch_, seen, sleepers_, spin_);
      if (stop_.load(std::memory_order_relaxed)) return;
      int t, n;
      while (claim(seen, &t, &n)) {
        run_share(t, n);
        finished_.fetch_add(1, std::memory_order_seq_cst);
        wake_sleepers(finished_, caller_sleeping_);
      }
    }
  }

  const bool spin_;  // helpers watch for work before sleeping (not when they outnumber the cores)
  std::vector<std::thread> helpers_;
  // The job, written by the caller before it publishes next_, read by those who claimed a share.
  void (*share_)(const void*, int, int) = nullptr;
  const void* ctx_ = nullptr;
  std::exception_ptr error_;
  std::mutex error_mutex_;
  uint32_t calls_ = 0;  // the caller's count of calls
  std::atomic<uint64_t> next_{0};
  std::atomic<uint32_t> epoch_{0}, finished_{0};
  std::atomic<int> sleepers_{0}, caller_sleeping_{0};
  std::atomic<bool> stop_{false};
};

thread_local std::unique_ptr<Team> tl_team;

// A child of fork() has only the thread that forked: that thread's team, if it had one, lists
// helpers that do not exist there. The child forgets it (without joining) and builds a new one.
void forget_team_in_child() { (void)tl_team.release(); }
const bool fork_handler = (pthread_atfork(nullptr, nullptr, forget_team_in_child), true);

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int cpu_threads() { return tl_threads > 0 ? tl_threads : default_threads(); }

void set_cpu_threads(int threads) { tl_threads = std::clamp(threads, 1, kMaxThreads); }

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
    tl_team = std::make_unique<Team>(size, size <= available_cores());
  }
  tl_team->run(n, share, ctx);
}
}  // namespace detail

}  // namespace onnxdp
