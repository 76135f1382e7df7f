// Size and index arithmetic on numbers a model, a file or an option declares (dims, attributes,
// offsets, element counts): the exact int64 result, or an Error naming the quantity. Never a
// wrapped value: a hostile model's [2^40, 2^40] or dilation 2^62 ends in a message, not in a
// negative shape or undefined behaviour. Every product or sum of declared sizes goes through
// these (docs/DESIGN.md, "Sizes"); shape_numel (graph/tensor.h) is the product of a whole shape.
#pragma once
#include <cstdint>

#include "graph/error.h"

namespace onnxdp {

inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail("{} does not fit in 64 bits ({} * {})", what, a, b);
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail("{} does not fit in 64 bits ({} + {})", what, a, b);
  return r;
}

inline int64_t checked_sub(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) fail("{} does not fit in 64 bits ({} - {})", what, a, b);
  return r;
}

// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace onnxdp
