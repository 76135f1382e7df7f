// The kernels' thread teams (exec/cpu/threads.h) and the shares split_rows / parallel_for deal
// out (exec/cpu/clones.h).
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "exec/cpu/clones.h"
#include "exec/cpu/threads.h"

using namespace onnxdp;

namespace {
// Sets this thread's cpu_threads() for a scope.
struct ThreadsFor {
  int before;
  explicit ThreadsFor(int n) : before(cpu_threads()) { set_cpu_threads(n); }
  ~ThreadsFor() { set_cpu_threads(before); }
};
}  // namespace

TEST_CASE("threads: run_shares runs every share once, at the same time when helpers are free, share 0 on the caller") {
  for (int size : {1, 2, 3, 4}) {
    ThreadsFor scope(size);
    for (int want : {1, 2, 3, 5}) {
      CAPTURE(size);
      CAPTURE(want);
      const int n = std::min(size, want);
      std::mutex mu;
      std::vector<int> calls(size_t(n), 0);
      std::set<std::thread::id> ids;
      std::thread::id first;
      std::atomic<int> arrived{0};
      bool all_met = true;
      run_shares(want, [&](int t, int count) {
        CHECK(count == n);
        CHECK(in_thread_share());
        {
          std::lock_guard<std::mutex> lock(mu);
          ++calls[size_t(t)];
          ids.insert(std::this_thread::get_id());
          if (t == 0) first = std::this_thread::get_id();
        }
        // Every share waits for all the others to start: only shares that run at once get past.
        arrived.fetch_add(1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (arrived.load() < count && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        if (arrived.load() < count) {
          std::lock_guard<std::mutex> lock(mu);
          all_met = false;
        }
      });
      CHECK(calls == std::vector<int>(size_t(n), 1));
      CHECK(ids.size() == size_t(n));
      CHECK(first == std::this_thread::get_id());
      CHECK(all_met);
      CHECK_FALSE(in_thread_share());
    }
  }
}

TEST_CASE("threads: a run_shares inside a share runs alone on its thread") {
  ThreadsFor scope(3);
  std::atomic<int> inner_calls{0}, wrong{0};
  run_shares(3, [&](int, int) {
    const auto self = std::this_thread::get_id();
    run_shares(3, [&](int t, int n) {
      inner_calls.fetch_add(1);
      if (t != 0 || n != 1 || std::this_thread::get_id() != self) wrong.fetch_add(1);
    });
  });
  CHECK(inner_calls.load() == 3);
  CHECK(wrong.load() == 0);
}

TEST_CASE("threads: an exception in a share reaches the caller after every share ended") {
  ThreadsFor scope(3);
  for (int thrower : {0, 1, 2}) {
    CAPTURE(thrower);
    std::atomic<int> finished{0};
    CHECK_THROWS_WITH_AS(run_shares(3,
                                    [&](int t, int) {
                                      if (t == thrower) throw std::runtime_error("share failed");
                                      std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                      finished.fetch_add(1);
                                    }),
                         "share failed", std::runtime_error);
    CHECK(finished.load() == 2);  // the others ran to their end before run_shares returned
  }
  int after = 0;  // the team still works
  run_shares(3, [&](int t, int) {
    if (t == 0) after = 1;
  });
  CHECK(after == 1);
}

TEST_CASE("threads: split_rows deals contiguous shares that cover every row once, as schedule(static)") {
  for (int size : {1, 2, 3, 4}) {
    ThreadsFor scope(size);
    for (int64_t count : {0, 1, 2, 3, 7, 8, 50, 1001}) {
      CAPTURE(size);
      CAPTURE(count);
      std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> shares(size_t(size), {-1, -1});
      split_rows(count, true, [&](int t, int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) hits[size_t(i)].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        shares[size_t(t)] = {lo, hi};
      });
      for (const auto& h : hits) CHECK(h.load() == 1);
      const int64_t threads = count < 2 ? 1 : std::min<int64_t>(size, count);
      for (int64_t t = 0; t < threads; ++t) {  // the first count % threads shares take one row more
        const int64_t q = count / threads, extra = count % threads;
        CHECK(shares[size_t(t)].first == t * q + std::min(t, extra));
        CHECK(shares[size_t(t)].second - shares[size_t(t)].first == q + (t < extra ? 1 : 0));
      }
      int64_t sum = 0;
      parallel_for(count, true, [&](int64_t i) {
        std::lock_guard<std::mutex> lock(mu);
        sum += i;
      });
      CHECK(sum == count * (count - 1) / 2);
    }
  }
}

TEST_CASE("threads: no share is lost when helpers have gone to sleep, across team sizes and with more threads than cores") {
  // Gaps longer than kThreadSpin put the helpers to sleep before the next call; short ones find
  // them watching. A lost wake-up would hang (the CTest timeout) or miss a count.
  std::mt19937 rng(5);
  int64_t total = 0, expected = 0;
  std::atomic<int64_t> counted{0};
  // The last size outnumbers the cores: its helpers sleep at once, and callers take over shares.
  for (int size : {2, 3, 2, 4 * available_cores() + 1}) {  // the team is rebuilt when the size changes
    ThreadsFor scope(size);
    for (int call = 0; call < 300; ++call) {
      if (rng() % 4 == 0) std::this_thread::sleep_for(kThreadSpin + std::chrono::microseconds(rng() % 300));
      run_shares(size, [&](int t, int) { counted.fetch_add(t + 1); });
      expected += int64_t(size) * (size + 1) / 2;
    }
  }
  total = counted.load();
  CHECK(total == expected);
}

TEST_CASE("threads: cpu_threads is the calling thread's own setting") {
  ThreadsFor scope(3);
  CHECK(cpu_threads() == 3);
  int other = 0, other_after = 0;
  std::thread([&] {
    other = cpu_threads();  // the default (OMP_NUM_THREADS, else the cores), not the setting above
    set_cpu_threads(7);
    other_after = cpu_threads();
  }).join();
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int cores = available_cores();
  CHECK(other == (env && std::atoi(env) > 0 ? std::atoi(env) : cores));
  CHECK(other_after == 7);
  CHECK(cpu_threads() == 3);
  set_cpu_threads(0);  // at least one
  CHECK(cpu_threads() == 1);
}

TEST_CASE("threads: a child of fork() builds a team of its own") {
  ThreadsFor scope(2);
  std::atomic<int> calls{0};
  run_shares(2, [&](int, int) { calls.fetch_add(1); });  // this thread's team now has a helper
  REQUIRE(calls.load() == 2);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child: the helper above does not exist here
    std::atomic<int> child_calls{0};
    run_shares(2, [&](int, int) { child_calls.fetch_add(1); });
    _exit(child_calls.load() == 2 ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("threads: available_cores follows the CPU affinity (taskset, a cpuset)") {
  CHECK(available_cores() >= 1);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child narrows itself to one CPU, as `taskset -c 0` would
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(2);
    _exit(available_cores() == 1 ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
