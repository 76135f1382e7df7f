// The backend test harness (DESIGN.md convention 5: the CPU kernel is the reference). One case is
// one node: its op, inputs (fed each run, constants, or absent), attributes and outputs. The harness
// builds the one-node Graph, runs it through a Plan on the CPU and through a Plan on a device
// backend (exec/device_backend.h), and compares every output with the case's comparison.
//
// Case generators register by family (register_cases); tests/backend/test_backend_ops.cpp sorts
// their cases by op row, walks the op table's rows and runs every case on every backend present
// (the emulated CUDA device always where CUDA is built, cuda:0 where a GPU is), names the rows no
// case covers, and counts by op name what a backend runs on the CPU instead (Plan::host_ops). The
// generators live with their kernels' tests (tests/gpu/test_cuda_<file>.cpp); the ops without a
// device kernel have theirs in tests/backend/test_backend_ops.cpp. The op tests' run_op
// (tests/ops/) runs its one-node graph through run_on_cpu.
//
//   std::vector<OpCase> my_cases() {
//     return {{.op = Op::Relu, .inputs = {fed("x", DType::f32, {4, 5})}, .compare = within(1e-5, 1e-6)}};
//   }
//   const bool registered = register_cases("elementwise", my_cases);
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exec/device_backend.h"
#include "exec/plan.h"
#include "graph/shape_helpers.h"

namespace onnxdp::test {

// An input of the node: fed each run, a constant, or absent (an empty name: an optional input the
// node goes without). A fed input without data is filled by the case's `fill` at each run.
struct CaseInput {
  std::string name = {};
  DType dtype = DType::f32;
  Shape shape = {};
  bool constant = false;
  Tensor data = {};
};

inline CaseInput fed(std::string name, DType t, Shape s, Tensor data = {}) {
  if (!data.empty()) data = data.reshaped(s);
  return {std::move(name), t, std::move(s), false, std::move(data)};
}
inline CaseInput fixed(std::string name, Tensor data) {
  DType t = data.dtype();
  Shape s = data.shape();
  return {std::move(name), t, std::move(s), true, std::move(data)};
}
inline CaseInput absent() { return {}; }

struct OpCase;

// What a comparison sees: one output of the two runs (same dtype and shape, checked before).
struct Compared {
  const OpCase& c;
  const std::string& output;  // "y0", "y1", ...
  const Tensor& cpu;          // the reference
  const Tensor& dev;          // the device's
  bool on_gpu;                // a real GPU (not the emulated device)
  const std::map<std::string, Tensor>& feed;  // the fed inputs of this run
};
// "" when the outputs agree, else what differs (the number of elements and the first few).
using Compare = std::function<std::string(const Compared&)>;

// Where the node must run on the device backend: there (its kernel), on the CPU (a refusal the
// case checks), or either (a case the backend may not support: counted as skipped by op name).
enum class Expect { device, host, either };

struct OpCase {
  std::string label = {};  // what the case is about, shown on a failure
  Op op = Op::Identity;
  std::vector<CaseInput> inputs = {};
  std::map<std::string, Attr> attrs = {};
  int outputs = 1;                      // named y0, y1, ...
  RunState rs = {};
  std::vector<int> absent_outputs = {}; // outputs the node does not produce
  Compare compare = {};                 // unset: bytes equal, any NaN equal to any NaN
  // Fills fed input k (inputs without data) from the run's generator; unset: distinct values (filled()).
  std::function<Tensor(const OpCase&, size_t k, std::mt19937&)> fill = {};
  Expect expect = Expect::device;
  int runs = 1;             // runs of the same two plans; 3 or more: the device plan replays a recording
  bool fresh_inputs = false;  // runs > 1: inputs filled anew each run (else the first run's)
  bool poison_outputs = false;  // the device writes into memory of all-ones bytes (NaN): unwritten elements show
  bool tf32 = false;        // the device's MatMul / Gemm may use TF32
  std::string expect_error = {};  // both runs must fail with the same message containing this
};

// ---- values ------------------------------------------------------------------------------

inline double element(const Tensor& t, int64_t i) {
  return dispatch_elem(t.dtype(), [&]<class E>() { return E::to_f64(t.as<typename E::T>()[i]); });
}

inline Tensor tensor_of(DType t, Shape s, const std::vector<double>& v) {
  Tensor x(t, std::move(s));
  REQUIRE(size_t(x.numel()) == v.size());
  dispatch_elem(t, [&]<class E>() {
    for (int64_t i = 0; i < x.numel(); ++i) x.as<typename E::T>()[i] = E::from_f64(v[size_t(i)]);
  });
  return x;
}

inline Tensor ints(const std::vector<int64_t>& v, DType t = DType::i64) {
  Tensor x(t, {int64_t(v.size())});
  if (t == DType::i64) {
    if (!v.empty()) std::memcpy(x.data(), v.data(), v.size() * 8);  // exact past 2^53
    return x;
  }
  return tensor_of(t, {int64_t(v.size())}, std::vector<double>(v.begin(), v.end()));
}

inline Tensor scalar(DType t, double v) { return tensor_of(t, {}, {v}); }

// Distinct values per element: any misplaced element shows. Floats get fractions and signs.
inline Tensor filled(DType t, const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(-1000, 1000);
  std::vector<double> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) {
    const double r = u(rng);
    switch (t) {
      case DType::boolean: v[i] = r > 0; break;
      case DType::u8: v[i] = double((i * 7 + 3) % 256); break;
      case DType::i8: v[i] = double(int(i * 5 % 256) - 128); break;
      default: v[i] = dtype_is_float(t) ? r / 8.0 + double(i) * 1024.0 : r + double(i) * 4096.0;
    }
  }
  return tensor_of(t, s, v);
}

// ---- comparisons -------------------------------------------------------------------------

// Counts the elements `ok` refuses; describes the first three.
inline std::string mismatches(const Compared& m, const std::function<bool(int64_t i, double cpu, double dev)>& ok) {
  int64_t bad = 0;
  std::string why;
  for (int64_t i = 0; i < m.cpu.numel(); ++i) {
    const double a = element(m.cpu, i), b = element(m.dev, i);
    if (ok(i, a, b)) continue;
    if (bad++ < 3) why += " [" + std::to_string(i) + "] cpu " + std::to_string(a) + " device " + std::to_string(b);
  }
  return bad ? std::to_string(bad) + " of " + std::to_string(m.cpu.numel()) + " elements differ:" + why : "";
}

// Bit-identical, except that any NaN matches any NaN for float dtypes (a NaN's payload after a
// float conversion is the hardware's choice).
inline std::string bytes_equal(const Compared& m) {
  const size_t es = dtype_size(m.cpu.dtype());
  const bool fl = dtype_is_float(m.cpu.dtype());
  return mismatches(m, [&](int64_t i, double a, double b) {
    const auto* p = static_cast<const uint8_t*>(m.cpu.data()) + size_t(i) * es;
    const auto* q = static_cast<const uint8_t*>(m.dev.data()) + size_t(i) * es;
    return std::memcmp(p, q, es) == 0 || (fl && std::isnan(a) && std::isnan(b));
  });
}

// Floats within |dev - cpu| <= atol + rtol |cpu| (NaN only against NaN, infinities equal);
// integers and bools exactly.
inline Compare within(double rtol, double atol) {
  return [=](const Compared& m) {
    const bool fl = dtype_is_float(m.cpu.dtype());
    return mismatches(m, [&](int64_t, double a, double b) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
      if (!fl || std::isinf(a) || std::isinf(b)) return a == b;
      return std::abs(a - b) <= atol + rtol * std::abs(a);
    });
  };
}

// ---- running ------------------------------------------------------------------------------

// "y<k>", built by appending (GCC 12 warns falsely (-Wrestrict) on "y" + std::to_string(k)).
inline std::string output_name(int k) {
  std::string s = "y";
  s += std::to_string(k);
  return s;
}

// op(dtype shape, ...) attrs [label]
inline std::string describe(const OpCase& c) {
  std::string s = std::string(op_name(c.op)) + "(";
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const CaseInput& in = c.inputs[k];
    s += k ? ", " : "";
    s += in.name.empty() ? "-" : std::string(dtype_name(in.dtype)) + shape_str(in.shape) + (in.constant ? " const" : "");
  }
  s += ")";
  for (const auto& [name, a] : c.attrs) {
    s += " " + name + "=";
    if (const int64_t* i = std::get_if<int64_t>(&a)) s += std::to_string(*i);
    else if (const float* f = std::get_if<float>(&a)) s += std::to_string(*f);
    else if (const std::string* str = std::get_if<std::string>(&a)) s += *str;
    else if (const std::vector<int64_t>* v = std::get_if<std::vector<int64_t>>(&a)) s += shape_str(*v);
  }
  if (!c.label.empty()) s += " [" + c.label + "]";
  return s;
}

// The case's one-node graph: fed inputs are graph inputs, every output a graph output.
inline Graph one_node_graph(const OpCase& c) {
  Graph g;
  std::vector<ValueId> ins;
  for (const CaseInput& in : c.inputs) {
    if (in.name.empty()) {
      ins.push_back(kNoValue);
      continue;
    }
    Value v;
    v.name = in.name;
    v.dtype = in.dtype;
    v.shape = in.shape;
    v.kind = in.constant ? ValueKind::constant : ValueKind::input;
    if (in.constant) v.data = in.data;
    ins.push_back(g.add_value(std::move(v)));
    if (!in.constant) g.inputs.push_back(ins.back());
  }
  std::vector<std::string> outs;
  for (int k = 0; k < c.outputs; ++k) outs.push_back(output_name(k));
  const int n = g.add_node(c.op, "test_node", ins, outs, c.attrs);
  for (int k : c.absent_outputs) g.nodes[size_t(n)].outputs[size_t(k)] = kNoValue;
  for (ValueId o : g.nodes[size_t(n)].outputs)
    if (o != kNoValue) g.outputs.push_back(o);
  verify(g);
  return g;
}

// The fed inputs of run `run`, seeded by the case and the run (the same for both plans).
inline std::map<std::string, Tensor> feed_of(const OpCase& c, int run) {
  std::mt19937 rng(unsigned(std::hash<std::string>{}(describe(c))) + unsigned(run));
  std::map<std::string, Tensor> feed;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const CaseInput& in = c.inputs[k];
    if (in.name.empty() || in.constant) continue;
    if (!in.data.empty()) feed[in.name] = in.data;
    else feed[in.name] = c.fill ? c.fill(c, k, rng) : filled(in.dtype, in.shape, rng);
  }
  return feed;
}

// The case's outputs on the CPU (the reference) for these inputs.
inline std::map<std::string, Tensor> run_on_cpu(const OpCase& c, const std::map<std::string, Tensor>& feed) {
  Plan p(one_node_graph(c));
  return p.run(feed, c.rs);
}

// The ops of the nodes that run on the CPU on `dev` ("" when the node has a kernel there).
inline std::string host_ops(const OpCase& c, const std::shared_ptr<DeviceBackend>& dev) {
  return Plan(one_node_graph(c), PlanOptions{.device = dev}).host_ops();
}

enum class Outcome { match, mismatch, host };

// Memory on dev holding all-ones bytes, released at the end of scope.
struct Poisoned {
  std::shared_ptr<DeviceBackend> dev;
  void* p = nullptr;
  Poisoned(std::shared_ptr<DeviceBackend> d, size_t bytes) : dev(std::move(d)), p(dev->alloc(bytes)) {
    std::vector<uint8_t> ones(bytes, 0xFF);
    dev->to_device(p, ones.data(), bytes);
  }
  ~Poisoned() { dev->release(p); }
  Poisoned(const Poisoned&) = delete;
  Poisoned& operator=(const Poisoned&) = delete;
};

// Runs c on the CPU and on dev (gpu: dev is a real GPU) and checks what the case expects. Returns
// host when the node ran on the CPU on dev (Expect::host, or a skip under Expect::either).
inline Outcome run_case(const OpCase& c, const std::shared_ptr<DeviceBackend>& dev, bool gpu) {
  const std::string what = describe(c);
  INFO(what);
  Plan cpu(one_node_graph(c));
  std::vector<std::unique_ptr<Poisoned>> poison;
  PlanOptions po{.device = dev};
  if (c.poison_outputs) {
    const Graph g = one_node_graph(c);
    for (ValueId o : g.outputs) {
      const Value& v = g.value(o);
      const size_t bytes = size_t(shape_numel(v.shape)) * dtype_size(v.dtype);
      if (!bytes) continue;
      poison.push_back(std::make_unique<Poisoned>(dev, bytes));
      po.bound[v.name] = poison.back()->p;
    }
  }
  Plan on_dev(one_node_graph(c), po);
  const std::string host = on_dev.host_ops();
  if (c.expect == Expect::device) CHECK_MESSAGE(host.empty(), "runs on the CPU on " << dev->name());
  if (c.expect == Expect::host) CHECK(host == op_name(c.op));
  if (c.tf32) dev->allow_tf32(true);
  bool ok = true;
  for (int run = 0; run < c.runs; ++run) {
    CAPTURE(run);
    const std::map<std::string, Tensor> feed = feed_of(c, c.fresh_inputs ? run : 0);
    if (!c.expect_error.empty()) {
      std::string a, b;
      try {
        cpu.run(feed, c.rs);
      } catch (const Error& e) {
        a = e.what();
      }
      try {
        on_dev.run(feed, c.rs);
      } catch (const Error& e) {
        b = e.what();
      }
      CHECK(a.find(c.expect_error) != std::string::npos);
      CHECK(b == a);
      ok = ok && a.find(c.expect_error) != std::string::npos && b == a;
      continue;
    }
    const std::map<std::string, Tensor> a = cpu.run(feed, c.rs), b = on_dev.run(feed, c.rs);
    REQUIRE(a.size() == b.size());
    for (const auto& [name, x] : a) {
      CAPTURE(name);
      const Tensor& y = b.at(name);
      REQUIRE(x.dtype() == y.dtype());
      REQUIRE(x.shape() == y.shape());
      const Compared m{c, name, x, y, gpu, feed};
      const std::string why = c.compare ? c.compare(m) : bytes_equal(m);
      CHECK_MESSAGE(why.empty(), why);
      ok = ok && why.empty();
    }
  }
  if (c.tf32) dev->allow_tf32(false);
  if (c.runs >= 3 && host.empty()) CHECK(on_dev.replays_graph());
  if (!ok) return Outcome::mismatch;
  if (host.empty()) return c.expect == Expect::host ? Outcome::mismatch : Outcome::match;
  return c.expect == Expect::device ? Outcome::mismatch : Outcome::host;
}

// ---- the registry ------------------------------------------------------------------------

// A family of cases, named as its kernels' file (elementwise, gemm, reduce ...): all of them, for
// any ops; the harness sorts them by op row. Cases hold shapes and small constants; fed inputs
// are filled when a case runs.
struct CaseSet {
  std::string family;
  std::function<std::vector<OpCase>()> cases;
};

inline std::vector<CaseSet>& registry() {
  static std::vector<CaseSet> sets;
  return sets;
}

// Registers at static initialisation: `const bool registered = register_cases("gemm", gemm_cases);`.
inline bool register_cases(std::string family, std::function<std::vector<OpCase>()> cases) {
  registry().push_back({std::move(family), std::move(cases)});
  return true;
}

}  // namespace onnxdp::test
