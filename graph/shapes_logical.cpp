// Shape rules of the logical ops (see graph/op_table.h).
#include "graph/graph.h"

namespace onnxdp {

namespace {

Shape broadcast_or_fail(const ShapeCtx& c, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const Error& e) {
    c.fail("{}", e.what());
  }
}

// Comparison: two inputs of one dtype, broadcast; the result is bool.
void compare(ShapeCtx& c, bool allow_bool) {
  if (c.dtype(0) != c.dtype(1))
    c.fail("inputs have different dtypes ({} and {})", dtype_name(c.dtype(0)), dtype_name(c.dtype(1)));
  if (!allow_bool && c.dtype(0) == DType::boolean) c.fail("input 0 is bool; this comparison needs numbers");
  c.set(0, DType::boolean, broadcast_or_fail(c, c.shape(0), c.shape(1)));
}

}  // namespace

void shape_Equal(ShapeCtx& c) { compare(c, true); }
void shape_Less(ShapeCtx& c) { compare(c, false); }
void shape_Greater(ShapeCtx& c) { compare(c, false); }

void shape_LessOrEqual(ShapeCtx& c) { compare(c, false); }
void shape_GreaterOrEqual(ShapeCtx& c) { compare(c, false); }

void shape_Not(ShapeCtx& c) {
  if (c.dtype(0) != DType::boolean) c.fail("input 0 is {}; Not takes bool", dtype_name(c.dtype(0)));
  c.set(0, DType::boolean, c.shape(0));
}

// And, Or, Xor: two bool inputs, broadcast.
static void logic(ShapeCtx& c) {
  for (int k = 0; k < 2; ++k)
    if (c.dtype(k) != DType::boolean) c.fail("input {} is {}; {} takes bool", k, dtype_name(c.dtype(k)), op_name(c.node.op));
  c.set(0, DType::boolean, broadcast_or_fail(c, c.shape(0), c.shape(1)));
}
void shape_And(ShapeCtx& c) { logic(c); }
void shape_Or(ShapeCtx& c) { logic(c); }
void shape_Xor(ShapeCtx& c) { logic(c); }

// Where(cond, x, y): cond bool, x and y of one dtype; all three broadcast together.
void shape_Where(ShapeCtx& c) {
  if (c.dtype(0) != DType::boolean) c.fail("input 0 (the condition) is {}; it must be bool", dtype_name(c.dtype(0)));
  if (c.dtype(1) != c.dtype(2))
    c.fail("inputs 1 and 2 have different dtypes ({} and {})", dtype_name(c.dtype(1)), dtype_name(c.dtype(2)));
  Shape s = broadcast_or_fail(c, broadcast_or_fail(c, c.shape(0), c.shape(1)), c.shape(2));
  c.set(0, c.dtype(1), s);
}

// IsNaN, IsInf: a float input (f32, f64, f16, bf16); the result is bool of its shape.
static void float_test(ShapeCtx& c) {
  if (!dtype_is_float(c.dtype(0)))
    c.fail("input 0 is {}; {} takes floats (f32, f64, f16, bf16)", dtype_name(c.dtype(0)), op_name(c.node.op));
  c.set(0, DType::boolean, c.shape(0));
}
void shape_IsNaN(ShapeCtx& c) { float_test(c); }
void shape_IsInf(ShapeCtx& c) { float_test(c); }

}  // namespace onnxdp
