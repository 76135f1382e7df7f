// nn.LSTM / nn.GRU / nn.RNN classifiers exported by both PyTorch exporters (tests/fixtures/rnn,
// made by tests/scripts/torch_rnn_reference.py): `onnxdp run` gives PyTorch's outputs and training
// with SGD gives PyTorch's per-step losses, both within 1e-5 relative.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "tests/test_util.h"
#include "train/npz.h"
#include "train/trainer.h"

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

std::string fixture(const std::string& name) { return std::string(ONNXDP_SOURCE_DIR) + "/tests/fixtures/rnn/" + name; }

// |got - want| <= 1e-5 |want| + 1e-7 elementwise (the 1e-7 for values near 0).
void check_rel(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    worst = std::max(worst, d / std::max(std::abs(want[i]), 1e-12));
    if (d > 1e-5 * std::abs(want[i]) + 1e-7) ++bad;
  }
  INFO("largest relative difference " << worst);
  CHECK(bad == 0);
}

void check_model(const std::string& kind, const std::string& exporter) {
  CAPTURE(kind);
  CAPTURE(exporter);
  const std::string model = fixture(kind + "_" + exporter + ".onnx"), data = fixture(kind + ".npz");
  auto ref = read_npz(fixture(kind + "_ref.npz"));
  TempDir tmp;
  CliResult r = onnxdp_cli(tmp, "run " + q(model) + " --data " + q(data) + " --out " + q(tmp.file("out.npz")) +
                                    " --batch-size 5");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  auto out = read_npz(tmp.file("out.npz"));
  REQUIRE(out.count("logits"));
  CHECK(out.at("logits").shape() == ref.at("logits").shape());
  check_rel(out.at("logits").to_f64(), ref.at("logits").to_f64());

  TrainOptions o;
  o.model = model;
  o.data = data;
  o.shuffle = false;
  o.quiet = true;
  o.devices = "cpu";
  o.report_to = "none";
  o.batch_size = ref.at("batch_size").to_i64()[0];
  o.steps = ref.at("steps").to_i64()[0];
  o.optimizer.kind = optimizer_kind_from_name("sgd");
  o.optimizer.lr = float(ref.at("lr").to_f64()[0]);
  TrainResult t = train(o);
  check_rel(std::vector<double>(t.losses.begin(), t.losses.end()), ref.at("sgd_losses").to_f64());
}

}  // namespace

TEST_CASE("rnn torch: nn.LSTM (bidirectional, batch_first) from both exporters runs and trains as in PyTorch") {
  check_model("lstm", "legacy");
  check_model("lstm", "dynamo");
}

TEST_CASE("rnn torch: nn.GRU (two layers, batch_first) from both exporters runs and trains as in PyTorch") {
  check_model("gru", "legacy");
  check_model("gru", "dynamo");
}

// The dynamo exporter unrolls nn.RNN into MatMul / Add / Relu per step; the legacy one writes ONNX RNN.
TEST_CASE("rnn torch: nn.RNN (relu, bidirectional, batch_first) from both exporters runs and trains as in PyTorch") {
  check_model("rnn", "legacy");
  check_model("rnn", "dynamo");
}

// pack_padded_sequence(x, lengths): the legacy exporter writes ONNX LSTM with sequence_lens from
// the model's `lengths` input (the dynamo exporter cannot export it). Past a row's length Y is 0
// and Y_h / Y_c are the state at its last step, as PyTorch's packed LSTM.
TEST_CASE("rnn torch: nn.LSTM on a packed sequence (sequence_lens) runs and trains as in PyTorch") {
  check_model("lstm_packed", "legacy");
}
