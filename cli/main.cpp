// onnxdp: train ONNX models data-parallel. Subcommands live in cli/cmd_*.cpp; main only parses
// and turns every failure into "onnxdp: error: <message>" and exit status 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <vector>

#include "cli/commands.h"
#include "graph/error.h"

std::vector<std::string>& onnxdp::cli::command_line() {
  static std::vector<std::string> args;
  return args;
}

int main(int argc, char** argv) {
  using namespace onnxdp::cli;
  command_line().assign(argv, argv + argc);
  CLI::App app{"onnxdp: train ONNX models data-parallel across devices and machines"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the version and the backends onnxdp sees");
  std::vector<Command> commands = {add_inspect_command(app), add_run_command(app), add_train_command(app),
                                   add_graph_command(app), add_plot_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // prints help (rc 0) or the usage error
    return rc == 0 ? 0 : 2;
  }
  try {
    if (version) {
      print_version();
      return 0;
    }
    for (const Command& c : commands)
      if (c.app->parsed()) return c.action();
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const onnxdp::Error& e) {
    std::fprintf(stderr, "onnxdp: error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "onnxdp: error: out of memory\n");
  } catch (const std::exception& e) {
    // Not an onnxdp::Error: a bug somewhere, but still a message and an exit status, not an abort.
    std::fprintf(stderr, "onnxdp: error: internal error: %s\n", e.what());
  }
  return 1;
}
