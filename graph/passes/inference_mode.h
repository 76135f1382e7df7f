// inference_mode: turns a graph exported for training (torch.onnx.export(training=TRAINING))
// into the graph that predicts, as PyTorch's eval() does:
//   - BatchNormalization with training_mode=1 normalises with its running statistics
//     (training_mode=0). Its running-mean/var outputs are dropped when nothing uses them; where
//     something does, it gets the unchanged running statistics (inputs 3/4), which is what those
//     outputs hold in inference mode.
//   - Dropout becomes the identity: its training_mode input/attribute is removed. When its mask
//     output is unused the node is spliced out (consumers read its input directly; a Dropout
//     producing a graph output becomes Identity); when the mask is used, the node stays as an
//     inference-mode Dropout, whose mask is all true.
// Value types do not change, so the pass runs before or after shape inference; nodes made dead
// (e.g. feeding only the running-stat outputs) are left for remove_dead_nodes.
#pragma once
#include "graph/graph.h"

namespace onnxdp {

void inference_mode(Graph& g);

}  // namespace onnxdp
