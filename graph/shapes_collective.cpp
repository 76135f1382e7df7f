// Shape rules of the collectives (see graph/op_table.h; inserted by parallel/data_parallel.h).
#include "graph/graph.h"

namespace onnxdp {

void shape_Scatter(ShapeCtx& c) {
  Shape s = c.shape(0);
  int64_t rows = c.node.i("rows");
  if (s.empty() || rows < 0 || rows > s[0]) c.fail("cannot take {} rows of a {} batch", rows, shape_str(s));
  s[0] = rows;
  c.set(0, c.dtype(0), s);
}

void shape_AllReduce(ShapeCtx& c) {
  if (c.num_inputs() != int(c.node.outputs.size())) c.fail("needs as many outputs as inputs");
  for (int k = 0; k < c.num_inputs(); ++k) {
    if (!dtype_is_float(c.dtype(k)) && c.dtype(k) != DType::i64) c.fail("input {} is {}; sums need f32, f64 or i64", k, dtype_name(c.dtype(k)));
    c.set(k, c.dtype(k), c.shape(k));
  }
}

// A bucket of --zero-stage 1: shapes and dtypes as AllReduce's.
void shape_ReduceScatter(ShapeCtx& c) { shape_AllReduce(c); }

void shape_AllGather(ShapeCtx& c) {
  Shape s = c.shape(0);
  if (s.empty()) c.fail("cannot gather a scalar along axis 0");
  s[0] = c.node.i("rows");
  c.set(0, c.dtype(0), s);
}

}  // namespace onnxdp
