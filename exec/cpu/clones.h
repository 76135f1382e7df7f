// Loops built twice, for x86-64-v3 (AVX2 and FMA: 8 floats or 4 doubles per instruction) and for
// the baseline the build targets; the program loader picks the one this CPU runs (GCC's
// target_clones). Both compute the same values, bit for bit: -ffp-contract=off (CMakeLists.txt)
// keeps multiply-adds from being fused, and GCC vectorizes no floating-point sum in an order
// other than the source's (sums of many terms spell their partial sums out: exec/cpu/row_sum.h).
//
// OpenMP moves a parallel loop's body into a function of its own, which target_clones does not
// reach. So a cloned function holds the whole loop over one thread's share of the work, and
// split_rows hands the shares out (also to the flat elementwise loop, exec/cpu/broadcast.h):
//
//   template <class T> ONNXDP_CPU_CLONES void softmax_rows(const T* x, T* y, int64_t lo, int64_t hi, ...);
//   split_rows(outer, outer * n > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
//     softmax_rows(x, y, lo, hi, ...);
//   });
#pragma once
#include <strings.h>

#include <cstdint>
#include <cstdlib>

#include <omp.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define ONNXDP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ONNXDP_CPU_CLONES
#endif

namespace onnxdp {

// OMP_WAIT_POLICY=ACTIVE (any case) in the environment.
inline bool openmp_threads_spin() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy && strcasecmp(policy, "active") == 0;
}

// Loops over more elements than parallel_min_elements() are split over the OpenMP threads;
// smaller ones run on the calling thread. onnxdp's OpenMP threads wait passively unless
// OMP_WAIT_POLICY says otherwise (exec/device.h), so a parallel region first wakes sleeping
// threads: about 70 us on a 2-core VM, where the wake-up goes through the hypervisor, so there
// two threads gain only on loops of more than ~140 us. 2^17 float elements (0.5 MB, 20-60 us on
// one thread) is a compromise with machines whose threads wake in a few us. At 2^15, tiny_lm's
// step on two threads took 7.4 ms, against 3.6 on one; at 2^17, 4.7. With OMP_WAIT_POLICY=ACTIVE
// the threads spin between regions and wake at once, and 2^15 stays (tiny_lm 3.2 ms; at 2^17
// the spinning thread idles beside the serial loops: 5.1). The threshold depends only on the
// setting, never on timing, so a run's results do not change from one start to the next.
// (Spinning waits collapse when cores are shared: two tiny_lm runs at once took 436 ms per step
// each with libgomp's default spin, against 4 ms waiting passively.)
inline int64_t parallel_min_elements() {
  static const int64_t min_elements = openmp_threads_spin() ? int64_t(1) << 15 : int64_t(1) << 17;
  return min_elements;
}

// Calls rows(thread, lo, hi) once per OpenMP thread of a parallel region, with the thread's index
// and its contiguous share of [0, count): the shares `schedule(static)` deals out (the first
// count % threads threads take one row more). With `parallel` false, or fewer than two rows,
// rows(0, 0, count) runs on the calling thread.
template <class Rows>
void split_rows(int64_t count, bool parallel, const Rows& rows) {
  if (!parallel || count < 2) return rows(0, int64_t(0), count);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t q = count / threads, extra = count % threads;
    const int64_t lo = t * q + (t < extra ? t : extra);
    rows(int(t), lo, lo + q + (t < extra ? 1 : 0));
  }
}

}  // namespace onnxdp
