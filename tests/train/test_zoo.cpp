// The model zoo (models/zoo/<model>/: model.onnx, data.npz, zoo.json; format in models/zoo/README.md):
// every model trains through the onnxdp binary exactly as `onnxdp train model.onnx --data data.npz
// ARGS` does for each run of its zoo.json, and every step's loss equals the loss its framework
// (PyTorch, Keras, JAX) computed on the same weights and batches, within 1e-5 relative; the set of
// parameters onnxdp trains (`onnxdp inspect --json --train`) equals the framework's trainable set
// by name, and inspect's per-initializer verdict agrees with it. Models listed in
// models/zoo/PENDING (one line: model, reason) are skipped with a message; nothing else is.
// tests/scripts/zoo_ort.py checks the saved models in ONNX Runtime.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using onnxdp::test::onnxdp_cli;
using onnxdp::test::q;
using onnxdp::test::read_text;
using onnxdp::test::TempDir;

namespace {

const fs::path kZoo = fs::path(ONNXDP_SOURCE_DIR) / "models" / "zoo";

struct ZooModel {
  std::string name;
  fs::path dir;
  json manifest;
};

// models/zoo/PENDING: "model reason..." per line (a ':' or ',' after the model name is allowed);
// blank lines and # comments ignored.
std::map<std::string, std::string> pending() {
  std::map<std::string, std::string> p;
  std::ifstream f(kZoo / "PENDING");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    std::string model, reason;
    if (!(s >> model) || model[0] == '#') continue;
    if (model.back() == ':' || model.back() == ',') model.pop_back();
    std::getline(s >> std::ws, reason);
    p[model] = reason;
  }
  return p;
}

// Every folder of models/zoo, in name order, with its zoo.json parsed; the PENDING ones are left
// out with a message. A folder without zoo.json, or a PENDING line naming no folder, fails.
std::vector<ZooModel> zoo_models() {
  std::vector<ZooModel> models;
  std::map<std::string, std::string> skip = pending();
  REQUIRE_MESSAGE(fs::is_directory(kZoo), kZoo.string() << " is missing");
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kZoo))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& d : dirs) {
    const std::string name = d.filename().string();
    CHECK_MESSAGE(fs::exists(d / "zoo.json"), "models/zoo/" << name << " has no zoo.json");
    CHECK_MESSAGE(fs::exists(d / "model.onnx"), "models/zoo/" << name << " has no model.onnx");
    CHECK_MESSAGE(fs::exists(d / "data.npz"), "models/zoo/" << name << " has no data.npz");
    if (!fs::exists(d / "zoo.json")) continue;
    if (skip.count(name)) {
      MESSAGE("zoo model " << name << " SKIPPED (models/zoo/PENDING): " << skip[name]);
      skip.erase(name);
      continue;
    }
    json m = json::parse(read_text((d / "zoo.json").string()), nullptr, false);
    CHECK_MESSAGE(!m.is_discarded(), "models/zoo/" << name << "/zoo.json is not valid JSON");
    if (m.is_discarded()) continue;
    models.push_back({name, d, m});
  }
  for (const auto& [name, reason] : skip) FAIL_CHECK("models/zoo/PENDING names " << name << ", which has no folder");
  return models;
}

// A run's args, each quoted for the shell.
std::string quoted(const json& args) {
  std::string s;
  for (const auto& a : args) {
    s += ' ';
    s += q(a.get<std::string>());
  }
  return s;
}

// The "loss" of every line of a metrics.jsonl, in step order.
std::vector<double> losses_of(const std::string& metrics) {
  std::vector<double> losses;
  std::istringstream s(read_text(metrics));
  std::string line;
  while (std::getline(s, line))
    if (!line.empty()) losses.push_back(json::parse(line).at("loss").get<double>());
  return losses;
}

// The values following `flag` in a run's args (none when absent), e.g. --loss.
std::vector<std::string> values_of(const json& args, const std::string& flag) {
  std::vector<std::string> v;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) v.push_back(args[i + 1].get<std::string>());
  return v;
}

// onnxdp's trainable set for model m under the options opts (" --loss X ..."), against zoo.json's.
void check_trainable(const TempDir& tmp, const ZooModel& m, const std::string& opts) {
  CAPTURE(opts);
  auto r = onnxdp_cli(tmp, "inspect " + q((m.dir / "model.onnx").string()) + " --json --train" + opts);
  CHECK_MESSAGE(r.rc == 0, m.name << ": onnxdp inspect --json --train" << opts << " failed:\n" << r.err);
  if (r.rc != 0) return;
  const json j = json::parse(r.out);
  const auto got = j.at("train").at("trainable").get<std::set<std::string>>();
  const auto want = m.manifest["trainable"].get<std::set<std::string>>();
  std::string extra, missing;
  for (const auto& n : got)
    if (!want.count(n)) extra += " " + n;
  for (const auto& n : want)
    if (!got.count(n)) missing += " " + n;
  CHECK_MESSAGE(extra.empty(), m.name << ": onnxdp trains what the framework does not:" << extra);
  CHECK_MESSAGE(missing.empty(), m.name << ": onnxdp does not train what the framework trains:" << missing);
  // inspect's own per-initializer verdict (which knows no --freeze / --trainable) agrees with the
  // training graph's (a parameter the export dropped and onnxdp restores is in the latter only).
  if (onnxdp::test::contains(opts, "--freeze") || onnxdp::test::contains(opts, "--trainable")) return;
  for (const json& init : j.at("initializers")) {
    const std::string name = init.at("name").get<std::string>();
    const bool trains = init.at("trainable").get<bool>();
    const std::string says = trains ? "trainable" : "frozen";
    CHECK_MESSAGE(trains == (got.count(name) > 0),
                  m.name << ": inspect --json says initializer " << name << " is " << says << "; its training graph does not");
  }
}

}  // namespace

TEST_CASE("zoo: every model's per-step losses equal its framework's within 1e-5 relative") {
  const std::vector<ZooModel> models = zoo_models();
  CHECK_MESSAGE(!models.empty(), "models/zoo holds no model to check");
  TempDir tmp("onnxdp_test_zoo");
  for (const ZooModel& m : models) {
    CAPTURE(m.name);
    const bool has_runs = m.manifest.contains("runs") && !m.manifest["runs"].empty();
    CHECK_MESSAGE(has_runs, m.name << ": zoo.json has no runs");
    if (!has_runs) continue;
    for (const json& run : m.manifest["runs"]) {
      const std::string run_name = run.at("name").get<std::string>();
      CAPTURE(run_name);
      const std::string out = tmp.file(m.name + "_" + run_name);
      const std::string args = q((m.dir / "model.onnx").string()) + " --data " + q((m.dir / "data.npz").string()) +
                               quoted(run.at("args")) + " --output-dir " + q(out) + " --report-to jsonl --quiet";
      auto r = onnxdp_cli(tmp, "train " + args);
      CHECK_MESSAGE(r.rc == 0, m.name << " " << run_name << ": onnxdp train " << args << " failed:\n" << r.out << r.err);
      if (r.rc != 0) continue;
      const std::vector<double> got = losses_of(out + "/metrics.jsonl");
      const std::vector<double> want = run.at("losses").get<std::vector<double>>();
      CHECK_MESSAGE(got.size() == want.size(),
                    m.name << " " << run_name << ": " << got.size() << " steps, the framework's reference has " << want.size());
      size_t worst = 0, bad = 0;
      double worst_rel = 0;
      for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        const double rel = std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), 1e-30);
        if (!(rel <= 1e-5)) ++bad;
        if (!(rel <= worst_rel)) worst_rel = rel, worst = i;  // NaN counts as worst
      }
      CHECK_MESSAGE(bad == 0, m.name << " " << run_name << ": " << bad << " of " << want.size()
                                     << " steps differ by more than 1e-5 relative; worst step " << worst + 1 << ": onnxdp "
                                     << std::setprecision(9) << got[worst] << ", framework " << want[worst]
                                     << " (relative " << worst_rel << ")");
    }
  }
}

TEST_CASE("zoo: every model's trainable set equals its framework's, by name") {
  const std::vector<ZooModel> models = zoo_models();
  TempDir tmp("onnxdp_test_zoo");
  for (const ZooModel& m : models) {
    CAPTURE(m.name);
    const bool complete = m.manifest.contains("trainable") && m.manifest.contains("runs");
    CHECK_MESSAGE(complete, m.name << ": zoo.json has no trainable list or no runs");
    if (!complete) continue;
    // The options of each run that change what trains (the loss decides what reaches it), each
    // distinct set once.
    std::set<std::string> option_sets;
    for (const json& run : m.manifest["runs"]) {
      std::string opts;
      for (const char* flag : {"--loss", "--freeze", "--trainable"})
        for (const std::string& v : values_of(run.at("args"), flag)) opts += std::string(" ") + flag + " " + q(v);
      option_sets.insert(opts);
    }
    for (const std::string& opts : option_sets) check_trainable(tmp, m, opts);
  }
}
