// Files onnxdp reads to their end (graph/input_file.h): `--config` and `onnxdp plot`'s metrics log
// must be regular files within their limits (config 16 MiB, metrics 4 GiB), checked before a byte
// is read. Through the binary, each under `timeout` and a 4 GiB address-space limit: a reader that
// read /dev/zero, a pipe or an oversized file would run out the timeout or the memory instead of
// ending at once with an error naming the file and the limit.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

using onnxdp::test::q;
using onnxdp::test::read_text;
using onnxdp::test::TempDir;

struct Result {
  int rc = -1;  // 124: still reading at the timeout
  std::string err;
};

Result onnxdp_limited(const TempDir& tmp, const std::string& args) {
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit = "";  // ASan reserves terabytes of address space: the timeout alone
#else
  const std::string limit = "ulimit -v 4194304 && ";
#endif
  const std::string cmd = "bash -c " + q(limit + "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MALLOC_ARENA_MAX=2 exec timeout 20 " +
                                         std::string(ONNXDP_BINARY) + " " + args) +
                          " >/dev/null 2>" + q(tmp.file("stderr.txt"));
  const int st = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = read_text(tmp.file("stderr.txt"));
  return r;
}

// A sparse file of `bytes` (no disk blocks): larger than a limit without taking the space.
void sparse_file(const std::string& path, off_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, bytes) == 0);
  ::close(fd);
}

const std::string kModel = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/model.onnx";

}  // namespace

TEST_CASE("input files: --config must be a regular file of at most 16 MiB") {
  TempDir tmp;
  REQUIRE(::mkfifo(tmp.file("fifo.toml").c_str(), 0644) == 0);
  sparse_file(tmp.file("huge.toml"), 17 << 20);
  struct Case {
    std::string file, why;
  } cases[] = {
      {"/dev/zero", "it is not a regular file but a device (onnxdp reads config files from regular files only)"},
      {tmp.file("fifo.toml"), "it is not a regular file but a pipe"},
      {tmp.path.string(), "it is not a regular file but a folder"},
      {tmp.file("huge.toml"), "it is 17825792 bytes, past the limit of 16 MiB for config files"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.file);
    Result r = onnxdp_limited(tmp, "train " + q(kModel) + " --config " + q(c.file) + " --steps 1 --output-dir " +
                                       q(tmp.file("run")));
    CHECK(r.rc == 1);
    CHECK(r.err.find("config '" + c.file + "': cannot read it: " + c.why) != std::string::npos);
    CHECK(!fs::exists(tmp.file("run")));
  }
}

TEST_CASE("input files: onnxdp plot's metrics log must be a regular file of at most 4 GiB") {
  TempDir tmp;
  REQUIRE(::mkfifo(tmp.file("fifo.jsonl").c_str(), 0644) == 0);
  sparse_file(tmp.file("huge.jsonl"), off_t(5) << 30);
  struct Case {
    std::string file, why;
  } cases[] = {
      {"/dev/zero", "it is not a regular file but a device (onnxdp reads metrics logs from regular files only)"},
      {tmp.file("fifo.jsonl"), "it is not a regular file but a pipe (onnxdp reads metrics logs from regular files only)"},
      {tmp.file("huge.jsonl"), "it is 5368709120 bytes, past the limit of 4 GiB for metrics logs"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.file);
    Result r = onnxdp_limited(tmp, "plot " + q(c.file) + " --out " + q(tmp.file("curves.svg")));
    CHECK(r.rc == 1);
    CHECK(r.err == "onnxdp: error: cannot read metrics '" + c.file + "': " + c.why + "\n");
    CHECK(!fs::exists(tmp.file("curves.svg")));
  }
}
