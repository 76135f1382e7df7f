// onnxdp's own AVX-512 loops (exec/cpu/conv_small.cpp, exec/cpu/conv_depthwise.cpp): the
// intrinsics, the attribute that compiles a function for AVX-512F, and the run-time check that
// this CPU has it. ONNXDP_AVX512_LOOPS is defined where the compiler can build them (GCC on
// x86-64, outside CUDA); elsewhere those files compile to "not taken".
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
// GCC 12's AVX-512 header fills some results' unused lanes from a self-initialized variable
// (_mm512_undefined_pd), which its own -Wuninitialized reports wherever they inline.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define ONNXDP_AVX512_LOOPS 1
#define ONNXDP_AVX512 __attribute__((target("avx512f")))

namespace onnxdp {

// Whether this CPU runs AVX-512F (asked once).
inline bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace onnxdp
#endif
