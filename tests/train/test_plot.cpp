// `onnxdp plot`'s drawing (train/plot.h): a metrics.jsonl in, an SVG out that a standard renderer
// (rsvg-convert) rasterises with the three curves where they belong
// (tests/scripts/svg_raster_check.py). python3, numpy and rsvg-convert missing is a failure, not
// a skip: CI installs them (scripts/setup).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "train/plot.h"
#include "tests/test_util.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

using onnxdp::test::TempDir;
using onnxdp::test::read_text;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string q(const std::string& s) { return "'" + s + "'"; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

using onnxdp::test::error_of;

// 60 steps as the trainer writes them: loss decaying, warmup then cosine lr, noisy throughput;
// eval_loss on two lines.
std::string sample_metrics() {
  std::string s;
  for (int step = 1; step <= 60; ++step) {
    double loss = 2.3 * std::exp(-step / 15.0) + 0.1;
    double lr = step <= 10 ? 1e-3 * step / 10 : 1e-3 * 0.5 * (1 + std::cos(M_PI * (step - 10) / 50.0));
    double sps = 1200 + 150 * std::sin(step * 0.7);
    s += fmt::format(R"({{"step": {}, "loss": {}, "lr": {}, "grad_norm": 0.5, "samples_per_s": {}, "epoch": 1, "comm_wait_ms": 0.0)",
                     step, loss, lr, sps);
    if (step == 30 || step == 60) s += fmt::format(R"(, "eval_loss": {}, "eval_accuracy": 0.9)", loss + 0.2);
    s += "}\n";
  }
  return s;
}

}  // namespace

TEST_CASE("plot: a run's metrics become an SVG that rsvg-convert rasterises with all three curves") {
  TempDir tmp;
  write_text(tmp.file("metrics.jsonl"), sample_metrics());
  std::string svg_path = tmp.file("curves.svg");
  plot_metrics(tmp.path.string(), svg_path);  // a run folder: its metrics.jsonl

  std::string svg = read_text(svg_path);
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.size() > 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  CHECK(count(svg, "<polyline") == 3);
  CHECK(count(svg, "<circle") == 2);  // the eval points
  CHECK(count(svg, "<g class=\"panel\">") == count(svg, "</g>"));
  CHECK(contains(svg, ">loss (line: train, dots: eval)</text>"));
  CHECK(contains(svg, ">learning rate</text>"));
  CHECK(contains(svg, ">samples/s</text>"));
  CHECK(contains(svg, ">step</text>"));
  CHECK(contains(svg, ">0.001</text>"));  // an lr tick label
  CHECK(contains(svg, ">1200</text>"));   // a samples/s tick label

  std::string out = tmp.file("check.txt");
  std::string cmd = "python3 " + q(std::string(ONNXDP_SOURCE_DIR) + "/tests/scripts/svg_raster_check.py") + " " +
                    q(svg_path) + " --eval >" + q(out) + " 2>&1";
  int st = std::system(cmd.c_str());
  std::string text = read_text(out);
  INFO("svg_raster_check.py output:\n" << text);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(contains(text, "size 800x"));
  CHECK(text.size() >= 3);
  CHECK(text.substr(text.size() - 3) == "ok\n");
}

TEST_CASE("plot: null values (a NaN loss) and missing optional keys leave gaps, not errors") {
  TempDir tmp;
  std::string path = tmp.file("m.jsonl");
  write_text(path,
             "{\"step\": 1, \"loss\": 2.0, \"lr\": 0.1, \"samples_per_s\": 10}\n"
             "\n"
             "{\"step\": 2, \"loss\": null, \"lr\": 0.1}\n"
             "{\"step\": 3, \"loss\": 1.0, \"lr\": 0.1, \"samples_per_s\": 12, \"future_key\": \"x\"}\n");
  MetricsLog log = read_metrics_log(path);
  REQUIRE(log.step.size() == 3);
  CHECK(log.step[2] == 3);
  CHECK(std::isnan(log.loss[1]));
  CHECK(std::isnan(log.samples_per_s[1]));
  CHECK(log.eval_loss.empty());
  std::string svg = metrics_svg(log);
  CHECK(count(svg, "<polyline") == 3);
  CHECK(!contains(svg, "nan"));
  CHECK(!contains(svg, "<circle"));
  CHECK(contains(svg, ">loss</text>"));

  // A single line still draws (a window around the one step).
  write_text(path, "{\"step\": 7, \"loss\": 0.5, \"lr\": 0.01, \"samples_per_s\": 99}\n");
  svg = metrics_svg(read_metrics_log(path));
  CHECK(!contains(svg, "nan"));
  CHECK(!contains(svg, "inf"));
}

TEST_CASE("plot: bad metrics are errors naming the file and the line") {
  TempDir tmp;
  std::string path = tmp.file("m.jsonl");
  const std::string ok = "{\"step\": 1, \"loss\": 2.0, \"lr\": 0.1}\n";

  std::string e = error_of([&] { read_metrics_log(tmp.file("missing.jsonl")); });
  CHECK(contains(e, "cannot read metrics '" + tmp.file("missing.jsonl") + "'"));
  fs::create_directory(tmp.file("run"));
  e = error_of([&] { read_metrics_log(tmp.file("run")); });
  CHECK(contains(e, "cannot read metrics '" + tmp.file("run") + "/metrics.jsonl'"));

  write_text(path, "\n  \n");
  CHECK(error_of([&] { read_metrics_log(path); }) == "metrics '" + path + "' has no lines to plot");

  write_text(path, ok + "{\"step\": 2, \"loss\": 1.5\n");  // truncated
  e = error_of([&] { read_metrics_log(path); });
  CHECK(contains(e, "metrics '" + path + "' line 2: not JSON"));

  write_text(path, ok + ok + "{\"step\": 3, \"loss\": \"abc\"}\n");
  CHECK(error_of([&] { read_metrics_log(path); }) == "metrics '" + path + "' line 3: \"loss\" is \"abc\", not a number");

  write_text(path, ok + "{\"step\": 2, \"loss\": 1, \"samples_per_s\": true}\n");
  CHECK(error_of([&] { read_metrics_log(path); }) ==
        "metrics '" + path + "' line 2: \"samples_per_s\" is true, not a number");

  write_text(path, "[1, 2]\n");
  CHECK(error_of([&] { read_metrics_log(path); }) == "metrics '" + path + "' line 1: not a JSON object");

  write_text(path, "{\"loss\": 1}\n");
  CHECK(error_of([&] { read_metrics_log(path); }) == "metrics '" + path + "' line 1: no \"step\"");

  write_text(path, ok);
  e = error_of([&] { plot_metrics(path, tmp.file("no/such/dir/curves.svg")); });
  CHECK(contains(e, "cannot write '" + tmp.file("no/such/dir/curves.svg") + "'"));
}
