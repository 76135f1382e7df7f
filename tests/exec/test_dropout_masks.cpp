// Dropout's masks against an independent implementation: models/make_train_refs.py's numpy
// Philox4x32-10 (dropout_keep((4, 8), 0.5, seed 0, step 1, node name "d")) printed these bits.
#include <doctest/doctest.h>

#include "exec/plan.h"

using namespace onnxdp;

TEST_CASE("dropout: masks equal the numpy re-implementation of the Philox layout") {
  const int want[4][8] = {{1, 1, 1, 0, 1, 0, 0, 0},
                          {1, 0, 0, 1, 0, 0, 1, 0},
                          {0, 1, 0, 0, 0, 0, 0, 1},
                          {0, 0, 0, 1, 0, 0, 0, 0}};
  Graph g;
  Value x;
  x.name = "x";
  x.shape = {4, 8};
  x.kind = ValueKind::input;
  g.inputs.push_back(g.add_value(x));
  auto constant = [&](Tensor t, const char* name) {
    Value v;
    v.name = name;
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.kind = ValueKind::constant;
    v.data = t;
    return g.add_value(v);
  };
  Tensor training(DType::boolean, {});
  training.as<bool>()[0] = true;
  int n = g.add_node(Op::Dropout, "d", {g.inputs[0], constant(Tensor::scalar_f32(0.5f), "ratio"), constant(training, "t")},
                     {"y", "mask"});
  g.outputs = g.nodes[size_t(n)].outputs;
  Plan p(g);
  Tensor ones(DType::f32, {4, 8});
  for (int i = 0; i < 32; ++i) ones.as<float>()[i] = 1.0f;
  RunState rs;
  rs.seed = 0;
  rs.step = 1;
  auto out = p.run({{"x", ones}}, rs);
  for (int i = 0; i < 32; ++i) {
    CAPTURE(i);
    CHECK(int(out.at("mask").as<bool>()[i]) == want[i / 8][i % 8]);
    CHECK(out.at("y").as<float>()[i] == (want[i / 8][i % 8] ? 2.0f : 0.0f));
  }
  // Rows 2..3 computed alone with batch_offset 2 give the same mask: masks do not depend on the split.
  Graph half = g;
  half.value(half.inputs[0]).shape = {2, 8};
  infer_node(half, 0);
  Plan ph(half);
  Tensor two(DType::f32, {2, 8});
  for (int i = 0; i < 16; ++i) two.as<float>()[i] = 1.0f;
  rs.batch_offset = 2;
  auto out2 = ph.run({{"x", two}}, rs);
  for (int i = 0; i < 16; ++i) CHECK(int(out2.at("mask").as<bool>()[i]) == want[2 + i / 8][i % 8]);
  // The same rows as the second micro-batch of a step (sample_offset 2, the replica's offset 0):
  // masks do not depend on the split into micro-batches either.
  rs.batch_offset = 0;
  rs.sample_offset = 2;
  auto out3 = ph.run({{"x", two}}, rs);
  for (int i = 0; i < 16; ++i) CHECK(int(out3.at("mask").as<bool>()[i]) == want[2 + i / 8][i % 8]);
  // A micro-batch at 1 whose replica starts 1 row further in: rows 2..3 again.
  rs.batch_offset = 1;
  rs.sample_offset = 1;
  auto out4 = ph.run({{"x", two}}, rs);
  for (int i = 0; i < 16; ++i) CHECK(int(out4.at("mask").as<bool>()[i]) == want[2 + i / 8][i % 8]);
}
