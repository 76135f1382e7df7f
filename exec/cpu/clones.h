// Loops built three times, for x86-64-v4 (AVX-512: 16 floats or 8 doubles per instruction),
// x86-64-v3 (AVX2 and FMA: 8 floats or 4 doubles) and the baseline the build targets; the program
// loader picks the best this CPU runs (GCC's target_clones). On an AVX-512 Xeon the v4 clones took
// BatchNormalizationGrad from 0.47 to 0.26 ms per cnn step and 5.1 to 3.4 per resnet step. All
// compute the same values, bit for bit: -ffp-contract=off (CMakeLists.txt)
// keeps multiply-adds from being fused, and GCC vectorizes no floating-point sum in an order
// other than the source's (sums of many terms spell their partial sums out: exec/cpu/row_sum.h).
//
// The clones are flattened: every call in them whose body the compiler sees is inlined (GCC
// otherwise inlines only small default-target functions into an x86-64-v3 clone, and a functor
// called per element keeps the loop scalar: GeluTanh's did).
//
// A cloned function holds the whole loop over one thread's share of the work (a lambda passed to
// the thread team is a function of its own, which target_clones does not reach), and split_rows
// hands the shares out (also to the flat elementwise loop, exec/cpu/broadcast.h):
//
//   template <class T> ONNXDP_CPU_CLONES void softmax_rows(const T* x, T* y, int64_t lo, int64_t hi, ...);
//   split_rows(outer, outer * n > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
//     softmax_rows(x, y, lo, hi, ...);
//   });
#pragma once
#include <algorithm>
#include <cstdint>

#include "exec/cpu/threads.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define ONNXDP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define ONNXDP_CPU_CLONES
#endif

namespace onnxdp {

// How many doubles one vector register holds in the clone this CPU runs: 8 in x86-64-v4's
// (AVX-512), else 4 (x86-64-v3's AVX2; the baseline's 16-byte registers take a 4-double vector
// as two). For loops written on explicit vectors, which are built for both widths and pick one
// by this (batch_norm_grad_channels, exec/cpu/grad.cpp).
inline int vector_lanes() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
  static const int lanes = __builtin_cpu_supports("x86-64-v4") ? 8 : 4;
  return lanes;
#else
  return 4;
#endif
}

// Loops over more elements than this are split over the thread's team (exec/cpu/threads.h);
// smaller ones run on the calling thread. A team's helpers watch for work for a while after each
// share, so a loop's split costs a few microseconds when the previous split was recent, and up to
// ~70 us (a sleeping helper's wake-up on a 2-core VM) when it was not. 2^15 float elements
// (128 KB, 5-15 us on one thread) gains on both counts: tiny_lm's step on two threads took 3.2 ms
// with helpers that wake at once, against 5.1 ms at 2^17 (the helper idles beside the serial
// loops) and 3.6 ms on one thread. The threshold is fixed, never timed, so a run's results do not
// change from one start to the next.
inline constexpr int64_t parallel_min_elements() { return int64_t(1) << 15; }

// Calls rows(thread, lo, hi) once per thread of the team (run_shares, exec/cpu/threads.h), with
// the thread's index and its contiguous share of [0, count): the shares OpenMP's
// `schedule(static)` would deal out (the first count % threads threads take one row more). With
// `parallel` false, or fewer than two rows, rows(0, 0, count) runs on the calling thread.
template <class Rows>
void split_rows(int64_t count, bool parallel, const Rows& rows) {
  if (!parallel || count < 2) return rows(0, int64_t(0), count);
  const int want = int(std::min<int64_t>(count, cpu_threads()));
  run_shares(want, [&](int t, int threads) {
    const int64_t q = count / threads, extra = count % threads;
    const int64_t lo = t * q + (t < extra ? t : extra);
    rows(t, lo, lo + q + (t < extra ? 1 : 0));
  });
}

// body(i) for every i in [0, count), in the contiguous shares split_rows deals out; with
// `parallel` false on the calling thread alone.
template <class Body>
void parallel_for(int64_t count, bool parallel, const Body& body) {
  split_rows(count, parallel, [&](int, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) body(i);
  });
}

}  // namespace onnxdp
