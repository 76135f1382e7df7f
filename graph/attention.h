// FusedAttention's geometry (graph/op_table.h's FusedAttention and FusedAttentionGrad rows): how many heads,
// their lengths and widths, and where each head's rows lie in q, k, v and y. One computation for
// the shape rules (graph/shapes_math.cpp, graph/shapes_grad.cpp), the CPU kernels
// (exec/cpu/attention.h) and graph/passes/fuse_attention.
//
// heads 0: q [N.., Tq, D], k stored transposed as kt [N.., D, Tk], v [N.., Tk, Dv], y [N.., Tq, Dv]
// (the leading dims N.. equal in all four). heads 1: q [B, Tq, H, D], k [B, Tk, H, D],
// v [B, Tk, H, Dv], y [B, Tq, H, Dv]: the [B, T, H, D] tensors before the head transposes, head
// (b, h)'s rows H * D elements apart. heads 2 (packed): q, k and v one tensor qkv [B, T, 3 * H * D],
// the output of a Linear layer that a Split cut into q, k and v in that order (H the attribute
// num_heads), each row q's H * D values, then k's, then v's; y [B, T, H, D] as with heads 1, and
// FusedAttentionGrad's one gradient dqkv like qkv. p is [N.., Tq, Tk] or [B, H, Tq, Tk].
#pragma once
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "graph/graph.h"
#include "graph/tensor.h"

namespace onnxdp {

// A mask's fill at or below this (-inf, or the lowest float that scaled_dot_product_attention's
// export writes): any score within 1e30 of 0 added to it rounds to it (an additive mask is the
// Where it stands for: graph/passes/fuse_attention.h), and its exp after the row's max is
// subtracted is exactly 0 in float for any row whose largest unmasked score is above -1e30, so the
// kernels skip the columns past a row's last unmasked one (exec/cpu/attention.h).
constexpr double kVastNegative = -1e30;

struct AttentionDims {
  bool heads = false;   // the `heads` attribute is 1 or 2: q and y are [B, T, H, D]
  bool packed = false;  // heads 2: q, k and v in one [B, T, 3 * H * D] tensor
  Shape lead;          // p's leading dims: N.. (heads 0) or [B, H] (heads 1 and 2)
  int64_t count = 0;   // heads in all: the product of `lead`
  int64_t h = 1;       // heads per batch row (heads 1 and 2), else 1
  int64_t tq = 0, tk = 0, d = 0, dv = 0;

  Shape p_shape() const {
    Shape s = lead;
    s.push_back(tq);
    s.push_back(tk);
    return s;
  }
  Shape y_shape() const {
    if (heads) return {lead[0], tq, h, dv};
    Shape s = lead;
    s.push_back(tq);
    s.push_back(dv);
    return s;
  }
  // Where head i's rows start in q (and dq), and how far apart its rows are, in elements.
  // Packed: in qkv (and dqkv), k's H * D values after q's in each row, v's after k's.
  int64_t q_at(int64_t i) const {
    return packed ? (i / h) * tq * 3 * h * d + (i % h) * d : heads ? (i / h) * tq * h * d + (i % h) * d : i * tq * d;
  }
  int64_t q_stride() const { return packed ? 3 * h * d : heads ? h * d : d; }
  // k: heads 1 and 2, rows of D like q's; heads 0, head i's kt [D, Tk] from here, rows of Tk.
  int64_t k_at(int64_t i) const {
    return packed ? q_at(i) + h * d : heads ? (i / h) * tk * h * d + (i % h) * d : i * d * tk;
  }
  int64_t k_stride() const { return packed ? 3 * h * d : heads ? h * d : tk; }
  int64_t v_at(int64_t i) const {
    return packed ? q_at(i) + 2 * h * d : heads ? (i / h) * tk * h * dv + (i % h) * dv : i * tk * dv;
  }
  int64_t v_stride() const { return packed ? 3 * h * d : heads ? h * dv : dv; }
  int64_t y_at(int64_t i) const { return heads ? (i / h) * tq * h * dv + (i % h) * dv : i * tq * dv; }
  int64_t y_stride() const { return heads ? h * dv : dv; }
};

// The geometry of q, k and v's shapes, or an error message (empty when they fit).
inline std::string attention_dims(const Shape& q, const Shape& k, const Shape& v, bool heads, AttentionDims& a) {
  a = AttentionDims{};
  a.heads = heads;
  if (heads) {
    if (q.size() != 4 || k.size() != 4 || v.size() != 4)
      return fmt::format("with heads 1, q, k and v are [B, T, H, D]: got {}, {} and {}", shape_str(q), shape_str(k),
                         shape_str(v));
    if (k[0] != q[0] || v[0] != q[0] || k[2] != q[2] || v[2] != q[2] || k[3] != q[3] || v[1] != k[1])
      return fmt::format("q {}, k {} and v {} do not fit [B, Tq, H, D], [B, Tk, H, D], [B, Tk, H, Dv]", shape_str(q),
                         shape_str(k), shape_str(v));
    a.lead = {q[0], q[2]};
    a.h = q[2];
    a.tq = q[1];
    a.tk = k[1];
    a.d = q[3];
    a.dv = v[3];
  } else {
    if (q.size() < 2 || k.size() != q.size() || v.size() != q.size())
      return fmt::format("q, k and v are [N.., T, D] of one rank: got {}, {} and {}", shape_str(q), shape_str(k),
                         shape_str(v));
    const size_t r = q.size();
    a.lead = Shape(q.begin(), q.end() - 2);
    if (Shape(k.begin(), k.end() - 2) != a.lead || Shape(v.begin(), v.end() - 2) != a.lead || k[r - 2] != q[r - 1] ||
        v[r - 2] != k[r - 1])
      return fmt::format("q {}, kt {} and v {} do not fit [N.., Tq, D], [N.., D, Tk], [N.., Tk, Dv]", shape_str(q),
                         shape_str(k), shape_str(v));
    a.tq = q[r - 2];
    a.d = q[r - 1];
    a.tk = k[r - 1];
    a.dv = v[r - 1];
  }
  a.count = shape_numel(a.lead);
  return {};
}

// heads 2: the geometry of qkv [B, T, 3 * H * D] with H = num_heads, or an error message.
inline std::string packed_attention_dims(const Shape& qkv, int64_t num_heads, AttentionDims& a) {
  a = AttentionDims{};
  a.heads = a.packed = true;
  if (num_heads < 1) return fmt::format("with heads 2, attribute 'num_heads' is {}, not 1 or more", num_heads);
  if (qkv.size() != 3 || qkv[2] % (3 * num_heads) != 0)
    return fmt::format("with heads 2, qkv is [B, T, 3 * H * D] with H = num_heads {}: got {}", num_heads,
                       shape_str(qkv));
  a.lead = {qkv[0], num_heads};
  a.h = num_heads;
  a.tq = a.tk = qkv[1];
  a.d = a.dv = qkv[2] / (3 * num_heads);
  a.count = shape_numel(a.lead);
  return {};
}

// A node's geometry from its `heads` (0, 1 or 2) and `num_heads` attributes and the shapes of q,
// k and v (with heads 2, q's is qkv's and k's and v's are not read), or an error message.
inline std::string attention_dims(int64_t heads, int64_t num_heads, const Shape& q, const Shape& k, const Shape& v,
                                  AttentionDims& a) {
  if (heads == 2) return packed_attention_dims(q, num_heads, a);
  return attention_dims(q, k, v, heads == 1, a);
}

// The shape rules' checks of q, k, v (node inputs first .. first + 2; with heads 2 qkv, input
// first, the other two absent) and the optional mask (input `mask`): q, k and v float32 or
// float64 alike, their shapes fitting, the mask bool and broadcast to p, `fill` given with a mask.
inline AttentionDims check_attention_inputs(ShapeCtx& c, int first, int mask) {
  const int64_t heads = c.node.i("heads");
  if (heads < 0 || heads > 2) c.fail("attribute 'heads' is {}, not 0, 1 or 2", heads);
  const DType t = c.dtype(first);
  if (t != DType::f32 && t != DType::f64) c.fail("q is {}, not float32 or float64", dtype_name(t));
  for (int k = first + 1; k < first + 3; ++k) {
    if (heads == 2) {
      if (c.has(k)) c.fail("with heads 2, input {} (qkv) holds q, k and v: input {} is to be absent", first, k);
      continue;
    }
    if (!c.has(k)) c.fail("input {} ({}) is missing", k, k == first + 1 ? "k" : "v");
    if (c.dtype(k) != t)
      c.fail("input {} ('{}') is {}, q is {}", k, c.in(k).name, dtype_name(c.dtype(k)), dtype_name(t));
  }
  AttentionDims a;
  const Shape& qs = c.shape(first);
  const std::string err = attention_dims(heads, c.node.i("num_heads"), qs, heads == 2 ? qs : c.shape(first + 1),
                                         heads == 2 ? qs : c.shape(first + 2), a);
  if (!err.empty()) c.fail("{}", err);
  if (c.has(mask)) {
    if (!c.node.has("fill")) c.fail("attribute 'fill' is required with a mask");
    if (c.dtype(mask) != DType::boolean) c.fail("the mask is {}, not bool", dtype_name(c.dtype(mask)));
    Shape b;
    try {
      b = broadcast_shapes(c.shape(mask), a.p_shape());
    } catch (const Error&) {
    }
    if (b != a.p_shape())
      c.fail("the mask {} does not broadcast to p {}", shape_str(c.shape(mask)), shape_str(a.p_shape()));
  }
  return a;
}

}  // namespace onnxdp
