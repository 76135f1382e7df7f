// TensorBoard event files: CRC-32C against its standard check value, the TFRecord framing by
// hand, and a full read-back by the `tensorboard` Python package (tests/scripts/
// tensorboard_readback.py). python3 and tensorboard missing is a failure, not a skip: CI installs
// them (scripts/setup).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "train/tensorboard.h"
#include "tests/test_util.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

using onnxdp::test::TempDir;
using onnxdp::test::read_text;

std::string q(const std::string& s) { return "'" + s + "'"; }

using onnxdp::test::error_of;

uint64_t le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | uint8_t(s[pos + i]);
  return v;
}

}  // namespace

TEST_CASE("tensorboard: crc32c matches the standard check value") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  // 32 zero bytes: the iSCSI test vector of RFC 3720, B.4.
  std::string zeros(32, '\0');
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  uint32_t c = crc32c("123456789", 9);
  CHECK(masked_crc32c("123456789", 9) == uint32_t(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST_CASE("tensorboard: the event file is named as TensorBoard expects and framed as TFRecords") {
  TempDir tmp;
  std::string dir = tmp.file("runs/tb");  // nested and missing: created
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.scalar("train/loss", 1, 0.5f, 1000.0);
  }
  CHECK(fs::path(path).parent_path() == fs::path(dir));
  std::string name = fs::path(path).filename().string();
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  CHECK(name.size() > 7);
  CHECK(name.substr(name.size() - 7) == ".onnxdp");

  // Two records, each: u64 length, masked crc of those 8 bytes, data, masked crc of the data.
  std::string blob = read_text(path);
  size_t pos = 0;
  int records = 0;
  std::string first;
  while (pos < blob.size()) {
    REQUIRE(pos + 12 <= blob.size());
    uint64_t n = le(blob, pos, 8);
    CHECK(le(blob, pos + 8, 4) == masked_crc32c(blob.data() + pos, 8));
    REQUIRE(pos + 16 + n <= blob.size());
    CHECK(le(blob, pos + 12 + n, 4) == masked_crc32c(blob.data() + pos + 12, n));
    if (records == 0) first = blob.substr(pos + 12, n);
    pos += 16 + n;
    ++records;
  }
  CHECK(records == 2);
  // The first Event carries file_version (field 3, length-delimited: key 0x1a).
  CHECK(first.find("\x1a\x0d" "brain.Event:2") != std::string::npos);
}

TEST_CASE("tensorboard: scalars read back with the tensorboard package") {
  TempDir tmp;
  std::string dir = tmp.file("tb");
  {
    TensorBoardWriter w(dir);
    // Values exact in float32, so the printed read-back is exact too.
    w.scalar("train/loss", 1, 2.5f, 1700000000.25);
    w.scalar("train/loss", 2, 1.25f, 1700000001.5);
    w.scalar("train/loss", 3, 0.625f, 1700000002.75);
    w.scalar("train/learning_rate", 1, 0.0009765625f, 1700000000.25);
    w.scalar("perf/samples_per_s", 3, 1234.5f, 1700000002.75);
    w.scalar("train/grad_norm", -1, -3.0f, 1700000003.0);  // negative step: 10-byte varint
    w.flush();
  }
  // stdout is compared; stderr (warnings of the package, the script's failure message) is shown.
  std::string out = tmp.file("readback.txt"), err = tmp.file("readback.err");
  std::string cmd = "python3 " + q(std::string(ONNXDP_SOURCE_DIR) + "/tests/scripts/tensorboard_readback.py") + " " +
                    q(dir) + " >" + q(out) + " 2>" + q(err);
  int st = std::system(cmd.c_str());
  std::string text = read_text(out);
  INFO("tensorboard_readback.py stdout:\n" << text << "stderr:\n" << read_text(err));
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  CHECK(text ==
        "files 1\n"
        "records 7\n"
        "file_version 2.0\n"
        "scalar perf/samples_per_s 3 1234.5 1700000002.750\n"
        "scalar train/grad_norm -1 -3 1700000003.000\n"
        "scalar train/learning_rate 1 0.000976562 1700000000.250\n"
        "scalar train/loss 1 2.5 1700000000.250\n"
        "scalar train/loss 2 1.25 1700000001.500\n"
        "scalar train/loss 3 0.625 1700000002.750\n");
}

TEST_CASE("tensorboard: a folder that cannot be made or written is an error naming it") {
  TempDir tmp;
  // A file where the folder should be.
  std::string blocker = tmp.file("file");
  std::ofstream(blocker) << "x";
  std::string e = error_of([&] { TensorBoardWriter w(blocker + "/tb"); });
  CHECK(e.find("cannot create TensorBoard folder") != std::string::npos);
  CHECK(e.find(blocker + "/tb") != std::string::npos);

  // A read-only folder (root ignores permissions, so only checked as another user).
  if (geteuid() != 0) {
    std::string ro = tmp.file("ro");
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    e = error_of([&] { TensorBoardWriter w(ro); });
    CHECK(e.find("cannot write TensorBoard event file") != std::string::npos);
    CHECK(e.find(ro) != std::string::npos);
  }
}
