// The recurrent composites LSTM, GRU and RNN (importer/ops_rnn.cpp): values against ONNX Runtime
// (tests/scripts/rnn_ort_reference.py writes rnn_ort_expected.h), gradients through time against
// finite differences, and the forms refused with an error naming the attribute.
#include <doctest/doctest.h>

#include <cmath>

#include "graph/autodiff.h"
#include "importer/onnx_io.h"
#include "tests/graph/gradcheck.h"
#include "tests/ops/op_test_util.h"
#include "tests/ops/rnn_ort_expected.h"
#include "compile/compile.h"

using namespace onnxdp;

namespace {

// Element i = sin(0.37 i + phase) * scale, as the reference script's pattern().
Tensor pattern(Shape s, double phase, double scale = 1.0, DType t = DType::f32) {
  Tensor r(t, std::move(s));
  for (int64_t i = 0; i < r.numel(); ++i) {
    const double v = std::sin(0.37 * double(i) + phase) * scale;
    if (t == DType::f64) r.as<double>()[i] = v;
    else r.as<float>()[i] = float(v);
  }
  return r;
}

Tensor lens(std::vector<int32_t> v) {
  Tensor t(DType::i32, {int64_t(v.size())});
  for (size_t k = 0; k < v.size(); ++k) t.as<int32_t>()[k] = v[k];
  return t;
}

onnx::AttributeProto attr_strings(const std::string& name, const std::vector<std::string>& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRINGS);
  for (const auto& s : v) a.add_strings(s);
  return a;
}

void check_near(const Tensor& got, const Shape& shape, const std::vector<double>& want, double tol = 2e-6) {
  REQUIRE(got.shape() == shape);
  REQUIRE(got.numel() == int64_t(want.size()));
  const std::vector<double> g = got.to_f64();
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(g[i] - want[i]) <= tol * (1 + std::fabs(want[i]))) continue;
    if (bad++ == 0) {
      INFO("first mismatch at " << i << ": got " << g[i] << ", expected " << want[i]);
      CHECK(g[i] == doctest::Approx(want[i]));
    }
  }
  CHECK(bad == 0);
}

// The five cases of rnn_ort_reference.py: inputs (float32) and attributes.
struct RnnCase {
  std::string op;
  std::vector<Tensor> inputs;
  std::vector<onnx::AttributeProto> attrs;
  int n_out;
};

RnnCase lstm_a(DType t = DType::f32) {  // bidirectional, layout 1, B, lens, states, peepholes
  const int64_t T = 4, B = 3, I = 2, H = 3, D = 2;
  return {"LSTM",
          {pattern({B, T, I}, .1, 1, t), pattern({D, 4 * H, I}, .2, .5, t), pattern({D, 4 * H, H}, .3, .5, t),
           pattern({D, 8 * H}, .4, .3, t), lens({4, 2, 3}), pattern({B, D, H}, .5, .4, t), pattern({B, D, H}, .6, .4, t),
           pattern({D, 3 * H}, .7, .3, t)},
          {optest::attr_i("hidden_size", H), optest::attr_s("direction", "bidirectional"), optest::attr_i("layout", 1)},
          3};
}
RnnCase gru_b(DType t = DType::f32) {  // reverse, layout 0, linear_before_reset 0, B, lens, initial_h
  const int64_t T = 3, B = 2, I = 3, H = 2, D = 1;
  return {"GRU",
          {pattern({T, B, I}, .1, 1, t), pattern({D, 3 * H, I}, .2, .5, t), pattern({D, 3 * H, H}, .3, .5, t),
           pattern({D, 6 * H}, .4, .3, t), lens({3, 1}), pattern({D, B, H}, .5, .4, t)},
          {optest::attr_i("hidden_size", H), optest::attr_s("direction", "reverse")},
          2};
}
RnnCase gru_c(DType t = DType::f32) {  // bidirectional, layout 1, linear_before_reset 1, no initial_h
  const int64_t T = 3, B = 2, I = 3, H = 2, D = 2;
  return {"GRU",
          {pattern({B, T, I}, .1, 1, t), pattern({D, 3 * H, I}, .2, .5, t), pattern({D, 3 * H, H}, .3, .5, t),
           pattern({D, 6 * H}, .4, .3, t)},
          {optest::attr_i("hidden_size", H), optest::attr_s("direction", "bidirectional"), optest::attr_i("layout", 1),
           optest::attr_i("linear_before_reset", 1)},
          2};
}
RnnCase rnn_d(DType t = DType::f32) {  // bidirectional, Relu / Tanh, clip, lens, initial_h, no B
  const int64_t T = 3, B = 2, I = 2, H = 3, D = 2;
  return {"RNN",
          {pattern({T, B, I}, .1, 2, t), pattern({D, H, I}, .2, .8, t), pattern({D, H, H}, .3, .5, t), Tensor(),
           lens({2, 3}), pattern({D, B, H}, .5, .4, t)},
          {optest::attr_i("hidden_size", H), optest::attr_s("direction", "bidirectional"),
           attr_strings("activations", {"Relu", "Tanh"}), optest::attr_f("clip", 0.9f)},
          2};
}
RnnCase lstm_e(DType t = DType::f32) {  // forward, clip, HardSigmoid / Tanh / Softplus, no B, no states
  const int64_t T = 3, B = 2, I = 2, H = 2, D = 1;
  return {"LSTM",
          {pattern({T, B, I}, .1, 2, t), pattern({D, 4 * H, I}, .2, .8, t), pattern({D, 4 * H, H}, .3, .8, t)},
          {optest::attr_i("hidden_size", H), attr_strings("activations", {"HardSigmoid", "Tanh", "Softplus"}),
           optest::attr_f("clip", 1.1f)},
          3};
}

std::vector<Tensor> run_case(const RnnCase& c, int first_const = 1) {
  return optest::run_onnx(14, c.op, c.inputs, c.attrs, c.n_out, first_const);
}

// Gradient check (float64): every float input an initializer (so a parameter), sequence_lens a
// constant; loss = sum over Y, Y_h (and Y_c) flattened and concatenated, times a random R.
void gradcheck_case(const RnnCase& rc) {
  onnx::ModelProto m = optest::one_node_model(14, rc.op, rc.inputs, rc.attrs, rc.n_out);
  onnx::GraphProto* gp = m.mutable_graph();
  gp->clear_input();
  for (size_t k = 0; k < rc.inputs.size(); ++k) {
    if (rc.inputs[k].empty()) continue;
    onnx::TensorProto* init = gp->add_initializer();
    tensor_to_proto(rc.inputs[k], init);
    init->set_name(fmt::format("x{}", k));
  }
  testing::Case c;
  c.g = load_graph(m, "", ImportOptions{});
  c.params = c.g.parameters();
  REQUIRE(!c.params.empty());
  std::vector<ValueId> flat;
  for (ValueId o : c.g.outputs) flat.push_back(c.node(Op::Flatten, {o}, {{"axis", Attr(int64_t(0))}}));
  ValueId out = c.node(Op::Concat, flat, {{"axis", Attr(int64_t(1))}});
  testing::gradcheck(c, out);
}

}  // namespace

TEST_CASE("rnn: LSTM bidirectional, batch first, sequence_lens, initial states, peepholes match ONNX Runtime") {
  auto y = run_case(lstm_a());
  check_near(y[0], {3, 4, 2, 3}, rnn_expected::kLstmA_Y);
  check_near(y[1], {3, 2, 3}, rnn_expected::kLstmA_Yh);
  check_near(y[2], {3, 2, 3}, rnn_expected::kLstmA_Yc);
  // The same with every input fed at run time (nothing folds at load).
  auto fed = run_case(lstm_a(), 8);
  check_near(fed[0], {3, 4, 2, 3}, rnn_expected::kLstmA_Y);
  check_near(fed[1], {3, 2, 3}, rnn_expected::kLstmA_Yh);
}

TEST_CASE("rnn: GRU reverse with sequence_lens, and bidirectional batch first with linear_before_reset, match ONNX Runtime") {
  auto b = run_case(gru_b());
  check_near(b[0], {3, 1, 2, 2}, rnn_expected::kGruB_Y);
  check_near(b[1], {1, 2, 2}, rnn_expected::kGruB_Yh);
  auto c = run_case(gru_c());
  check_near(c[0], {2, 3, 2, 2}, rnn_expected::kGruC_Y);
  check_near(c[1], {2, 2, 2}, rnn_expected::kGruC_Yh);
}

TEST_CASE("rnn: RNN with activations Relu / Tanh and clip, LSTM with HardSigmoid / Softplus and clip, match ONNX Runtime") {
  auto d = run_case(rnn_d());
  check_near(d[0], {3, 2, 2, 3}, rnn_expected::kRnnD_Y);
  check_near(d[1], {2, 2, 3}, rnn_expected::kRnnD_Yh);
  auto e = run_case(lstm_e());
  check_near(e[0], {3, 1, 2, 2}, rnn_expected::kLstmE_Y);
  check_near(e[1], {1, 2, 2}, rnn_expected::kLstmE_Yh);
  check_near(e[2], {1, 2, 2}, rnn_expected::kLstmE_Yc);
}

TEST_CASE("rnn: only Y_h named: the node's Y is dropped, Y_h keeps its ONNX name") {
  RnnCase c = gru_b();
  onnx::ModelProto m = optest::one_node_model(14, c.op, c.inputs, c.attrs, 2);
  m.mutable_graph()->mutable_node(0)->set_output(0, "");
  m.mutable_graph()->mutable_output()->DeleteSubrange(0, 1);
  ImportOptions opt;
  for (size_t k = 1; k < c.inputs.size(); ++k) opt.constant_inputs[fmt::format("x{}", k)] = c.inputs[k];
  Graph g = load_graph(m, "", opt);
  REQUIRE(g.outputs.size() == 1);
  CHECK(g.value(g.outputs[0]).name == "y1");
  Plan plan(g);
  check_near(plan.run({{"x0", c.inputs[0]}}).at("y1"), {1, 2, 2}, rnn_expected::kGruB_Yh);
}

TEST_CASE("rnn: gradients through time match finite differences (LSTM, GRU, RNN, both directions, states, lengths)") {
  SUBCASE("LSTM bidirectional, batch first, lengths, states, peepholes") { gradcheck_case(lstm_a(DType::f64)); }
  SUBCASE("GRU reverse, lengths, initial_h") { gradcheck_case(gru_b(DType::f64)); }
  SUBCASE("GRU bidirectional, linear_before_reset") { gradcheck_case(gru_c(DType::f64)); }
  SUBCASE("RNN bidirectional, Relu, clip, lengths") { gradcheck_case(rnn_d(DType::f64)); }
  SUBCASE("LSTM HardSigmoid, Softplus, clip") { gradcheck_case(lstm_e(DType::f64)); }
}

TEST_CASE("rnn: forms onnxdp does not compute are refused, naming the node and attribute") {
  auto err = [](RnnCase c, std::vector<onnx::AttributeProto> extra) {
    for (auto& a : extra) c.attrs.push_back(a);
    return optest::error_of([&] { run_case(c); });
  };
  std::string e = err(lstm_e(), {optest::attr_i("input_forget", 1)});
  CHECK(e.find("test_node") != std::string::npos);
  CHECK(e.find("input_forget") != std::string::npos);
  CHECK(err(gru_b(), {optest::attr_floats("activation_alpha", {0.5f})}).find("activation_alpha") != std::string::npos);
  RnnCase bad_act = rnn_d();
  bad_act.attrs[2] = attr_strings("activations", {"ThresholdedRelu", "Tanh"});
  CHECK(err(bad_act, {}).find("'ThresholdedRelu' is not supported") != std::string::npos);
  RnnCase few = rnn_d();
  few.attrs[2] = attr_strings("activations", {"Relu"});
  CHECK(err(few, {}).find("'activations' names 1 functions") != std::string::npos);
  RnnCase dir = gru_b();
  dir.attrs[1] = optest::attr_s("direction", "backward");
  CHECK(err(dir, {}).find("'direction' is 'backward'") != std::string::npos);
  RnnCase hs = gru_b();
  hs.attrs[0] = optest::attr_i("hidden_size", 5);
  CHECK(err(hs, {}).find("'hidden_size' is 5") != std::string::npos);
  RnnCase long_len = gru_b();
  long_len.inputs[4] = lens({4, 1});
  CHECK(err(long_len, {}).find("sequence_lens[0] is 4, outside [0, 3]") != std::string::npos);
  CHECK(err(gru_b(), {optest::attr_i("output_sequence", 1)}).find("'output_sequence' is not supported") !=
        std::string::npos);
  // A list of strings on an op that is not a composite is still refused.
  CHECK(optest::error_of([] {
          optest::run_onnx(14, "Relu", {pattern({2}, 0)}, {attr_strings("activations", {"Relu"})}, 1, 1);
        }).find("attribute 'activations'") != std::string::npos);
}

TEST_CASE("rnn: the ONNX backend node tests of LSTM, GRU and RNN pass") {
  optest::check_node_tests({"LSTM", "GRU", "RNN"}, 12);
}
