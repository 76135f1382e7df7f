// `onnxdp train` on llm.c token shards as a user runs it: models/make_token_shards.py makes a
// corpus from a text numpy ships, the sample LM trains on 'train_*.bin' and is evaluated on
// val_000.bin; a kill -9 mid-run and --resume give the losses and parameters of an
// uninterrupted run.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/test_util.h"

using namespace onnxdp::test;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ONNXDP_SOURCE_DIR;

// step -> loss; a step logged twice (before a kill, and again after the resume) keeps the last.
std::map<int64_t, double> losses_by_step(const std::string& metrics) {
  std::map<int64_t, double> l;
  std::istringstream in(read_text(metrics));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) l[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return l;
}

}  // namespace

TEST_CASE("cli: train a sample LM on token shards made from a package's text, kill -9 and --resume") {
  TempDir tmp;
  const std::string corpus = tmp.file("corpus");
  const std::string make = "python3 " + q(kSource + "/models/make_token_shards.py") + " --out " + q(corpus) +
                           " --shard-tokens 4096 >" + q(tmp.file("make.txt")) + " 2>&1";
  REQUIRE_MESSAGE(std::system(make.c_str()) == 0, read_text(tmp.file("make.txt")));
  REQUIRE(fs::exists(corpus + "/train_000.bin"));
  REQUIRE(fs::exists(corpus + "/train_001.bin"));
  const std::string model = q(kSource + "/models/tiny_lm/model.onnx");
  const std::string common = model + " --data " + q(corpus + "/train_*.bin") + " --batch-size 32 --steps 400 --seed 3" +
                             " --lr-schedule cosine --checkpoint-every 50 --log-every 1";

  CliResult a = onnxdp_cli(tmp, "train " + common + " --eval-data " + q(corpus + "/val_000.bin") + " --output-dir " + q(tmp.file("a")));
  REQUIRE_MESSAGE(a.rc == 0, a.err);
  CHECK(contains(a.out, "files of tokens in windows of 16 + 1"));
  CHECK(contains(a.out, "MB mapped, read a micro-batch at a time"));  // the summary's data memory
  CHECK(contains(a.out, "eval on " + corpus + "/val_000.bin: loss"));
  const auto straight = losses_by_step(tmp.file("a/metrics.jsonl"));
  REQUIRE(straight.size() == 400);
  CHECK(straight.at(400) < straight.at(1) - 0.5);  // from ln 32 = 3.47 towards the text's character statistics

  // The same run killed once checkpoint-250 is written (in the second epoch: about 180 steps an
  // epoch), then resumed.
  const std::string b = tmp.file("b");
  const std::string killed = "( " + q(ONNXDP_BINARY) + " train " + common + " --output-dir " + q(b) +
                             " >/dev/null 2>&1 & pid=$!; while [ ! -d " + q(b + "/checkpoint-250") +
                             " ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done; kill -9 $pid 2>/dev/null; wait $pid; "
                             "true )";
  REQUIRE(std::system(killed.c_str()) == 0);
  REQUIRE(fs::exists(b + "/checkpoint-250"));
  REQUIRE_FALSE(fs::exists(b + "/checkpoint-400"));  // killed mid-run, not after it
  CliResult r = onnxdp_cli(tmp, "train " + common + " --output-dir " + q(b) + " --resume");
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(contains(r.out, "resumed from"));
  const auto resumed = losses_by_step(b + "/metrics.jsonl");
  REQUIRE(resumed.size() == 400);
  for (const auto& [step, loss] : straight) {
    CAPTURE(step);
    CHECK(resumed.at(step) == loss);
  }
  CHECK(read_text(tmp.file("a/checkpoint-400/model.safetensors")) == read_text(b + "/checkpoint-400/model.safetensors"));

  CliResult none = onnxdp_cli(tmp, "train " + model + " --data " + q(corpus + "/test_*.bin") + " --steps 1");
  CHECK(none.rc != 0);
  CHECK(contains(none.err, "no file matches the pattern"));
}
