// `onnxdp plot` through the binary (ONNXDP_BINARY): the command is registered, writes the SVG,
// and a bad input is "onnxdp: error: …" with exit status 1. The drawing itself is tested in
// tests/train/test_plot.cpp.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

using onnxdp::test::onnxdp_cli;
using onnxdp::test::q;
using onnxdp::test::read_text;
using onnxdp::test::TempDir;
using Result = onnxdp::test::CliResult;

}  // namespace

TEST_CASE("cli: plot writes the SVG of a run folder and names a bad line") {
  TempDir tmp;
  fs::create_directory(tmp.file("run"));
  std::ofstream(tmp.file("run/metrics.jsonl")) << "{\"step\": 1, \"loss\": 2.0, \"lr\": 0.001, \"samples_per_s\": 100}\n"
                                               << "{\"step\": 2, \"loss\": 1.0, \"lr\": 0.001, \"samples_per_s\": 110}\n";
  Result r = onnxdp_cli(tmp, "plot " + q(tmp.file("run")) + " --out " + q(tmp.file("curves.svg")));
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK(r.out == "wrote " + tmp.file("curves.svg") + "\n");
  std::string svg = read_text(tmp.file("curves.svg"));
  CHECK(svg.find("<polyline") != std::string::npos);
  CHECK(svg.find("</svg>") != std::string::npos);

  std::ofstream(tmp.file("bad.jsonl")) << "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": [1]}\n";
  r = onnxdp_cli(tmp, "plot " + q(tmp.file("bad.jsonl")) + " --out " + q(tmp.file("bad.svg")));
  CHECK(r.rc == 1);
  CHECK(r.err == "onnxdp: error: metrics '" + tmp.file("bad.jsonl") + "' line 2: \"loss\" is [1], not a number\n");
  CHECK(!fs::exists(tmp.file("bad.svg")));
}
