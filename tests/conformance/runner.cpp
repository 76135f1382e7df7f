// onnxdp_conformance: runs the ONNX backend node tests (onnx/backend/test/data/node/<case>/) through
// onnxdp's importer, shape inference/folding and CPU Plan, and compares the outputs.
//
//   onnxdp_conformance <node-test-folder> [--filter SUBSTR] [--verbose] [--exclusions FILE]
//                      [--timeout SECONDS] [--no-fork]
//
// A case is skipped (with its reason) when its model uses an op the op table does not claim (or one
// of onnxdp's internal ops: categories collective and grad), a non-default domain, or an element
// type onnxdp does not hold (uint16, string, float8, int4 ...: dtype_from_onnx refuses it). Every
// other case runs: float graph inputs are fed at run time with their exact shapes, other inputs
// (shapes, axes, indices) are bound as constants, and so are float inputs read only as Resize's
// roi or scales, OneHot's depth or Range's bounds (they set the output shape: constants in any model
// onnxdp trains, where the importer makes such initializers constants). Outputs must match in dtype and shape exactly,
// floats within |a-b| <= atol + rtol*|b| (rtol 1e-3, atol 1e-5), NaN == NaN,
// integers and bools exactly.
//
// Each case runs in a child process, so a crash or a hang in one kernel is reported as that case's
// failure and the run goes on. The parent never runs a kernel (no thread team before fork).
//
// The last lines are `N passed, N failed, N skipped` and the pass rate over the cases of claimed
// ops, passed / (passed + failed + excluded). Exit 1 on any failure or a pass rate below 98 %.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "exec/plan.h"
#include "importer/onnx_io.h"
#include "compile/compile.h"

namespace fs = std::filesystem;
using namespace onnxdp;

namespace {

constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-5;
constexpr double kMinPassRate = 0.98;  // an op is claimed only with its node tests passing or excluded for a stated reason

struct Options {
  std::string node_dir;
  std::string filter;
  std::string exclusions = std::string(ONNXDP_SOURCE_DIR) + "/tests/conformance/exclusions.txt";
  bool verbose = false;
  bool fork_cases = true;
  int timeout_s = 120;
};

// ---------------------------------------------------------------------------------------------
// Deciding whether a case is onnxdp's to run.

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// Op table categories of onnxdp's own ops (the data-parallel collectives, the gradient helpers):
// their names may clash with ONNX ops (Scatter), but the importer never claims them.
bool is_internal_category(const char* category) {
  return std::string(category) == "collective" || std::string(category) == "grad";
}

// Collects the element types a case touches that onnxdp does not hold.
// onnx_type_name knows the codes up to BFLOAT16 (16); the node tests also use the newer ones.
std::string type_name(int onnx_type) {
  static const char* newer[] = {"FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
                                "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2"};
  if (onnx_type >= 17 && onnx_type < 17 + int(std::size(newer))) return newer[onnx_type - 17];
  return onnx_type_name(onnx_type);
}

void note_type(int onnx_type, std::set<std::string>& bad) {
  DType dt;
  if (onnx_type != 0 && !dtype_from_onnx(onnx_type, &dt)) bad.insert(type_name(onnx_type));
}

void note_value_info(const onnx::ValueInfoProto& vi, std::set<std::string>& bad, std::string& non_tensor) {
  if (!vi.type().has_tensor_type()) {
    non_tensor = vi.name();
    return;
  }
  note_type(vi.type().tensor_type().elem_type(), bad);
}

// The reason to skip a case, or "" to run it. `ops` collects the ops the model uses.
std::string skip_reason(const onnx::ModelProto& m, std::set<std::string>& ops) {
  const onnx::GraphProto& g = m.graph();
  std::string reason;
  std::set<std::string> bad_types;
  std::string non_tensor;
  for (const auto& n : g.node()) {
    ops.insert(n.op_type());
    if (!reason.empty()) continue;
    if (!is_default_domain(n.domain())) reason = "domain '" + n.domain() + "' (op " + n.op_type() + ")";
    else if (!imports_op(n.op_type())) reason = "op " + n.op_type() + " not in onnxdp's op table";
    else if (auto op = op_from_name(n.op_type()); op && is_internal_category(op_info(*op).category))
      reason = "op " + n.op_type() + " is an internal onnxdp op of the same name, not the ONNX op";
    for (const auto& a : n.attribute()) {
      if (a.name() == "to" && a.type() == onnx::AttributeProto::INT) note_type(int(a.i()), bad_types);
      if (a.type() == onnx::AttributeProto::TENSOR) note_type(a.t().data_type(), bad_types);
    }
  }
  if (!reason.empty()) return reason;
  for (const auto& vi : g.input()) note_value_info(vi, bad_types, non_tensor);
  for (const auto& vi : g.output()) note_value_info(vi, bad_types, non_tensor);
  for (const auto& init : g.initializer()) note_type(init.data_type(), bad_types);
  if (!non_tensor.empty()) return "graph input/output '" + non_tensor + "' is not a tensor";
  if (!bad_types.empty()) {
    std::string s;
    for (const auto& t : bad_types) s += (s.empty() ? "" : ", ") + t;
    return "element type onnxdp does not hold: " + s;
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Running one case: returns "" on success, else what went wrong.

std::string fmt_value(double v) {
  if (std::isnan(v)) return "nan";
  return fmt::format("{:.9g}", v);
}

std::string compare(const std::string& name, const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return fmt::format("output '{}': dtype {}, expected {}", name, dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (got.shape() != want.shape())
    return fmt::format("output '{}': shape {}, expected {}", name, shape_str(got.shape()), shape_str(want.shape()));
  const int64_t n = want.numel();
  int64_t bad = 0, first = -1;
  std::string first_got, first_want;
  double max_diff = 0;
  if (dtype_is_float(want.dtype())) {
    std::vector<double> a = got.to_f64(), b = want.to_f64();
    for (int64_t i = 0; i < n; ++i) {
      double x = a[size_t(i)], y = b[size_t(i)];
      bool ok;
      if (std::isnan(x) || std::isnan(y)) ok = std::isnan(x) && std::isnan(y);
      else if (std::isinf(x) || std::isinf(y)) ok = x == y;
      else {
        double d = std::fabs(x - y);
        ok = d <= kAtol + kRtol * std::fabs(y);
        max_diff = std::max(max_diff, d);
      }
      if (!ok && bad++ == 0) first = i, first_got = fmt_value(x), first_want = fmt_value(y);
    }
    if (bad)
      return fmt::format("output '{}': {} of {} values differ; first at index {}: got {}, expected {} (max |diff| {:.3g})",
                         name, bad, n, first, first_got, first_want, max_diff);
  } else {
    std::vector<int64_t> a = got.to_i64(), b = want.to_i64();
    for (int64_t i = 0; i < n; ++i)
      if (a[size_t(i)] != b[size_t(i)] && bad++ == 0)
        first = i, first_got = std::to_string(a[size_t(i)]), first_want = std::to_string(b[size_t(i)]);
    if (bad)
      return fmt::format("output '{}': {} of {} values differ; first at index {}: got {}, expected {}", name, bad, n,
                         first, first_got, first_want);
  }
  return "";
}

std::vector<fs::path> data_sets(const fs::path& case_dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(case_dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  return sets;
}

std::string run_data_set(const fs::path& case_dir, const onnx::ModelProto& m, const fs::path& set_dir) {
  const onnx::GraphProto& gp = m.graph();
  std::set<std::string> init_names;
  for (const auto& init : gp.initializer()) init_names.insert(init.name());

  // Float inputs read only as Resize's roi (1) or scales (2), OneHot's depth (1) or Range's bounds.
  std::map<std::string, bool> shape_parameter;
  for (const auto& n : gp.node())
    for (int j = 0; j < n.input_size(); ++j) {
      const bool param = (n.op_type() == "Resize" && (j == 1 || j == 2)) || (n.op_type() == "OneHot" && j == 1) ||
                         n.op_type() == "Range";
      auto [it, fresh] = shape_parameter.emplace(n.input(j), param);
      if (!fresh) it->second = it->second && param;
    }

  // input_k.pb belongs to the k-th graph input that is not an initializer.
  ImportOptions opts;
  std::map<std::string, Tensor> feeds;
  int k = 0;
  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;
    fs::path f = set_dir / fmt::format("input_{}.pb", k++);
    if (!fs::exists(f)) return fmt::format("{} is missing (graph input '{}')", f.filename().string(), vi.name());
    Tensor t = load_tensor_pb(f.string());
    if (dtype_is_float(t.dtype()) && !shape_parameter[vi.name()]) {
      opts.input_shapes[vi.name()] = t.shape();
      feeds[vi.name()] = std::move(t);
    } else {
      opts.constant_inputs[vi.name()] = std::move(t);
    }
  }

  Graph g = load_graph(m, case_dir.string(), opts);
  Plan plan(std::move(g));
  std::map<std::string, Tensor> got = plan.run(feeds);

  for (int j = 0; j < gp.output_size(); ++j) {
    const std::string& name = gp.output(j).name();
    fs::path f = set_dir / fmt::format("output_{}.pb", j);
    if (!fs::exists(f)) return fmt::format("{} is missing (graph output '{}')", f.filename().string(), name);
    Tensor want = load_tensor_pb(f.string());
    auto it = got.find(name);
    if (it == got.end()) return fmt::format("output '{}' was not produced", name);
    std::string diff = compare(name, it->second, want);
    if (!diff.empty()) return diff;
  }
  return "";
}

std::string run_case(const fs::path& case_dir, const onnx::ModelProto& m) {
  try {
    auto sets = data_sets(case_dir);
    if (sets.empty()) return "no test_data_set_* folder";
    for (const auto& s : sets) {
      std::string r = run_data_set(case_dir, m, s);
      if (!r.empty()) return sets.size() > 1 ? s.filename().string() + ": " + r : r;
    }
    return "";
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

// Runs run_case in a child process; a crash, a hang past the timeout or an abort becomes the
// message.
std::string run_case_isolated(const fs::path& case_dir, const onnx::ModelProto& m, const Options& opt) {
  if (!opt.fork_cases) return run_case(case_dir, m);
  std::fflush(stdout);
  std::fflush(stderr);
  int fds[2];
  if (pipe(fds) != 0) return "pipe() failed";
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "fork() failed";
  }
  if (pid == 0) {
    close(fds[0]);
    alarm(unsigned(opt.timeout_s));
    std::string r = run_case(case_dir, m);
    size_t off = 0;
    while (off < r.size()) {
      ssize_t w = write(fds[1], r.data() + off, r.size() - off);
      if (w <= 0) break;
      off += size_t(w);
    }
    close(fds[1]);
    _exit(r.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  for (;;) {
    ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    msg.append(buf, size_t(r));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGALRM) return fmt::format("timed out after {} s", opt.timeout_s);
    return fmt::format("crashed with signal {} ({}){}", sig, strsignal(sig), msg.empty() ? "" : ": " + msg);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && msg.empty())
    return fmt::format("child exited with status {} without a message (a sanitizer report or exit() in a "
                       "kernel? see its stderr above)", WEXITSTATUS(status));
  return msg;
}

// ---------------------------------------------------------------------------------------------

// exclusions.txt: `case_name  reason`, '#' comments and blank lines ignored.
std::map<std::string, std::string> read_exclusions(const std::string& path) {
  std::map<std::string, std::string> ex;
  std::ifstream f(path);
  if (!f) return ex;
  std::string line;
  while (std::getline(f, line)) {
    size_t h = line.find('#');
    if (h == 0) continue;
    std::istringstream is(line);
    std::string name;
    if (!(is >> name)) continue;
    std::string reason;
    std::getline(is, reason);
    reason.erase(0, reason.find_first_not_of(" \t"));
    ex[name] = reason.empty() ? "(no reason given)" : reason;
  }
  return ex;
}

std::string ops_str(const std::set<std::string>& ops) {
  std::string s;
  for (const auto& o : ops)
    if (o != "Constant" || ops.size() == 1) s += (s.empty() ? "" : "+") + o;
  return s;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s <onnx node-test folder> [--filter SUBSTR] [--verbose] [--exclusions FILE]\n"
               "       [--timeout SECONDS] [--no-fork]\n"
               "The folder is onnx/backend/test/data/node of the pinned onnx package (scripts/conformance-data).\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(usage(argv[0]));
      }
      return argv[++i];
    };
    if (a == "--filter") opt.filter = next();
    else if (a == "--verbose" || a == "-v") opt.verbose = true;
    else if (a == "--exclusions") opt.exclusions = next();
    else if (a == "--timeout") opt.timeout_s = std::max(1, std::atoi(next().c_str()));
    else if (a == "--no-fork") opt.fork_cases = false;
    else if (a == "--help" || a == "-h") return usage(argv[0]), 0;
    else if (!a.empty() && a[0] == '-') return usage(argv[0]);
    else if (opt.node_dir.empty()) opt.node_dir = a;
    else return usage(argv[0]);
  }
  if (opt.node_dir.empty()) return usage(argv[0]);
  std::error_code ec;
  if (!fs::is_directory(opt.node_dir, ec)) {
    std::fprintf(stderr, "onnxdp_conformance: '%s' is not a folder\n", opt.node_dir.c_str());
    return 2;
  }
  const auto exclusions = read_exclusions(opt.exclusions);

  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(opt.node_dir))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx") &&
        e.path().filename().string().find(opt.filter) != std::string::npos)
      cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());

  int passed = 0, failed = 0, skipped = 0, excluded = 0;
  std::map<std::string, int> skip_counts;  // reason kind -> cases
  std::vector<std::string> skip_lines, excluded_lines, pass_lines, stale_exclusions;
  // Per op of single-op cases (Constant aside), "(multi-op)" for the rest: passed, failed, excluded.
  std::map<std::string, std::array<int, 3>> per_op;
  std::set<std::string> seen;

  for (const fs::path& dir : cases) {
    const std::string name = dir.filename().string();
    seen.insert(name);
    onnx::ModelProto m;
    std::set<std::string> ops;
    std::string reason;
    try {
      m = load_model_proto((dir / "model.onnx").string());
      reason = skip_reason(m, ops);
    } catch (const Error& e) {
      ++failed;
      std::printf("FAIL %s: %s\n", name.c_str(), e.what());
      continue;
    }
    if (!reason.empty()) {
      ++skipped;
      skip_counts[reason]++;
      skip_lines.push_back(name + ": " + reason);
      continue;
    }
    std::string key = ops.size() == 1 || (ops.size() == 2 && ops.count("Constant")) ? ops_str(ops) : "(multi-op)";
    std::string result = run_case_isolated(dir, m, opt);
    auto ex = exclusions.find(name);
    if (ex != exclusions.end()) {
      ++skipped;
      ++excluded;
      per_op[key][2]++;
      excluded_lines.push_back(name + ": " + ex->second + (result.empty() ? "  [passes now]" : ""));
      if (result.empty()) stale_exclusions.push_back(name);
      continue;
    }
    if (result.empty()) {
      ++passed;
      per_op[key][0]++;
      pass_lines.push_back(name);
    } else {
      ++failed;
      per_op[key][1]++;
      // One line per failure; a message with newlines is folded.
      std::replace(result.begin(), result.end(), '\n', ' ');
      std::printf("FAIL %s [%s]: %s\n", name.c_str(), ops_str(ops).c_str(), result.c_str());
    }
    std::fflush(stdout);
  }

  if (opt.verbose) {
    std::printf("\n-- passed (%zu)\n", pass_lines.size());
    for (const auto& l : pass_lines) std::printf("pass %s\n", l.c_str());
    std::printf("\n-- excluded (%zu), from %s\n", excluded_lines.size(), opt.exclusions.c_str());
    for (const auto& l : excluded_lines) std::printf("excluded %s\n", l.c_str());
    std::printf("\n-- skipped, not claimed by onnxdp (%zu)\n", skip_lines.size());
    for (const auto& l : skip_lines) std::printf("skip %s\n", l.c_str());
    std::printf("\n-- per op (single-op cases; the rest under (multi-op)): passed failed excluded\n");
    for (const auto& [op, c] : per_op) std::printf("%-28s %4d %4d %4d\n", op.c_str(), c[0], c[1], c[2]);
    std::printf("\n-- skip reasons (cases)\n");
    for (const auto& [r, c] : skip_counts) std::printf("%4d  %s\n", c, r.c_str());
  }
  for (const auto& s : stale_exclusions)
    std::printf("note: %s is in %s but passes now: remove it from the list\n", s.c_str(), opt.exclusions.c_str());
  if (opt.filter.empty())
    for (const auto& [n, r] : exclusions)
      if (!seen.count(n)) std::printf("note: exclusion '%s' names no case in %s\n", n.c_str(), opt.node_dir.c_str());

  const int claimed = passed + failed + excluded;
  const double rate = claimed ? double(passed) / claimed : 1.0;
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  std::printf("pass rate over cases of claimed ops: %.1f%% (%d / %d; %d excluded, %d not claimed)\n", 100 * rate,
              passed, claimed, excluded, skipped - excluded);
  return failed > 0 || rate < kMinPassRate ? 1 : 0;
}
