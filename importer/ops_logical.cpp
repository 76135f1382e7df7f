// ONNX import of the logical ops: one function per op (see graph/op_table.h).
#include "importer/importer.h"

namespace onnxdp {

void import_Equal(ImportCtx& c) { c.fail("import not written yet"); }
void import_Less(ImportCtx& c) { c.fail("import not written yet"); }
void import_Greater(ImportCtx& c) { c.fail("import not written yet"); }
void import_Not(ImportCtx& c) { c.fail("import not written yet"); }
void import_Where(ImportCtx& c) { c.fail("import not written yet"); }

}  // namespace onnxdp
