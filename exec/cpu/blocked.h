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
#include <vector>

#include "exec/kernel.h"
#include "graph/passes/block_channels.h"  // blocked_input / blocked_output

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

// The storage of a blocked [N, C, spatial..] tensor read as a plain array: [N, C / 16, spatial..,
// 16]. The same shape describes, in plain memory, an operand broadcast against it whose spatial
// dims are all 1 and whose channels are C or 1 ([C, 1, 1], [1, C, 1, 1], [N, C, 1, 1], a scalar):
// a plain [.., C] is [.., C / 16, 16] (and a [.., 1] is [.., 1, 1]). So an elementwise kernel whose
// output is blocked broadcasts these storage shapes as it would the plain ones. `s` is
// right-aligned to `rank` (at least 2) dims first.
inline std::vector<int64_t> blocked_storage(const std::vector<int64_t>& s, size_t rank) {
  std::vector<int64_t> a(rank > s.size() ? rank - s.size() : 0, 1);
  a.insert(a.end(), s.begin(), s.end());
  const bool split = a[1] % kChannelBlock == 0;
  if (split) a[1] /= kChannelBlock;
  a.push_back(split ? kChannelBlock : 1);
  return a;
}

// The storage shapes an elementwise kernel with a blocked output 0 reads through: the output's
// first, then its inputs 0 .. n-1. Each input has the output's shape and is blocked, or is a plain
// channel_operand (graph/passes/block_channels.h ties and refuses them so); fails naming the input
// that is neither.
inline std::vector<std::vector<int64_t>> blocked_storages(const KernelCtx& c, int n) {
  const Shape& s = *c.out(0).shape;
  std::vector<std::vector<int64_t>> v{blocked_storage(s, s.size())};
  for (int k = 0; k < n; ++k) {
    const Shape& a = *c.in(k).shape;
    if ((a == s) != blocked_input(c.node, k))
      c.fail("output 0 is blocked and input {} ({}) is {}", k, a == s ? "the output's shape" : "broadcast",
             a == s ? "not" : "blocked too");
    if (a != s && !channel_operand(a, s))
      c.fail("output 0 is blocked and input {} broadcasts over more than its channels", k);
    v.push_back(blocked_storage(a, s.size()));
  }
  return v;
}

// t read through another shape of the same number of elements (its storage).
inline TensorRef viewed_as(TensorRef t, const std::vector<int64_t>& shape) {
  t.shape = &shape;
  return t;
}

}  // namespace onnxdp
