// The onnxdp subcommands. Each lives in its own cli/cmd_<name>.cpp: it registers its options on
// the parent app and returns the action main runs when the subcommand was given. Actions report
// problems by throwing onnxdp::Error; main prints them and exits 1.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace onnxdp::cli {

struct Command {
  CLI::App* app = nullptr;      // the subcommand, to ask parsed()
  std::function<int()> action;  // runs it; returns the exit code
};

Command add_inspect_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_train_command(CLI::App& parent);
Command add_graph_command(CLI::App& parent);
Command add_plot_command(CLI::App& parent);

// The command line as main received it (argv[0] first): what `train` hands its worker processes.
std::vector<std::string>& command_line();

// `onnxdp --version`: the version and what CUDA onnxdp sees.
void print_version();

}  // namespace onnxdp::cli
