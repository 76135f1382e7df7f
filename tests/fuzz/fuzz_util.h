// What every fuzz target shares: a scratch folder of its own (the readers take paths, so each
// input is written to a file there first), and the rule for what counts as a finding.
//
// An input may end in an onnxdp::Error: that is a reader refusing bad input, as it must. Any
// other exception (std::out_of_range from a .at(), a JSON library's type_error, a filesystem_error)
// means a reader let through input it did not check: the target aborts, and libFuzzer records the
// input as a crash. So do the sanitizers (ASan, UBSan: any report aborts), allocations past
// -malloc_limit_mb, and inputs that run past -timeout.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "graph/error.h"

namespace onnxdp::fuzz {

// A folder under $TMPDIR for this process, removed at exit.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::string templ = (std::filesystem::temp_directory_path() / "onnxdp_fuzz_XXXXXX").string();
    if (!mkdtemp(templ.data())) {
      std::perror("onnxdp fuzz: mkdtemp");
      std::abort();
    }
    static const std::string keep = templ;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return std::filesystem::path(templ);
  }();
  return dir;
}

// Writes `size` bytes to scratch()/name (replacing it) and returns its path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::filesystem::path p = scratch() / name;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) {
    std::fprintf(stderr, "onnxdp fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
  return p.string();
}

// Runs f; an onnxdp::Error is a clean refusal, anything else thrown is a finding.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnxdp fuzz: a reader threw an exception that is not an onnxdp::Error: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "onnxdp fuzz: a reader threw something that is not an exception\n");
    std::abort();
  }
}

}  // namespace onnxdp::fuzz
