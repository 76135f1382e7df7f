// How a global batch splits over the replicas, as DataParallel splits it (64 on 2 -> 32 + 32; an
// uneven split gives the first replicas one more). Header-only: the data-parallel pass places
// Scatter by it, and the collectives' kernels (exec/) find each replica's rows by it: the
// semantics of Scatter / AllGather, so it lives with the graph.
#pragma once
#include <cstdint>
#include <vector>

namespace onnxdp {

// Rows of each replica for a global batch.
inline std::vector<int64_t> shard_rows(int64_t global_batch, int world_size) {
  std::vector<int64_t> rows(size_t(world_size), global_batch / world_size);
  for (int64_t r = 0; r < global_batch % world_size; ++r) ++rows[size_t(r)];
  return rows;
}

// Index of replica r's first row in the global batch.
inline int64_t shard_offset(int64_t global_batch, int world_size, int replica) {
  std::vector<int64_t> rows = shard_rows(global_batch, world_size);
  int64_t off = 0;
  for (int r = 0; r < replica; ++r) off += rows[size_t(r)];
  return off;
}

}  // namespace onnxdp
