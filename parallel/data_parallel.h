// The data-parallel rewrite: one SPMD training graph that every replica runs on its shard.
//
//   forward + loss (normalised by the GLOBAL batch, graph/passes/loss.h)
//     -> data_parallel_forward: Scatter on every batch input; training-mode BatchNormalization
//        with statistics over the global batch (AllReduce of the sums), or, with local_bn, its
//        per-replica statistics and running statistics averaged over replicas
//     -> autodiff (the AllReduce nodes of the forward get AllReduce gradients)
//     -> data_parallel_gradients: AllReduce buckets over the gradients, in the order backward
//        produces them, a small first bucket then bucket_mb each, each placed right after the node
//        producing its last gradient and launched asynchronously (with grad_dtype bf16 each
//        float gradient is cast to bfloat16 after its producer and back after the bucket); with zero_stage 1 (ZeRO-1, the
//        optimizer state sharded over the replicas) ReduceScatter nodes instead, each replica
//        summing only the part of the flat gradient buffer it updates (exec/flat_state.h)
// Gradients of a replica are sums over its rows of a loss normalised by the global count, so their
// all-reduced sum is exactly the gradient one device computes on the whole batch, even when the
// shards are uneven. A world of one is left unchanged.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/shards.h"  // shard_rows, shard_offset

namespace onnxdp {

struct DataParallelOptions {
  int world_size = 1;
  int replica = 0;             // this replica's global index
  int64_t global_batch = 0;    // rows of the global batch this graph is built for
  bool local_bn = false;       // DDP's per-replica BatchNormalization statistics
  double first_bucket_mb = 1;  // as DDP: a small first bucket so communication starts early
  double bucket_mb = 25;
  int zero_stage = 0;  // 1: the buckets reduce-scatter (each replica needs the sums of its part only)
  // bf16: float gradients are cast to bfloat16 for the all-reduce and back (DDP's bf16 compression
  // hook: half the bytes, bfloat16's rounding of the sums); f32: as computed.
  DType grad_dtype = DType::f32;
};

// Scatter on the graph inputs named in batch_inputs (their shape becomes the global batch's;
// consumers read the replica's rows) and the BatchNormalization rewrite.
void data_parallel_forward(Graph& g, const DataParallelOptions& o, const std::vector<std::string>& batch_inputs);

struct Bucket {
  std::vector<ValueId> grads;  // in production order
  std::vector<size_t> index;   // their positions in the grads vector given to data_parallel_gradients
  size_t bytes = 0;
  int node = -1;               // index of its AllReduce node in g.nodes
};

// The positions in grads (kNoValue ones left out) in the order backward produces them: by the index
// of each one's producing node. Buckets take them in this order; the trainer lays the flat
// gradient buffer out in it, so that every bucket is one contiguous range.
std::vector<size_t> production_order(const Graph& g, const std::vector<ValueId>& grads);

// Inserts the AllReduce buckets; grads[i] is replaced by its all-reduced value.
std::vector<Bucket> data_parallel_gradients(Graph& g, std::vector<ValueId>& grads, const DataParallelOptions& o);

// Gradient accumulation (--grad-accum): a graph input "grad_accum/<names[i]>" per gradient, added
// to it right after the node producing it (so a bucket's all-reduce still starts as early); grads[i]
// is replaced by the sum, and the loss likewise by loss + input "grad_accum/loss". The micro-batches
// before the last run a graph without buckets and feed each other their sums; the last one's
// buckets all-reduce the whole step's gradients at once.
void accumulate_gradients(Graph& g, std::vector<ValueId>& grads, const std::vector<std::string>& names,
                          ValueId& loss);

}  // namespace onnxdp
