// ONNX import of the generator ops: one function per op (see graph/op_table.h).
#include "importer/importer.h"

namespace onnxdp {

void import_Constant(ImportCtx& c) { c.fail("import not written yet"); }
void import_ConstantOfShape(ImportCtx& c) { c.fail("import not written yet"); }
void import_Range(ImportCtx& c) { c.fail("import not written yet"); }

}  // namespace onnxdp
