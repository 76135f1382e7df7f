// ONNX import of the reduction ops: one function per op (see graph/op_table.h).
#include "importer/importer.h"

namespace onnxdp {

// The axes moved from an attribute to input 1 in opset 18 (ReduceSum: opset 13).
void import_ReduceMean(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
}
void import_ReduceSum(ImportCtx& c) {
  if (c.opset < 13) c.attr_to_input("axes", 1);
}
void import_ReduceMax(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
}
void import_ReduceMin(ImportCtx& c) {
  if (c.opset < 18) c.attr_to_input("axes", 1);
}

}  // namespace onnxdp
