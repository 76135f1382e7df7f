// A two-layer ONNX model for the tests that need a model file with a given op: x [batch, n] ->
// MatMul with W [n, n] (the one trainable initializer) -> `op` reading that product and the
// named scalar initializers -> y [batch, n]. Opset 17.
#pragma once
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "onnx/onnx_pb.h"

namespace onnxdp::test {

inline void write_tiny_model(const std::string& path, int64_t n, const std::vector<float>& w, const std::string& op,
                             const std::vector<std::pair<std::string, float>>& scalars = {}) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("tiny");
  auto io = [&](onnx::ValueInfoProto* vi, const char* name) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(n);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  auto init = [&](const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float f : v) t->add_float_data(f);
  };
  REQUIRE(int64_t(w.size()) == n * n);
  init("W", {n, n}, w);
  onnx::NodeProto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->set_name("xw");
  mm->add_input("x");
  mm->add_input("W");
  mm->add_output("xw");
  onnx::NodeProto* last = g->add_node();
  last->set_op_type(op);
  last->set_name("y");
  last->add_input("xw");
  for (const auto& [name, v] : scalars) {
    init(name, {}, {v});
    last->add_input(name);
  }
  last->add_output("y");
  std::ofstream f(path, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&f));
}

}  // namespace onnxdp::test
