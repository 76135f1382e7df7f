// The worker processes' communicator (parallel/workers.h) over socket pairs made here, its
// workers as threads: the sums are the in-process world's bits (worker order), broadcasts and
// gathers deliver what each worker gave, and a mismatched call, a closed socket or a silent peer
// end in errors naming the worker. The launcher end to end: tests/scripts/workers_train.py.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "graph/error.h"
#include "parallel/communicator.h"
#include "parallel/workers.h"

using namespace onnxdp;

namespace {

// n worker communicators joined as run_worker_processes joins its workers (worker 0 the hub).
CommWorld socket_world(int n, double timeout_s = 30.0) {
  std::vector<int> hub;
  std::vector<int> ends(static_cast<size_t>(n), -1);
  for (int k = 1; k < n; ++k) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    hub.push_back(sv[0]);
    ends[size_t(k)] = sv[1];
  }
  CommWorld world;
  CommOptions opts{timeout_s};
  world.push_back(make_worker_communicator(0, n, hub, opts));
  for (int k = 1; k < n; ++k) world.push_back(make_worker_communicator(k, n, {ends[size_t(k)]}, opts));
  return world;
}

// Runs body(rank, comm) on a thread per worker; returns each one's error ("" when it returned).
std::vector<std::string> run_each(CommWorld& world, const std::function<void(int, Communicator&)>& body) {
  std::vector<std::string> errors(world.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < world.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(int(r), *world[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        world[r]->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

TEST_CASE("worker sockets: all_reduce_sum adds in worker order, the same bits on every worker") {
  const int n = 4;
  CommWorld world = socket_world(n);
  // Values whose float sum depends on the order: 1e8 + 1 + 1 - 1e8 in worker order.
  const float term[n] = {1e8f, 1.0f, 1.0f, -1e8f};
  float expected = 0;
  expected = term[0];
  for (int k = 1; k < n; ++k) expected += term[k];
  std::vector<std::vector<float>> got(n);
  std::vector<std::vector<double>> big(n);
  auto errors = run_each(world, [&](int r, Communicator& c) {
    got[size_t(r)] = {term[r], float(r)};
    c.all_reduce_sum(got[size_t(r)].data(), 2, DType::f32);
    // Larger than a socket's buffer: the hub reads every worker's whole buffer before it answers.
    big[size_t(r)].assign(300000, double(r + 1));
    c.all_reduce_sum(big[size_t(r)].data(), int64_t(big[size_t(r)].size()), DType::f64);
    int64_t ints[3] = {r, 10, -r};
    c.all_reduce_sum(ints, 3, DType::i64);
    CHECK(ints[0] == 0 + 1 + 2 + 3);
    CHECK(ints[1] == 40);
    CHECK(ints[2] == -6);
  });
  for (int r = 0; r < n; ++r) {
    CHECK(errors[size_t(r)] == "");
    CHECK(std::memcmp(&got[size_t(r)][0], &expected, sizeof expected) == 0);
    CHECK(got[size_t(r)][1] == 6.0f);
    CHECK(big[size_t(r)].front() == 10.0);
    CHECK(big[size_t(r)].back() == 10.0);
  }
}

TEST_CASE("worker sockets: broadcast from any root, all_gather of different sizes, barriers, async all-reduces") {
  const int n = 3;
  CommWorld world = socket_world(n);
  auto errors = run_each(world, [&](int r, Communicator& c) {
    for (int root = 0; root < n; ++root) {
      std::string text = r == root ? "from " + std::to_string(root) : std::string(6, '?');
      c.broadcast(text.data(), text.size(), root);
      CHECK(text == "from " + std::to_string(root));
    }
    const std::string mine(size_t(r) * 5, char('a' + r));  // worker 0 gives nothing
    std::vector<std::vector<uint8_t>> all;
    c.all_gather_bytes(mine.data(), mine.size(), all);
    REQUIRE(all.size() == size_t(n));
    for (int k = 0; k < n; ++k) CHECK(std::string(all[size_t(k)].begin(), all[size_t(k)].end()) == std::string(size_t(k) * 5, char('a' + k)));
    c.barrier();
    c.idle_barrier();
    float a[2] = {1, float(r)}, b[1] = {2};
    auto ha = c.start_all_reduce_sum(a, 2, DType::f32);
    auto hb = c.start_all_reduce_sum(b, 1, DType::f32);
    c.wait(ha);
    c.wait(hb);
    CHECK(a[0] == 3);
    CHECK(a[1] == 3);
    CHECK(b[0] == 6);
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("worker sockets: a mismatched call names both calls") {
  CommWorld world = socket_world(2);
  auto errors = run_each(world, [&](int r, Communicator& c) {
    float x[3] = {0, 0, 0};
    c.all_reduce_sum(x, r == 0 ? 3 : 2, DType::f32);
  });
  CHECK(errors[0].find("collective mismatch: worker 1 called all_reduce #1 (2 f32) where worker 0 called "
                       "all_reduce #1 (3 f32)") != std::string::npos);
  CHECK(errors[1] != "");  // it learns from the closed socket
}

TEST_CASE("worker sockets: a worker that is gone or silent ends its peers' calls with its name") {
  SUBCASE("closed: at once") {
    CommWorld world = socket_world(3);
    const auto t0 = std::chrono::steady_clock::now();
    auto errors = run_each(world, [&](int r, Communicator& c) {
      if (r == 2) {
        world[2].reset();  // closes its socket, as a dead process's sockets close
        return;
      }
      float x = 1;
      c.all_reduce_sum(&x, 1, DType::f32);
    });
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
    CHECK(errors[0].find("worker 2 closed its connection during all_reduce #1") != std::string::npos);
    CHECK(errors[1] != "");
  }
  SUBCASE("silent: at the timeout") {
    CommWorld world = socket_world(2, 0.3);
    auto errors = run_each(world, [&](int r, Communicator& c) {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return;
      }
      c.barrier();
    });
    CHECK(errors[0].find("worker 1 did not reach barrier #1 within 0.3 s") != std::string::npos);
  }
}

TEST_CASE("worker sockets: the communicator refuses a wrong set of sockets") {
  CHECK_THROWS_WITH_AS(make_worker_communicator(0, 3, {}, CommOptions{}),
                       doctest::Contains("expected 2 socket(s) to the other workers, got 0"), Error);
}

TEST_CASE("worker processes: of workers that ended together, the one killed by a signal is named") {
  const int exit0 = W_EXITCODE(0, 0), exit1 = W_EXITCODE(1, 0), exit3 = W_EXITCODE(3, 0), killed = W_EXITCODE(0, SIGKILL);
  CHECK(worker_to_name({}) == -1);
  CHECK(worker_to_name({{0, exit0}, {1, exit0}}) == -1);
  // Worker 0 ended on its own when worker 1 was killed; waitpid gives worker 0 first.
  CHECK(worker_to_name({{0, exit1}, {1, killed}}) == 1);
  CHECK(worker_to_name({{1, killed}, {0, exit1}}) == 0);  // an index into the list, not a worker
  // No signal: the first failure in waitpid's order; a clean exit is never named.
  CHECK(worker_to_name({{0, exit0}, {2, exit3}, {1, exit1}}) == 1);
  // Two killed: the first of them.
  CHECK(worker_to_name({{0, exit1}, {2, killed}, {1, W_EXITCODE(0, SIGTERM)}}) == 1);
}
