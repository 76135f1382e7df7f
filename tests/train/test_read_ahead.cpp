// train/read_ahead.h: the trainer's one reader thread. Jobs run one at a time on the same thread
// (not the caller's), in the order given, even when a caller drops a future before its job ends;
// what a job throws comes out of its future; the destructor waits for the job in hand.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "train/read_ahead.h"

namespace onnxdp {

TEST_CASE("read ahead: jobs run one at a time, in order, on one thread that is not the caller's") {
  ReadAhead<int> reader;
  std::atomic<int> running{0}, most{0};
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  const auto job = [&](int k) {
    return [&, k] {
      most = std::max(most.load(), ++running);
      std::this_thread::sleep_for(std::chrono::milliseconds(k % 2 ? 5 : 0));
      order.push_back(k);  // one job at a time: no lock needed if the reader keeps its promise
      threads.push_back(std::this_thread::get_id());
      --running;
      return k * k;
    };
  };
  std::future<int> kept = reader.run(job(1));
  for (int k = 2; k <= 6; ++k) {
    std::future<int> dropped = reader.run(job(k));  // dropped at once (the trainer's abandoned read)
    (void)dropped;
  }
  std::future<int> last = reader.run(job(7));
  CHECK(kept.get() == 1);
  CHECK(last.get() == 49);
  CHECK(most == 1);
  CHECK(order == std::vector<int>{1, 2, 3, 4, 5, 6, 7});
  for (const auto& id : threads) {
    CHECK(id == threads.front());
    CHECK(id != std::this_thread::get_id());
  }
}

TEST_CASE("read ahead: a job's error comes out of its future, and the reader goes on") {
  ReadAhead<int> reader;
  std::future<int> bad = reader.run([]() -> int { throw std::runtime_error("data 'x.npy': truncated"); });
  CHECK_THROWS_WITH_AS(bad.get(), "data 'x.npy': truncated", std::runtime_error);
  CHECK(reader.run([] { return 3; }).get() == 3);
}

TEST_CASE("read ahead: the destructor waits for the job in hand") {
  std::atomic<bool> done{false};
  {
    ReadAhead<int> reader;
    std::future<int> f = reader.run([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = true;
      return 0;
    });
    (void)f;
  }
  CHECK(done);
  ReadAhead<int> unused;  // never started: nothing to join
}

}  // namespace onnxdp
