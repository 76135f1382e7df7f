// End-to-end tests of the onnxdp binary (ONNXDP_BINARY), on models built here with the ONNX
// protobuf API and on the sample models in models/. Also the inference_mode pass the `run`
// command applies. Scratch files go to a temp folder, never into the repository.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "graph/passes/inference_mode.h"
#include "onnx/onnx_pb.h"
#include "train/npz.h"
#include "tests/test_util.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

using test::CliResult;
using test::contains;
using test::onnxdp_cli;
using test::q;
using test::read_text;
using test::TempDir;
using Result = CliResult;

// ---- models built with the ONNX protobuf API ---------------------------------------------------

onnx::ModelProto empty_model(int opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("onnxdp-test");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  m.mutable_graph()->set_name("test");
  return m;
}

// dims: an int64 is a fixed size, a string a symbolic one.
void add_value_info(onnx::ValueInfoProto* vi, const std::string& name, int elem_type,
                    const std::vector<std::variant<int64_t, std::string>>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (auto* v = std::get_if<int64_t>(&d)) dim->set_dim_value(*v);
    else dim->set_dim_param(std::get<std::string>(d));
  }
}

void add_initializer(onnx::ModelProto& m, const std::string& name, int elem_type, std::vector<int64_t> dims) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  int64_t esize = elem_type == 7 || elem_type == 11 ? 8 : 4;
  t->set_raw_data(std::string(size_t(n * esize), '\0'));
}

onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, const std::string& name,
                          std::vector<std::string> ins, std::vector<std::string> outs, const std::string& domain = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  n->set_domain(domain);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}

void save(const onnx::ModelProto& m, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&f));
}

// A model without nodes whose output is its input: exercises run's batching, feeding and
// concatenation without depending on any kernel.
onnx::ModelProto passthrough_model(const std::vector<std::variant<int64_t, std::string>>& dims, int elem_type = 1) {
  onnx::ModelProto m = empty_model();
  add_value_info(m.mutable_graph()->add_input(), "x", elem_type, dims);
  add_value_info(m.mutable_graph()->add_output(), "x", elem_type, dims);
  return m;
}

Tensor iota_f32(Shape s) {
  Tensor t(DType::f32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = float(i) * 0.5f - 3.0f;
  return t;
}

}  // namespace

// ---- --version, help, usage errors ---------------------------------------------------------------

TEST_CASE("cli: --version prints the version and the CUDA line") {
  TempDir tmp;
  Result r = onnxdp_cli(tmp, "--version");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "onnxdp 0.1.0"));
  CHECK(contains(r.out, "CUDA: "));
  CHECK((contains(r.out, "CUDA: built") || contains(r.out, "CUDA: not built")));
}

TEST_CASE("cli: no subcommand prints help, a usage error exits 2") {
  TempDir tmp;
  Result r = onnxdp_cli(tmp, "");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "inspect"));
  CHECK(contains(r.out, "run"));
  r = onnxdp_cli(tmp, "run");  // required arguments missing
  CHECK(r.rc == 2);
  CHECK(!r.err.empty());
  r = onnxdp_cli(tmp, "frobnicate");
  CHECK(r.rc == 2);
}

// ---- inspect -------------------------------------------------------------------------------------

namespace {

// Conv -> BatchNormalization -> Reshape (int64 shape initializer) -> a custom-domain op and an op
// onnxdp does not have.
onnx::ModelProto inspect_model() {
  onnx::ModelProto m = empty_model();
  add_value_info(m.mutable_graph()->add_input(), "x", 1, {std::string("batch"), 3, std::string("h"), 8});
  add_initializer(m, "conv.weight", 1, {4, 3, 3, 3});
  add_initializer(m, "bn.weight", 1, {4});
  add_initializer(m, "bn.bias", 1, {4});
  add_initializer(m, "bn.running_mean", 1, {4});
  add_initializer(m, "bn.running_var", 1, {4});
  add_initializer(m, "shape", 7, {2});
  add_initializer(m, "orphan", 1, {5});
  add_node(m, "Conv", "/conv/Conv", {"x", "conv.weight"}, {"c"});
  add_node(m, "BatchNormalization", "/bn/BatchNormalization",
           {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, {"b"});
  add_node(m, "Reshape", "/Reshape", {"b", "shape"}, {"r"});
  add_node(m, "FusedMatMul", "/fused", {"r", "r"}, {"f"}, "com.microsoft");
  add_node(m, "NoSuchOp", "/nosuch", {"f"}, {"y0"});
  // A float buffer that only feeds a comparison (a causal mask): no gradient reaches it.
  add_initializer(m, "causal", 1, {2});
  add_node(m, "Equal", "/eq", {"causal", "causal"}, {"eq"});
  add_node(m, "Where", "/where", {"eq", "y0", "y0"}, {"y"});
  add_value_info(m.mutable_graph()->add_output(), "y", 1, {std::string("batch"), std::string("n")});
  return m;
}

}  // namespace

TEST_CASE("cli: inspect lists inputs, parameters, ops and unsupported ops") {
  TempDir tmp;
  save(inspect_model(), tmp.file("m.onnx"));

  Result r = onnxdp_cli(tmp, "inspect " + q(tmp.file("m.onnx")));
  CHECK(r.rc == 1);  // unsupported ops: listed, and a non-zero exit
  CHECK(contains(r.err, "is not supported"));
  CHECK(contains(r.out, "ir version  8"));
  CHECK(contains(r.out, "producer    onnxdp-test"));
  CHECK(contains(r.out, "ai.onnx 17"));
  CHECK(contains(r.out, "[batch, 3, h, 8]"));
  CHECK(contains(r.out, "[batch, n]"));
  CHECK(contains(r.out, "frozen: BatchNormalization running mean"));
  CHECK(contains(r.out, "frozen: BatchNormalization running variance"));
  CHECK(contains(r.out, "frozen: i64 (not floating point)"));
  CHECK(contains(r.out, "frozen: unused"));
  CHECK(contains(r.out, "frozen: no gradient path to an output"));
  CHECK(contains(r.out, "/nosuch (NoSuchOp, domain ai.onnx)"));
  CHECK(contains(r.out, "/fused (FusedMatMul, domain com.microsoft)"));

  r = onnxdp_cli(tmp, "inspect --json " + q(tmp.file("m.onnx")));
  CHECK(r.rc == 1);  // unsupported ops: listed, and a non-zero exit
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["ir_version"] == 8);
  CHECK(j["opsets"]["ai.onnx"] == 17);
  CHECK(j["inputs"].size() == 1);
  CHECK(j["inputs"][0]["name"] == "x");
  CHECK(j["inputs"][0]["dtype"] == "f32");
  CHECK(j["inputs"][0]["shape"] == nlohmann::json::array({"batch", 3, "h", 8}));
  CHECK(j["outputs"][0]["shape"] == nlohmann::json::array({"batch", "n"}));
  // 108 + 4 + 4 trainable; 4 + 4 running stats, 2 int64, 5 unused, 2 causal frozen.
  CHECK(j["parameters"]["tensors"] == 8);
  CHECK(j["parameters"]["elements"] == 108 + 4 * 4 + 2 + 5 + 2);
  CHECK(j["parameters"]["bytes"] == (108 + 4 * 4 + 5 + 2) * 4 + 2 * 8);
  CHECK(j["parameters"]["trainable"]["tensors"] == 3);
  CHECK(j["parameters"]["trainable"]["elements"] == 116);
  CHECK(j["parameters"]["frozen"]["elements"] == 4 + 4 + 2 + 5 + 2);
  std::map<std::string, bool> trains;
  for (const auto& i : j["initializers"]) trains[i["name"].get<std::string>()] = i["trainable"].get<bool>();
  CHECK(trains == std::map<std::string, bool>{{"conv.weight", true}, {"bn.weight", true}, {"bn.bias", true},
                                              {"bn.running_mean", false}, {"bn.running_var", false},
                                              {"shape", false}, {"orphan", false}, {"causal", false}});
  CHECK(j["nodes"] == 7);
  CHECK(j["ops"]["Conv"] == 1);
  CHECK(j["ops"]["com.microsoft:FusedMatMul"] == 1);
  REQUIRE(j["unsupported_ops"].size() == 2);
  CHECK(j["unsupported_ops"][0]["node"] == "/fused");
  CHECK(j["unsupported_ops"][0]["domain"] == "com.microsoft");
  CHECK(j["unsupported_ops"][1]["op_type"] == "NoSuchOp");
  CHECK(j["supported"] == false);
}

TEST_CASE("cli: inspect errors: missing file, truncated model, not ONNX") {
  TempDir tmp;
  Result r = onnxdp_cli(tmp, "inspect " + q(tmp.file("nope.onnx")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "onnxdp: error: "));
  CHECK(contains(r.err, "nope.onnx"));

  std::string bytes = inspect_model().SerializeAsString();
  {
    // Cut inside the last initializer's raw data: protobuf cannot parse a truncated field.
    std::ofstream f(tmp.file("cut.onnx"), std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size() - bytes.size() / 3));
  }
  r = onnxdp_cli(tmp, "inspect " + q(tmp.file("cut.onnx")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "onnxdp: error: "));
  CHECK(contains(r.err, "cut.onnx"));

  std::ofstream(tmp.file("text.onnx")) << "this is not a model";
  r = onnxdp_cli(tmp, "inspect --json " + q(tmp.file("text.onnx")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "onnxdp: error: "));
}

TEST_CASE("cli: inspect reports an opset onnxdp does not import, exit 1") {
  TempDir tmp;
  onnx::ModelProto m = passthrough_model({std::string("batch"), 4});
  m.mutable_opset_import(0)->set_version(5);
  save(m, tmp.file("old.onnx"));
  Result r = onnxdp_cli(tmp, "inspect " + q(tmp.file("old.onnx")));
  CHECK(r.rc == 1);  // the facts are printed, and the exit status says onnxdp cannot run it
  CHECK(contains(r.out, "problem: default-domain opset 5"));
}

// ---- run: feeding, batching, errors (models without kernels) --------------------------------------

TEST_CASE("cli: run batches samples and concatenates outputs in order") {
  TempDir tmp;
  save(passthrough_model({std::string("batch"), std::string("feat")}), tmp.file("p.onnx"));
  Tensor x = iota_f32({10, 3});
  for (bool compressed : {true, false}) {
    CAPTURE(compressed);
    write_npz(tmp.file("in.npz"), {{"x", x}, {"ignored", Tensor::from_f32({1, 2})}}, compressed);
    for (int bs : {4, 10, 64, 1}) {
      CAPTURE(bs);
      Result r = onnxdp_cli(tmp, "run " + q(tmp.file("p.onnx")) + " --data " + q(tmp.file("in.npz")) + " --out " +
                                     q(tmp.file("out.npz")) + " --batch-size " + std::to_string(bs));
      CHECK(r.rc == 0);
      CHECK(r.err.empty());
      int batches = (10 + std::min(bs, 10) - 1) / std::min(bs, 10);
      CHECK(contains(r.out, "ran 10 samples in " + std::to_string(batches) + " batches"));
      auto out = read_npz(tmp.file("out.npz"));
      REQUIRE(out.count("x"));
      CHECK(out.size() == 1);
      CHECK(out.at("x").shape() == Shape{10, 3});
      CHECK(out.at("x").to_f64() == x.to_f64());
    }
  }
}

TEST_CASE("cli: run errors name the array, before running") {
  TempDir tmp;
  save(passthrough_model({std::string("batch"), 4}), tmp.file("p.onnx"));
  auto run = [&](const std::map<std::string, Tensor>& data, const std::string& extra = "") {
    write_npz(tmp.file("in.npz"), data);
    return onnxdp_cli(tmp, "run " + q(tmp.file("p.onnx")) + " --data " + q(tmp.file("in.npz")) + " --out " +
                               q(tmp.file("out.npz")) + extra);
  };

  SUBCASE("missing model file") {
    write_npz(tmp.file("in.npz"), {{"x", iota_f32({2, 4})}});
    Result r = onnxdp_cli(tmp, "run " + q(tmp.file("none.onnx")) + " --data " + q(tmp.file("in.npz")) + " --out " +
                            q(tmp.file("out.npz")));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "onnxdp: error: model file"));
    CHECK(contains(r.err, "none.onnx"));
  }
  SUBCASE("missing data file") {
    Result r = onnxdp_cli(tmp, "run " + q(tmp.file("p.onnx")) + " --data " + q(tmp.file("nodata.npz")) + " --out " +
                                   q(tmp.file("out.npz")));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "onnxdp: error: npz file"));
    CHECK(contains(r.err, "nodata.npz"));
  }
  SUBCASE("missing input array") {
    Result r = run({{"y", iota_f32({2, 4})}});
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "onnxdp: error: the model's input 'x' has no array"));
    CHECK(contains(r.err, "arrays there: y"));
  }
  SUBCASE("wrong dtype") {
    Result r = run({{"x", Tensor::from_i64({1, 2, 3, 4}, {1, 4})}});
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "onnxdp: error: array 'x'"));
    CHECK(contains(r.err, "is i64, but the model's input 'x' is f32"));
  }
  SUBCASE("wrong non-batch shape") {
    Result r = run({{"x", iota_f32({2, 5})}});
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "array 'x'"));
    CHECK(contains(r.err, "dim 1 must be 4"));
  }
  SUBCASE("wrong rank") {
    Result r = run({{"x", iota_f32({2, 4, 1})}});
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "array 'x'"));
    CHECK(contains(r.err, "rank 3"));
  }
  SUBCASE("no samples") {
    Result r = run({{"x", iota_f32({0, 4})}});
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "no samples"));
  }
  SUBCASE("bad batch size") {
    Result r = run({{"x", iota_f32({2, 4})}}, " --batch-size 0");
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "--batch-size"));
  }
  SUBCASE("data is not an npz") {
    std::ofstream(tmp.file("bad.npz")) << "nope";
    Result r = onnxdp_cli(tmp, "run " + q(tmp.file("p.onnx")) + " --data " + q(tmp.file("bad.npz")) + " --out " +
                                   q(tmp.file("out.npz")));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "bad.npz"));
  }
  // Nothing was written by a failed run.
  CHECK(!fs::exists(tmp.file("out.npz")));
}

TEST_CASE("cli: run checks symbolic dims shared by several inputs") {
  TempDir tmp;
  onnx::ModelProto m = empty_model();
  add_value_info(m.mutable_graph()->add_input(), "a", 1, {std::string("batch"), std::string("n")});
  add_value_info(m.mutable_graph()->add_input(), "b", 1, {std::string("batch"), std::string("n")});
  add_value_info(m.mutable_graph()->add_output(), "a", 1, {std::string("batch"), std::string("n")});
  save(m, tmp.file("two.onnx"));
  write_npz(tmp.file("in.npz"), {{"a", iota_f32({3, 2})}, {"b", iota_f32({3, 5})}});
  Result r = onnxdp_cli(tmp, "run " + q(tmp.file("two.onnx")) + " --data " + q(tmp.file("in.npz")) + " --out " +
                                 q(tmp.file("out.npz")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "'n'"));
  write_npz(tmp.file("in.npz"), {{"a", iota_f32({3, 2})}, {"b", iota_f32({4, 2})}});
  r = onnxdp_cli(tmp, "run " + q(tmp.file("two.onnx")) + " --data " + q(tmp.file("in.npz")) + " --out " +
                          q(tmp.file("out.npz")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "samples"));
}

// ---- run on the sample models: PyTorch eval-mode references ---------------------------------------

TEST_CASE("cli: run matches PyTorch's eval-mode outputs on the sample models") {
  const std::string models = std::string(ONNXDP_SOURCE_DIR) + "/models";
  for (std::string name : {"mlp", "mlp_dynamo", "cnn", "tiny_lm", "rope_lm"}) {
    CAPTURE(name);
    std::string dir = models + "/" + name;
    if (!fs::exists(dir + "/model.onnx") || !fs::exists(dir + "/reference.npz")) {
      MESSAGE("models/" << name << " is missing; skipped");
      continue;
    }
    TempDir tmp;
    auto ref = read_npz(dir + "/reference.npz");
    // 32 samples in batches of 10: three full batches and a last one of 2 with its own shape.
    Result r = onnxdp_cli(tmp, "run " + q(dir + "/model.onnx") + " --data " + q(dir + "/reference.npz") + " --out " +
                                   q(tmp.file("out.npz")) + " --batch-size 10");
    INFO(r.err);
    REQUIRE(r.rc == 0);
    auto out = read_npz(tmp.file("out.npz"));
    REQUIRE(!out.empty());
    for (const auto& [oname, t] : out) {
      CAPTURE(oname);
      REQUIRE(ref.count(oname));
      const Tensor& want = ref.at(oname);
      REQUIRE(t.shape() == want.shape());
      std::vector<double> a = t.to_f64(), b = want.to_f64();
      // np.allclose(a, b, rtol=1e-4, atol=1e-5): float32 sums in another order differ by ~1e-7.
      size_t bad = 0;
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        double excess = std::abs(a[i] - b[i]) - (1e-4 * std::abs(b[i]) + 1e-5);
        if (excess > 0) ++bad;
        worst = std::max(worst, std::abs(a[i] - b[i]));
      }
      CAPTURE(worst);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cli: run --mixed-precision bf16 / fp16 computes the products in 16 bits: close to float32, not equal") {
  const std::string dir = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp";
  TempDir tmp;
  const std::string base = "run " + q(dir + "/model.onnx") + " --data " + q(dir + "/reference.npz") + " --out ";
  Result a = onnxdp_cli(tmp, base + q(tmp.file("f32.npz")));
  INFO(a.err);
  REQUIRE(a.rc == 0);
  auto fa = read_npz(tmp.file("f32.npz"));
  // Within a few roundings of the format through three layers: bfloat16 keeps 8 bits, float16 11.
  std::map<std::string, double> worst_of;
  for (const auto& [mode, tol] : {std::pair<std::string, double>{"bf16", 1e-2}, {"fp16", 1e-3}}) {
    CAPTURE(mode);
    Result b = onnxdp_cli(tmp, base + q(tmp.file(mode + ".npz")) + " --mixed-precision " + mode);
    INFO(b.err);
    REQUIRE(b.rc == 0);
    auto fb = read_npz(tmp.file(mode + ".npz"));
    REQUIRE(fa.size() == fb.size());
    for (const auto& [name, t] : fa) {
      CAPTURE(name);
      std::vector<double> x = t.to_f64(), y = fb.at(name).to_f64();
      REQUIRE(x.size() == y.size());
      double scale = 0, worst = 0;
      for (size_t i = 0; i < x.size(); ++i) scale = std::max(scale, std::abs(x[i]));
      for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
      CAPTURE(worst);
      CHECK(worst > 0);               // the 16-bit roundings happened
      CHECK(worst <= tol * scale);
      worst_of[mode] = std::max(worst_of[mode], worst / scale);
    }
  }
  CHECK(worst_of.at("fp16") < worst_of.at("bf16") / 4);  // float16 is the finer format
  Result bad = onnxdp_cli(tmp, base + q(tmp.file("x.npz")) + " --mixed-precision fp8");
  CHECK(bad.rc != 0);
  CHECK(contains(bad.err, "fp8"));
}

// `onnxdp graph` writes what onnxdp runs as ONNX: the forward graph, the training graph with its
// backward and collectives, and with --mixed-precision the Casts around the products (fp16
// training: the loss-scale input that seeds backward).
TEST_CASE("cli: graph writes the forward and training graphs, with --mixed-precision's casts") {
  const std::string model = std::string(ONNXDP_SOURCE_DIR) + "/models/cnn/model.onnx";
  TempDir tmp;
  auto read = [&](const std::string& file) {
    onnx::ModelProto m;
    std::ifstream f(tmp.file(file), std::ios::binary);
    REQUIRE(m.ParseFromIstream(&f));
    std::map<std::string, int> ops;
    for (const auto& n : m.graph().node()) ++ops[n.op_type()];
    std::set<std::string> inputs;
    for (const auto& i : m.graph().input()) inputs.insert(i.name());
    return std::pair(ops, inputs);
  };
  Result r = onnxdp_cli(tmp, "graph " + q(model) + " --out " + q(tmp.file("fwd.onnx")));
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "wrote "));
  auto [fwd, fwd_in] = read("fwd.onnx");
  CHECK(fwd["Conv"] == 2);
  CHECK(fwd["Cast"] == 0);
  r = onnxdp_cli(tmp, "graph " + q(model) + " --mixed-precision bf16 --out " + q(tmp.file("bf16.onnx")));
  REQUIRE(r.rc == 0);
  auto [bf16, bf16_in] = read("bf16.onnx");
  CHECK(bf16["Conv"] == 2);
  CHECK(bf16["Cast"] >= 2 * 3 + 2);  // x, W, B in and one out per Conv at least
  r = onnxdp_cli(tmp, "graph " + q(model) + " --train --devices cpu:2 --mixed-precision fp16 --out " +
                          q(tmp.file("train.onnx")));
  INFO(r.err);
  REQUIRE(r.rc == 0);
  auto [train, train_in] = read("train.onnx");
  CHECK(train["ConvTranspose"] == 1);  // conv2's input gradient (conv1's input is the data)
  CHECK(train["ConvGradFilter"] == 2);
  CHECK(train["AllReduce"] >= 1);
  CHECK(train_in.count("amp/loss_scale") == 1);
  r = onnxdp_cli(tmp, "graph " + q(model) + " --train --out " + q(tmp.file("f32.onnx")));
  REQUIRE(r.rc == 0);
  CHECK(read("f32.onnx").second.count("amp/loss_scale") == 0);
}

TEST_CASE("cli: run --devices cpu:N splits each batch over replicas and gathers outputs in sample order") {
  const std::string models = std::string(ONNXDP_SOURCE_DIR) + "/models";
  struct Case {
    std::string model, extra;
  };
  // cnn in training mode: BatchNormalization statistics over the whole batch and Dropout masks by
  // sample position, so the replicas' outputs must equal one device's. Batches of 74 leave a last
  // batch of 1 sample, which joins the one before it on 4 replicas (inference mode: same outputs).
  for (const Case& c : {Case{"cnn", "--batch-size 50 --train-mode"}, Case{"cnn", "--batch-size 74"},
                        Case{"tiny_lm", "--batch-size 37"}, Case{"mlp", "--batch-size 100"}}) {
    CAPTURE(c.model);
    CAPTURE(c.extra);
    TempDir tmp;
    const std::string base = "run " + q(models + "/" + c.model + "/model.onnx") + " --data " +
                             q(models + "/" + c.model + "/eval.npz") + " " + c.extra + " --out ";
    Result one = onnxdp_cli(tmp, base + q(tmp.file("one.npz")) + " --devices cpu");
    INFO(one.err);
    REQUIRE(one.rc == 0);
    auto want = read_npz(tmp.file("one.npz"));
    for (const char* dev : {"cpu:2", "cpu:4"}) {
      CAPTURE(dev);
      Result r = onnxdp_cli(tmp, base + q(tmp.file("n.npz")) + " --devices " + dev);
      INFO(r.err);
      REQUIRE(r.rc == 0);
      CHECK(contains(r.out, std::string(dev).substr(4) + " replicas"));
      auto got = read_npz(tmp.file("n.npz"));
      REQUIRE(got.size() == want.size());
      for (const auto& [name, t] : want) {
        CAPTURE(name);
        REQUIRE(got.at(name).shape() == t.shape());
        std::vector<double> a = t.to_f64(), b = got.at(name).to_f64();
        size_t bad = 0;
        for (size_t i = 0; i < a.size(); ++i) bad += std::abs(a[i] - b[i]) > 1e-5 + 1e-5 * std::abs(a[i]);
        CHECK(bad == 0);
      }
    }
  }
  // Fewer samples than replicas: a clear error, not a hang.
  TempDir tmp;
  std::map<std::string, Tensor> two;
  two["x"] = read_npz(models + "/mlp/eval.npz").at("x");
  Tensor x(DType::f32, {2, two["x"].shape()[1]});
  std::memcpy(x.data(), two["x"].data(), x.nbytes());
  write_npz(tmp.file("two.npz"), {{"x", x}}, true);
  Result r = onnxdp_cli(tmp, "run " + q(models + "/mlp/model.onnx") + " --data " + q(tmp.file("two.npz")) + " --out " +
                                 q(tmp.file("o.npz")) + " --devices cpu:4");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "2 samples cannot be split over 4 replicas"));
  CHECK(!fs::exists(tmp.file("o.npz")));
}

TEST_CASE("cli: run --train-mode runs the graph as exported (BatchNormalization uses batch statistics)") {
  const std::string dir = std::string(ONNXDP_SOURCE_DIR) + "/models/cnn";
  if (!fs::exists(dir + "/model.onnx")) return;
  TempDir tmp;
  Result r = onnxdp_cli(tmp, "run " + q(dir + "/model.onnx") + " --data " + q(dir + "/reference.npz") + " --out " +
                                 q(tmp.file("out.npz")) + " --batch-size 16 --train-mode");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "training mode"));
  auto out = read_npz(tmp.file("out.npz")), ref = read_npz(dir + "/reference.npz");
  std::vector<double> a = out.at("logits").to_f64(), b = ref.at("logits").to_f64();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  CHECK(diff > 1e-3);  // batch statistics differ from the running ones the reference used
}

// ---- the inference_mode pass ----------------------------------------------------------------------

namespace {

// x -> BatchNormalization(training_mode=1) -> y [, rm, rv] -> Dropout(y, ratio, training_mode)
// -> z [, mask] -> Relu -> w. Built without shape rules: the pass does not need types.
struct TrainingGraph {
  Graph g;
  ValueId x, scale, bias, mean, var, y, rm, rv, ratio, tm, z, mask, w;

  ValueId value(const std::string& name, ValueKind kind, Shape s = {2, 3}) {
    Value v;
    v.name = name;
    v.kind = kind;
    v.shape = s;
    if (kind != ValueKind::activation && kind != ValueKind::input) v.data = Tensor(DType::f32, s);
    return g.add_value(v);
  }
  void node(Op op, const std::string& name, std::vector<ValueId> ins, std::vector<ValueId> outs,
            std::map<std::string, Attr> attrs = {}) {
    Node n;
    n.op = op;
    n.name = name;
    n.inputs = ins;
    n.outputs = outs;
    n.attrs = attrs;
    for (ValueId o : outs)
      if (o != kNoValue) g.value(o).producer = int(g.nodes.size());
    g.nodes.push_back(n);
  }
  TrainingGraph() {
    x = value("x", ValueKind::input);
    g.inputs = {x};
    scale = value("scale", ValueKind::parameter, {3});
    bias = value("bias", ValueKind::parameter, {3});
    mean = value("mean", ValueKind::parameter, {3});
    var = value("var", ValueKind::parameter, {3});
    y = value("y", ValueKind::activation);
    rm = value("rm", ValueKind::activation, {3});
    rv = value("rv", ValueKind::activation, {3});
    ratio = value("ratio", ValueKind::constant, {});
    tm = value("tm", ValueKind::constant, {});
    z = value("z", ValueKind::activation);
    mask = value("mask", ValueKind::activation);
    w = value("w", ValueKind::activation);
    node(Op::BatchNormalization, "bn", {x, scale, bias, mean, var}, {y, rm, rv}, {{"training_mode", int64_t(1)}});
    node(Op::Dropout, "drop", {y, ratio, tm}, {z, mask});
    node(Op::Relu, "relu", {z}, {w});
    g.outputs = {w};
  }
  const Node* find(const std::string& name) const {
    for (const Node& n : g.nodes)
      if (n.name == name) return &n;
    return nullptr;
  }
  void check_producers() const {
    for (size_t ni = 0; ni < g.nodes.size(); ++ni)
      for (ValueId o : g.nodes[ni].outputs)
        if (o != kNoValue) CHECK(g.value(o).producer == int(ni));
  }
};

}  // namespace

TEST_CASE("inference_mode: BatchNormalization uses running stats, Dropout is spliced out") {
  TrainingGraph t;
  inference_mode(t.g);
  REQUIRE(t.g.nodes.size() == 2);
  const Node* bn = t.find("bn");
  REQUIRE(bn);
  CHECK(bn->i("training_mode") == 0);
  CHECK(bn->outputs == std::vector<ValueId>{t.y});
  CHECK(!t.find("drop"));
  const Node* relu = t.find("relu");
  REQUIRE(relu);
  CHECK(relu->inputs == std::vector<ValueId>{t.y});
  CHECK(t.g.outputs == std::vector<ValueId>{t.w});
  t.check_producers();
}

TEST_CASE("inference_mode: used running-stat outputs read the unchanged statistics") {
  TrainingGraph t;
  ValueId u = t.value("u", ValueKind::activation, {3});
  t.node(Op::Relu, "use_rm", {t.rm}, {u});
  t.g.outputs = {t.w, u, t.rv};
  inference_mode(t.g);
  const Node* bn = t.find("bn");
  REQUIRE(bn);
  CHECK(bn->outputs.size() == 1);
  CHECK(t.find("use_rm")->inputs == std::vector<ValueId>{t.mean});
  // rv is a graph output: an Identity right after BatchNormalization copies the running variance.
  int ident = -1;
  for (size_t k = 0; k < t.g.nodes.size(); ++k)
    if (t.g.nodes[k].op == Op::Identity) ident = int(k);
  REQUIRE(ident == 1);
  CHECK(t.g.nodes[1].inputs == std::vector<ValueId>{t.var});
  CHECK(t.g.nodes[1].outputs == std::vector<ValueId>{t.rv});
  CHECK(t.g.outputs == std::vector<ValueId>{t.w, u, t.rv});
  t.check_producers();
}

TEST_CASE("inference_mode: Dropout at a graph output becomes Identity, a used mask keeps the node") {
  SUBCASE("output") {
    TrainingGraph t;
    t.g.outputs = {t.z};
    inference_mode(t.g);
    const Node* d = t.find("drop");
    CHECK(!d);
    bool found = false;
    for (const Node& n : t.g.nodes)
      if (n.op == Op::Identity && n.outputs == std::vector<ValueId>{t.z}) {
        found = true;
        CHECK(n.inputs == std::vector<ValueId>{t.y});
      }
    CHECK(found);
    t.check_producers();
  }
  SUBCASE("mask used") {
    TrainingGraph t;
    t.g.outputs = {t.w, t.mask};
    inference_mode(t.g);
    const Node* d = t.find("drop");
    REQUIRE(d);
    CHECK(d->op == Op::Dropout);
    CHECK(d->inputs == std::vector<ValueId>{t.y, t.ratio});  // training_mode removed: defaults to false
    CHECK(d->outputs == std::vector<ValueId>{t.z, t.mask});
    CHECK(d->i("training_mode") == 0);
    t.check_producers();
  }
  SUBCASE("inference graphs are left alone") {
    TrainingGraph t;
    inference_mode(t.g);
    std::string before = print_graph(t.g);
    inference_mode(t.g);
    CHECK(print_graph(t.g) == before);
  }
}

// Out-of-range option values are errors naming the option and its range, from the command line
// and from --config alike; none is replaced by a default (--lr -1 used to train at 0.001,
// --steps -1 an epoch, --per-device-train-batch-size 0 at batch 32).
TEST_CASE("cli: out-of-range option values are errors naming the option, never replaced") {
  const std::string model = q(std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/model.onnx");
  TempDir tmp;
  struct Case {
    std::string args, option;
  };
  for (const Case& c : {Case{"--lr -1", "--lr"}, Case{"--lr -inf", "--lr"}, Case{"--lr nan", "--lr"},
                        Case{"--weight-decay -0.5", "--weight-decay"}, Case{"--momentum -1", "--momentum"},
                        Case{"--max-grad-norm inf", "--max-grad-norm"}, Case{"--steps -1", "--steps"},
                        Case{"--steps 0", "--steps"}, Case{"--epochs 0", "--epochs"}, Case{"--batch-size 0", "--batch-size"},
                        Case{"--per-device-train-batch-size 0", "--per-device-train-batch-size"},
                        Case{"--warmup-steps -2", "--warmup-steps"}, Case{"--grad-accum 0", "--grad-accum"},
                        Case{"--bucket-mb 0", "--bucket-mb"}, Case{"--comm-timeout -3", "--comm-timeout"},
                        Case{"--checkpoint-every -1", "--checkpoint-every"}, Case{"--eval-every -1", "--eval-every"}}) {
    CAPTURE(c.args);
    Result r = onnxdp_cli(tmp, "train " + model + " " + c.args + " --quiet --output-dir " + q(tmp.file("out")));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, c.option));
    CHECK((contains(r.err, "expected") || contains(r.err, "must be at least")));
    CHECK(!std::filesystem::exists(tmp.file("out") + "/model.onnx"));
  }
  std::ofstream(tmp.file("neg.toml")) << "lr = -1.0\n";
  Result r = onnxdp_cli(tmp, "train " + model + " --config " + q(tmp.file("neg.toml")) + " --quiet --output-dir " +
                                 q(tmp.file("out2")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "--lr -1"));
  // Products of options that do not fit in 64 bits: the option named, not a wrapped batch of 0 or
  // a negative one ("a micro-batch of 0 rows", "--batch-size must be positive" before).
  const std::string data = q(std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/eval.npz");
  r = onnxdp_cli(tmp, "train " + model + " --data " + data + " --per-device-train-batch-size 4611686018427387904 "
                      "--devices cpu:4 --steps 1 --quiet --output-dir " + q(tmp.file("out3")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "--per-device-train-batch-size times the replicas does not fit in 64 bits"));
  // --grad-accum past the data: one step takes every sample (as with any count past it).
  r = onnxdp_cli(tmp, "train " + model + " --data " + data + " --grad-accum 9223372036854775807 --batch-size 64 "
                      "--steps 1 --output-dir " + q(tmp.file("out4")));
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "batch 64 x 5 micro-batches per step"));
}

// cross_entropy labels outside [0, classes) are an error before step 1 naming the data, the
// sample and the class count, for the training and the held-out data (they used to select no
// class: a loss of 0 for that position and exit 0); -100, PyTorch's ignore_index, says so.
TEST_CASE("cli: train refuses class labels out of range, naming the sample and the classes") {
  const std::string dir = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/";
  TempDir tmp;
  std::map<std::string, Tensor> data = read_npz(dir + "model.npz");
  for (int64_t bad : {int64_t(10), int64_t(-1), int64_t(1) << 62, int64_t(-100)}) {
    CAPTURE(bad);
    std::map<std::string, Tensor> d = data;
    Tensor label = d.at("label").clone();
    label.as<int64_t>()[7] = bad;
    d["label"] = label;
    write_npz(tmp.file("bad.npz"), d);
    Result r = onnxdp_cli(tmp, "train " + q(dir + "model.onnx") + " --data " + q(tmp.file("bad.npz")) +
                                   " --steps 2 --quiet --output-dir " + q(tmp.file("out")));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "holds " + std::to_string(bad) + " at sample 7"));
    CHECK(contains(r.err, "10 classes"));
    CHECK(contains(r.err, "ignore_index") == (bad == -100));
    // The same labels as held-out data: refused before step 1 too.
    r = onnxdp_cli(tmp, "train " + q(dir + "model.onnx") + " --eval-data " + q(tmp.file("bad.npz")) +
                            " --steps 2 --quiet --output-dir " + q(tmp.file("out_eval")));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "bad.npz"));
    CHECK(!std::filesystem::exists(tmp.file("out_eval") + "/metrics.jsonl"));
  }
}

// Outputs never alias inputs: a path onnxdp would write that is (by file identity: links too) the
// model, its data or config, or a metrics file being plotted, is an error naming both, and the
// input is left as it was (--output-dir set to the model's own folder used to replace model.onnx).
TEST_CASE("cli: no output may overwrite an input: train, run, graph and plot refuse, naming both") {
  const std::string src = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/";
  TempDir tmp;
  const std::string dir = tmp.file("m");
  fs::create_directories(dir);
  fs::copy_file(src + "model.onnx", dir + "/model.onnx");
  fs::copy_file(src + "model.npz", dir + "/model.npz");
  fs::create_symlink(dir + "/model.onnx", dir + "/link.onnx");
  const std::string model = q(dir + "/model.onnx");
  const std::string model_bytes = read_text(dir + "/model.onnx"), data_bytes = read_text(dir + "/model.npz");
  struct Case {
    std::string args, out_role, in_role;
  };
  for (const Case& c : {Case{"train " + model + " --steps 1 --output-dir " + q(dir), "--output-dir's trained model.onnx", "the model"},
                        Case{"train " + model + " --steps 1 --metrics " + q(dir + "/model.npz") + " --output-dir " + q(tmp.file("o1")),
                             "--metrics", "--data"},
                        Case{"train " + model + " --steps 1 --save " + q(dir + "/link.onnx") + " --output-dir " + q(tmp.file("o2")),
                             "--save", "the model"},
                        Case{"run " + model + " --data " + q(dir + "/model.npz") + " --out " + q(dir + "/model.npz"), "--out", "--data"},
                        Case{"graph " + model + " --out " + q(dir + "/link.onnx"), "--out", "the model"}}) {
    CAPTURE(c.args);
    Result r = onnxdp_cli(tmp, c.args + (c.args.rfind("train", 0) == 0 ? " --quiet" : ""));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, c.out_role));
    CHECK(contains(r.err, c.in_role));
    CHECK(read_text(dir + "/model.onnx") == model_bytes);
    CHECK(read_text(dir + "/model.npz") == data_bytes);
  }
  // plot: the SVG over the metrics it reads.
  Result r = onnxdp_cli(tmp, "train " + model + " --steps 2 --quiet --output-dir " + q(tmp.file("run")));
  REQUIRE(r.rc == 0);
  const std::string metrics = read_text(tmp.file("run") + "/metrics.jsonl");
  r = onnxdp_cli(tmp, "plot " + q(tmp.file("run")) + " --out " + q(tmp.file("run") + "/metrics.jsonl"));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "--out"));
  CHECK(read_text(tmp.file("run") + "/metrics.jsonl") == metrics);
}

// A NaN in the input data reaches the loss (Relu used to map it to 0: a finite loss, exit 0),
// and the non-finite-loss stop names the step.
TEST_CASE("cli: a NaN in the training data stops the run at its step instead of training on") {
  const std::string dir = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/";
  TempDir tmp;
  std::map<std::string, Tensor> d = read_npz(dir + "model.npz");
  Tensor x = d.at("x").clone();
  x.as<float>()[5] = std::nanf("");  // sample 0, the first batch without shuffling
  d["x"] = x;
  write_npz(tmp.file("nan.npz"), d);
  Result r = onnxdp_cli(tmp, "train " + q(dir + "model.onnx") + " --data " + q(tmp.file("nan.npz")) +
                                 " --no-shuffle --steps 3 --quiet --output-dir " + q(tmp.file("out")));
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "the loss is NaN at step 1"));
}

// `onnxdp graph --passes` lists the passes compile ran, in order: the training graph's include
// autodiff and the gradient buckets, the forward graph `run` runs includes inference mode instead.
TEST_CASE("cli: graph --passes lists the compile passes that made the graph") {
  const std::string model = q(std::string(ONNXDP_SOURCE_DIR) + "/models/cnn/model.onnx");
  TempDir tmp;
  Result r = onnxdp_cli(tmp, "graph " + model + " --train --passes --out " + q(tmp.file("t.onnx")));
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "passes: import, fuse_gelu, merge_transposes, running_stats, autocast, fuse_attention, loss, trainability"));
  CHECK(contains(r.out, "autodiff"));
  CHECK(contains(r.out, "gradient_buckets"));
  CHECK(!contains(r.out, "inference_mode"));
  r = onnxdp_cli(tmp, "graph " + model + " --passes --out " + q(tmp.file("f.onnx")));
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "passes: import, fuse_gelu, merge_transposes, inference_mode, remove_dead_nodes, autocast, fuse_attention"));
  CHECK(!contains(r.out, "autodiff"));
}
