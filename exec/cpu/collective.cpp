// CPU kernels of the collectives, over the replica's Communicator (RunState::comm). With none (a
// world of one) they are copies.
#include <algorithm>
#include <cstring>

#include "exec/kernel.h"
#include "parallel/communicator.h"

namespace onnxdp {

// x [B, ...] (the global batch) -> y [rows, ...]: rows batch_offset .. batch_offset + rows.
void Scatter_forward(KernelCtx& c) {
  const TensorRef &x = c.in(0), &y = c.out(0);
  size_t row_bytes = x.dim(0) ? size_t(x.numel / x.dim(0)) * dtype_size(x.dtype) : 0;
  int64_t rows = y.dim(0);
  if (c.run.batch_offset < 0 || c.run.batch_offset + rows > x.dim(0))
    c.fail("rows {}..{} are outside the global batch of {}", c.run.batch_offset, c.run.batch_offset + rows, x.dim(0));
  if (rows) std::memcpy(y.data, x.as<uint8_t>() + size_t(c.run.batch_offset) * row_bytes, size_t(rows) * row_bytes);
}

// Each output <- the sum over replicas of its input, in place in the output. async=1 queues the
// sums on the communication thread; the Plan waits for them at the end of the run (their outputs
// are read only after it). Outputs laid out as one range (all_reduce_span) take one call.
void AllReduce_forward(KernelCtx& c) {
  const bool async = c.node.i("async") != 0;
  for (int k = 0; k < int(c.inputs.size()); ++k) {
    const TensorRef &x = c.in(k), &y = c.out(k);
    if (x.data != y.data && x.numel) std::memcpy(y.data, x.data, size_t(x.numel) * dtype_size(x.dtype));
  }
  if (!c.run.comm) return;
  auto reduce = [&](void* data, int64_t n, DType t) {
    if (async) c.run.comm->start_all_reduce_sum(data, n, t);
    else c.run.comm->all_reduce_sum(data, n, t);
  };
  if (const int64_t span = all_reduce_span(c)) return reduce(c.out(0).data, span, c.out(0).dtype);
  for (const TensorRef& y : c.outputs) reduce(y.data, y.numel, y.dtype);
}

// AllReduce's bucket under --zero-stage 1. When the outputs are one range of the flat gradient
// buffer (RunState::shards), each replica gets the sums of the part of that range it owns: the
// counts are the range's overlaps with the replicas' parts (zero for most replicas of a small
// bucket). Anywhere else (a bucket not laid out in the flat buffer) every element is summed, which
// gives each owner its sums too.
void ReduceScatter_forward(KernelCtx& c) {
  const FlatShards* sh = c.run.shards;
  const int64_t span = c.run.comm ? all_reduce_span(c) : 0;
  const float* begin = static_cast<const float*>(c.out(0).data);
  if (!sh || span == 0 || c.out(0).dtype != DType::f32 || begin < sh->base ||
      begin + span > sh->base + sh->bounds.back())
    return AllReduce_forward(c);
  for (int k = 0; k < int(c.inputs.size()); ++k) {  // in place in the outputs, as AllReduce
    const TensorRef &x = c.in(k), &y = c.out(k);
    if (x.data != y.data && x.numel) std::memcpy(y.data, x.data, size_t(x.numel) * dtype_size(x.dtype));
  }
  const int64_t lo = begin - sh->base, hi = lo + span;
  std::vector<int64_t> counts(sh->bounds.size() - 1);
  for (size_t r = 0; r + 1 < sh->bounds.size(); ++r)
    counts[r] = std::max<int64_t>(0, std::min(hi, sh->bounds[r + 1]) - std::max(lo, sh->bounds[r]));
  if (c.node.i("async") != 0) c.run.comm->start_reduce_scatter_sum(c.out(0).data, std::move(counts), DType::f32);
  else c.run.comm->reduce_scatter_sum(c.out(0).data, counts, DType::f32);
}

// x [rows_r, ...] on replica r -> y [sum of rows, ...], the shards in replica order.
void AllGather_forward(KernelCtx& c) {
  const TensorRef &x = c.in(0), &y = c.out(0);
  const size_t bytes = size_t(x.numel) * dtype_size(x.dtype);
  if (!c.run.comm) {
    if (x.numel != y.numel) c.fail("a world of one cannot gather {} rows from {}", y.dim(0), x.dim(0));
    if (bytes) std::memcpy(y.data, x.data, bytes);
    return;
  }
  std::vector<std::vector<uint8_t>> all;
  c.run.comm->all_gather_bytes(x.data, bytes, all);
  size_t off = 0, total = size_t(y.numel) * dtype_size(y.dtype);
  for (const auto& part : all) {
    if (off + part.size() > total) c.fail("the replicas' shards hold more than the {} rows expected", y.dim(0));
    if (!part.empty()) std::memcpy(y.as<uint8_t>() + off, part.data(), part.size());  // a replica may hold no rows
    off += part.size();
  }
  if (off != total) c.fail("the replicas' shards hold fewer than the {} rows expected", y.dim(0));
}

}  // namespace onnxdp
