// The fused optimizer over the flat parameter buffer on CUDA: the gradient's squared global norm,
// and the update of exec/optimizer_update.h (the host loop's arithmetic) for every element.
#pragma once
#include <cstdint>

#include "exec/optimizer_update.h"

namespace onnxdp::cuda {

// Blocks of the first pass of squared_norm_launch: `partial` holds this many doubles.
inline constexpr int kNormBlocks = 512;

// *out (device) <- the sum of g[i]^2 in double: per-block sums in a fixed tree order into
// partial[0..kNormBlocks), then one thread adds those in order (deterministic).
void squared_norm_launch(const float* g, int64_t n, double* partial, double* out, void* stream);
// The same sum on the host (emulated device): sequential, in double, into *out.
void squared_norm_emulate(const float* g, int64_t n, double* out);

// optimizer_update(*u, clip_factor(*u, *squared_norm), p, g, m, v, i) for i < n; u and
// squared_norm in device memory, read when the kernel runs (a recorded step reads each step's).
void optimizer_launch(const OptimizerUpdate* u, const double* squared_norm, float* p, float* g, float* m, float* v,
                      int64_t n, void* stream);
void optimizer_emulate(const OptimizerUpdate* u, const double* squared_norm, float* p, float* g, float* m, float* v,
                       int64_t n);

}  // namespace onnxdp::cuda
