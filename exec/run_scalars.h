// The scalars of a run that change from run to run, as a device plan keeps them in device memory
// (written before every run, RunState::device): a kernel recorded into a replayed CUDA graph reads
// them there. Host and device code include this.
#pragma once
#include <cstdint>

namespace onnxdp {

struct RunScalars {
  uint64_t seed = 0, step = 0;
  int64_t batch_offset = 0, sample_offset = 0;
};

}  // namespace onnxdp
