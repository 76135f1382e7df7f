// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Each draw is a pure function of (counter, key), so any element of a
// random tensor can be computed on its own, on the host or on a device, in any order and split in
// any way across threads or replicas. Header-only; compiles as CUDA device code under nvcc.
//
// onnxdp's Dropout masks (exec/cpu/nn.cpp; the CUDA kernel must use dropout_uniform below too):
//   key     = the seed (64 bits)
//   counter = {group lo, group hi, step (low 32 bits), stream}
// where element p of the GLOBAL batch tensor (p = its flat index in the tensor of all replicas
// together) takes word p % 4 of the block for group p / 4, and stream tells apart the Dropout
// nodes of one graph (a hash of the node name). A replica holding rows [b0, b0 + n) of the batch
// computes p = j + b0 * (numel / shape[0]) for its element j, which makes the masks independent
// of how the batch is split.
#pragma once
#include <cstdint>

#ifndef ONNXDP_HD
#if defined(__CUDACC__)
#define ONNXDP_HD __host__ __device__
#else
#define ONNXDP_HD
#endif
#endif

namespace onnxdp {

struct Philox4x32 {
  uint32_t v[4];
};

namespace philox_detail {
inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl) increments

ONNXDP_HD inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}
}  // namespace philox_detail

// The 10-round block function: four 32-bit words from a 128-bit counter and a 64-bit key.
ONNXDP_HD inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
  using namespace philox_detail;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, ctr.v[0], hi0, lo0);
    mulhilo(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
  }
  return ctr;
}

// A 32-bit word to a float in [0, 1): its top 24 bits, so every value is exact in float.
ONNXDP_HD inline float philox_to_unit(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }

// 32-bit FNV-1a of a string: Dropout's stream id from its node name.
inline uint32_t philox_stream_id(const char* s) {
  uint32_t h = 2166136261u;
  for (; *s; ++s) h = (h ^ uint8_t(*s)) * 16777619u;
  return h;
}

// The block of group `group` (see the layout at the top): the words of global elements 4 * group
// to 4 * group + 3. A loop over consecutive elements draws it once for the four.
ONNXDP_HD inline Philox4x32 dropout_block(uint64_t seed, uint64_t step, uint32_t stream, uint64_t group) {
  const Philox4x32 ctr{{uint32_t(group), uint32_t(group >> 32), uint32_t(step), stream}};
  return philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32));
}

// The uniform in [0, 1) of global element `pos`: word pos % 4 of group pos / 4's block.
ONNXDP_HD inline float dropout_uniform(uint64_t seed, uint64_t step, uint32_t stream, uint64_t pos) {
  return philox_to_unit(dropout_block(seed, step, stream, pos >> 2).v[pos & 3]);
}

}  // namespace onnxdp
