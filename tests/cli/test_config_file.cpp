// `--config FILE.toml` (cli/config_file.h) on a subcommand shaped like `onnxdp train`: keys with
// '_' or '-', a [train] section, flags, arrays, aliases, the command line winning, and errors
// naming the file and the key.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli/config_file.h"
#include "tests/test_util.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

using onnxdp::test::TempDir;

// A `train` subcommand with a few options of each kind; parse() runs the command line, then the
// config file the way the real action does.
struct Cli {
  CLI::App app{"test"};
  CLI::App* sub = app.add_subcommand("train", "train");
  std::string model, config;
  double lr = 1e-3;
  int64_t batch_size = 32, epochs = 1, steps = 0;
  bool nesterov = false;
  std::vector<std::string> freeze;

  Cli() {
    sub->add_option("model", model)->required();
    sub->add_option("--config", config)->configurable(false);
    sub->add_option("--lr,--learning-rate", lr);
    sub->add_option("--batch-size", batch_size);
    auto* e = sub->add_option("--epochs,--num-train-epochs", epochs);
    auto* s = sub->add_option("--steps,--max-steps", steps);
    e->excludes(s);
    sub->add_flag("--nesterov", nesterov);
    sub->add_option("--freeze", freeze);
  }
  void parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last-first
    app.parse(args);
    if (!config.empty()) cli::apply_config_file(*sub, config);
  }
};

std::string write(const TempDir& tmp, const std::string& name, const std::string& text) {
  std::ofstream(tmp.file(name)) << text;
  return tmp.file(name);
}

using onnxdp::test::error_of;

}  // namespace

TEST_CASE("config file: keys spelt with dashes or underscores, aliases, flags and arrays set options") {
  TempDir tmp;
  std::string path = write(tmp, "run.toml",
                           "# Hugging Face spelling\n"
                           "learning_rate = 3e-4\n"
                           "batch-size = 64\n"
                           "num_train_epochs = 3\n"
                           "nesterov = true\n"
                           "freeze = [\"^conv1\", \"bn\"]\n");
  Cli c;
  c.parse({"train", "m.onnx", "--config", path});
  CHECK(c.model == "m.onnx");
  CHECK(c.lr == doctest::Approx(3e-4));
  CHECK(c.batch_size == 64);
  CHECK(c.epochs == 3);
  CHECK(c.nesterov);
  CHECK(c.freeze == std::vector<std::string>{"^conv1", "bn"});
}

TEST_CASE("config file: a [train] section, and the command line wins over the file") {
  TempDir tmp;
  std::string path = write(tmp, "run.toml", "[train]\nlr = 0.5\nbatch_size = 16\nepochs = 4\n");
  Cli c;
  c.parse({"train", "m.onnx", "--config", path, "--lr", "0.1", "--epochs", "2"});
  CHECK(c.lr == doctest::Approx(0.1));
  CHECK(c.batch_size == 16);
  CHECK(c.epochs == 2);
  CHECK(c.sub->count("--batch-size") == 1);  // as if typed: code that asks count() sees it
}

TEST_CASE("config file: unknown keys, sections and bad values are errors naming the file and the key") {
  TempDir tmp;
  auto err = [&](const std::string& text) {
    std::string path = write(tmp, "bad.toml", text);
    return error_of([&] {
      Cli c;
      c.parse({"train", "m.onnx", "--config", path});
    });
  };
  std::string p = tmp.file("bad.toml");
  CHECK(err("lr = 0.5\nbogus_key = 1\n") == "config '" + p + "': unknown key 'bogus_key' (not an option of `onnxdp train`)");
  CHECK(err("model = \"x.onnx\"\n") == "config '" + p + "': unknown key 'model' (not an option of `onnxdp train`)");
  CHECK(err("config = \"other.toml\"\n") == "config '" + p + "': unknown key 'config' (not an option of `onnxdp train`)");
  CHECK(err("[eval]\nlr = 0.5\n") == "config '" + p + "': unknown section 'eval' (keys go at the top or under [train])");
  CHECK(err("[train.more]\nlr = 0.5\n") == "config '" + p + "': unknown section 'train.more' (keys go at the top or under [train])");
  std::string e = err("batch_size = \"abc\"\n");
  CHECK(e.rfind("config '" + p + "': key 'batch_size': ", 0) == 0);
  CHECK(err("lr = 0.5\nbatch_size = 8\nlearning_rate = 0.1\n") ==
        "config '" + p + "': key 'learning_rate' sets --lr again (first set by 'lr')");
  // excludes() holds between the file and the command line, and within the file.
  CHECK(err("max_steps = 10\nnum_train_epochs = 2\n") ==
        "config '" + p + "': key 'max_steps' cannot be used with --epochs");
  e = error_of([&] {
    Cli c;
    c.parse({"train", "m.onnx", "--epochs", "2", "--config", write(tmp, "steps.toml", "max_steps = 10\n")});
  });
  CHECK(e == "config '" + tmp.file("steps.toml") + "': key 'max_steps' cannot be used with --epochs");
  e = err("lr = [1, 2]\n");
  CHECK(e.rfind("config '" + p + "': key 'lr': ", 0) == 0);
  e = error_of([&] {
    Cli c;
    c.parse({"train", "m.onnx", "--config", tmp.file("missing.toml")});
  });
  CHECK(e.rfind("config '" + tmp.file("missing.toml") + "': cannot read it", 0) == 0);
}
