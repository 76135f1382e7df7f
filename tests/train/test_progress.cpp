// The progress display: plain lines for logs and pipes, one redrawn bar on a terminal. Output goes
// to a tmpfile() and is read back. (The whole CLI under a pseudo-terminal:
// tests/scripts/progress_pty.py.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "train/progress.h"

using namespace onnxdp;

namespace {

// Everything written to f so far.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("progress: eta is m:ss below an hour and h:mm:ss above") {
  CHECK(ProgressReporter::format_eta(0) == "0:00");
  CHECK(ProgressReporter::format_eta(12) == "0:12");
  CHECK(ProgressReporter::format_eta(59.6) == "1:00");
  CHECK(ProgressReporter::format_eta(754) == "12:34");
  CHECK(ProgressReporter::format_eta(3600) == "1:00:00");
  CHECK(ProgressReporter::format_eta(3725) == "1:02:05");
  CHECK(ProgressReporter::format_eta(-1) == "?");
  CHECK(ProgressReporter::format_eta(std::nan("")) == "?");
}

TEST_CASE("progress: not a terminal, plain lines every log_every steps plus the first and the last") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    ProgressReporter p(200, /*tty=*/false, /*log_every=*/40, f);
    for (int64_t s = 1; s <= 200; ++s) {
      p.update(s, 0.4213f, 0.001f, 1234.0);
      if (s == 100) p.message("saved checkpoint-100");
    }
    p.finish();
    p.finish();  // idempotent
  }
  std::string out = contents(f);
  std::fclose(f);
  INFO(out);
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find('\x1b') == std::string::npos);
  std::vector<std::string> ls = lines(out);
  std::vector<std::string> steps = {"1", "40", "80", "100*", "120", "160", "200"};
  REQUIRE(ls.size() == steps.size());
  std::regex eta(" eta [0-9]+:[0-9][0-9]$");
  for (size_t i = 0; i < ls.size(); ++i) {
    if (steps[i] == "100*") {
      CHECK(ls[i] == "saved checkpoint-100");
      continue;
    }
    CHECK(ls[i].rfind("step " + steps[i] + "/200  loss 0.4213  lr 0.001  1234 samples/s  eta ", 0) == 0);
    CHECK(std::regex_search(ls[i], eta));
  }
  CHECK(ls.back() == "step 200/200  loss 0.4213  lr 0.001  1234 samples/s  eta 0:00");
}

TEST_CASE("progress: not a terminal, a run that stops early still shows its last step") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  ProgressReporter p(200, false, 40, f);
  for (int64_t s = 101; s <= 157; ++s) p.update(s, 1.5f, 3e-4f, 10.0);  // resumed at 101
  p.finish();
  std::vector<std::string> ls = lines(contents(f));
  std::fclose(f);
  REQUIRE(ls.size() == 3);  // the first update (101), 120, and where it stopped
  CHECK(ls[0].rfind("step 101/200  loss 1.5000  lr 0.0003  10 samples/s  eta ", 0) == 0);
  CHECK(ls[1].rfind("step 120/200", 0) == 0);
  CHECK(ls[2].rfind("step 157/200", 0) == 0);
}

TEST_CASE("progress: on a terminal one bar is redrawn in place, rate-limited, ended by finish") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  ProgressReporter p(200, /*tty=*/true, 40, f);
  for (int64_t s = 1; s <= 200; ++s) {
    p.update(s, 0.25f, 0.001f, 500.0);
    if (s == 3) p.message("evaluating");
  }
  std::string before = contents(f);
  p.finish();
  std::string out = contents(f);
  std::fclose(f);
  INFO(out);
  CHECK(before.find('\n') == before.rfind('\n'));  // only the message's line ends so far
  CHECK(out.find('\r') != std::string::npos);
  CHECK(out.find("\x1b[K") != std::string::npos);
  REQUIRE(!out.empty());
  CHECK(out.back() == '\n');
  // A tight loop of 200 steps takes far less than the 100 ms between redraws: the first, the
  // message's redraw and the last, not 200.
  CHECK(count(out, "\r[") < 20);
  // The first step, drawn at once with an empty bar; the message clears the bar line first.
  CHECK(out.rfind("\r[....................] step 1/200  loss 0.2500  lr 0.001  500 samples/s  eta ", 0) == 0);
  CHECK(out.find("\r\x1b[Kevaluating\n\r[") != std::string::npos);
  // The last step is always drawn, with a full bar.
  CHECK(out.find("\r[####################] step 200/200  loss 0.2500  lr 0.001  500 samples/s  eta 0:00\x1b[K\n") !=
        std::string::npos);
}
