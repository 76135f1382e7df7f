// Helpers shared by the doctest files: a scratch folder, file reading, and running the onnxdp
// binary (ONNXDP_BINARY) with its exit status and output captured.
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "graph/error.h"

namespace onnxdp::test {

// A fresh folder under the system temp dir, removed with everything in it at the end of scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "onnxdp_test") {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ec);  // a test may have made it read-only
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The message of the onnxdp::Error that f throws, "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Single-quoted for the shell.
inline std::string q(const std::string& s) { return "'" + s + "'"; }

struct CliResult {
  int rc = -1;  // exit status; 128 + signal when it crashed
  std::string out, err;
};

// Runs `onnxdp ARGS` (ARGS already quoted for the shell) with stdout and stderr in files of tmp,
// in the folder cwd when given.
inline CliResult onnxdp_cli(const TempDir& tmp, const std::string& args, const std::string& cwd = "") {
  const std::string out = tmp.file("stdout.txt"), err = tmp.file("stderr.txt");
  const std::string cmd = (cwd.empty() ? "" : "cd " + q(cwd) + " && ") + q(ONNXDP_BINARY) + " " + args + " >" + q(out) +
                          " 2>" + q(err);
  const int st = std::system(cmd.c_str());
  CliResult r;
  if (WIFEXITED(st)) r.rc = WEXITSTATUS(st);
  else if (WIFSIGNALED(st)) r.rc = 128 + WTERMSIG(st);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// The ONNX backend node-test folder (onnx/backend/test/data/node of the pinned onnx package:
// scripts/conformance-data), or ONNXDP_ONNX_NODE_TESTS when set; "" when it cannot be found.
inline std::string node_test_dir() {
  if (const char* e = std::getenv("ONNXDP_ONNX_NODE_TESTS")) return e;
  std::string cmd = std::string(ONNXDP_SOURCE_DIR) + "/scripts/conformance-data 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  char buf[4096];
  std::string out;
  while (fgets(buf, sizeof buf, p)) out += buf;
  if (pclose(p) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace onnxdp::test
