#include "train/plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "graph/error.h"
#include "graph/input_file.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The value of key on line `line_no`: a number, NaN when absent or null; anything else an error.
double number_of(const nlohmann::json& j, const char* key, bool required, const std::string& path, int line_no) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) fail("metrics '{}' line {}: no \"{}\"", path, line_no, key);
    return kNaN;
  }
  if (it->is_null()) return kNaN;
  if (!it->is_number()) fail("metrics '{}' line {}: \"{}\" is {}, not a number", path, line_no, key, it->dump());
  return it->get<double>();
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// The finite range of values (lo == hi for one value); {NaN, NaN} when there is none.
std::pair<double, double> finite_range(const std::vector<double>& v) {
  double lo = kNaN, hi = kNaN;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    lo = std::isnan(lo) ? x : std::min(lo, x);
    hi = std::isnan(hi) ? x : std::max(hi, x);
  }
  return {lo, hi};
}

// An axis range with some air around the data; a single value gets a unit-sized window.
std::pair<double, double> padded(std::pair<double, double> r) {
  auto [lo, hi] = r;
  if (std::isnan(lo)) return {0, 1};
  if (hi - lo <= std::abs(hi) * 1e-12) {
    double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
    return {lo - d, hi + d};
  }
  double d = (hi - lo) * 0.05;
  return {lo - d, hi + d};
}

// About `target` round tick values (1, 2 or 5 times a power of ten apart) inside [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5) {
  double raw = (hi - lo) / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  std::vector<double> ticks;
  // k * step, not a running sum: no drift, and zero is exactly 0.
  for (double k = std::ceil(lo / step); k * step <= hi + step * 1e-9; ++k) ticks.push_back(k == 0 ? 0.0 : k * step);
  return ticks;
}

// Whole numbers in full (step 250000, not 2.5e+05); fractions with 4 significant digits.
std::string tick_label(double v) {
  if (std::abs(v) < 1e9 && std::abs(v - std::round(v)) < 1e-9 * std::max(1.0, std::abs(v)))
    return fmt::format("{:.0f}", std::round(v));
  return fmt::format("{:.4g}", v);
}

// Layout, in px. Each panel: a title line, the plot box, tick labels below and left of it.
constexpr double kWidth = 800, kPanelHeight = 230, kLeft = 80, kRight = 24, kTop = 34, kBottom = 36;

struct Series {
  const std::vector<double>* y;
  const char* color;
};

// One panel at vertical offset y0: frame, grid and tick labels, the curve, optional eval points.
void panel(std::string& svg, double y0, const std::string& title, const std::vector<double>& steps, Series s,
           const std::vector<std::pair<double, double>>* points, std::pair<double, double> xr) {
  std::vector<double> all = *s.y;
  if (points)
    for (const auto& p : *points) all.push_back(p.second);
  std::pair<double, double> yr = padded(finite_range(all));
  double x0 = kLeft, x1 = kWidth - kRight, top = y0 + kTop, bottom = y0 + kPanelHeight - kBottom;
  auto px = [&](double v) { return x0 + (v - xr.first) / (xr.second - xr.first) * (x1 - x0); };
  auto py = [&](double v) { return bottom - (v - yr.first) / (yr.second - yr.first) * (bottom - top); };

  svg += fmt::format("<g class=\"panel\">\n<text x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                     x0, y0 + 20, xml_escape(title));
  // Grid lines and tick labels.
  for (double t : nice_ticks(yr.first, yr.second))
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n",
        x0, py(t), x1, py(t), x0 - 6, py(t) + 4, tick_label(t));
  for (double t : nice_ticks(xr.first, xr.second))
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n",
        px(t), top, px(t), bottom, px(t), bottom + 15, tick_label(t));
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">step</text>\n", x1,
                     bottom + 30);
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#404040\"/>\n", x0, top,
                     x1 - x0, bottom - top);
  // The curve: points without a finite value are left out.
  std::string pts;
  for (size_t i = 0; i < steps.size(); ++i) {
    double y = (*s.y)[i];
    if (!std::isfinite(y) || !std::isfinite(steps[i])) continue;
    pts += fmt::format("{:.1f},{:.1f} ", px(steps[i]), py(y));
  }
  if (!pts.empty()) pts.pop_back();
  svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"{}\"/>\n",
                     s.color, pts);
  if (points) {
    for (const auto& [x, y] : *points)
      if (std::isfinite(x) && std::isfinite(y))
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#c0392b\"/>\n", px(x), py(y));
  }
  svg += "</g>\n";
}

}  // namespace

MetricsLog read_metrics_log(const std::string& run_dir_or_jsonl) {
  MetricsLog log;
  log.path = fs::is_directory(run_dir_or_jsonl) ? (fs::path(run_dir_or_jsonl) / "metrics.jsonl").string()
                                                : run_dir_or_jsonl;
  // Read line by line to its end: a regular file, at most 4 GiB (a line per step is ~200 bytes:
  // 20 million steps), checked first, so that /dev/zero or a pipe is an error instead of a read
  // without end.
  uint64_t size = 0;
  if (const std::string why = input_file_problem(log.path, 4 * kGiB, "metrics logs", &size); !why.empty())
    fail("cannot read metrics '{}': {}", log.path, why);
  std::ifstream f(log.path);
  if (!f) fail("cannot read metrics '{}': {}", log.path, std::strerror(errno));
  std::string line;
  int line_no = 0;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past a double
      fail("metrics '{}' line {}: not JSON ({})", log.path, line_no, e.what());
    }
    if (!j.is_object()) fail("metrics '{}' line {}: not a JSON object", log.path, line_no);
    log.step.push_back(number_of(j, "step", true, log.path, line_no));
    if (std::isnan(log.step.back())) fail("metrics '{}' line {}: \"step\" is null", log.path, line_no);
    log.loss.push_back(number_of(j, "loss", true, log.path, line_no));
    log.lr.push_back(number_of(j, "lr", false, log.path, line_no));
    log.samples_per_s.push_back(number_of(j, "samples_per_s", false, log.path, line_no));
    // Checked so that a damaged file is reported, though not drawn.
    for (const char* key : {"grad_norm", "comm_wait_ms", "epoch", "eval_accuracy"})
      number_of(j, key, false, log.path, line_no);
    double ev = number_of(j, "eval_loss", false, log.path, line_no);
    if (!std::isnan(ev)) log.eval_loss.emplace_back(log.step.back(), ev);
  }
  if (f.bad()) fail("cannot read metrics '{}': {}", log.path, std::strerror(errno));
  if (log.step.empty()) fail("metrics '{}' has no lines to plot", log.path);
  return log;
}

std::string metrics_svg(const MetricsLog& log) {
  std::pair<double, double> xr = finite_range(log.step);
  if (xr.first == xr.second) xr = {xr.first - 1, xr.second + 1};  // one step: a window around it
  double height = 3 * kPanelHeight + 30;
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"12\" fill=\"#606060\">{3}</text>\n",
      kWidth, height, kLeft, xml_escape(log.path));
  // The loss panel names its eval points when there are any.
  std::string loss_title = log.eval_loss.empty() ? "loss" : "loss (line: train, dots: eval)";
  panel(svg, 30, loss_title, log.step, {&log.loss, "#1a3a8a"}, &log.eval_loss, xr);
  panel(svg, 30 + kPanelHeight, "learning rate", log.step, {&log.lr, "#1e7b34"}, nullptr, xr);
  panel(svg, 30 + 2 * kPanelHeight, "samples/s", log.step, {&log.samples_per_s, "#8a4b08"}, nullptr, xr);
  svg += "</svg>\n";
  return svg;
}

void plot_metrics(const std::string& run_dir_or_jsonl, const std::string& svg_path) {
  std::string svg = metrics_svg(read_metrics_log(run_dir_or_jsonl));
  std::ofstream f(svg_path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot write '{}': {}", svg_path, std::strerror(errno));
  f << svg;
  f.flush();
  if (!f) fail("cannot write '{}'", svg_path);
}

}  // namespace onnxdp
