// What the CPU kernels of FusedAttention (exec/cpu/math.cpp) and FusedAttentionGrad (exec/cpu/grad.cpp)
// share: the rows of p in blocks, how many leading columns of each row of p can be non-zero, and
// which rows need their mask within those.
//
// Each head runs whole on one thread, its block of p in cache: the products of a block of rows
// (kAttentionRowBlock) with the columns those rows can reach, the softmax or its gradient on those
// rows, then the products that read them. The products read the heads where they lie (with heads
// 1, rows H * D elements apart: no transposed copies). A row's columns past its last unmasked one
// are exactly 0 in p when the fill is -inf or vast (graph/attention.h's kVastNegative), so a causal
// mask's blocks above the diagonal are not computed (p holds zeros there); a row whose reach holds
// no masked column runs the plain softmax. With another fill, or no mask, every row is whole.
//
// Measured on gpt_small (one thread, batch 8, T 128, 8 heads of 32; see
// bench/results/2026-12-05-gemm-engines.md): rows in blocks of 32 and 64 ran alike, 16 and 128
// slower.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/cpu/mask_rows.h"
#include "exec/kernel.h"
#include "graph/attention.h"

namespace onnxdp {

// Rows of p per block: a block's products are [kAttentionRowBlock, L], L the block's reach.
constexpr int64_t kAttentionRowBlock = 32;

// nan_to_zero: rows of p (`rows` of them, tk apart), columns [0, l), with NaN read as 0: pb itself
// when they hold no NaN, else a copy in buf.
template <class T>
const T* attention_nan_zeroed(const T* pb, int64_t rows, int64_t tk, int64_t l, std::vector<T>& buf) {
  bool any = false;
  for (int64_t r = 0; r < rows && !any; ++r)
    for (int64_t j = 0; j < l; ++j) any |= std::isnan(pb[r * tk + j]);
  if (!any) return pb;
  buf.resize(size_t(rows * tk));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < l; ++j) buf[size_t(r * tk + j)] = std::isnan(pb[r * tk + j]) ? T(0) : pb[r * tk + j];
  return buf.data();
}

// The mask's rows and each row of p's reach: row o (head o / tq, row o % tq) reads its mask at
// mask.data[mask.start[o]], and only its first reach(o) columns can be non-zero.
struct AttentionRows {
  bool masked = false, fill_when = true;
  double fill = 0;
  MaskRows mask;
  int64_t tk = 0;
  std::vector<int64_t> mask_reach;  // per row of mask.data (a vast fill), else empty: every row whole
  std::vector<char> mask_inside;    // per row of mask.data: whether it masks a column within its reach

  int64_t reach(int64_t o) const {
    return mask_reach.empty() ? tk : mask_reach[size_t(mask.start[size_t(o)] / tk)];
  }
  // Whether row o's softmax needs its mask: a column within its reach is masked.
  bool masked_within(int64_t o) const {
    return masked && (mask_inside.empty() || mask_inside[size_t(mask.start[size_t(o)] / tk)]);
  }
  const int32_t* mask_row(int64_t o) const { return mask.data.data() + mask.start[size_t(o)]; }
  // The reach of rows r0..r1 of head i: the widest of them.
  int64_t block_reach(const AttentionDims& a, int64_t i, int64_t r0, int64_t r1) const {
    int64_t l = 0;
    for (int64_t r = r0; r < r1; ++r) l = std::max(l, reach(i * a.tq + r));
    return l;
  }
};

// The geometry of a FusedAttention (q at input `first` = 0) or FusedAttentionGrad (1) node's
// operands, as its shape rule checked them; heads 2 reads qkv's shape alone.
inline AttentionDims attention_dims_of(const KernelCtx& c, int first) {
  const int64_t heads = c.node.i("heads");
  const Shape& q = *c.in(first).shape;
  AttentionDims a;
  attention_dims(heads, c.node.i("num_heads"), q, heads == 2 ? q : *c.in(first + 1).shape,
                 heads == 2 ? q : *c.in(first + 2).shape, a);
  return a;
}

// `mask_input`: the node's mask input (absent: no mask).
inline AttentionRows attention_rows(const KernelCtx& c, const AttentionDims& a, int mask_input) {
  AttentionRows r;
  r.tk = a.tk;
  if (!c.has_in(mask_input)) return r;
  r.masked = true;
  r.fill_when = c.node.i("fill_when") != 0;
  r.fill = c.node.f("fill");
  r.mask = mask_rows(c.in(mask_input), a.p_shape());
  if (!(r.fill <= kVastNegative) || a.tk == 0) return r;
  // Each mask row's reach: one past its last unmasked column; a row masked throughout is whole
  // (its softmax is the unfused one's, NaN with a -inf fill).
  const int32_t when = r.fill_when ? 1 : 0;
  const int64_t rows = int64_t(r.mask.data.size()) / a.tk;
  r.mask_reach.resize(size_t(rows));
  r.mask_inside.resize(size_t(rows));
  for (int64_t m = 0; m < rows; ++m) {
    const int32_t* row = r.mask.data.data() + m * a.tk;
    int64_t l = a.tk;
    while (l > 0 && row[l - 1] == when) --l;
    r.mask_reach[size_t(m)] = l == 0 ? a.tk : l;
    r.mask_inside[size_t(m)] = l == 0 || std::find(row, row + l, when) != row + l;
  }
  return r;
}

}  // namespace onnxdp
