// TensorBoard event files without TensorFlow: the Event / Summary protobuf messages are encoded
// by hand and framed as TFRecords, so `tensorboard --logdir DIR` shows onnxdp's scalars.
//
// Tags the trainer writes (one point per logged step):
//   train/loss            loss of the global batch, before the update
//   train/learning_rate   the scheduled learning rate of the step
//   train/grad_norm       global L2 norm of the gradients (before clipping)
//   perf/samples_per_s    global samples per second of the step
//   perf/comm_wait_ms     milliseconds the step waited on collectives
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace onnxdp {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it.
// crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
// TFRecord's masked form of a CRC: rotate right by 15, add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

// Seconds since the Unix epoch, with sub-second resolution (an Event's wall_time).
double unix_time_now();

class TensorBoardWriter {
 public:
  // Creates dir when missing and opens dir/events.out.tfevents.<unix-seconds>.<hostname>.onnxdp,
  // whose first record says file_version "brain.Event:2". Failures name the path.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // flushes and closes; never throws
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event with one Summary.Value{tag, simple_value}.
  void scalar(const std::string& tag, int64_t step, float value, double wall_time = unix_time_now());
  // Hands buffered records to the OS, so a running TensorBoard sees them.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);  // one TFRecord around an encoded Event
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace onnxdp
