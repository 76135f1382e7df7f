// Graph -> ONNX, for looking at what onnxdp runs (`onnxdp graph`): the training graph with its
// loss, backward and collectives, openable in Netron. ONNX ops keep the default domain; onnxdp's
// own ops (collectives, gradient kernels) are written in the `onnxdp` domain.
#pragma once
#include "graph/graph.h"
#include "onnx/onnx_pb.h"

namespace onnxdp {

onnx::ModelProto graph_to_onnx(const Graph& g, int64_t opset = 17);

}  // namespace onnxdp
