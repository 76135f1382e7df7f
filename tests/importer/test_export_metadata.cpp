// importer/export_metadata.h: which initializers are constants of an export, and the untying of
// parameters the dynamo exporter merged. models/rope_lm is torch.onnx.export(dynamo=True)'s real
// output; the small graphs below are written by hand, their metadata as the exporter writes it.
#include <doctest/doctest.h>

#include <google/protobuf/unknown_field_set.h>

#include <fstream>
#include <set>

#include "importer/onnx_io.h"
#include "tests/importer/proto_util.h"
#include "importer/export_metadata.h"

using namespace onnxdp;
using onnxdp::testing::add_metadata;

namespace {

const std::string kRopeLm = std::string(ONNXDP_SOURCE_DIR) + "/models/rope_lm/model.onnx";

// The file as written, without load_model_proto's untying.
onnx::ModelProto raw(const std::string& path) {
  onnx::ModelProto m;
  std::ifstream f(path, std::ios::binary);
  REQUIRE(m.ParseFromIstream(&f));
  return m;
}


void add_f32(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims, float v) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t->add_float_data(v);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in, const std::string& out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("node_" + out);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

int uses_of(const onnx::GraphProto& g, const std::string& name) {
  int uses = 0;
  for (const auto& n : g.node())
    for (const auto& in : n.input()) uses += in == name;
  return uses;
}

}  // namespace

TEST_CASE("export metadata: rope_lm's constants are found, its weights are not") {
  const onnx::ModelProto m = load_model_proto(kRopeLm);
  const auto constants = export_constants(m);
  REQUIRE(constants.count("cos"));
  CHECK(constants.at("cos").find("computed it from constants") != std::string::npos);
  REQUIRE(constants.count("sin"));
  // The weights: the embedding, the five RMSNorm weights, and the fifteen Linear weights the
  // exporter stored transposed (folded_from one parameter). Everything else float is a constant.
  int trainable = 0, pow_exponents = 0;
  for (const auto& t : m.graph().initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT) continue;
    CAPTURE(t.name());
    auto c = constants.find(t.name());
    if (c == constants.end()) {
      ++trainable;
      CHECK(t.dims_size() == 2 - (t.name().find("norm") != std::string::npos));
    } else {
      pow_exponents += c->second.find("exponent of Pow") != std::string::npos;
    }
  }
  CHECK(trainable == 1 + 5 + 15);
  CHECK(pow_exponents == 1);  // one initializer 2.0, shared by the five RMSNorms' Pow nodes
}

TEST_CASE("export metadata: rope_lm's merged RMSNorm weights are untied by name, each with its one use") {
  onnx::ModelProto m = raw(kRopeLm);
  CHECK(uses_of(m.graph(), "blocks.0.attn_norm.weight") == 5);
  const std::vector<std::string> notes = untie_merged_parameters(m);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("'blocks.0.attn_norm.weight' stood for 5 parameters") != std::string::npos);
  for (const char* name : {"blocks.0.attn_norm.weight", "blocks.0.mlp_norm.weight", "blocks.1.attn_norm.weight",
                           "blocks.1.mlp_norm.weight", "norm.weight"}) {
    CAPTURE(name);
    CHECK(uses_of(m.graph(), name) == 1);
  }
  // Each copy is marked a parameter as the original is, so nothing else changes its role.
  CHECK(export_constants(m).count("norm.weight") == 0);
  // Untying twice changes nothing more; load_model_proto has already done it.
  CHECK(untie_merged_parameters(m).empty());
  CHECK(load_model_proto(kRopeLm).graph().initializer_size() == m.graph().initializer_size());
}

TEST_CASE("export metadata: without exporter metadata only Pow exponents are constants, and nothing is untied") {
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  add_f32(g, "w", {2, 2}, 0.5f);
  add_f32(g, "e", {}, 2.0f);
  add_f32(g, "eps", {}, 1e-6f);
  add_node(g, "MatMul", {"x", "w"}, "h");
  add_node(g, "Pow", {"h", "e"}, "p");
  add_node(g, "Add", {"p", "eps"}, "y");
  add_node(g, "Mul", {"y", "w"}, "z");
  const auto constants = export_constants(m);
  REQUIRE(constants.size() == 1);
  CHECK(constants.at("e") == "the exponent of Pow node 'node_p'");
  CHECK(untie_merged_parameters(m).empty());
  CHECK(uses_of(*g, "w") == 2);
}

TEST_CASE("export metadata: torch.export's marks decide, the exporter's folds follow their sources") {
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  const int vi = 4, node = 9;
  const std::string kind = "pkg.torch.export.graph_signature.InputSpec.kind";
  const std::string folded = "pkg.onnxscript.optimizer.folded_from";
  const std::string fx = "pkg.torch.onnx.fx_node";
  add_f32(g, "lin.weight", {4, 4}, 0.1f);  // marked PARAMETER
  add_f32(g, "scale", {4}, 2.0f);          // marked BUFFER
  add_f32(g, "val_3", {4, 4}, 0.3f);       // folded from a parameter the file no longer holds
  add_f32(g, "table", {4, 4}, 0.7f);       // folded from constants only
  add_f32(g, "val_9", {}, 1e-5f);          // a scalar the export wrote
  add_f32(g, "alpha", {}, 1.0f);           // a scalar parameter whose mark was lost
  auto mark = [&](const std::string& name, const std::string& key, const std::string& value) {
    onnx::ValueInfoProto* v = g->add_value_info();
    v->set_name(name);
    add_metadata(v, vi, key, value);
  };
  mark("lin.weight", kind, "PARAMETER");
  mark("scale", kind, "BUFFER");
  mark("val_3", folded, "['proj.weight']");
  mark("table", folded, "['arange', 'scale', 'val_1']");
  add_metadata(add_node(g, "MatMul", {"x", "lin.weight"}, "a"), node, fx,
               "%linear : call_function[target=torch.ops.aten.linear.default](args = (%x, %p_lin_weight))");
  add_metadata(add_node(g, "MatMul", {"a", "val_3"}, "b"), node, fx,
               "%linear_1 : call_function[target=torch.ops.aten.linear.default](args = (%linear, %p_proj_weight))");
  add_metadata(add_node(g, "Mul", {"b", "scale"}, "c"), node, fx, "%mul : aten.mul.Tensor(args = (%linear_1, %b_scale))");
  add_metadata(add_node(g, "Add", {"c", "table"}, "d"), node, fx, "%add : aten.add.Tensor(args = (%mul, %table))");
  add_metadata(add_node(g, "Add", {"d", "val_9"}, "e"), node, fx, "%add_1 : aten.add.Tensor(args = (%add, 1e-05))");
  add_metadata(add_node(g, "Mul", {"e", "alpha"}, "f"), node, fx, "%mul_1 : aten.mul.Tensor(args = (%add_1, %p_alpha))");
  const auto constants = export_constants(m);
  CHECK(constants.size() == 3);
  CHECK(constants.count("lin.weight") == 0);
  CHECK(constants.count("val_3") == 0);
  CHECK(constants.count("alpha") == 0);
  REQUIRE(constants.count("scale"));
  CHECK(constants.at("scale") == "torch.export marks it BUFFER, not a parameter");
  REQUIRE(constants.count("table"));
  CHECK(constants.at("table") == "the exporter computed it from constants (arange, scale, val_1)");
  REQUIRE(constants.count("val_9"));
  CHECK(constants.at("val_9").find("scalar constant") != std::string::npos);
}

TEST_CASE("export metadata: a merged LayerNorm weight and bias are untied by the attribute each use takes") {
  // norm1 and norm2 of one layer, merged: both LayerNormalization nodes read norm1's tensors; the
  // second one's op names norm2's weight and bias, which the file does not hold.
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  add_f32(g, "l.norm1.weight", {4}, 1.0f);
  add_f32(g, "l.norm1.bias", {4}, 0.0f);
  for (const char* name : {"l.norm1.weight", "l.norm1.bias"}) {
    onnx::ValueInfoProto* v = g->add_value_info();
    v->set_name(name);
    add_metadata(v, 4, "pkg.torch.export.graph_signature.InputSpec.kind", "PARAMETER");
  }
  for (const std::string k : {"1", "2"}) {
    onnx::NodeProto* n = add_node(g, "LayerNormalization", {k == "1" ? "x" : "y1", "l.norm1.weight", "l.norm1.bias"}, "y" + k);
    add_metadata(n, 9, "pkg.torch.onnx.fx_node",
                 "%layer_norm : aten.layer_norm.default(args = (%x, [4], %p_l_norm" + k + "_weight, %p_l_norm" + k + "_bias))");
    add_metadata(n, 9, "pkg.torch.onnx.name_scopes", "['', 'l', 'l.norm" + k + "', 'layer_norm']");
  }
  const std::vector<std::string> notes = untie_merged_parameters(m);
  CHECK(notes.size() == 2);
  const onnx::NodeProto& second = g->node(1);
  CHECK(second.input(1) == "l.norm2.weight");
  CHECK(second.input(2) == "l.norm2.bias");
  CHECK(g->node(0).input(1) == "l.norm1.weight");
  std::set<std::string> names;
  for (const auto& t : g->initializer()) names.insert(t.name());
  CHECK(names == std::set<std::string>{"l.norm1.weight", "l.norm1.bias", "l.norm2.weight", "l.norm2.bias"});
}

TEST_CASE("export metadata: a training-mode BatchNorm the export fused or turned to inference form is reported") {
  auto bn_fx = [](const std::string& name) {
    return "%" + name + " : call_function[target=torch.ops.aten._native_batch_norm_legit_functional.default](args = "
           "(%conv2d, %p_bn_weight, %p_bn_bias, %b_bn_running_mean, %b_bn_running_var, True, 0.1, 1e-05))";
  };
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  onnx::NodeProto* fused = add_node(g, "Conv", {"x", "w"}, "a");
  add_metadata(fused, 9, "pkg.torch.onnx.fx_node", bn_fx("bn_a"));
  add_metadata(fused, 9, "pkg.torch.onnx.name_scopes", "['', 'bn1', '_native_batch_norm_legit_functional']");
  add_metadata(fused, 9, "pkg.onnxscript.rewriter.rule_name", "FuseBatchNormIntoConv");
  onnx::NodeProto* inference = add_node(g, "BatchNormalization", {"a", "s", "b", "m", "v"}, "c");
  add_metadata(inference, 9, "pkg.torch.onnx.fx_node", bn_fx("bn_c"));
  add_metadata(inference, 9, "pkg.torch.onnx.name_scopes", "['', 'bn2', '_native_batch_norm_legit_functional_1']");
  onnx::NodeProto* training = add_node(g, "BatchNormalization", {"c", "s", "b", "m", "v"}, "d");
  add_metadata(training, 9, "pkg.torch.onnx.fx_node", bn_fx("bn_d"));
  onnx::AttributeProto* mode = training->add_attribute();
  mode->set_name("training_mode");
  mode->set_type(onnx::AttributeProto::INT);
  mode->set_i(1);
  const std::vector<std::string> w = export_warnings(m);
  REQUIRE(w.size() == 2);
  CHECK(w[0].find("node 'node_a': BatchNorm 'bn1'") == 0);
  CHECK(w[0].find("fused into this Conv (FuseBatchNormIntoConv)") != std::string::npos);
  CHECK(w[1].find("node 'node_c': BatchNorm 'bn2'") == 0);
  CHECK(w[1].find("inference form (training_mode 0)") != std::string::npos);
  CHECK(w[1].find("dynamo=False") != std::string::npos);
  // The legacy exporter's training-mode BatchNorm (models/cnn) has no such metadata: nothing to say.
  CHECK(export_warnings(load_model_proto(std::string(ONNXDP_SOURCE_DIR) + "/models/cnn/model.onnx")).empty());
}

TEST_CASE("export warnings: an inference-form BatchNorm of a file without metadata, and tf2onnx's bias-less layers") {
  onnx::ModelProto m;
  auto* op = m.add_opset_import();
  op->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  add_node(g, "BatchNormalization", {"x", "s", "b", "m", "v"}, "y");  // training_mode 0: inference form
  onnx::NodeProto* trained = add_node(g, "BatchNormalization", {"y", "s", "b", "m", "v"}, "z");
  onnx::AttributeProto* mode = trained->add_attribute();
  mode->set_name("training_mode");
  mode->set_type(onnx::AttributeProto::INT);
  mode->set_i(1);
  std::vector<std::string> w = export_warnings(m);
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("node 'node_y': BatchNormalization is in inference form") == 0);
  // Opset < 14: the running-statistics outputs make it the training form.
  op->set_version(12);
  trained->clear_attribute();
  trained->add_output("running_mean");
  CHECK(export_warnings(m).size() == 1);

  // tf2onnx: a Conv without bias and a MatMul whose output is not added to an initializer are
  // named; a Conv with one and a MatMul followed by a bias Add are not. Other producers: nothing.
  onnx::ModelProto k;
  k.set_producer_name("tf2onnx");
  onnx::GraphProto* kg = k.mutable_graph();
  for (const char* name : {"w1", "w2", "w3", "w4", "bias"}) add_f32(kg, name, {2, 2}, 0.5f);
  add_node(kg, "Conv", {"x", "w1"}, "c1");
  add_node(kg, "Conv", {"c1", "w2", "bias"}, "c2");
  add_node(kg, "MatMul", {"c2", "w3"}, "m1");
  add_node(kg, "MatMul", {"m1", "w4"}, "m2");
  add_node(kg, "Add", {"m2", "bias"}, "out");
  w = export_warnings(k);
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("2 layer(s) have no bias in this tf2onnx file: node_c1, node_m1.") == 0);
  k.set_producer_name("pytorch");
  CHECK(export_warnings(k).empty());
}
