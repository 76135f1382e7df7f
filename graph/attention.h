// FusedAttention's geometry (graph/op_table.h's FusedAttention and FusedAttentionGrad rows): how many heads,
// their lengths and widths, and where each head's rows lie in q, k, v and y. One computation for
// the shape rules (graph/shapes_math.cpp, graph/shapes_grad.cpp), the CPU kernels
// (exec/cpu/attention.h) and graph/passes/fuse_attention.
//
// heads 0: q [N.., Tq, D], k stored transposed as kt [N.., D, Tk], v [N.., Tk, Dv], y [N.., Tq, Dv]
// (the leading dims N.. equal in all four). heads 1: q [B, Tq, H, D], k [B, Tk, H, D],
// v [B, Tk, H, Dv], y [B, Tq, H, Dv]: the [B, T, H, D] tensors before the head transposes, head
// (b, h)'s rows H * D elements apart. p is [N.., Tq, Tk] or [B, H, Tq, Tk] in both.
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
  bool heads = false;  // the `heads` attribute
  Shape lead;          // p's leading dims: N.. (heads 0) or [B, H] (heads 1)
  int64_t count = 0;   // heads in all: the product of `lead`
  int64_t h = 1;       // heads per batch row (heads 1), else 1
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
  int64_t q_at(int64_t i) const { return heads ? (i / h) * tq * h * d + (i % h) * d : i * tq * d; }
  int64_t q_stride() const { return heads ? h * d : d; }
  // k: heads 1, rows of D like q's; heads 0, head i's kt [D, Tk] from here, rows of Tk.
  int64_t k_at(int64_t i) const { return heads ? (i / h) * tk * h * d + (i % h) * d : i * d * tk; }
  int64_t k_stride() const { return heads ? h * d : tk; }
  int64_t v_at(int64_t i) const { return heads ? (i / h) * tk * h * dv + (i % h) * dv : i * tk * dv; }
  int64_t v_stride() const { return heads ? h * dv : dv; }
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

// The shape rules' checks of q, k, v (node inputs first .. first + 2) and the optional mask (input
// `mask`): q, k and v float32 or float64 alike, their shapes fitting, the mask bool and broadcast
// to p, `fill` given with a mask.
inline AttentionDims check_attention_inputs(ShapeCtx& c, int first, int mask) {
  const int64_t heads = c.node.i("heads");
  if (heads != 0 && heads != 1) c.fail("attribute 'heads' is {}, not 0 or 1", heads);
  const DType t = c.dtype(first);
  if (t != DType::f32 && t != DType::f64) c.fail("q is {}, not float32 or float64", dtype_name(t));
  for (int k = first + 1; k < first + 3; ++k)
    if (c.dtype(k) != t)
      c.fail("input {} ('{}') is {}, q is {}", k, c.in(k).name, dtype_name(c.dtype(k)), dtype_name(t));
  AttentionDims a;
  const std::string err = attention_dims(c.shape(first), c.shape(first + 1), c.shape(first + 2), heads == 1, a);
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
