// `onnxdp plot RUN_DIR|METRICS.jsonl --out curves.svg`: the training curves of a run (loss with
// eval points, learning rate, samples/s against step) as one self-contained SVG (train/plot.h).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "train/outputs.h"
#include "train/plot.h"

namespace onnxdp::cli {

Command add_plot_command(CLI::App& parent) {
  auto input = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>("curves.svg");
  CLI::App* sub = parent.add_subcommand("plot", "Draw a run's training curves (metrics.jsonl) as an SVG");
  sub->add_option("run", *input, "A run folder holding metrics.jsonl, or a metrics .jsonl file")->required();
  sub->add_option("--out", *out, "The .svg file to write")->capture_default_str();
  return Command{sub, [=] {
                   const std::string metrics = std::filesystem::is_directory(*input) ? *input + "/metrics.jsonl" : *input;
                   check_outputs_apart({{"--out", *out}}, {{"the metrics", metrics}});
                   plot_metrics(*input, *out);
                   std::printf("wrote %s\n", out->c_str());
                   return 0;
                 }};
}

}  // namespace onnxdp::cli
