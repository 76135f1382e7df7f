// The emulated device's stream (DeviceKind::cuda_emulated, exec/cuda/backend.cpp): a queue of
// closures that one host thread of its own runs in order while the caller goes on, as a CUDA
// stream runs its kernels while the host queues more. Events are positions in a stream's queue:
// record() marks what is queued so far, and wait(e) on another stream holds that stream's later
// work until the marked work ran (cudaEventRecord / cudaStreamWaitEvent). So a missing event wait,
// or a buffer reused before a queued collective read it, gives a wrong result here too, on a
// machine without a GPU.
//
//   HostStream compute("compute"), comm("comm");
//   compute.enqueue([&] { produce(x); });
//   comm.wait(compute.record());             // comm's next closure starts after produce(x)
//   comm.enqueue([&] { all_reduce(x); });
//   compute.wait(comm.record());
//   compute.enqueue([&] { consume(x); });
//   compute.synchronize();                   // consume(x) ran; rethrows a closure's error
//
// A closure that throws is the stream's error (CUDA's sticky error): the closures after it are
// skipped (counted as run, so waits on them end), and the next synchronize() rethrows it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace onnxdp::cuda {

class HostStream;

// A recorded event: done once `stream` has run its first `ticket` closures. Default: never
// recorded, done at once (as waiting for a CUDA event never recorded returns at once).
struct HostEvent {
  HostStream* stream = nullptr;
  uint64_t ticket = 0;
};

class HostStream {
 public:
  explicit HostStream(std::string name);
  // Runs what is queued (an error left is dropped: nobody is there to hear it), then stops the thread.
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  const std::string& name() const { return name_; }
  void enqueue(std::function<void()> work);
  // The position after everything queued so far.
  HostEvent record();
  // The work queued after this call starts once e is done (e of this stream: nothing to wait for).
  void wait(HostEvent e);
  bool done(HostEvent e) const;
  // Milliseconds this stream's thread spent held by waits on other streams' events since the last
  // call (the emulated device's comm_wait_ms: the compute stream waiting for the collectives).
  double take_waited_ms();
  // Blocks until every closure queued ran, calling poll about every millisecond meanwhile (it may
  // throw to stop waiting: an aborted world). Rethrows the first error since the last synchronize.
  void synchronize(const std::function<void()>& poll = {});
  // Blocks until every closure queued ran; never throws (what a release before freeing needs).
  void drain();
  bool idle() const;

 private:
  void main();
  // Blocks the calling thread (another stream's) until this stream ran `ticket` closures.
  void wait_for_ticket(uint64_t ticket) const;

  std::string name_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // work queued, work run, or stop
  std::deque<std::function<void()>> queue_;
  uint64_t queued_ = 0, done_ = 0;  // closures ever queued / run (or skipped after an error)
  std::exception_ptr error_;
  std::atomic<int64_t> waited_ns_{0};
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace onnxdp::cuda
