// The backend test harness run over the op table (tests/backend/backend_ops.h): every registered
// case of every op row, through a one-node Plan on the CPU (the reference) and on each backend
// present, every output compared.
//
// Suite "cuda" (CTest gpu.cuda_check): the emulated CUDA device, the CUDA backend's host side with
// its kernels' bodies run on the host: it checks the node-to-launch mapping and the loops, not the
// device. Suite "gpu" (CTest gpu.cuda_kernels): cuda:0; without a GPU it prints "no GPU: <reason>"
// and returns (CTest reports Skipped). Each prints, per family of kernels, "cuda <family> on GPU:
// N cases match the CPU kernels" (tests/gpu/run-all.sh adds those up), the ops a backend ran on
// the CPU instead, by name and count, and the op rows no case covers.
#if defined(ONNXDP_HAVE_CUDA)
#include <doctest/doctest.h>

#include "tests/backend/backend_ops.h"
#include "tests/gpu/cuda_test_util.h"

#include <map>
#include <string>
#include <vector>

using namespace onnxdp;
using namespace onnxdp::test;

namespace {

struct Tally {
  std::map<std::string, int> matched;  // by family: ran on the device and matched
  std::map<std::string, int> on_cpu;   // by op: ran on the CPU on the device backend (and matched)
  int mismatched = 0;
  std::vector<std::string> uncovered;  // op rows without a case
};

// Every registered case, by op row in the table's order, on `kind`.
Tally run_table(DeviceKind kind) {
  auto dev = make_device_backend(kind, 0);
  std::vector<std::vector<std::pair<std::string, OpCase>>> by_op(static_cast<size_t>(kOpCount));
  for (const CaseSet& set : registry())
    for (OpCase& c : set.cases()) by_op[size_t(c.op)].emplace_back(set.family, std::move(c));
  Tally t;
  for (int o = 0; o < kOpCount; ++o) {
    if (by_op[size_t(o)].empty()) t.uncovered.push_back(op_name(Op(o)));
    for (const auto& [family, c] : by_op[size_t(o)]) {
      switch (run_case(c, dev, kind == DeviceKind::cuda)) {
        case Outcome::match: ++t.matched[family]; break;
        case Outcome::host: ++t.on_cpu[op_name(c.op)]; break;
        case Outcome::mismatch: ++t.mismatched; break;
      }
    }
  }
  return t;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void report(const Tally& t, const std::string& where, const std::string& device) {
  for (const auto& [family, n] : t.matched) MESSAGE("cuda " << family << " " << where << ": " << n << " cases match the CPU kernels");
  std::string cpu;
  int skipped = 0;
  for (const auto& [op, n] : t.on_cpu) cpu += (cpu.empty() ? "" : ", ") + op + " x" + std::to_string(n), skipped += n;
  MESSAGE(device << ": " << skipped << " run on the CPU instead (no kernel there), matching: " << (cpu.empty() ? "none" : cpu));
  MESSAGE("backend ops: " << t.uncovered.size() << " of " << kOpCount << " op rows have no case: " << join(t.uncovered));
  CHECK(t.mismatched == 0);
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("backend ops (emulated): every op row's cases match the CPU kernels on cuda-emulated") {
    report(run_table(DeviceKind::cuda_emulated), "emulated", "cuda-emulated:0");
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("backend ops on GPU: every op row's cases match the CPU kernels on cuda:0") {
    if (!have_gpu()) return;
    report(run_table(DeviceKind::cuda), "on GPU", "cuda:0");
  }
}
#endif  // ONNXDP_HAVE_CUDA
