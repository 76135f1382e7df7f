// importer/export_ties.h: one parameter stored twice trains as one, distinct parameters merged by an
// exporter train apart, and a parameter folded into a computed tensor is still a parameter. The
// graphs are written by hand as the PyTorch exporters write them (names, Identity nodes, metadata);
// the Hugging Face zoo models (models/zoo/hf_*) are the real files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "importer/export_metadata.h"
#include "tests/importer/proto_util.h"
#include "importer/export_ties.h"
#include "importer/onnx_io.h"
#include "train/npz.h"
#include "train/trainer.h"

using namespace onnxdp;
using onnxdp::testing::add_metadata;

namespace {


void add_f32(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims, std::vector<float> values) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in, const std::string& out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + out);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

std::map<std::string, std::vector<float>> initializers(const onnx::GraphProto& g) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : g.initializer()) out[t.name()] = {t.float_data().begin(), t.float_data().end()};
  return out;
}

int count_op(const onnx::GraphProto& g, const std::string& op) {
  int k = 0;
  for (const auto& n : g.node()) k += n.op_type() == op;
  return k;
}

// As torch.onnx.export(dynamo=False) writes a two-layer block in eval mode: the second layer's
// zero bias and unit LayerNorm weight are Identity nodes of the first layer's.
onnx::ModelProto legacy_deduplicated() {
  onnx::ModelProto m;
  m.set_producer_name("pytorch");
  onnx::GraphProto* g = m.mutable_graph();
  g->add_output()->set_name("y");
  add_f32(g, "l0.fc.bias", {2}, {0, 0});
  add_f32(g, "l0.norm.weight", {2}, {1, 1});
  add_f32(g, "onnx::MatMul_7", {2, 2}, {0.3f, -0.2f, 0.9f, 0.4f});
  add_node(g, "Identity", {"l0.fc.bias"}, "l1.fc.bias")->set_name("Identity_3");
  add_node(g, "Identity", {"l0.norm.weight"}, "l1.norm.weight")->set_name("Identity_4");
  add_node(g, "Identity", {"l0.fc.bias"}, "l1.norm.bias")->set_name("Identity_5");
  add_node(g, "MatMul", {"x", "onnx::MatMul_7"}, "h0");
  add_node(g, "Add", {"h0", "l0.fc.bias"}, "a0");
  add_node(g, "LayerNormalization", {"a0", "l0.norm.weight", "l0.fc.bias"}, "n0");
  add_node(g, "Add", {"n0", "l1.fc.bias"}, "a1");
  add_node(g, "LayerNormalization", {"a1", "l1.norm.weight", "l1.norm.bias"}, "y");
  return m;
}

}  // namespace

TEST_CASE("export ties: the legacy exporter's deduplicated initializers become one tensor each") {
  onnx::ModelProto m = legacy_deduplicated();
  const std::vector<std::string> notes = untie_deduplicated_initializers(m);
  const onnx::GraphProto& g = m.graph();
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].find("'l0.fc.bias' stood for 3 tensors") != std::string::npos);
  CHECK(notes[0].find("l0.fc.bias, l1.fc.bias, l1.norm.bias") != std::string::npos);
  CHECK(notes[1].find("'l0.norm.weight' stood for 2 tensors") != std::string::npos);
  CHECK(count_op(g, "Identity") == 0);
  CHECK(g.node_size() == 5);
  const auto inits = initializers(g);
  CHECK(inits.size() == 6);
  CHECK(inits.at("l1.fc.bias") == std::vector<float>{0, 0});
  CHECK(inits.at("l1.norm.bias") == std::vector<float>{0, 0});
  CHECK(inits.at("l1.norm.weight") == std::vector<float>{1, 1});
  // The nodes read the names they read before, now each its own initializer.
  CHECK(g.node(3).input(1) == "l1.fc.bias");
  CHECK(g.node(4).input(2) == "l1.norm.bias");
  CHECK(untie_deduplicated_initializers(m).empty());
}

TEST_CASE("export ties: random tensors the legacy exporter deduplicated train apart too") {
  // nn.TransformerEncoder deep-copies its layer: in an eval-mode export every weight of the second
  // layer is an Identity of the first layer's (random) one. PyTorch trains them apart.
  onnx::ModelProto m;
  m.set_producer_name("pytorch");
  onnx::GraphProto* g = m.mutable_graph();
  g->add_output()->set_name("y");
  add_f32(g, "onnx::MatMul_365", {2, 2}, {0.3f, -0.2f, 0.9f, 0.4f});
  add_node(g, "Identity", {"onnx::MatMul_365"}, "onnx::MatMul_406");
  add_node(g, "MatMul", {"x", "onnx::MatMul_365"}, "h")->set_name("/layers.0/linear2/MatMul");
  add_node(g, "MatMul", {"h", "onnx::MatMul_406"}, "y")->set_name("/layers.1/linear2/MatMul");
  add_f32(g, "layers.0.linear2.bias", {2}, {0.1f, -0.3f});
  add_node(g, "Identity", {"layers.0.linear2.bias"}, "layers.1.linear2.bias");
  CHECK(untie_deduplicated_initializers(m).size() == 2);
  CHECK(initializers(m.graph()).at("onnx::MatMul_406") == std::vector<float>{0.3f, -0.2f, 0.9f, 0.4f});
  CHECK(initializers(m.graph()).at("layers.1.linear2.bias") == std::vector<float>{0.1f, -0.3f});
  CHECK(count_op(m.graph(), "Identity") == 0);
}

TEST_CASE("export ties: one module called twice folds its weight twice, the legacy exporter's Identity between the folds stays") {
  // self.a(tanh(self.a(x))): the exporter folds a.weight's transpose once per call and
  // deduplicates the second fold into an Identity of the first. PyTorch trains one a.weight.
  onnx::ModelProto m;
  m.set_producer_name("pytorch");
  onnx::GraphProto* g = m.mutable_graph();
  g->add_output()->set_name("y");
  add_f32(g, "onnx::MatMul_24", {2, 2}, {0.3f, -0.2f, 0.9f, 0.4f});
  add_node(g, "Identity", {"onnx::MatMul_24"}, "onnx::MatMul_25")->set_name("Identity_1");
  add_node(g, "MatMul", {"x", "onnx::MatMul_24"}, "h")->set_name("/blk/a/MatMul");
  add_node(g, "Tanh", {"h"}, "t")->set_name("/blk/Tanh");
  add_node(g, "MatMul", {"t", "onnx::MatMul_25"}, "y")->set_name("/blk/a_1/MatMul");
  CHECK(untie_deduplicated_initializers(m).empty());
  CHECK(count_op(m.graph(), "Identity") == 1);
  CHECK(m.graph().initializer_size() == 1);
  // Unnamed readers: nothing shows two modules, so the file's one tensor stays one.
  for (auto& n : *g->mutable_node()) n.clear_name();
  CHECK(untie_deduplicated_initializers(m).empty());
  CHECK(count_op(m.graph(), "Identity") == 1);
}

TEST_CASE("export ties: what the legacy exporter did not deduplicate stays as it is") {
  SUBCASE("a parameter the module shares is one initializer read twice, and stays one") {
    onnx::ModelProto m;
    m.set_producer_name("pytorch");
    onnx::GraphProto* g = m.mutable_graph();
    add_f32(g, "a.weight", {2, 2}, {0.3f, -0.2f, 0.9f, 0.4f});
    add_node(g, "MatMul", {"x", "a.weight"}, "h");
    add_node(g, "MatMul", {"h", "a.weight"}, "y");
    const std::string before = m.SerializeAsString();
    CHECK(untie_deduplicated_initializers(m).empty());
    CHECK(m.SerializeAsString() == before);
  }
  SUBCASE("an Identity that returns a parameter as a graph output") {
    onnx::ModelProto m;
    m.set_producer_name("pytorch");
    onnx::GraphProto* g = m.mutable_graph();
    g->add_output()->set_name("10");
    add_f32(g, "b.weight", {2}, {0, 0});
    add_node(g, "Identity", {"b.weight"}, "10");
    CHECK(untie_deduplicated_initializers(m).empty());
    CHECK(count_op(m.graph(), "Identity") == 1);
  }
  SUBCASE("other producers: an Identity of an initializer is one tensor under two names") {
    for (const char* producer : {"", "tf2onnx", "onnx.helper"}) {
      onnx::ModelProto m = legacy_deduplicated();
      m.set_producer_name(producer);
      CHECK(untie_deduplicated_initializers(m).empty());
      CHECK(count_op(m.graph(), "Identity") == 3);
    }
  }
  SUBCASE("a torch.export file (its merges are untie_merged_parameters' work)") {
    onnx::ModelProto m = legacy_deduplicated();
    add_metadata(m.mutable_graph(), 16, "pkg.torch.export.ExportedProgram.graph_signature",
                 "\n# inputs\np_l0_fc_bias: PARAMETER target='l0.fc.bias'\n");
    CHECK(untie_deduplicated_initializers(m).empty());
    CHECK(count_op(m.graph(), "Identity") == 3);
  }
}

namespace {

// GPT-2 as the legacy exporter writes it: the token embedding read by Gather, and the tied lm_head
// as a constant-folded transpose of it for the logits MatMul.
onnx::ModelProto legacy_tied(std::vector<float> lm_head) {
  onnx::ModelProto m;
  m.set_producer_name("pytorch");
  onnx::GraphProto* g = m.mutable_graph();
  add_f32(g, "wte.weight", {3, 2}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});  // [vocab 3, hidden 2]
  add_f32(g, "onnx::MatMul_655", {2, 3}, lm_head);                       // [hidden 2, vocab 3]
  add_node(g, "Gather", {"wte.weight", "ids"}, "h");
  add_node(g, "MatMul", {"h", "onnx::MatMul_655"}, "logits");
  g->add_output()->set_name("logits");
  return m;
}

const std::vector<float> kWteTransposed = {0.1f, 0.3f, 0.5f, 0.2f, 0.4f, 0.6f};

}  // namespace

TEST_CASE("export ties: a legacy file's folded transpose of a weight is computed from it") {
  onnx::ModelProto m = legacy_tied(kWteTransposed);
  const std::vector<std::string> notes = tie_transposed_copies(m, "");
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("'onnx::MatMul_655' is 'wte.weight' transposed") != std::string::npos);
  const onnx::GraphProto& g = m.graph();
  CHECK(initializers(g).count("onnx::MatMul_655") == 0);
  CHECK(initializers(g).count("wte.weight") == 1);
  REQUIRE(g.node_size() == 3);
  const onnx::NodeProto& t = g.node(0);  // before its use
  CHECK(t.op_type() == "Transpose");
  CHECK(t.input(0) == "wte.weight");
  CHECK(t.output(0) == "onnx::MatMul_655");
  REQUIRE(t.attribute_size() == 1);
  CHECK(std::vector<int64_t>(t.attribute(0).ints().begin(), t.attribute(0).ints().end()) == std::vector<int64_t>{1, 0});
  CHECK(g.node(2).input(1) == "onnx::MatMul_655");
  CHECK(tie_transposed_copies(m, "").empty());
}

TEST_CASE("export ties: batched weights tie on their last two axes, a graph input listing goes too") {
  onnx::ModelProto m;
  m.set_producer_name("pytorch");
  onnx::GraphProto* g = m.mutable_graph();
  add_f32(g, "w", {2, 1, 3}, {1, 2, 3, 4, 5, 6});
  add_f32(g, "onnx::MatMul_9", {2, 3, 1}, {1, 2, 3, 4, 5, 6});
  g->add_input()->set_name("onnx::MatMul_9");  // keep_initializers_as_inputs
  add_node(g, "MatMul", {"x", "w"}, "h");
  add_node(g, "MatMul", {"h", "onnx::MatMul_9"}, "y");
  REQUIRE(tie_transposed_copies(m, "").size() == 1);
  CHECK(g->node(0).op_type() == "Transpose");
  CHECK(std::vector<int64_t>(g->node(0).attribute(0).ints().begin(), g->node(0).attribute(0).ints().end()) ==
        std::vector<int64_t>{0, 2, 1});
  CHECK(g->input_size() == 0);
  CHECK(g->initializer_size() == 1);
}

TEST_CASE("export ties: tensors that are not a parameter's transpose are left alone") {
  auto unchanged = [](onnx::ModelProto m) {
    const std::string before = m.SerializeAsString();
    CHECK(tie_transposed_copies(m, "").empty());
    CHECK(m.SerializeAsString() == before);
  };
  SUBCASE("one element differs") {
    std::vector<float> v = kWteTransposed;
    v[4] = 0.41f;
    unchanged(legacy_tied(v));
  }
  SUBCASE("the same values, not transposed") { unchanged(legacy_tied({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f})); }
  SUBCASE("another producer: two tensors that start transposed-equal may train apart") {
    onnx::ModelProto m = legacy_tied(kWteTransposed);
    m.set_producer_name("tf2onnx");
    unchanged(m);
  }
  SUBCASE("both named as parameters") {
    onnx::ModelProto m = legacy_tied(kWteTransposed);
    m.mutable_graph()->mutable_initializer(1)->set_name("decoder.weight");
    m.mutable_graph()->mutable_node(1)->set_input(1, "decoder.weight");
    unchanged(m);
  }
  SUBCASE("a fill equals the transpose of every parameter initialised the same way") {
    onnx::ModelProto m = legacy_tied(std::vector<float>(6, 0.0f));
    for (int i = 0; i < 6; ++i) m.mutable_graph()->mutable_initializer(0)->set_float_data(i, 0.0f);
    unchanged(m);
  }
  SUBCASE("a symmetric square matrix (an identity initialisation) equals its own transpose") {
    onnx::ModelProto m;
    m.set_producer_name("pytorch");
    onnx::GraphProto* g = m.mutable_graph();
    add_f32(g, "a.weight", {2, 2}, {1, 0.5f, 0.5f, 1});
    add_f32(g, "onnx::MatMul_3", {2, 2}, {1, 0.5f, 0.5f, 1});
    add_node(g, "MatMul", {"x", "a.weight"}, "h");
    add_node(g, "MatMul", {"h", "onnx::MatMul_3"}, "y");
    unchanged(m);
  }
}

TEST_CASE("export ties: a dynamo file's tensor folded from a parameter it holds is that parameter transposed") {
  // hf_gpt2_dynamo: lm_head.weight (the tied embedding) read by Gather, val_344 = its transpose,
  // folded_from ['lm_head.weight'], read by the logits MatMul.
  auto model = [](std::vector<float> val_344) {
    onnx::ModelProto m;
    m.set_producer_name("pytorch");
    onnx::GraphProto* g = m.mutable_graph();
    add_f32(g, "lm_head.weight", {3, 2}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
    add_f32(g, "val_344", {2, 3}, val_344);
    onnx::ValueInfoProto* vi = g->add_value_info();
    vi->set_name("val_344");
    add_metadata(vi, 4, "pkg.onnxscript.optimizer.folded_from", "['lm_head.weight']");
    add_node(g, "Gather", {"lm_head.weight", "ids"}, "h");
    add_node(g, "MatMul", {"h", "val_344"}, "logits");
    return m;
  };
  onnx::ModelProto m = model(kWteTransposed);
  const std::vector<std::string> notes = tie_transposed_copies(m, "");
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("'val_344' is 'lm_head.weight' transposed (the exporter folded it") != std::string::npos);
  CHECK(m.graph().node(0).op_type() == "Transpose");
  CHECK(m.graph().initializer_size() == 1);
  // Folded from the parameter but not its transpose (a scaled copy): left alone.
  onnx::ModelProto scaled = model({0.2f, 0.6f, 1.0f, 0.4f, 0.8f, 1.2f});
  CHECK(tie_transposed_copies(scaled, "").empty());
  CHECK(scaled.graph().initializer_size() == 2);
}

TEST_CASE("export ties: the exported program's signature lists parameters the file no longer holds") {
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  add_metadata(g, 16, "pkg.torch.export.ExportedProgram.graph_signature",
               "\n# inputs\np_wte_weight: PARAMETER target='wte.weight'\np_wpe_weight: PARAMETER target='wpe.weight'\n"
               "b_h_0_attn_bias: BUFFER target='h.0.attn.bias' persistent=True\ninput_ids: USER_INPUT\n\n# outputs\n"
               "linear: USER_OUTPUT\n");
  const auto inputs = exported_program_inputs(m);
  CHECK(inputs == std::map<std::string, std::string>{{"wte.weight", "PARAMETER"},
                                                     {"wpe.weight", "PARAMETER"},
                                                     {"h.0.attn.bias", "BUFFER"},
                                                     {"input_ids", "USER_INPUT"}});
  CHECK(exported_program_inputs(onnx::ModelProto{}).empty());
}

TEST_CASE("export ties: a tensor folded from a parameter the file lost trains, one folded from a buffer does not") {
  // hf_gpt2_dynamo's embedding_1 = wpe.weight gathered at positions 0..15; no node names wpe.
  auto model = [](const std::string& signature) {
    onnx::ModelProto m;
    onnx::GraphProto* g = m.mutable_graph();
    if (!signature.empty()) add_metadata(g, 16, "pkg.torch.export.ExportedProgram.graph_signature", signature);
    add_f32(g, "embedding_1", {1, 2}, {0.5f, -0.5f});
    add_f32(g, "mask", {1, 2}, {0, 1});
    for (auto [name, sources] : {std::pair<const char*, const char*>{"embedding_1", "['add', 'arange', 'wpe.weight']"},
                                 {"mask", "['arange', 'h.0.attn.bias']"}}) {
      onnx::ValueInfoProto* vi = g->add_value_info();
      vi->set_name(name);
      add_metadata(vi, 4, "pkg.onnxscript.optimizer.folded_from", sources);
    }
    add_node(g, "Add", {"x", "embedding_1"}, "h");
    add_node(g, "Mul", {"h", "mask"}, "y");
    return m;
  };
  const auto with = export_constants(model("\n# inputs\np_wpe_weight: PARAMETER target='wpe.weight'\n"
                                           "b_h_0_attn_bias: BUFFER target='h.0.attn.bias' persistent=True\n"));
  CHECK(with.count("embedding_1") == 0);
  CHECK(with.count("mask") == 1);
  // Without the signature nothing shows that wpe.weight was a parameter.
  const auto without = export_constants(model(""));
  CHECK(without.count("embedding_1") == 1);
  CHECK(without.count("mask") == 1);
}

TEST_CASE("export ties: a legacy export with a tied embedding and deduplicated parameters trains as PyTorch") {
  // tests/fixtures/ties/make_ties.py: the real exporter's file, torch's own per-step losses and final
  // embedding. Read literally the file trains two copies of the embedding and one tensor for eight
  // parameters: its losses then drift up to 18 % (SGD) and 4 % (AdamW) from torch's by step 4.
  const std::string dir = std::string(ONNXDP_SOURCE_DIR) + "/tests/fixtures/ties";
  const auto ref = read_npz(dir + "/reference.npz");
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "onnxdp_test_export_ties";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  for (const std::string opt : {"sgd", "adamw"}) {
    CAPTURE(opt);
    TrainOptions o;
    o.model = dir + "/model.onnx";
    o.data = dir + "/data.npz";
    o.label = "label";
    o.shuffle = false;
    o.quiet = true;
    o.batch_size = ref.at("batch_size").to_i64()[0];
    o.steps = ref.at("steps").to_i64()[0];
    o.optimizer.kind = optimizer_kind_from_name(opt);
    o.optimizer.lr = float(ref.at(opt + "_lr").to_f64()[0]);
    o.save = (tmp / (opt + ".onnx")).string();
    const TrainResult r = train(o);
    const std::vector<double> want = ref.at(opt + "_losses").to_f64();
    REQUIRE(r.losses.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(r.losses[i] == doctest::Approx(want[i]).epsilon(1e-5));
    }
    // The trained model holds the embedding once, as torch's, and computes the logits' weight
    // from it; every deduplicated parameter is its own initializer.
    onnx::ModelProto saved;
    {
      std::ifstream f(o.save, std::ios::binary);
      REQUIRE(saved.ParseFromIstream(&f));
    }
    std::set<std::string> names;
    const onnx::TensorProto* emb = nullptr;
    for (const auto& t : saved.graph().initializer()) {
      names.insert(t.name());
      if (t.name() == "emb.weight") emb = &t;
    }
    CHECK(names.count("onnx::MatMul_44") == 0);
    for (const char* p : {"fc1.bias", "fc2.bias", "norm2.weight", "norm2.bias", "norm_f.weight", "mix_b.bias",
                          "onnx::MatMul_43"})
      CHECK(names.count(p) == 1);
    CHECK(count_op(saved.graph(), "Identity") == 0);
    CHECK(count_op(saved.graph(), "Transpose") == 1);
    REQUIRE(emb != nullptr);
    const std::vector<double> got = tensor_from_proto(*emb, tmp.string()).to_f64();
    const std::vector<double> exp = ref.at(opt + "_final.emb.weight").to_f64();
    REQUIRE(got.size() == exp.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(got[i] - exp[i]));
      scale = std::max(scale, std::abs(exp[i]));
    }
    CHECK(worst <= 1e-5 * scale);
  }
}

TEST_CASE("export ties: hf_gpt2_dynamo's tied embedding is one trained tensor in the saved model, its data external") {
  // The dynamo exporter's file keeps lm_head.weight (read by Gather) and val_344 = its transpose
  // (the logits MatMul), both as external data. The model onnxdp writes holds lm_head.weight once,
  // in the output's own .data file, and computes val_344 from it.
  const std::string model = std::string(ONNXDP_SOURCE_DIR) + "/models/zoo/hf_gpt2_dynamo/model.onnx";
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "onnxdp_test_export_ties_gpt2";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  std::vector<std::string> notes;
  const onnx::ModelProto m = load_model_proto(model, &notes);
  int tie_notes = 0;
  for (const std::string& n : notes) tie_notes += n.find("'val_344' is 'lm_head.weight' transposed") != std::string::npos;
  CHECK(tie_notes == 1);
  const onnx::TensorProto* lm_head = nullptr;
  for (const auto& t : m.graph().initializer()) {
    CHECK(t.name() != "val_344");
    if (t.name() == "lm_head.weight") lm_head = &t;
  }
  REQUIRE(lm_head != nullptr);
  Tensor trained = tensor_from_proto(*lm_head, std::filesystem::path(model).parent_path().string());
  for (int64_t i = 0; i < trained.numel(); ++i) trained.as<float>()[i] += 0.01f * float(i % 7);  // [64, 32]
  const std::string out = (tmp / "trained.onnx").string();
  export_model(model, out, {{"lm_head.weight", trained}});
  onnx::ModelProto saved;
  {
    std::ifstream f(out, std::ios::binary);
    REQUIRE(saved.ParseFromIstream(&f));
  }
  const onnx::TensorProto* saved_head = nullptr;
  for (const auto& t : saved.graph().initializer()) {
    CHECK(t.name() != "val_344");
    if (t.name() == "lm_head.weight") saved_head = &t;
  }
  REQUIRE(saved_head != nullptr);
  CHECK(saved_head->data_location() == onnx::TensorProto::EXTERNAL);
  const Tensor back = tensor_from_proto(*saved_head, tmp.string());
  REQUIRE(back.numel() == 64 * 32);
  CHECK(std::memcmp(back.data(), trained.data(), trained.nbytes()) == 0);
  REQUIRE(saved.graph().node_size() > 0);
  CHECK(saved.graph().node(0).op_type() == "Transpose");
  CHECK(saved.graph().node(0).input(0) == "lm_head.weight");
  CHECK(saved.graph().node(0).output(0) == "val_344");
}
