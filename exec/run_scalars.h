// The scalars of a run that change from run to run, as a device plan keeps them in device memory
// (written before every run, RunState::device): a kernel recorded into a replayed CUDA graph reads
// them there. Host and device code include this.
#pragma once
#include <cstddef>
#include <cstdint>

namespace onnxdp {

struct RunScalars {
  uint64_t seed = 0, step = 0;
  int64_t batch_offset = 0, sample_offset = 0;
};

// Bad data that device kernels find (an index out of range) is recorded in a plan's check slots
// (RunState::device_checks) instead of stopping the stream or the host waiting per kernel: the
// Plan clears them before each run (inside its recording) and reads one word after it, and fails
// with the node's message. 64-bit slots: [0] ~(position of the first failing node in the plan),
// then per node k: [1 + 2k] ~(its first bad element), [2 + 2k] the value found there. Zero means
// none; a maximum over the complements keeps the smallest node and element (deterministic).
inline constexpr size_t device_check_slots(size_t nodes) { return 1 + 2 * nodes; }

}  // namespace onnxdp
