// ONNX import of the reduction ops: one function per op (see graph/op_table.h).
#include "importer/importer.h"

namespace onnxdp {

void import_ReduceMean(ImportCtx& c) { c.fail("import not written yet"); }
void import_ReduceSum(ImportCtx& c) { c.fail("import not written yet"); }
void import_ReduceMax(ImportCtx& c) { c.fail("import not written yet"); }

}  // namespace onnxdp
