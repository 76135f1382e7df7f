// The CPU kernels' threads: each thread that runs kernels (a replica's thread, the main thread)
// owns a team of cpu_threads() - 1 helper threads, and a kernel splits a large loop over the team
// with run_shares, or with split_rows and parallel_for (exec/cpu/clones.h).
//
// Why not OpenMP: its threads either sleep between parallel regions (OMP_WAIT_POLICY=PASSIVE),
// so every region first wakes them (about 70 us on a 2-core VM, where the wake-up goes through
// the hypervisor; gpt_small's step has ~250 regions: 121 ms against 102 spinning), or spin
// without bound (ACTIVE, or libgomp's default 300k spins), which collapses when cores are shared:
// two tiny_lm runs at once took 436 ms per step each, against 4 ms passive. Here a helper that
// finishes its share watches for the next one for kThreadSpin, yielding its core to anything else
// runnable, and only then sleeps: a step's back-to-back loops find the helpers awake, and a
// helper left idle (between steps, beside a long serial stretch) gives its core back. Helpers that
// outnumber the cores (OMP_NUM_THREADS above them) do not watch: they sleep at once, and the caller
// takes over the shares they are too late for (run_shares).
#pragma once
#include <chrono>
#include <cstdint>

namespace onnxdp {

// How long an idle helper watches for the next share before it sleeps.
inline constexpr std::chrono::microseconds kThreadSpin{200};

// The cores this process may run on (its CPU affinity: taskset, a container's cpuset).
int available_cores();
// The threads this thread's kernels split their loops over, itself included: what
// set_cpu_threads gave it, else OMP_NUM_THREADS, else available_cores().
int cpu_threads();
// Sets cpu_threads() for the calling thread (1 to 4096); its team grows or shrinks on next use.
void set_cpu_threads(int threads);
// True on a thread that is running a share of run_shares (the caller's own share included).
bool in_thread_share();

namespace detail {
void run_shares(int threads, void (*share)(const void* ctx, int t, int n), const void* ctx);
}

// Calls share(t, n) once for each t in [0, n), n = min(threads, cpu_threads()), and returns when
// all have returned. The calling thread runs share 0, the helpers claim the others; a share no
// helper has claimed by the time the caller is done with its own, the caller runs too (a helper
// may be slow to wake, or have no core). So shares run at the same time when the helpers are
// awake, but none may wait for another. On a thread already running a share (nested), or with
// n < 2, share(0, 1) runs on the calling thread alone. An exception thrown by a share is rethrown
// here (the first one, after all shares ended).
template <class Share>
void run_shares(int threads, const Share& share) {
  detail::run_shares(
      threads, [](const void* ctx, int t, int n) { (*static_cast<const Share*>(ctx))(t, n); }, &share);
}

}  // namespace onnxdp
