// Grid sizes of the one-dimensional kernels (grid-stride loops): kThreads per block, enough blocks
// for n items up to the 65535 that every launch dimension takes.
#pragma once
#include <cstdint>

namespace onnxdp::cuda {

inline constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

}  // namespace onnxdp::cuda
