// The bad-model corpus (tests/bad_models/, made by make_bad_models.py): each model is a small valid
// model with one thing broken. Loading it must give exactly one onnxdp::Error whose message names
// the culprit (the tensor, op, domain, opset, value or file), never a crash or another exception.
// The same corpus goes through the `onnxdp` CLI, which must exit non-zero without a signal.
// Symlinks and hard links are made here at run time in a temporary folder.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "importer/onnx_io.h"
#include "compile/compile.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace onnxdp;

namespace {

using onnxdp::test::TempDir;

const fs::path kCorpus = fs::path(ONNXDP_SOURCE_DIR) / "tests" / "bad_models";

// A fresh temporary folder, removed with the object.
struct BadCase {
  std::string what;
  // Builds the case (in `tmp` when it needs links) and returns the model path.
  std::function<fs::path(const fs::path& tmp)> make;
  std::vector<std::string> culprits;  // substrings the error message must hold
};

fs::path corpus(const std::string& file) { return kCorpus / file; }

// ext_link_template.onnx reads W from "w.bin" in its folder; a copy of it goes to tmp/model.onnx.
fs::path link_template_into(const fs::path& tmp) {
  fs::copy_file(corpus("ext_link_template.onnx"), tmp / "model.onnx", fs::copy_options::overwrite_existing);
  return tmp / "model.onnx";
}

// The template with W's location changed (for a link in a folder component of the location).
fs::path template_with_location(const fs::path& tmp, const std::string& location) {
  onnx::ModelProto m = load_model_proto(corpus("ext_link_template.onnx").string());
  for (auto& init : *m.mutable_graph()->mutable_initializer())
    for (auto& e : *init.mutable_external_data())
      if (e.key() == "location") e.set_value(location);
  fs::path out = tmp / "model.onnx";
  std::ofstream f(out, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&f));
  return out;
}

std::vector<BadCase> bad_cases() {
  auto file = [](const std::string& f) { return [f](const fs::path&) { return corpus(f); }; };
  const fs::path weights = fs::absolute(corpus("ext_weights.bin"));
  return {
      {"truncated protobuf", file("truncated.onnx"), {"truncated.onnx", "protobuf"}},
      {"empty file", file("empty.onnx"), {"empty.onnx", "no graph"}},
      {"model path does not exist", file("no_such_model.onnx"), {"no_such_model.onnx", "does not exist"}},
      {"model path is a folder", file("good_external"), {"good_external", "not a regular file"}},
      {"external data location ../", file("ext_parent_dir.onnx"), {"'W'", "../bad_models/ext_weights.bin", ".."}},
      {"external data absolute path", file("ext_absolute.onnx"), {"'W'", "/etc/passwd", "absolute"}},
      {"external data offset past end of file", file("ext_offset_past_end.onnx"),
       {"'W'", "offset 100", "past the end"}},
      {"external data length past end of file", file("ext_length_past_end.onnx"),
       {"'W'", "length 24", "past the end"}},
      {"external data length disagrees with dims x dtype", file("ext_size_mismatch.onnx"),
       {"'W'", "16 bytes", "[3, 2]", "24"}},
      {"external data file missing", file("ext_missing_file.onnx"), {"'W'", "no_such_weights.bin"}},
      {"external data offset negative", file("ext_bad_offset.onnx"), {"'W'", "offset", "-8"}},
      {"external data file is a symlink",
       [weights](const fs::path& tmp) {
         fs::create_symlink(weights, tmp / "w.bin");
         return link_template_into(tmp);
       },
       {"'W'", "w.bin", "symbolic link"}},
      {"external data folder is a symlink",
       [weights](const fs::path& tmp) {
         fs::create_directory_symlink(weights.parent_path(), tmp / "sub");
         return template_with_location(tmp, "sub/ext_weights.bin");
       },
       {"'W'", "sub/ext_weights.bin", "symbolic link"}},
      {"external data file is a hard link",
       [weights](const fs::path& tmp) {
         fs::copy_file(weights, tmp / "real.bin");
         fs::create_hard_link(tmp / "real.bin", tmp / "w.bin");
         return link_template_into(tmp);
       },
       {"'W'", "w.bin", "hard link"}},
      {"raw_data size disagrees with dims x dtype", file("size_mismatch.onnx"),
       {"'W'", "raw_data", "20 bytes", "24"}},
      {"dims product overflows", file("dims_overflow.onnx"), {"'W'", "1099511627776", "2^62"}},
      {"initializer without data", file("missing_initializer_data.onnx"), {"'W'", "float_data", "0 values"}},
      {"unknown op", file("unknown_op.onnx"), {"fancy", "FancyMatMul", "not supported"}},
      {"unknown domain", file("unknown_domain.onnx"), {"matmul", "com.example.custom"}},
      {"opset too new", file("opset_too_new.onnx"), {"opset 99", "7 to 27"}},
      {"opset too old", file("opset_too_old.onnx"), {"opset 6", "7 to 27"}},
      {"cyclic graph", file("cyclic.onnx"), {"add", "'yy'", "cycle"}},
      {"graph input of unsupported element type", file("input_string_type.onnx"), {"'x'", "STRING"}},
      {"graph input that is not a tensor", file("input_sequence_type.onnx"), {"'x'", "not a tensor"}},
  };
}

// Runs `argv` with stdout and stderr captured; returns the wait status.
int run_process(const std::vector<std::string>& args, std::string* output) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  output->clear();
  char buf[4096];
  for (;;) {
    ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    output->append(buf, size_t(r));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Whether `onnxdp --help` lists the subcommand (CLI11 prints it indented under "Subcommands:").
// (`onnxdp SUB --help` is no test: CLI11 answers --help with exit 0 whatever precedes it.)
bool cli_has_subcommand(const std::string& sub) {
  std::string out;
  int st = run_process({ONNXDP_BINARY, "--help"}, &out);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return false;
  size_t at = out.find("Subcommands:");
  if (at == std::string::npos) return false;
  std::istringstream lines(out.substr(at));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first;
    if (line.size() > 1 && (line[0] == ' ' || line[0] == '\t') && (words >> first) && first == sub) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("bad models: each gives one clear onnxdp::Error naming the culprit") {
  for (const BadCase& c : bad_cases()) {
    CAPTURE(c.what);
    TempDir tmp;
    fs::path model = c.make(tmp.path);
    std::string msg;
    bool threw_error = false;
    try {
      load_graph(model.string());
    } catch (const Error& e) {
      threw_error = true;
      msg = e.what();
    } catch (const std::exception& e) {
      FAIL_CHECK("not an onnxdp::Error: " << e.what());
      continue;
    }
    CAPTURE(msg);
    CHECK(threw_error);
    CHECK(msg.find('\n') == std::string::npos);
    for (const std::string& s : c.culprits) {
      CAPTURE(s);
      CHECK(msg.find(s) != std::string::npos);
    }
  }
}

TEST_CASE("bad models: the good control model of the corpus loads") {
  // The corpus' models are this one with one thing broken: it must load, or every case above
  // could fail for the wrong reason.
  Graph g = load_graph(corpus("good_inline.onnx").string());
  CHECK(g.inputs.size() == 1);
  CHECK(g.outputs.size() == 1);
}

namespace {

// Runs `onnxdp <sub>` on the good control model (must succeed) and on every bad model (must exit
// non-zero, without a signal, relaying the importer's message).
void check_cli_on_corpus(const std::string& sub) {
  if (!cli_has_subcommand(sub)) {
    MESSAGE("`onnxdp " << sub << "` does not exist yet: skipped");
    return;
  }
  TempDir out_dir;
  auto command = [&](const fs::path& model) -> std::vector<std::string> {
    if (sub == "inspect") return {ONNXDP_BINARY, "inspect", model.string()};
    return {ONNXDP_BINARY, "run", model.string(), "--data", corpus("x.npz").string(), "--out",
            (out_dir.path / "out.npz").string()};
  };
  // Control: the good model succeeds, so a non-zero exit below is the bad model's doing.
  std::string out;
  int st = run_process(command(corpus("good_inline.onnx")), &out);
  {
    CAPTURE(out);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  }
  for (const BadCase& c : bad_cases()) {
    CAPTURE(c.what);
    TempDir tmp;
    fs::path model = c.make(tmp.path);
    st = run_process(command(model), &out);
    CAPTURE(out);
    CHECK_FALSE(WIFSIGNALED(st));
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) != 0);
    CHECK(WEXITSTATUS(st) != 127);  // exec failed
    CHECK(out.find(c.culprits.back()) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("bad models: onnxdp run exits non-zero naming the culprit, without a signal") {
  check_cli_on_corpus("run");
}

TEST_CASE("bad models: onnxdp inspect exits non-zero naming the culprit, without a signal") {
  check_cli_on_corpus("inspect");
}

// Dims that claim gigabytes the file does not hold (the data is a few bytes): the loader compares
// the data with the claim before it allocates anything. Run under a 4 GiB address-space limit
// (ASan builds, which reserve terabytes of address space: ASan's allocation limit), a loader that
// allocated the claim first fails with "out of memory" instead of naming the data that is short.
TEST_CASE("bad models: a tensor's claimed size is checked against its data before it is allocated") {
  struct Claim {
    const char* file;
    std::vector<std::string> culprits;
  };
  const std::vector<Claim> claims = {
      {"claims_16gib_raw_data.onnx", {"'W'", "raw_data holds 8 bytes", "[4294967296] needs 17179869184"}},
      {"claims_8gib_float_data.onnx", {"'W'", "float_data has 2 values", "[2147483648] needs 2147483648"}},
      {"ext_claims_16gib.onnx", {"'W'", "external data holds 24 bytes", "needs 17179869184"}},
      // The dropped bias restore_dropped_parameters would add: 2^30 float32 zeros from the weight's dims.
      {"restored_bias_claims_4gib.onnx",
       {"'patch.weight'", "raw_data holds 1536 bytes", "[1073741824, 3, 4, 4] needs 206158430208"}},
  };
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit = "export ASAN_OPTIONS=\"$ASAN_OPTIONS:max_allocation_size_mb=4096:allocator_may_return_null=1\"; ";
#else
  const std::string limit = "ulimit -v 4194304 && ";
#endif
  for (const Claim& c : claims) {
    const std::string file = c.file;
    CAPTURE(file);
    const std::string cmd = limit + "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MALLOC_ARENA_MAX=2 exec '" +
                            std::string(ONNXDP_BINARY) + "' inspect '" + corpus(c.file).string() + "'";
    std::string out;
    const int st = run_process({"/bin/bash", "-c", cmd}, &out);
    CAPTURE(out);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 1);
    for (const std::string& s : c.culprits) {
      CAPTURE(s);
      CHECK(out.find(s) != std::string::npos);
    }
  }
}
