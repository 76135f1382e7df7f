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

using Attrs = std::map<std::string, Attr>;

Tensor f32s(Shape s, const std::vector<double>& v) { return tensor_of(DType::f32, std::move(s), v); }

// Ops with no CUDA kernel today, on a few dtypes and shapes each (family "other ops"): the device
// backend runs them on the CPU with copies (counted by op), or, once a kernel exists, on the device
// against the CPU. Fed indices are given in range; everything else is filled().
std::vector<OpCase> other_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string label, Op op, std::vector<CaseInput> ins, Attrs attrs = {}, int outputs = 1) {
    cs.push_back({std::move(label), op, std::move(ins), std::move(attrs), outputs});
    cs.back().expect = Expect::either;
  };
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    for (int64_t ex : {0, 1})
      for (int64_t rev : {0, 1})
        add("", Op::CumSum, {fed("x", t, {3, 4, 5}), fixed("axis", scalar(DType::i64, 1))},
            {{"exclusive", Attr(ex)}, {"reverse", Attr(rev)}});
    add("", Op::ReduceProd, {fed("x", t, {2, 3, 2}), fixed("axes", ints({1}))}, {{"keepdims", Attr(int64_t(0))}});
    for (Op op : {Op::ArgMax, Op::ArgMin})
      for (int64_t last : {0, 1}) add("", op, {fed("x", t, {3, 4, 5})}, {{"axis", Attr(int64_t(-1))}, {"select_last_index", Attr(last)}});
    add("", Op::TopK, {fed("x", t, {3, 7}), fixed("k", ints({3}))}, {{"axis", Attr(int64_t(1))}}, 2);
    add("", Op::Shape, {fed("x", t, {2, 3, 4})}, {{"start", Attr(int64_t(1))}});
    add("", Op::Size, {fed("x", t, {2, 3, 4})});
    add("", Op::GatherElements, {fed("x", t, {3, 4}), fed("i", DType::i64, {3, 2}, ints({0, 3, -1, 2, 1, 1}))},
        {{"axis", Attr(int64_t(1))}});
    add("", Op::GatherND, {fed("x", t, {3, 4, 2}), fed("i", DType::i64, {2, 2}, ints({0, 1, 2, -1}))});
    add("", Op::ScatterND,
        {fed("x", t, {4, 3}), fed("i", DType::i64, {2, 1}, ints({2, 0})), fed("u", t, {2, 3})}, {{"reduction", Attr(std::string("add"))}});
    add("", Op::OneHot, {fed("i", DType::i64, {4}, ints({0, 2, -1, 7})), fixed("depth", scalar(DType::i64, 3)), fixed("values", tensor_of(t, {2}, {0, 5}))});
    add("", Op::Range, {fixed("start", scalar(t, 2)), fixed("limit", scalar(t, 11)), fixed("delta", scalar(t, 3))});
    add("", Op::ConstantOfShape, {fixed("shape", ints({2, 3}))}, {{"value", Attr(tensor_of(t, {1}, {4}))}});
    add("", Op::Constant, {}, {{"value", Attr(tensor_of(t, {2, 2}, {1, 2, 3, 4}))}});
  }
  for (DType t : {DType::f32, DType::f64}) {
    const Tensor scales = f32s({4}, {1, 1, 2, 1.5});
    for (const char* mode : {"nearest", "linear", "cubic"})
      add(mode, Op::Resize, {fed("x", t, {1, 2, 3, 4}), absent(), fixed("scales", scales)}, {{"mode", Attr(std::string(mode))}});
    for (const char* mode : {"linear", "cubic"})
      add(mode, Op::ResizeGrad, {fed("dy", t, {1, 2, 6, 6}), fixed("xshape", ints({1, 2, 3, 4})), absent(), fixed("scales", scales)},
          {{"mode", Attr(std::string(mode))}});
    add("", Op::GatherElementsGrad,
        {fed("dy", t, {3, 2}), fed("i", DType::i64, {3, 2}, ints({0, 3, -1, 2, 1, 1})), fixed("shape", ints({3, 4}))},
        {{"axis", Attr(int64_t(1))}});
    add("", Op::GatherNDGrad, {fed("dy", t, {2, 2}), fed("i", DType::i64, {2, 2}, ints({0, 1, 0, 1})), fixed("shape", ints({3, 4, 2}))});
  }
  return cs;
}

// The collectives in a world of one (family "collectives"): Scatter takes this replica's rows
// from RunState::batch_offset; AllReduce and AllGather copy (on a device not connected to a world,
// exec/device_backend.h's connect, on the CPU).
std::vector<OpCase> collective_cases() {
  std::vector<OpCase> cs;
  RunState rs;
  rs.batch_offset = 2;
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    cs.push_back({"", Op::Scatter, {fed("x", t, {8, 3})}, {{"rows", Attr(int64_t(4))}}, 1, rs});
    cs.push_back({"", Op::AllReduce, {fed("a", t, {5}), fed("b", t, {2, 3})}, {}, 2});
    cs.push_back({"", Op::AllGather, {fed("x", t, {4, 3})}, {{"rows", Attr(int64_t(4))}}});
  }
  for (OpCase& c : cs) c.expect = Expect::either;
  return cs;
}

const bool registered = register_cases("other ops", other_cases) && register_cases("collectives", collective_cases);

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
  MESSAGE(device << ": " << skipped << " run on the CPU instead (the backend has no kernel for them), matching: " << (cpu.empty() ? "none" : cpu));
  MESSAGE("backend ops: " << t.uncovered.size() << " of " << kOpCount
                          << " op rows have no case: " << (t.uncovered.empty() ? "none" : join(t.uncovered)));
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
