// Test buffers for the AVX-512 loops that read their tensors in place with masked loads (which
// AddressSanitizer does not check): a copy that ends where a page that cannot be read begins.
#pragma once
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace onnxdp::test {

// n floats (a copy of `from`) that end where a page that cannot be read begins: a load of one
// float past them faults.
struct Guarded {
  void* base = nullptr;
  size_t length = 0;
  float* data = nullptr;
  explicit Guarded(const std::vector<float>& from) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE)), bytes = (from.size() * sizeof(float) + page - 1) / page * page;
    length = bytes + page;
    base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(base != MAP_FAILED);
    REQUIRE(mprotect(static_cast<char*>(base) + bytes, page, PROT_NONE) == 0);
    data = reinterpret_cast<float*>(static_cast<char*>(base) + bytes) - from.size();
    std::copy(from.begin(), from.end(), data);
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  ~Guarded() { munmap(base, length); }
};

// n values of a fixed, uneven pattern, times scale.
inline std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * float((i * 7919) % 97 - 48);
  return v;
}

}  // namespace onnxdp::test
