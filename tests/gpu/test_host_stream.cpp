// The emulated device's streams (exec/cuda/host_stream.h): closures run in order on a thread of
// their own while the caller goes on, events order two streams, errors are sticky and reported by
// synchronize, and a wait that would never end can be stopped. The first case is the point of it:
// a consumer that forgets the event wait reads the producer's buffer before the producer wrote it.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "exec/cuda/host_stream.h"
#include "tests/test_util.h"

using namespace onnxdp;
using onnxdp::cuda::HostEvent;
using onnxdp::cuda::HostStream;

namespace {

// Producer on one stream (slow: 50 ms before it writes 1 to x), consumer on another reading x,
// with or without the event wait between them. Returns what the consumer read.
int consumer_reads(bool wait_for_producer) {
  HostStream producer("producer"), consumer("consumer");
  std::atomic<int> x{0}, seen{-1};
  producer.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    x = 1;
  });
  if (wait_for_producer) consumer.wait(producer.record());
  consumer.enqueue([&] { seen = x.load(); });
  consumer.synchronize();
  producer.synchronize();
  return seen;
}

}  // namespace

TEST_CASE("host stream: a missing event wait reads the buffer before it was written, the wait fixes it") {
  CHECK(consumer_reads(false) == 0);  // the race the emulated device now shows
  CHECK(consumer_reads(true) == 1);
}

TEST_CASE("host stream: the time a stream is held by a wait on another is counted (comm_wait_ms)") {
  HostStream comm("comm"), compute("compute");
  comm.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(80)); });
  compute.wait(comm.record());
  compute.enqueue([] {});
  compute.synchronize();
  const double held = compute.take_waited_ms();
  CHECK(held >= 40.0);  // most of the 80 ms (the wait was queued while comm's closure slept)
  CHECK(held < 5000.0);
  CHECK(compute.take_waited_ms() == 0.0);  // taken
  CHECK(comm.take_waited_ms() == 0.0);     // comm never waited
  // A wait on work already done holds nothing.
  compute.wait(comm.record());
  compute.synchronize();
  CHECK(compute.take_waited_ms() < 20.0);
}

TEST_CASE("host stream: closures run in order on the stream's thread while the caller goes on") {
  HostStream s("s");
  std::vector<int> order;
  std::atomic<bool> release{false};
  std::thread::id ran_on;
  s.enqueue([&] {
    ran_on = std::this_thread::get_id();
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  for (int i = 0; i < 1000; ++i) s.enqueue([&order, i] { order.push_back(i); });
  CHECK(!s.idle());  // enqueue returned while the first closure still blocks the stream
  const HostEvent mid = s.record();
  CHECK(!s.done(mid));
  release = true;
  s.synchronize();
  CHECK(s.done(mid));
  CHECK(s.idle());
  CHECK(ran_on != std::this_thread::get_id());
  REQUIRE(order.size() == 1000);
  for (int i = 0; i < 1000; ++i) CHECK(order[size_t(i)] == i);
  CHECK(s.done(HostEvent{}));  // an event never recorded is done
}

TEST_CASE("host stream: an error skips the work after it, synchronize rethrows it once, waits on it end") {
  HostStream a("a"), b("b");
  int ran = 0;
  a.enqueue([] { throw Error("node 'k' (Gather): index 7 out of range"); });
  a.enqueue([&] { ++ran; });  // skipped: the stream failed
  b.wait(a.record());         // ends although the work it waits for was skipped
  b.enqueue([&] { ++ran; });
  b.synchronize();
  CHECK(ran == 1);
  CHECK(test::contains(test::error_of([&] { a.synchronize(); }), "index 7 out of range"));
  a.synchronize();  // reported: the stream runs again
  a.enqueue([&] { ++ran; });
  a.synchronize();
  CHECK(ran == 2);
}

TEST_CASE("host stream: a host wait is stopped by its poll, a drain never throws") {
  HostStream s("s");
  std::atomic<bool> release{false};
  s.enqueue([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  int polls = 0;
  const std::string e = test::error_of([&] {
    s.synchronize([&] {
      if (++polls == 20) throw Error("replica 1 failed: on purpose");
    });
  });
  CHECK(test::contains(e, "replica 1 failed"));
  CHECK(polls == 20);
  release = true;
  s.enqueue([] { throw Error("left for synchronize"); });
  s.drain();
  CHECK(s.idle());
  CHECK(test::contains(test::error_of([&] { s.synchronize(); }), "left for synchronize"));
}
#endif
