// The collectives are onnxdp's own ops (domain onnxdp), never read from a user's model.
#include "importer/importer.h"

namespace onnxdp {

void import_Scatter(ImportCtx& c) { c.fail("Scatter is an internal onnxdp op, not importable"); }
void import_AllReduce(ImportCtx& c) { c.fail("AllReduce is an internal onnxdp op, not importable"); }
void import_AllGather(ImportCtx& c) { c.fail("AllGather is an internal onnxdp op, not importable"); }

}  // namespace onnxdp
