// Shape rules of the generator ops (see graph/op_table.h).
#include <cmath>

#include "graph/graph.h"

namespace onnxdp {

void shape_Constant(ShapeCtx& c) {
  const Tensor& v = c.node.t("value");
  c.set(0, v.dtype(), v.shape());
}

void shape_ConstantOfShape(ShapeCtx& c) {
  const Tensor& s = c.require_constant(0, "output shape");
  if (!dtype_is_integer(s.dtype())) c.fail("input 0 (the output shape) must be int64, it is {}", dtype_name(s.dtype()));
  if (s.rank() > 1) c.fail("input 0 (the output shape) must be 1-D, it has shape {}", shape_str(s.shape()));
  Shape out = s.to_i64();
  for (int64_t d : out)
    if (d < 0) c.fail("the output shape {} has a negative dim", shape_str(out));
  DType t = DType::f32;
  if (c.node.has("value")) {
    const Tensor& v = c.node.t("value");
    if (v.numel() != 1) c.fail("attribute 'value' must hold one element, it has shape {}", shape_str(v.shape()));
    t = v.dtype();
  }
  c.set(0, t, out);
}

// Range: max(ceil((limit - start) / delta), 0) elements; exact integer arithmetic for integer types.
void shape_Range(ShapeCtx& c) {
  const char* what[3] = {"start", "limit", "delta"};
  const DType t = c.dtype(0);
  if (t == DType::boolean) c.fail("Range does not take bool inputs");
  for (int k = 0; k < 3; ++k) {
    const Tensor& v = c.require_constant(k, what[k]);
    if (v.numel() != 1) c.fail("input {} (the {}) must be a scalar, it has shape {}", k, what[k], shape_str(v.shape()));
    if (v.dtype() != t) c.fail("input {} (the {}) is {}, input 0 is {}", k, what[k], dtype_name(v.dtype()), dtype_name(t));
  }
  int64_t n;
  if (dtype_is_integer(t)) {
    const int64_t start = c.constant(0)->to_i64()[0], limit = c.constant(1)->to_i64()[0],
                  delta = c.constant(2)->to_i64()[0];
    if (delta == 0) c.fail("delta must not be 0");
    // ceil(span / delta) with C++'s truncating division, in 128 bits: limit - start and
    // INT64_MIN / -1 do not fit in 64.
    const __int128 span = __int128(limit) - start;
    const __int128 q = span / delta + ((span % delta != 0) && ((span < 0) == (delta < 0)) ? 1 : 0);
    if (q > (__int128(1) << 62))
      c.fail("the range start {}, limit {}, delta {} has more than 2^62 elements", start, limit, delta);
    n = q < 0 ? 0 : int64_t(q);
  } else {
    const double start = c.constant(0)->to_f64()[0], limit = c.constant(1)->to_f64()[0],
                 delta = c.constant(2)->to_f64()[0];
    if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
      c.fail("start {}, limit {}, delta {} do not give a finite range", start, limit, delta);
    const double count = std::ceil((limit - start) / delta);
    if (count > double(int64_t(1) << 40)) c.fail("the range start {}, limit {}, delta {} is too long", start, limit, delta);
    n = int64_t(count);
  }
  c.set(0, t, {std::max<int64_t>(n, 0)});
}

}  // namespace onnxdp
