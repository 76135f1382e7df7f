// Fuzz target: bytes as a `--config` TOML file, applied to a subcommand with options of every kind
// `onnxdp train` has (integers, floats, strings, flags, repeatable options, a checked choice,
// options that exclude each other), as cli/config_file.h applies it.
#include <cstddef>
#include <cstdint>

#include "cli/config_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnxdp;
  const std::string path = fuzz::write_input("run.toml", data, size);
  CLI::App app{"fuzz"};
  CLI::App* sub = app.add_subcommand("train", "train");
  std::string model = "m.onnx", config, precision = "no";
  double lr = 1e-3;
  int64_t batch_size = 32, epochs = 1, steps = 0;
  int seed = 0;
  bool nesterov = false;
  std::vector<std::string> freeze;
  sub->add_option("--config", config)->configurable(false);
  sub->add_option("--lr,--learning-rate", lr);
  sub->add_option("--batch-size", batch_size);
  sub->add_option("--seed", seed);
  auto* e = sub->add_option("--epochs,--num-train-epochs", epochs);
  auto* s = sub->add_option("--steps,--max-steps", steps);
  e->excludes(s);
  sub->add_flag("--nesterov", nesterov);
  sub->add_option("--freeze", freeze);
  sub->add_option("--mixed-precision", precision)->check(CLI::IsMember({"no", "bf16", "fp16"}));
  fuzz::expect_clean([&] { cli::apply_config_file(*sub, path); });
  return 0;
}
