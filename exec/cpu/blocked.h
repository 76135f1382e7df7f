// The CPU's channel-blocked layout (graph/passes/block_channels.h chooses the values that take
// it): a float tensor of shape [N, C, spatial..] with C a multiple of 16, stored as
// [N, C / 16, spatial.., 16]: sixteen channels innermost, the layout oneDNN's convolutions run in
// (its nChw16c; exec/cpu/onednn.h). Element (n, c, s) of a tensor with S spatial positions is at
//
//   ((n * (C / 16) + c / 16) * S + s) * 16 + c % 16
//
// The shape stays the plain one (the layout is the nodes' business: their blocked_inputs /
// blocked_outputs attributes), and so does the size; each image is still one contiguous run, so a
// range of images is a range of memory in either layout.
#pragma once
#include <cstdint>

namespace onnxdp {

inline constexpr int64_t kChannelBlock = 16;

// Where element (n, c, s) of a blocked [N, C, S] tensor lives.
inline int64_t blocked_offset(int64_t n, int64_t c, int64_t s, int64_t C, int64_t S) {
  return ((n * (C / kChannelBlock) + c / kChannelBlock) * S + s) * kChannelBlock + c % kChannelBlock;
}

// x [N, C, S] plain -> y blocked, and back (C a multiple of 16). For the paths that need plain
// tensors (a convolution oneDNN does not run; tests).
template <class T>
void plain_to_blocked(const T* x, T* y, int64_t N, int64_t C, int64_t S) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < C / kChannelBlock; ++cb) {
      const T* src = x + (n * C + cb * kChannelBlock) * S;
      T* dst = y + (n * C + cb * kChannelBlock) * S;
      for (int64_t s = 0; s < S; ++s)
        for (int64_t l = 0; l < kChannelBlock; ++l) dst[s * kChannelBlock + l] = src[l * S + s];
    }
}

template <class T>
void blocked_to_plain(const T* y, T* x, int64_t N, int64_t C, int64_t S) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < C / kChannelBlock; ++cb) {
      const T* src = y + (n * C + cb * kChannelBlock) * S;
      T* dst = x + (n * C + cb * kChannelBlock) * S;
      for (int64_t l = 0; l < kChannelBlock; ++l)
        for (int64_t s = 0; s < S; ++s) dst[l * S + s] = src[s * kChannelBlock + l];
    }
}

}  // namespace onnxdp
