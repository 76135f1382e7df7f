// importer/trainability.h: which initializers train. Real exports (tests/fixtures/trainability/,
// made by the make_*.py there) against the framework's own trainable set; each rule on a small
// hand-built graph; --freeze / --trainable / training_info; and (importer/export_metadata.h) the
// zero biases the dynamo exporter dropped, restored.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "graph/error.h"
#include "importer/export_metadata.h"
#include "tests/importer/proto_util.h"
#include "importer/onnx_io.h"
#include "importer/trainability.h"

using namespace onnxdp;
using onnxdp::testing::add_metadata;

namespace {

const std::string kFixtures = std::string(ONNXDP_SOURCE_DIR) + "/tests/fixtures/trainability/";

std::set<std::string> trainable_set(const Trainability& t) {
  std::set<std::string> names;
  for (const auto& r : t.initializers)
    if (r.trainable()) names.insert(r.name);
  return names;
}

std::string reason(const Trainability& t, const std::string& name) {
  const InitializerRole* r = t.find(name);
  REQUIRE(r != nullptr);
  return r->trainable() ? "trains" : r->reason;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

onnx::TensorProto* add_f32(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims,
                           std::vector<float> values) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t->add_float_data(values[size_t(i) % values.size()]);
  return t;
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("n_" + out[0]);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

void add_io(onnx::ValueInfoProto* vi, const std::string& name, int type = onnx::TensorProto::FLOAT) {
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(type);
}

// x [B, 4] -> MatMul w -> h; y = h (+ whatever a test adds); one graph output `y`.
onnx::ModelProto base_model() {
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  add_io(g->add_input(), "x");
  add_f32(g, "lin.weight", {4, 4}, {0.5f, -0.25f});
  add_node(g, "MatMul", {"x", "lin.weight"}, {"h"});
  return m;
}


}  // namespace

TEST_CASE("trainability: real exports train exactly the framework's trainable parameters") {
  // legacy_llama: torch legacy exporter, default settings (transposed Linear weights as onnx::MatMul_N,
  // nn.PReLU's weight as onnx::PRelu_N, a learned logit_scale, an inv_freq buffer, a -inf mask buffer);
  // keras_layernorm: tf2onnx; jax_mlp: jax2onnx; dynamo_vit: the dynamo exporter, zero biases dropped.
  for (const char* name : {"legacy_llama", "keras_layernorm", "jax_mlp", "dynamo_vit"}) {
    CAPTURE(name);
    std::ifstream f(kFixtures + name + ".json");
    REQUIRE(f);
    const nlohmann::json expected = nlohmann::json::parse(f);
    const Trainability t = decide_trainability(load_model_proto(kFixtures + name + ".onnx"));
    CHECK(trainable_set(t) == expected["trainable"].get<std::set<std::string>>());
  }
}

TEST_CASE("trainability: each frozen constant of the real exports says why") {
  const Trainability llama = decide_trainability(load_model_proto(kFixtures + "legacy_llama.onnx"));
  CHECK(has(reason(llama, "mask"), "non-finite"));
  CHECK(has(reason(llama, "onnx::Mul_121"), "frequency table"));  // inv_freq, folded into [1, 4]
  CHECK(reason(llama, "logit_scale") == "trains");                // one element, a module's own name
  CHECK(reason(llama, "onnx::PRelu_131") == "trains");            // one element, a PRelu's slope
  const Trainability keras = decide_trainability(load_model_proto(kFixtures + "keras_layernorm.onnx"));
  CHECK(has(reason(keras, "functional_1/layer_normalization_1/add/y:0"), "epsilon added under a square root"));
  const Trainability jax = decide_trainability(load_model_proto(kFixtures + "jax_mlp.onnx"));
  CHECK(has(reason(jax, "const_7"), "epsilon"));
  CHECK(has(reason(jax, "const_6"), "one-element constant"));  // Max(variance, 0)
  CHECK(has(reason(jax, "const_9"), "one-element constant"));  // sqrt(8.0)
}

TEST_CASE("trainability: one-element initializers are constants unless named and used as parameters") {
  onnx::ModelProto m = base_model();
  onnx::GraphProto* g = m.mutable_graph();
  // h * each: a trainable position; the names decide.
  const std::vector<std::string> names = {"onnx::Mul_12", "/blocks.0/Constant_output_0", "dense/mul/y:0",
                                          "const_fold_opt__3", "const_7", "logit_scale", "blocks.0.gate"};
  std::string prev = "h";
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string out = names[i] + "/product";
    add_f32(g, names[i], {}, {1.5f});
    add_node(g, "Mul", {prev, names[i]}, {out});
    prev = out;
  }
  add_f32(g, "onnx::PRelu_5", {1, 1}, {0.25f});  // nn.PReLU()'s weight under constant folding
  add_node(g, "PRelu", {prev, "onnx::PRelu_5"}, {"p"});
  add_f32(g, "blocks.0.eps", {1}, {1e-5f});  // a state_dict name, but in an epsilon's place
  add_node(g, "ReduceMean", {"p"}, {"var"});
  add_node(g, "Add", {"var", "blocks.0.eps"}, {"ve"});
  add_node(g, "Sqrt", {"ve"}, {"sd"});
  add_node(g, "Div", {"p", "sd"}, {"y"});
  add_io(g->add_output(), "y");
  const Trainability t = decide_trainability(m);
  for (size_t i = 0; i < 5; ++i) CHECK(has(reason(t, names[i]), "one-element constant"));
  CHECK(reason(t, "logit_scale") == "trains");
  CHECK(reason(t, "blocks.0.gate") == "trains");
  CHECK(reason(t, "onnx::PRelu_5") == "trains");
  CHECK(reason(t, "blocks.0.eps") == "an epsilon added under a square root (node 'n_ve')");
  CHECK(reason(t, "lin.weight") == "trains");
}

TEST_CASE("trainability: constants by position: mean divisor, attention mask, Pow exponent, non-finite") {
  onnx::ModelProto m = base_model();
  onnx::GraphProto* g = m.mutable_graph();
  add_f32(g, "divisor", {1, 4}, {4.f});  // sum / n, shaped as the sum's rows
  add_node(g, "ReduceSum", {"h"}, {"s"});
  add_node(g, "Div", {"s", "divisor"}, {"mean"});
  add_f32(g, "causal", {4, 4}, {0.f, -1e9f, -1e9f, 0.f});  // sliced, then added to scores
  add_f32(g, "starts", {}, {0.f});
  g->mutable_initializer(g->initializer_size() - 1)->set_data_type(onnx::TensorProto::INT64);
  g->mutable_initializer(g->initializer_size() - 1)->clear_float_data();
  g->mutable_initializer(g->initializer_size() - 1)->add_int64_data(0);
  add_node(g, "Slice", {"causal", "starts", "starts"}, {"cs"});
  add_node(g, "Add", {"mean", "cs"}, {"scores"});
  add_node(g, "Softmax", {"scores"}, {"attn"});
  add_f32(g, "rel_bias", {4, 4}, {0.f});  // a learned bias before a Softmax, zero at init: trains
  add_node(g, "Add", {"attn", "rel_bias"}, {"scores2"});
  add_node(g, "Softmax", {"scores2"}, {"attn2"});
  add_f32(g, "two", {4}, {2.f});
  add_node(g, "Pow", {"attn2", "two"}, {"sq"});
  add_f32(g, "fill", {4}, {-INFINITY});
  add_node(g, "Max", {"sq", "fill"}, {"y"});
  add_io(g->add_output(), "y");
  const Trainability t = decide_trainability(m);
  CHECK(reason(t, "divisor") == "the divisor of a mean (node 'n_mean')");
  CHECK(reason(t, "causal") == "a mask added to scores before a Softmax (node 'n_scores')");
  CHECK(reason(t, "rel_bias") == "trains");
  CHECK(has(reason(t, "two"), "exponent of Pow"));
  CHECK(has(reason(t, "fill"), "non-finite"));
  CHECK(reason(t, "lin.weight") == "trains");
}

TEST_CASE("trainability: a frequency table under Sin / Cos of positions is constant, Sin of data is not") {
  onnx::ModelProto m = base_model();
  onnx::GraphProto* g = m.mutable_graph();
  // positions: Range over the batch's row count, as float; inv_freq [4] times them -> Cos / Sin.
  add_node(g, "Shape", {"h"}, {"shape"});
  onnx::AttributeProto* to = add_node(g, "Cast", {"shape"}, {"pos"})->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  add_f32(g, "rotary.inv_freq", {4}, {1.f, 0.1f, 0.01f, 0.001f});
  add_node(g, "Unsqueeze", {"pos"}, {"pos2"});
  add_node(g, "Mul", {"pos2", "rotary.inv_freq"}, {"freqs"});
  add_node(g, "Cos", {"freqs"}, {"cos"});
  add_node(g, "Sin", {"freqs"}, {"sin"});
  add_node(g, "Mul", {"h", "cos"}, {"hc"});
  add_node(g, "Mul", {"h", "sin"}, {"hs"});
  add_node(g, "Add", {"hc", "hs"}, {"r"});
  // A SIREN layer: sin(x W + b): W and b reach the output only through Sin too, of the data.
  add_f32(g, "siren.weight", {4, 4}, {0.3f});
  add_f32(g, "siren.bias", {4}, {0.1f});
  add_node(g, "MatMul", {"x", "siren.weight"}, {"sw"});
  add_node(g, "Add", {"sw", "siren.bias"}, {"swb"});
  add_node(g, "Sin", {"swb"}, {"siren"});
  add_node(g, "Add", {"r", "siren"}, {"y"});
  add_io(g->add_output(), "y");
  const Trainability t = decide_trainability(m);
  CHECK(has(reason(t, "rotary.inv_freq"), "frequency table"));
  CHECK(reason(t, "siren.weight") == "trains");
  CHECK(reason(t, "siren.bias") == "trains");
}

TEST_CASE("trainability: --trainable overrides a rule, --freeze freezes, conflicts and impossible ones are errors") {
  onnx::ModelProto m = base_model();
  onnx::GraphProto* g = m.mutable_graph();
  add_f32(g, "onnx::Mul_3", {}, {0.5f});
  add_node(g, "Mul", {"h", "onnx::Mul_3"}, {"hs"});
  add_f32(g, "bn.scale", {4}, {1.f});
  add_f32(g, "bn.bias", {4}, {0.f});
  add_f32(g, "bn.running_mean", {4}, {0.f});
  add_f32(g, "bn.running_var", {4}, {1.f});
  add_node(g, "BatchNormalization", {"hs", "bn.scale", "bn.bias", "bn.running_mean", "bn.running_var"}, {"y"});
  onnx::TensorProto* shape = g->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(1);
  shape->add_int64_data(4);
  add_node(g, "Reshape", {"y", "shape"}, {"z"});
  add_io(g->add_output(), "z");

  CHECK(has(reason(decide_trainability(m), "onnx::Mul_3"), "one-element constant"));
  Trainability t = decide_trainability(m, {{"^lin\\."}, {"^onnx::Mul_3$"}});
  CHECK(reason(t, "onnx::Mul_3") == "trains");
  CHECK(reason(t, "lin.weight") == "--freeze '^lin\\.'");
  CHECK_THROWS_WITH_AS(decide_trainability(m, {{"Mul_3"}, {"^onnx::Mul"}}),
                       "initializer 'onnx::Mul_3' is matched by both --freeze 'Mul_3' and --trainable '^onnx::Mul'", Error);
  CHECK_THROWS_WITH_AS(decide_trainability(m, {{}, {"running_mean"}}),
                       "--trainable 'running_mean' matches initializer 'bn.running_mean', which cannot train: "
                       "BatchNormalization running mean",
                       Error);
  CHECK_THROWS_WITH_AS(decide_trainability(m, {{}, {"^sha"}}),
                       "--trainable '^sha' matches initializer 'shape', which cannot train: i64 (not floating point)",
                       Error);
  CHECK_THROWS_AS(decide_trainability(m, {{"("}, {}}), Error);
}

TEST_CASE("trainability: training_info's update_binding names exactly what trains") {
  onnx::ModelProto m = base_model();
  onnx::GraphProto* g = m.mutable_graph();
  add_f32(g, "lin.bias", {4}, {0.f});
  add_f32(g, "temperature", {}, {2.f});
  add_node(g, "Add", {"h", "lin.bias"}, {"hb"});
  add_node(g, "Mul", {"hb", "temperature"}, {"y"});
  add_io(g->add_output(), "y");
  // temperature: one element, but a module's name in a trainable position.
  CHECK(trainable_set(decide_trainability(m)) == std::set<std::string>{"lin.weight", "lin.bias", "temperature"});
  onnx::TrainingInfoProto* ti = m.add_training_info();
  for (const char* name : {"lin.weight", "temperature"}) {
    onnx::StringStringEntryProto* b = ti->add_update_binding();
    b->set_key(name);
    b->set_value(std::string(name) + "_new");
  }
  Trainability t = decide_trainability(m);
  CHECK(trainable_set(t) == std::set<std::string>{"lin.weight", "temperature"});
  CHECK(reason(t, "lin.bias") == "the model's training_info does not update it");
  REQUIRE(t.notes.size() == 1);
  CHECK(has(t.notes[0], "training_info updates 2 initializers"));
  t = decide_trainability(m, {{"temp"}, {"lin.bias"}});  // the options still apply
  CHECK(trainable_set(t) == std::set<std::string>{"lin.weight", "lin.bias"});
}

TEST_CASE("restore: the dynamo exporter's dropped zero biases come back on their Conv and Gemm") {
  const onnx::ModelProto m = load_model_proto(kFixtures + "dynamo_vit.onnx");
  std::map<std::string, std::vector<int64_t>> restored;
  for (const auto& t : m.graph().initializer())
    if (t.name() == "patch.bias" || t.name() == "attn.out_proj.bias" || t.name() == "head.bias")
      restored[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
  CHECK(restored == std::map<std::string, std::vector<int64_t>>{
                        {"patch.bias", {8}}, {"attn.out_proj.bias", {8}}, {"head.bias", {5}}});
  int on_third_input = 0;
  for (const auto& n : m.graph().node())
    if (n.input_size() == 3 && (n.input(2) == "patch.bias" || n.input(2) == "attn.out_proj.bias" || n.input(2) == "head.bias"))
      on_third_input += n.op_type() == (n.input(2) == "patch.bias" ? "Conv" : "Gemm");
  CHECK(on_third_input == 3);
  std::vector<std::string> notes;
  load_model_proto(kFixtures + "dynamo_vit.onnx", &notes);
  REQUIRE(notes.size() == 3);
  CHECK(notes[0] == "restored parameter 'patch.bias' [8] of node 'node_Conv_101' (Conv): the exporter dropped it "
                    "(all zeros); onnxdp trains it from zero");
  // The sample dynamo exports lost nothing: nothing restored, no warning.
  for (const char* model : {"mlp_dynamo", "rope_lm"}) {
    std::vector<std::string> lines;
    load_model_proto(std::string(ONNXDP_SOURCE_DIR) + "/models/" + model + "/model.onnx", &lines);
    for (const auto& l : lines) CHECK_MESSAGE(!has(l, "restore"), l);
  }
}

TEST_CASE("restore: a Linear on 3-D input that lost its Add gets one, what cannot be restored is a warning") {
  onnx::ModelProto m = base_model();
  onnx::GraphProto* g = m.mutable_graph();
  g->mutable_initializer(0)->set_name("val_3");  // lin.weight, stored transposed [in 4, out 4]
  g->mutable_node(0)->set_input(1, "val_3");
  const std::string fx = "%linear : call_function[target=torch.ops.aten.linear.default](args = (%x, %p_lin_weight, %p_lin_bias))";
  add_metadata(g->mutable_node(0), 9, "pkg.torch.onnx.fx_node", fx);
  onnx::ValueInfoProto* vi = g->add_value_info();
  vi->set_name("val_3");
  add_metadata(vi, 4, "pkg.onnxscript.optimizer.folded_from", "['lin.weight']");
  add_f32(g, "norm.weight", {4}, {1.f});
  onnx::ValueInfoProto* mark = g->add_value_info();
  mark->set_name("norm.weight");
  add_metadata(mark, 4, "pkg.torch.export.graph_signature.InputSpec.kind", "PARAMETER");
  onnx::NodeProto* mul = add_node(g, "Mul", {"h", "norm.weight"}, {"y"});
  add_metadata(mul, 9, "pkg.torch.onnx.fx_node", "%mul : aten.mul.Tensor(args = (%linear, %p_norm_weight, %p_norm_gain))");
  add_io(g->add_output(), "y");

  const std::vector<std::string> notes = restore_dropped_parameters(m);
  REQUIRE(notes.size() == 2);
  CHECK(notes[0] == "restored parameter 'lin.bias' [4] of node 'n_h' (MatMul): the exporter dropped it (all zeros); "
                    "onnxdp trains it from zero, added after the MatMul");
  CHECK(has(notes[1], "warning: parameter 'norm_gain' of the exported module (node 'n_y', Mul) is not in the file"));
  REQUIRE(g->node_size() == 3);
  CHECK(g->node(0).output(0) == "h/without_bias");
  CHECK(g->node(1).op_type() == "Add");
  CHECK(g->node(1).input(0) == "h/without_bias");
  CHECK(g->node(1).input(1) == "lin.bias");
  CHECK(g->node(1).output(0) == "h");
  CHECK(g->node(2).input(0) == "h");
  CHECK(trainable_set(decide_trainability(m)) == std::set<std::string>{"val_3", "lin.bias", "norm.weight"});
  CHECK(restore_dropped_parameters(m).size() == 1);  // restored once; the warning stays
}
