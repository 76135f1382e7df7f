// The trainability decision through the onnxdp binary: inspect's reasons and restored parameters,
// --trainable / --freeze in train, inspect --train, graph --train and the config file, and an
// unsupported op refused with one error before anything runs (issue 20, acceptance 3).
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "onnx/onnx_pb.h"
#include "tests/test_util.h"
#include "train/npz.h"

using namespace onnxdp;
using test::contains;
using test::onnxdp_cli;
using test::q;
using test::TempDir;

namespace {

const std::string kFixtures = std::string(ONNXDP_SOURCE_DIR) + "/tests/fixtures/trainability/";

// legacy_llama's inputs: token ids [N, 4] and next-token labels [N, 4], vocabulary 16.
std::string llama_data(const TempDir& tmp) {
  std::vector<int64_t> ids(8 * 4), labels(8 * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t(i * 7 % 16);
    labels[i] = int64_t(i * 5 % 16);
  }
  const std::string path = tmp.file("llama.npz");
  write_npz(path, {{"ids", Tensor::from_i64(ids, {8, 4})}, {"label", Tensor::from_i64(labels, {8, 4})}});
  return path;
}

int lines_with(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t i = 0; (i = s.find(part, i)) != std::string::npos; i += part.size()) ++n;
  return n;
}

}  // namespace

TEST_CASE("cli: inspect gives the reason of every frozen tensor and names the restored parameters") {
  TempDir tmp;
  test::CliResult r = onnxdp_cli(tmp, "inspect --json " + q(kFixtures + "legacy_llama.onnx"));
  REQUIRE(r.rc == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::map<std::string, std::string> frozen;
  for (const auto& i : j["initializers"])
    if (!i["trainable"].get<bool>()) frozen[i["name"]] = i["frozen_because"];
  REQUIRE(frozen.size() == 2);
  CHECK(contains(frozen["mask"], "non-finite"));
  CHECK(contains(frozen["onnx::Mul_121"], "frequency table"));

  r = onnxdp_cli(tmp, "inspect " + q(kFixtures + "dynamo_vit.onnx"));
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "export: restored parameter") == 3);
  CHECK(contains(r.out, "export: restored parameter 'head.bias' [5] of node 'node_Gemm_129' (Gemm)"));
  CHECK(contains(r.out, "head.bias"));
}

TEST_CASE("cli: --trainable and --freeze in inspect --train, train, graph --train and the config file") {
  TempDir tmp;
  const std::string model = q(kFixtures + "legacy_llama.onnx"), data = q(llama_data(tmp));
  // inspect --train: the frequency table trains only when asked.
  test::CliResult r = onnxdp_cli(tmp, "inspect --json --train --batch-size 2 " + model);
  REQUIRE(r.rc == 0);
  nlohmann::json t = nlohmann::json::parse(r.out)["train"];
  CHECK(t["trainable"].size() == 11);
  CHECK(contains(t["frozen_because"]["onnx::Mul_121"].get<std::string>(), "frequency table"));
  r = onnxdp_cli(tmp, "inspect --json --train --batch-size 2 --trainable 'Mul_121$' --freeze '^head\\.' " + model);
  REQUIRE(r.rc == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  t = j["train"];
  CHECK(t["trainable"].size() == 11);  // + the table, - head.bias
  CHECK(t["frozen_because"]["head.bias"] == "--freeze '^head\\.'");
  for (const auto& i : j["initializers"])
    if (i["name"] == "onnx::Mul_121") CHECK(i["trainable"] == true);
  r = onnxdp_cli(tmp, "inspect --train --batch-size 2 " + model);
  CHECK(contains(r.out, "  frozen  mask: holds non-finite values"));

  // train: the start line counts them; from the config file too.
  const std::string run = " --data " + data + " --steps 1 --batch-size 4 --quiet --report-to none --output-dir ";
  std::ofstream(tmp.file("c.toml")) << "trainable = [\"Mul_121$\"]\nsteps = 1\n";
  r = onnxdp_cli(tmp, "train " + model + " --data " + data + " --batch-size 4 --report-to none --output-dir " +
                          q(tmp.file("r1")) + " --config " + q(tmp.file("c.toml")));
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "12 trainable tensors"));
  // Both options on one name, or --trainable on what cannot train: one error naming it, before step 1.
  r = onnxdp_cli(tmp, "train " + model + run + q(tmp.file("r2")) + " --freeze '^mask$' --trainable mas");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "initializer 'mask' is matched by both --freeze '^mask$' and --trainable 'mas'"));
  CHECK(!contains(r.out, "step"));
  r = onnxdp_cli(tmp, "graph " + model + " --out " + q(tmp.file("g.onnx")) + " --train --trainable 'Mul_121$'");
  CHECK(r.rc == 0);
  r = onnxdp_cli(tmp, "graph " + model + " --out " + q(tmp.file("g.onnx")) + " --train --trainable '^mask$' --freeze mask");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "matched by both"));
}

TEST_CASE("cli: an unsupported op is one error naming the node and the op, before anything runs") {
  TempDir tmp;
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  for (const char* io : {"x", "y"}) {
    onnx::ValueInfoProto* vi = std::string(io) == "x" ? g->add_input() : g->add_output();
    vi->set_name(io);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(4);
  for (int i = 0; i < 16; ++i) w->add_float_data(0.1f * float(i));
  onnx::NodeProto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->set_name("/lin/MatMul");
  mm->add_input("x");
  mm->add_input("w");
  mm->add_output("h");
  onnx::NodeProto* odd = g->add_node();
  odd->set_op_type("NoSuchOp");
  odd->set_name("/weird/NoSuchOp");
  odd->add_input("h");
  odd->add_output("y");
  {
    std::ofstream f(tmp.file("m.onnx"), std::ios::binary);
    REQUIRE(m.SerializeToOstream(&f));
  }
  write_npz(tmp.file("d.npz"), {{"x", Tensor::from_f32(std::vector<float>(32, 1.f), {8, 4})},
                                {"label", Tensor::from_i64(std::vector<int64_t>(8, 1), {8})}});
  const std::string model = q(tmp.file("m.onnx"));
  for (const std::string& cmd :
       {"train " + model + " --data " + q(tmp.file("d.npz")) + " --steps 2 --report-to none --output-dir " + q(tmp.file("r")),
        "run " + model + " --data " + q(tmp.file("d.npz")) + " --out " + q(tmp.file("o.npz")), "inspect " + model,
        "inspect --train " + model, "graph " + model + " --train --out " + q(tmp.file("g.onnx"))}) {
    CAPTURE(cmd);
    test::CliResult r = onnxdp_cli(tmp, cmd);
    CHECK(r.rc == 1);
    CHECK(lines_with(r.err, "error:") == 1);
    CHECK(contains(r.err, "/weird/NoSuchOp (NoSuchOp"));
    CHECK(!contains(r.out, "step "));
  }
  CHECK(!std::filesystem::exists(tmp.file("o.npz")));
}
