// ONNX import of the logical ops: one function per op (see graph/op_table.h).
// Between opsets 7 and 27 these ops only widened their type lists (checked by the shape rules).
#include "importer/importer.h"

namespace onnxdp {

void import_Equal(ImportCtx& c) {}
void import_Less(ImportCtx& c) {}
void import_Greater(ImportCtx& c) {}
void import_Not(ImportCtx& c) {}
void import_LessOrEqual(ImportCtx& c) {}
void import_GreaterOrEqual(ImportCtx& c) {}
void import_And(ImportCtx& c) {}
void import_Or(ImportCtx& c) {}
void import_Xor(ImportCtx& c) {}
void import_Where(ImportCtx& c) {}

// IsNaN (opsets 9, 13, 20) and IsInf (10, 20): later versions only added element types.
void import_IsNaN(ImportCtx& c) {}
void import_IsInf(ImportCtx& c) {}

}  // namespace onnxdp
