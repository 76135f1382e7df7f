// `onnxdp plot`: training curves from a run's metrics.jsonl as one self-contained SVG, three
// panels stacked against step: loss (with eval_loss points when lines carry it), learning rate,
// samples/s. No plotting library: the SVG is written here.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace onnxdp {

// The columns of a metrics.jsonl, one entry per line in file order. A value a line lacks, or
// writes as null (a NaN or inf loss is dumped as null), is NaN here and left out of the curve.
struct MetricsLog {
  std::string path;  // the file read
  std::vector<double> step, loss, lr, samples_per_s;
  std::vector<std::pair<double, double>> eval_loss;  // (step, eval_loss) of the lines that have one
};

// Reads RUN_DIR/metrics.jsonl, or the given .jsonl file. Every non-blank line must be a JSON
// object with a numeric "step" and "loss" (or null); other known keys must be numbers or null.
// Errors name the file and the line.
MetricsLog read_metrics_log(const std::string& run_dir_or_jsonl);

// The SVG document (UTF-8 text), 800 px wide.
std::string metrics_svg(const MetricsLog& log);

// read_metrics_log + metrics_svg, written to svg_path.
void plot_metrics(const std::string& run_dir_or_jsonl, const std::string& svg_path);

}  // namespace onnxdp
