// The fused optimizer's host loop over the flat buffers (exec/optimizer_update.h): the squared
// norm of the gradient, then every element's update, on the replica's CPU threads.
#include <algorithm>
#include <vector>

#include "exec/cpu/clones.h"
#include "exec/cpu/threads.h"
#include "exec/optimizer_update.h"

namespace onnxdp {

namespace {
// Elements lo..hi of the update of kind K: one loop per kind, with its own copy of the scalars (no
// aliasing with the buffers), so the compiler vectorizes the element update.
template <OptimizerUpdate::Kind K>
ONNXDP_CPU_CLONES void update_range(OptimizerUpdate u, float clip, float* p, float* g, float* m, float* v, int64_t lo,
                                    int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) optimizer_update_of<K>(u, clip, p, g, m, v, i);
}

// The sum of g[lo..hi)^2 in double, in 4 lanes (lane l takes elements lo + l, lo + l + 4, ...),
// combined as (l0 + l1) + (l2 + l3), then the tail in order.
ONNXDP_CPU_CLONES double squares_sum(const float* g, int64_t lo, int64_t hi) {
  double l[4] = {0, 0, 0, 0};
  int64_t i = lo;
  for (; i + 4 <= hi; i += 4)
    for (int k = 0; k < 4; ++k) l[k] += double(g[i + k]) * double(g[i + k]);
  double s = (l[0] + l[1]) + (l[2] + l[3]);
  for (; i < hi; ++i) s += double(g[i]) * double(g[i]);
  return s;
}

// sum(g[i]^2) over the flat gradient: chunks of a fixed size summed by the threads, then added in
// order, so the value is the same on any number of threads.
double squared_norm(const float* g, int64_t n) {
  constexpr int64_t kChunk = int64_t(1) << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(size_t(chunks), 0.0);
  parallel_for(chunks, n > parallel_min_elements(), [&](int64_t c) {
    part[size_t(c)] = squares_sum(g, c * kChunk, std::min(n, (c + 1) * kChunk));
  });
  double sq = 0;
  for (double x : part) sq += x;
  return sq;
}
}  // namespace

double host_squared_norm(const float* g, int64_t n) { return squared_norm(g, n); }

double host_optimizer_step(const OptimizerUpdate& u, float* p, float* g, float* m, float* v, int64_t n) {
  const double sq = squared_norm(g, n);
  host_optimizer_apply(u, sq, p, g, m, v, n);
  return sq;
}

void host_optimizer_apply(const OptimizerUpdate& u, double sq, float* p, float* g, float* m, float* v, int64_t n) {
  if (skips_step(u, sq)) return;
  const float clip = clip_factor(u, sq);
  auto loop = [&]<OptimizerUpdate::Kind K>() {
    split_rows(n, n > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) { update_range<K>(u, clip, p, g, m, v, lo, hi); });
  };
  switch (u.kind) {
    case OptimizerUpdate::Kind::sgd: loop.template operator()<OptimizerUpdate::Kind::sgd>(); break;
    case OptimizerUpdate::Kind::momentum: loop.template operator()<OptimizerUpdate::Kind::momentum>(); break;
    case OptimizerUpdate::Kind::adam: loop.template operator()<OptimizerUpdate::Kind::adam>(); break;
  }
}

}  // namespace onnxdp
