// In-process Communicator: collectives, asynchronous order, determinism, and failures that end in
// clear errors instead of hangs. Expected values are closed forms (sums of small integers, exact in
// floating point) or the replica-order sum computed here in a plain loop.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "graph/error.h"
#include "graph/tensor.h"
#include "parallel/communicator.h"
#include "parallel/spin_condition.h"

using namespace onnxdp;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs body on every replica and returns each replica's error message ("" when it returned).
std::vector<std::string> run_collect(CommWorld& world, const std::function<void(Communicator&)>& body) {
  std::vector<std::string> errors(world.size());
  try {
    run_replicas(world, [&](Communicator& c) {
      try {
        body(c);
      } catch (const std::exception& e) {
        errors[c.rank()] = e.what();
        throw;
      }
    });
  } catch (const std::exception&) {
  }
  return errors;
}

// Replica j's all_gather input: lengths differ between replicas.
std::string gather_tag(int j) {
  std::string s = "r";
  s += std::to_string(j);
  s.append(j * 5, 'x');
  return s;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("communicator: in-process world has ranks 0..N-1") {
  auto world = make_in_process_world(3);
  REQUIRE(world.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(world[i]->rank() == i);
    CHECK(world[i]->size() == 3);
  }
  CHECK_THROWS_AS(make_in_process_world(0), Error);
  CommOptions bad;
  bad.timeout_s = 0;
  CHECK_THROWS_AS(make_in_process_world(2, bad), Error);
}

TEST_CASE("communicator: all_reduce_sum f32 f64 i64 i32 for 1 to 5 replicas") {
  for (int n = 1; n <= 5; ++n) {
    CAPTURE(n);
    auto world = make_in_process_world(n);
    const int64_t tri = int64_t(n) * (n + 1) / 2;
    std::atomic<int> bad{0};
    run_replicas(world, [&](Communicator& c) {
      int r = c.rank();
      // Sizes around the 16-element slices and the 2048-element blocks of the reduction.
      for (int64_t count : {1, 7, 16, 17, 63, 2048, 2049, 10007}) {
        std::vector<float> f(count);
        for (int64_t i = 0; i < count; ++i) f[i] = float((i % 101) * (r + 1));
        c.all_reduce_sum(f.data(), count, DType::f32);
        for (int64_t i = 0; i < count; ++i) bad += f[i] != float((i % 101) * tri);
      }
      std::vector<double> d(333);
      for (int i = 0; i < 333; ++i) d[i] = 0.5 * i * (r + 1);
      c.all_reduce_sum(d.data(), d.size(), DType::f64);
      for (int i = 0; i < 333; ++i) bad += d[i] != 0.5 * i * tri;
      // i64 past 2^53: no detour through double.
      std::vector<int64_t> q(50);
      for (int i = 0; i < 50; ++i) q[i] = (int64_t(1) << 55) + r * 1000 + i;
      c.all_reduce_sum(q.data(), q.size(), DType::i64);
      for (int i = 0; i < 50; ++i) bad += q[i] != n * (int64_t(1) << 55) + 1000 * (tri - n) + int64_t(n) * i;
      std::vector<int32_t> k(40);
      for (int i = 0; i < 40; ++i) k[i] = r - i;
      c.all_reduce_sum(k.data(), k.size(), DType::i32);
      for (int i = 0; i < 40; ++i) bad += k[i] != int32_t(tri - n) - n * i;
      c.all_reduce_sum(nullptr, 0, DType::f32);  // zero elements: a no-op collective
    });
    CHECK(bad == 0);
  }
}

TEST_CASE("communicator: f32 sums are in replica order and bit-identical on every replica") {
  // Values of very different magnitudes: the result depends on the order of the additions.
  const int n = 4;
  const int64_t count = 50000;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < count; ++i) inputs[r][i] = u(gen) * (r == 1 ? 1e8f : 1.0f) + (r == 2 ? 1e-3f : 0.0f);
  std::vector<float> expected(count);
  for (int64_t i = 0; i < count; ++i) {
    float s = inputs[0][i];
    for (int r = 1; r < n; ++r) s += inputs[r][i];
    expected[i] = s;
  }
  for (int rep = 0; rep < 3; ++rep) {
    auto world = make_in_process_world(n);
    std::vector<std::vector<float>> out(n);
    run_replicas(world, [&](Communicator& c) {
      std::vector<float> x = inputs[c.rank()];
      c.all_reduce_sum(x.data(), count, DType::f32);
      out[c.rank()] = x;
    });
    for (int r = 0; r < n; ++r) CHECK(std::memcmp(out[r].data(), expected.data(), count * sizeof(float)) == 0);
  }
}

// --zero-stage 1's collectives: each replica's part of a reduce-scatter holds the bits the
// replica-order sum gives (blocking, asynchronous, and parts of zero elements), and all_gather_parts
// puts every replica's part into every buffer.
TEST_CASE("communicator: reduce_scatter_sum gives each replica its part's sums, all_gather_parts its peers' parts") {
  const int n = 4;
  const std::vector<int64_t> counts = {700, 0, 1301, 37};  // a replica may own none of a bucket
  int64_t count = 0;
  for (int64_t k : counts) count += k;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(size_t(count)));
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < count; ++i) inputs[r][i] = u(gen) * (r == 1 ? 1e7f : 1.0f);
  std::vector<float> expected(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    float s = inputs[0][i];
    for (int r = 1; r < n; ++r) s += inputs[r][i];
    expected[i] = s;
  }
  auto world = make_in_process_world(n);
  std::vector<std::vector<float>> blocking(n), async(n), gathered(n);
  run_replicas(world, [&](Communicator& c) {
    const int r = c.rank();
    std::vector<float> x = inputs[r], y = inputs[r];
    c.reduce_scatter_sum(x.data(), counts, DType::f32);
    Communicator::Handle h = c.start_reduce_scatter_sum(y.data(), counts, DType::f32);
    c.wait(h);
    blocking[r] = x;
    async[r] = y;
    // Each replica's own part (its reduced values) gathered into every buffer: the whole sum.
    c.all_gather_parts(x.data(), counts, DType::f32);
    gathered[r] = x;
  });
  int64_t part = 0;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const size_t bytes = size_t(counts[size_t(r)]) * sizeof(float);
    if (bytes) {
      CHECK(std::memcmp(blocking[r].data() + part, expected.data() + part, bytes) == 0);
      CHECK(std::memcmp(async[r].data() + part, expected.data() + part, bytes) == 0);
    }
    CHECK(std::memcmp(gathered[r].data(), expected.data(), size_t(count) * sizeof(float)) == 0);
    part += counts[size_t(r)];
  }
  CHECK_THROWS_WITH_AS(world[0]->reduce_scatter_sum(nullptr, {1, 2}, DType::f32), doctest::Contains("2 parts for a world of 4"), Error);
}

// --grad-dtype bf16: bfloat16 sums added in replica order in float and rounded once.
TEST_CASE("communicator: bfloat16 all-reduce sums in float and rounds once") {
  const int n = 3;
  const std::vector<float> vals = {1.0f, 0.00390625f, 0.00390625f};  // 1 + 2^-8 + 2^-8 = 1 + 2^-7: bf16 holds it
  auto world = make_in_process_world(n);
  std::vector<uint16_t> out(n);
  run_replicas(world, [&](Communicator& c) {
    uint16_t x = f32_to_bf16(vals[size_t(c.rank())]);
    c.all_reduce_sum(&x, 1, DType::bf16);
    out[size_t(c.rank())] = x;
  });
  // Rounded after each addition it would stay 1 (1 + 2^-8 ties to even in bf16's 8 bits).
  for (uint16_t x : out) CHECK(bf16_to_f32(x) == 1.0f + 0.0078125f);
}

// The replicas that wait while replica 0 evaluates or writes a checkpoint: an idle barrier outlasts
// --comm-timeout (where a plain barrier reports the late replica), and still fails at once when a
// replica dies.
TEST_CASE("communicator: idle_barrier waits past the timeout for a slow replica, not for a dead one") {
  CommOptions opts;
  opts.timeout_s = 0.3;
  for (const bool idle : {true, false}) {
    CAPTURE(idle);
    auto world = make_in_process_world(3, opts);
    const std::vector<std::string> errors = run_collect(world, [&](Communicator& c) {
      if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(900));
      if (idle) c.idle_barrier();
      else c.barrier();
    });
    if (idle) {
      for (const std::string& e : errors) CHECK(e.empty());
    } else {
      CHECK(errors[1].find("did not reach") != std::string::npos);
    }
  }
  auto world = make_in_process_world(3, opts);
  const auto t0 = Clock::now();
  const std::vector<std::string> errors = run_collect(world, [&](Communicator& c) {
    if (c.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      fail("replica 0 broke");
    }
    c.idle_barrier();
  });
  CHECK(seconds_since(t0) < 5);
  CHECK(errors[1].find("aborted") != std::string::npos);
  std::string why;  // what a GPU stream's wait polls (exec/cuda/backend.cpp's wait_for)
  CHECK(world[2]->aborted(&why));
  CHECK(why.find("replica 0 broke") != std::string::npos);
  CHECK(!make_in_process_world(2)[0]->aborted());
}

TEST_CASE("communicator: broadcast from every root and all_gather of different sizes") {
  const int n = 3;
  auto world = make_in_process_world(n);
  std::atomic<int> bad{0};
  run_replicas(world, [&](Communicator& c) {
    int r = c.rank();
    for (int root = 0; root < n; ++root) {
      std::vector<uint8_t> buf(1001, uint8_t(200 + r));
      if (r == root)
        for (int i = 0; i < 1001; ++i) buf[i] = uint8_t(root * 17 + i);
      c.broadcast(buf.data(), buf.size(), root);
      for (int i = 0; i < 1001; ++i) bad += buf[i] != uint8_t(root * 17 + i);
    }
    c.broadcast(nullptr, 0, 1);
    std::string mine = gather_tag(r);
    std::vector<std::vector<uint8_t>> all;
    c.all_gather_bytes(mine.data(), mine.size(), all);
    bad += all.size() != size_t(n);
    for (int j = 0; j < n; ++j)
      bad += std::string(all[j].begin(), all[j].end()) != gather_tag(j);
    c.barrier();
  });
  CHECK(bad == 0);
  CHECK_THROWS_WITH_AS(world[0]->broadcast(nullptr, 0, 3), doctest::Contains("root 3"), Error);
  std::vector<uint16_t> h(4);
  CHECK_THROWS_WITH_AS(world[0]->all_reduce_sum(h.data(), 4, DType::f16), doctest::Contains("f16"), Error);
}

TEST_CASE("communicator: asynchronous all-reduces run in order and mix with blocking calls") {
  const int n = 3;
  auto world = make_in_process_world(n);
  std::atomic<int> bad{0};
  run_replicas(world, [&](Communicator& c) {
    int r = c.rank();
    // Buckets of different dtypes and sizes, started in order, waited in reverse.
    std::vector<std::vector<float>> f(5);
    std::vector<int64_t> q(10, r);
    std::vector<Communicator::Handle> hs;
    for (int b = 0; b < 5; ++b) {
      f[b].assign(100 + 1000 * b, float(b + 1) * (r + 1));
      hs.push_back(c.start_all_reduce_sum(f[b].data(), f[b].size(), DType::f32));
    }
    auto hq = c.start_all_reduce_sum(q.data(), q.size(), DType::i64);
    // A blocking collective after queued ones: it waits for them, so the order is the same everywhere.
    int64_t one = 1;
    c.all_reduce_sum(&one, 1, DType::i64);
    bad += one != n;
    c.wait(hq);
    for (int64_t v : q) bad += v != n * (n - 1) / 2;
    for (int b = 4; b >= 0; --b) {
      c.wait(hs[b]);
      for (float v : f[b]) bad += v != float(b + 1) * (n * (n + 1) / 2);
    }
    c.wait(hs[0]);                   // waiting twice returns at once
    c.wait(Communicator::Handle{});  // the empty handle too
    // wait_all collects everything not waited yet.
    std::vector<double> d(7, 1.0);
    c.start_all_reduce_sum(d.data(), 7, DType::f64);
    c.start_all_reduce_sum(d.data(), 7, DType::f64);  // same buffer: the second sees the first's result
    c.wait_all();
    for (double v : d) bad += v != double(n) * n;
  });
  CHECK(bad == 0);
}

TEST_CASE("communicator: SpinCondition loses no wake-up, whether its waiters spin or sleep") {
  // Two threads take turns 20000 times, each waiting for the other's turn: a wake-up lost between
  // a waiter's check and its sleep (or its spin) would stall the game until its 60 s deadline.
  // (20 s was too short for the spinning mode on 2 busy cores: 18-26 s while CTest ran beside it.)
  enum Mode { kSleep, kSpin, kDefault };
  for (Mode mode : {kSleep, kSpin, kDefault}) {
    CAPTURE(int(mode));
    SpinCondition cond;
    std::mutex mu;
    int turn = 0;
    constexpr int kTurns = 20000;
    std::atomic<int> timeouts{0};
    const auto t0 = Clock::now(), deadline = t0 + std::chrono::seconds(60);
    auto player = [&](int me) {
      for (int t = me; t < kTurns; t += 2) {
        std::unique_lock<std::mutex> lk(mu);
        if (mode == kDefault) {
          cond.wait(lk, [&] { return turn == t; });
        } else {
          const auto spin_until = mode == kSpin ? deadline : Clock::now();
          while (turn != t)
            if (!cond.wait_until(lk, spin_until, deadline) && turn != t) {
              ++timeouts;
              return;
            }
        }
        ++turn;
        cond.notify_all();
      }
    };
    std::thread other(player, 1);
    player(0);
    other.join();
    CHECK(timeouts == 0);
    CHECK(turn == kTurns);
    CHECK(seconds_since(t0) < 60.0);
  }

  // With no notify_all, wait_until reports the deadline, not before it, and a spin longer than
  // the deadline does not delay it.
  SpinCondition cond;
  std::mutex mu;
  std::unique_lock<std::mutex> lk(mu);
  for (auto spin : {std::chrono::milliseconds(0), std::chrono::milliseconds(5), std::chrono::milliseconds(5000)}) {
    CAPTURE(spin.count());
    const auto t0 = Clock::now(), deadline = t0 + std::chrono::milliseconds(20);
    int calls = 0;
    while (cond.wait_until(lk, t0 + spin, deadline)) REQUIRE(++calls < 1000);
    CHECK(Clock::now() >= deadline);
    CHECK(seconds_since(t0) < 2.5);
    CHECK(lk.owns_lock());
  }
}

TEST_CASE("communicator: comm_wait_ms counts time blocked in wait") {
  auto world = make_in_process_world(2);
  std::atomic<bool> started{false};
  run_replicas(world, [&](Communicator& c) {
    float x = 1;
    if (c.rank() == 0) {
      auto h = c.start_all_reduce_sum(&x, 1, DType::f32);
      started = true;
      c.wait(h);  // replica 1 joins 80 ms after this point: blocked about that long
    } else {
      while (!started) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
      c.wait(c.start_all_reduce_sum(&x, 1, DType::f32));
    }
  });
  CHECK(world[0]->comm_wait_ms() >= 40.0);
  world[0]->reset_comm_wait_ms();
  CHECK(world[0]->comm_wait_ms() == 0.0);
}

TEST_CASE("communicator: the asynchronous all-reduce completes while the caller computes") {
  // Replica 0 starts its all-reduce and "computes" (does not call wait) until replica 1 has seen
  // the result: the communication thread did the work, so replica 0's wait finds it done.
  auto world = make_in_process_world(2);
  std::atomic<bool> done_on_1{false};
  std::vector<float> x0(1 << 16, 1.0f), x1(1 << 16, 2.0f);
  run_replicas(world, [&](Communicator& c) {
    if (c.rank() == 0) {
      auto h = c.start_all_reduce_sum(x0.data(), x0.size(), DType::f32);
      while (!done_on_1) std::this_thread::yield();
      c.wait(h);
    } else {
      c.wait(c.start_all_reduce_sum(x1.data(), x1.size(), DType::f32));
      done_on_1 = true;
    }
  });
  CHECK(x0[12345] == 3.0f);
  CHECK(x1[12345] == 3.0f);
  CHECK(world[0]->comm_wait_ms() < 50.0);
}

TEST_CASE("communicator: a replica that throws makes the others fail at once") {
  const int n = 4;
  auto world = make_in_process_world(n);  // default timeout: 300 s
  auto t0 = Clock::now();
  std::string root_cause;
  std::vector<std::string> errors(n);
  try {
    run_replicas(world, [&](Communicator& c) {
      try {
        std::vector<float> x(100, 1.0f);
        c.all_reduce_sum(x.data(), x.size(), DType::f32);
        if (c.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          throw Error("boom in replica 2");
        }
        auto h = c.start_all_reduce_sum(x.data(), x.size(), DType::f32);
        c.wait(h);
      } catch (const std::exception& e) {
        errors[c.rank()] = e.what();
        throw;
      }
    });
  } catch (const Error& e) {
    root_cause = e.what();
  }
  CHECK(seconds_since(t0) < 10.0);
  CHECK(root_cause == "boom in replica 2");
  for (int r : {0, 1, 3}) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "all_reduce #2 (100 f32) aborted: replica 2 failed: boom in replica 2"));
  }
  // The communicators are unusable afterwards: every call fails at once.
  float y = 0;
  CHECK_THROWS_WITH_AS(world[0]->all_reduce_sum(&y, 1, DType::f32), doctest::Contains("unusable"), Error);
}

TEST_CASE("communicator: a missing replica ends in a timeout naming it") {
  CommOptions opts;
  opts.timeout_s = 0.3;
  auto world = make_in_process_world(3, opts);
  std::vector<std::string> errors(3);
  std::vector<double> took(3, 0);
  std::atomic<int> failed{0};
  run_collect(world, [&](Communicator& c) {
    auto t0 = Clock::now();
    std::vector<float> x(4, 1.0f);
    c.barrier();
    try {
      if (c.rank() == 1) {
        // "Stuck" elsewhere until the others gave up (at most 5 s).
        while (failed < 2 && seconds_since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return;
      }
      c.all_reduce_sum(x.data(), x.size(), DType::f32);
    } catch (const std::exception& e) {
      took[c.rank()] = seconds_since(t0);
      errors[c.rank()] = e.what();
      ++failed;
      throw;
    }
  });
  // Replica 0 or 2 times out first and aborts the group; both name replica 1 and the collective.
  for (int r : {0, 2}) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "replica 1 did not reach all_reduce #2 (4 f32) within 0.3 s: it may have died"));
    CHECK(took[r] < 1.2);
  }
}

TEST_CASE("communicator: a timeout also bounds asynchronous all-reduces") {
  CommOptions opts;
  opts.timeout_s = 0.2;
  auto world = make_in_process_world(2, opts);
  std::string error;
  std::atomic<bool> failed{false};
  run_collect(world, [&](Communicator& c) {
    if (c.rank() == 1) {
      auto t0 = Clock::now();
      while (!failed && seconds_since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    float x = 1;
    auto h = c.start_all_reduce_sum(&x, 1, DType::f32);
    try {
      c.wait(h);
    } catch (const Error& e) {
      error = e.what();
    }
    failed = true;
    // Queued work after the failure fails at once.
    CHECK_THROWS_WITH_AS(c.wait(c.start_all_reduce_sum(&x, 1, DType::f32)), doctest::Contains("unusable"), Error);
  });
  CHECK(contains(error, "replica 1 did not reach all_reduce #1 (1 f32) within 0.2 s"));
}

TEST_CASE("communicator: a replica that finished fails the others at once") {
  auto world = make_in_process_world(2);  // 300 s timeout: the test would hang without leave()
  auto t0 = Clock::now();
  std::vector<std::string> errors = run_collect(world, [&](Communicator& c) {
    float x = 1;
    c.all_reduce_sum(&x, 1, DType::f32);
    if (c.rank() == 0) c.all_reduce_sum(&x, 1, DType::f32);  // replica 1 has one step fewer
  });
  CHECK(seconds_since(t0) < 10.0);
  CAPTURE(errors[0]);
  CHECK(contains(errors[0], "replica 1 has finished (its last collective was all_reduce #1 (1 f32)) and will not "
                            "reach all_reduce #2 (1 f32)"));
  CHECK(errors[1].empty());
}

TEST_CASE("communicator: mismatched collectives are an error on every replica") {
  auto world = make_in_process_world(3);
  std::vector<std::string> errors = run_collect(world, [&](Communicator& c) {
    std::vector<float> x(10, 1.0f);
    c.all_reduce_sum(x.data(), 10, DType::f32);
    if (c.rank() == 2)
      c.all_reduce_sum(x.data(), 9, DType::f32);  // a different size
    else
      c.all_reduce_sum(x.data(), 10, DType::f32);
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(errors[r]);
    CHECK((contains(errors[r], "collective mismatch: replica 0 called all_reduce #2 (10 f32) while replica 2 called "
                               "all_reduce #2 (9 f32)")));
  }
  auto world2 = make_in_process_world(2);
  errors = run_collect(world2, [&](Communicator& c) {
    uint8_t b[4] = {0};
    if (c.rank() == 0)
      c.barrier();
    else
      c.broadcast(b, 4, 0);
  });
  for (int r = 0; r < 2; ++r) CHECK(contains(errors[r], "replica 0 called barrier #1 while replica 1 called broadcast #1"));
}

TEST_CASE("communicator: destroying a communicator with work in flight does not hang") {
  CommOptions opts;  // 300 s: a hang would show
  auto world = make_in_process_world(2, opts);
  auto t0 = Clock::now();
  std::vector<float> x(10, 1.0f);
  world[0]->start_all_reduce_sum(x.data(), x.size(), DType::f32);  // replica 1 never joins
  world[0].reset();
  CHECK(seconds_since(t0) < 10.0);
  float y = 0;
  CHECK_THROWS_WITH_AS(world[1]->all_reduce_sum(&y, 1, DType::f32), doctest::Contains("in flight"), Error);
}

TEST_CASE("communicator: launch detection and make_world without a launcher") {
  // Save and clear what a launcher sets.
  const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE",       "PMI_RANK",
                        "SLURM_STEP_ID",        "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",   "SLURM_PROCID"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : vars) {
    if (const char* x = std::getenv(v)) saved.emplace_back(v, x);
    unsetenv(v);
  }

  LaunchInfo li = detect_launch();
  CHECK(!li.launched);
  CHECK(li.size == 1);
  auto world = make_world(3);  // no launcher: an in-process world, MPI untouched
  CHECK(world.size() == 3);
  CHECK(world[0]->size() == 3);
  CHECK(contains(world[2]->describe(), "in-process replica 2 of 3"));

  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  li = detect_launch();
  CHECK(li.launched);
  CHECK(li.rank == 2);
  CHECK(li.size == 4);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");

  // A Slurm batch script alone (no srun step) is one process, not a launch.
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_PROCID", "0", 1);
  CHECK(!detect_launch().launched);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_STEP_NUM_TASKS", "8", 1);
  setenv("SLURM_PROCID", "5", 1);
  li = detect_launch();
  CHECK(li.launched);
  CHECK(li.rank == 5);
  CHECK(li.size == 8);
  if (!mpi_built()) CHECK_THROWS_WITH_AS(make_world(1), doctest::Contains("without MPI"), Error);
  setenv("SLURM_PROCID", "9", 1);
  CHECK_THROWS_WITH_AS(detect_launch(), doctest::Contains("inconsistent"), Error);

  for (const char* v : vars) unsetenv(v);
  for (auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
}

TEST_CASE("communicator: a world runs again after its replicas finished a run") {
  // run_replicas makes finished replicas leave; the next run brings them back.
  auto world = make_in_process_world(3);
  for (int run = 0; run < 3; ++run) {
    std::atomic<int> bad{0};
    run_replicas(world, [&](Communicator& c) {
      // Replica 0 is slow to start: the others must wait for it, not see it as finished.
      if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      int64_t x = c.rank() + run;
      c.all_reduce_sum(&x, 1, DType::i64);
      bad += x != 3 + 3 * run;
    });
    CHECK(bad == 0);
  }
}
