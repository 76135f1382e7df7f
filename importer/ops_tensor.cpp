// ONNX import of the tensor ops: one function per op (see graph/op_table.h).
#include "importer/importer.h"

namespace onnxdp {

void import_Identity(ImportCtx& c) { c.fail("import not written yet"); }
void import_Cast(ImportCtx& c) { c.fail("import not written yet"); }
void import_Shape(ImportCtx& c) { c.fail("import not written yet"); }
void import_Flatten(ImportCtx& c) { c.fail("import not written yet"); }
void import_Reshape(ImportCtx& c) { c.fail("import not written yet"); }
void import_Transpose(ImportCtx& c) { c.fail("import not written yet"); }
void import_Squeeze(ImportCtx& c) { c.fail("import not written yet"); }
void import_Unsqueeze(ImportCtx& c) { c.fail("import not written yet"); }
void import_Concat(ImportCtx& c) { c.fail("import not written yet"); }
void import_Split(ImportCtx& c) { c.fail("import not written yet"); }
void import_Slice(ImportCtx& c) { c.fail("import not written yet"); }
void import_Gather(ImportCtx& c) { c.fail("import not written yet"); }
void import_Expand(ImportCtx& c) { c.fail("import not written yet"); }
void import_Tile(ImportCtx& c) { c.fail("import not written yet"); }
void import_Pad(ImportCtx& c) { c.fail("import not written yet"); }
void import_Trilu(ImportCtx& c) { c.fail("import not written yet"); }

}  // namespace onnxdp
