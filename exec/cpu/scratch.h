// A thread's two work buffers per element type, kept between calls: a step's convolutions
// (exec/cpu/conv_gemm.cpp, conv_small.cpp, conv_depthwise.cpp) reuse them instead of allocating,
// zeroing and faulting in up to a few MB per call. Each keeps the largest size asked of it. A
// caller holds the pointers only within one call, and none of those calls asks for buffers while
// another on the same thread holds them.
#pragma once
#include <cstdint>
#include <vector>

namespace onnxdp {

template <class T>
T* scratch(int which, int64_t elements) {
  thread_local std::vector<T> buffers[2];
  std::vector<T>& b = buffers[which];
  if (b.size() < size_t(elements)) b.resize(size_t(elements));
  return b.data();
}

}  // namespace onnxdp
