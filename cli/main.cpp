// onnxdp: train ONNX models data-parallel. Subcommands live in cli/cmd_*.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "graph/error.h"

int main(int argc, char** argv) {
  CLI::App app{"onnxdp: train ONNX models data-parallel across devices and machines"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the version and the backends onnxdp sees");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (version) {
      std::printf("onnxdp %s\n", ONNXDP_VERSION);
      return 0;
    }
    if (app.get_subcommands().empty()) {
      std::printf("%s", app.help().c_str());
      return 0;
    }
  } catch (const onnxdp::Error& e) {
    std::fprintf(stderr, "onnxdp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
