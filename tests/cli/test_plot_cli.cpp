// `onnxdp plot` through the binary (ONNXDP_BINARY): the command is registered, writes the SVG,
// and a bad input is "onnxdp: error: …" with exit status 1. The drawing itself is tested in
// tests/train/test_plot.cpp.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "onnxdp_plotcli_XXXXXX").string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string q(const std::string& s) { return "'" + s + "'"; }

struct Result {
  int rc = -1;
  std::string out, err;
};

Result onnxdp_cli(const TempDir& tmp, const std::string& args) {
  std::string out = tmp.file("stdout.txt"), err = tmp.file("stderr.txt");
  int st = std::system((q(ONNXDP_BINARY) + " " + args + " >" + q(out) + " 2>" + q(err)).c_str());
  Result r;
  if (WIFEXITED(st)) r.rc = WEXITSTATUS(st);
  else if (WIFSIGNALED(st)) r.rc = 128 + WTERMSIG(st);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

}  // namespace

TEST_CASE("cli: plot writes the SVG of a run folder and names a bad line") {
  TempDir tmp;
  fs::create_directory(tmp.file("run"));
  std::ofstream(tmp.file("run/metrics.jsonl")) << "{\"step\": 1, \"loss\": 2.0, \"lr\": 0.001, \"samples_per_s\": 100}\n"
                                               << "{\"step\": 2, \"loss\": 1.0, \"lr\": 0.001, \"samples_per_s\": 110}\n";
  Result r = onnxdp_cli(tmp, "plot " + q(tmp.file("run")) + " --out " + q(tmp.file("curves.svg")));
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK(r.out == "wrote " + tmp.file("curves.svg") + "\n");
  std::string svg = read_text(tmp.file("curves.svg"));
  CHECK(svg.find("<polyline") != std::string::npos);
  CHECK(svg.find("</svg>") != std::string::npos);

  std::ofstream(tmp.file("bad.jsonl")) << "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": [1]}\n";
  r = onnxdp_cli(tmp, "plot " + q(tmp.file("bad.jsonl")) + " --out " + q(tmp.file("bad.svg")));
  CHECK(r.rc == 1);
  CHECK(r.err == "onnxdp: error: metrics '" + tmp.file("bad.jsonl") + "' line 2: \"loss\" is [1], not a number\n");
  CHECK(!fs::exists(tmp.file("bad.svg")));
}
