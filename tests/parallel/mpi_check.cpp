// mpi_check: the MPI world end to end, run under mpiexec by CTest (cmake/mpi.cmake).
//
//   mpiexec -np P mpi_check --local L [--expect-mpi 1]   every check below; prints "mpi_check: OK"
//   mpi_check --local L --expect-mpi 0                    no launcher: in-process world, MPI untouched
//   mpiexec -np 2 mpi_check --mode stall --timeout 2      MPI rank 1 skips a collective (stays alive):
//                                                         rank 0 must fail with the timeout message
//   mpiexec -np 2 mpi_check --mode die|kill               MPI rank 1 exits (or is killed) in the middle:
//                                                         the job must end with an error, not hang
//
// Expected values are computed here from closed forms (sums of small integers, exact in floating
// point) or from every replica's inputs regenerated locally in double precision, never by the
// communicator under test.
// The C API only: Open MPI's and MPICH's mpi.h otherwise pull in the deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "graph/error.h"
#include "parallel/communicator.h"

using namespace onnxdp;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw Error("check failed: " + what);
}

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// Replica r's contribution at element i of the big f32 test: deterministic, in [-1, 1).
float noise(int r, int64_t i) {
  uint64_t x = (uint64_t(r) + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(i) * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<float>((x >> 40) * (1.0 / double(1ull << 24)) * 2.0 - 1.0);
}

// Every replica's results must be the same bits: compare hashes across the world.
void require_identical(Communicator& comm, const void* data, size_t bytes, const std::string& what) {
  uint64_t h = fnv1a(data, bytes);
  std::vector<std::vector<uint8_t>> all;
  comm.all_gather_bytes(&h, sizeof h, all);
  for (size_t j = 0; j < all.size(); ++j)
    require(all[j].size() == sizeof h && std::memcmp(all[j].data(), &h, sizeof h) == 0,
            fmt::format("{}: replica {} holds different bits than replica {}", what, j, comm.rank()));
}

void full_check(Communicator& comm, int expected_size) {
  const int r = comm.rank(), n = comm.size();
  require(n == expected_size, fmt::format("world size {} != expected {}", n, expected_size));
  const int64_t tri = int64_t(n) * (n + 1) / 2;  // sum of (r + 1) over replicas

  // all_gather of different lengths: replica j sends "replica j" + j dots.
  std::string mine = fmt::format("replica {}", r) + std::string(r, '.');
  std::vector<std::vector<uint8_t>> all;
  comm.all_gather_bytes(mine.data(), mine.size(), all);
  require(int(all.size()) == n, "all_gather size");
  for (int j = 0; j < n; ++j) {
    std::string want = fmt::format("replica {}", j) + std::string(j, '.');
    require(std::string(all[j].begin(), all[j].end()) == want, fmt::format("all_gather entry {}", j));
  }

  // f32: (i % 97) * (r + 1), sum = (i % 97) * n(n+1)/2, exact.
  std::vector<float> f(1003);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float((i % 97) * (r + 1));
  comm.all_reduce_sum(f.data(), f.size(), DType::f32);
  for (size_t i = 0; i < f.size(); ++i) require(f[i] == float((i % 97) * tri), fmt::format("f32 sum at {}", i));

  // f64: 0.25 * i * (r + 1), exact.
  std::vector<double> d(517);
  for (size_t i = 0; i < d.size(); ++i) d[i] = 0.25 * i * (r + 1);
  comm.all_reduce_sum(d.data(), d.size(), DType::f64);
  for (size_t i = 0; i < d.size(); ++i) require(d[i] == 0.25 * i * tri, fmt::format("f64 sum at {}", i));

  // i64 beyond 2^53 (no detour through double): 2^40 (r + 1) + i.
  std::vector<int64_t> q(301);
  for (size_t i = 0; i < q.size(); ++i) q[i] = (int64_t(1) << 40) * (r + 1) + int64_t(i) * 3;
  comm.all_reduce_sum(q.data(), q.size(), DType::i64);
  for (size_t i = 0; i < q.size(); ++i)
    require(q[i] == (int64_t(1) << 40) * tri + int64_t(i) * 3 * n, fmt::format("i64 sum at {}", i));

  // i32, negative values.
  std::vector<int32_t> k(77);
  for (size_t i = 0; i < k.size(); ++i) k[i] = r - int32_t(i);
  comm.all_reduce_sum(k.data(), k.size(), DType::i32);
  for (size_t i = 0; i < k.size(); ++i) require(k[i] == n * (n - 1) / 2 - n * int32_t(i), fmt::format("i32 sum at {}", i));

  // Zero elements: a valid no-op collective.
  comm.all_reduce_sum(nullptr, 0, DType::f32);

  // A large f32 buffer (MPI picks its large-message algorithms): close to the double-precision sum
  // of every replica's inputs, and the same bits on every replica.
  const int64_t big = 3'000'001;
  std::vector<float> b(big);
  for (int64_t i = 0; i < big; ++i) b[i] = noise(r, i);
  comm.all_reduce_sum(b.data(), big, DType::f32);
  for (int64_t i = 0; i < big; i += 997) {
    double ref = 0, mag = 0;
    for (int j = 0; j < n; ++j) ref += noise(j, i), mag += std::fabs(noise(j, i));
    require(std::fabs(b[i] - ref) <= 1e-6 * mag + 1e-7, fmt::format("big f32 sum at {}: {} vs {}", i, b[i], ref));
  }
  require_identical(comm, b.data(), big * sizeof(float), "big f32 all_reduce");

  // broadcast from every replica in turn (roots on every process and local index).
  for (int root = 0; root < n; ++root) {
    std::vector<uint8_t> buf(4099, 0);
    if (r == root)
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(root * 31 + i * 7);
    comm.broadcast(buf.data(), buf.size(), root);
    for (size_t i = 0; i < buf.size(); ++i)
      require(buf[i] == uint8_t(root * 31 + i * 7), fmt::format("broadcast from {} at byte {}", root, i));
  }

  // Asynchronous all-reduces: started in order, waited in reverse, mixed with a blocking one.
  std::vector<std::vector<float>> bufs(4);
  std::vector<Communicator::Handle> hs;
  for (int t = 0; t < 4; ++t) {
    bufs[t].assign(1000 * (t + 1) + 3, float(t + 1) * (r + 1));
    hs.push_back(comm.start_all_reduce_sum(bufs[t].data(), bufs[t].size(), DType::f32));
  }
  int64_t one = 1;
  comm.all_reduce_sum(&one, 1, DType::i64);  // waits for the queued ones first, keeps the order
  require(one == n, "blocking all_reduce between asynchronous ones");
  for (int t = 3; t >= 0; --t) {
    comm.wait(hs[t]);
    for (float v : bufs[t]) require(v == float((t + 1) * tri), fmt::format("asynchronous all_reduce {}", t));
  }
  require(comm.comm_wait_ms() >= 0, "comm_wait_ms");

  comm.barrier();
}

struct Args {
  int local = 1;
  int expect_mpi = -1;  // 1: must be an MPI world; 0: must not have touched MPI
  std::string mode = "check";
  double timeout_s = 60;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) throw Error("missing value after " + k);
    std::string v = argv[++i];
    if (k == "--local") a.local = std::stoi(v);
    else if (k == "--expect-mpi") a.expect_mpi = std::stoi(v);
    else if (k == "--mode") a.mode = v;
    else if (k == "--timeout") a.timeout_s = std::stod(v);
    else throw Error("unknown option " + k);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  LaunchInfo li;
  try {
    Args a = parse(argc, argv);
    li = detect_launch();
    CommOptions opts;
    opts.timeout_s = a.timeout_s;
    CommWorld world = make_world(a.local, opts);

    int mpi_initialized = 0;
    MPI_Initialized(&mpi_initialized);
    if (a.expect_mpi == 0)
      require(!li.launched && !mpi_initialized, "a process started without a launcher must not initialise MPI");
    if (a.expect_mpi == 1) require(li.launched && mpi_initialized, "a launched process must make an MPI world");
    const int processes = li.launched ? li.size : 1;

    if (a.mode == "check") {
      run_replicas(world, [&](Communicator& c) { full_check(c, processes * a.local); });
      if (world[0]->rank() == 0)
        fmt::print("mpi_check: OK: world of {} replicas ({} process(es) x {} local), timeout {} s\n",
                   world[0]->size(), processes, a.local, a.timeout_s);
    } else if (a.mode == "stall" || a.mode == "die" || a.mode == "kill") {
      run_replicas(world, [&](Communicator& c) {
        int64_t x = 1;
        c.all_reduce_sum(&x, 1, DType::i64);  // all_reduce #1: everybody
        if (li.rank == 1) {
          if (a.mode == "die") {
            std::fprintf(stderr, "mpi_check: MPI rank 1 exits early (simulated crash)\n");
            std::fflush(stderr);
            std::_Exit(3);
          }
          if (a.mode == "kill") {
            std::fprintf(stderr, "mpi_check: MPI rank 1 kills itself (SIGKILL)\n");
            std::fflush(stderr);
            std::raise(SIGKILL);
          }
          // Alive but elsewhere for much longer than the timeout.
          std::this_thread::sleep_for(std::chrono::duration<double>(a.timeout_s * 10));
          return;
        }
        c.all_reduce_sum(&x, 1, DType::i64);  // all_reduce #2: MPI rank 1 never comes
        throw Error("all_reduce #2 returned although MPI rank 1 never called it");
      });
    } else {
      throw Error("unknown mode " + a.mode);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_check: MPI rank %d: error: %s\n", li.rank, e.what());
    return 1;
  }
}
