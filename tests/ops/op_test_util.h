// Helpers of the op tests, defined in tests/ops/test_tensor.cpp: tensors from values, running one
// op (run_op: the backend harness's one-node graph through a Plan on the CPU, tests/backend/
// backend_ops.h; or through the importer from an ONNX node), checks, and the ONNX backend node
// tests of a set of ops.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "exec/kernel.h"
#include "importer/importer.h"

namespace onnxdp::optest {
Tensor make(DType t, Shape s, const std::vector<double>& v);
Tensor arange(DType t, Shape s, double start = 0, double step = 1);
Tensor ints(std::vector<int64_t> v);
void check(const Tensor& t, DType d, const Shape& s, const std::vector<double>& expected, double rtol = 1e-6);
std::vector<Tensor> run_op(Op op, const std::vector<Tensor>& inputs, const std::map<std::string, Attr>& attrs = {},
                           int n_out = 1, int first_const = 1);
onnx::AttributeProto attr_i(const std::string& name, int64_t v);
onnx::AttributeProto attr_f(const std::string& name, float v);
onnx::AttributeProto attr_s(const std::string& name, const std::string& v);
onnx::AttributeProto attr_ints(const std::string& name, const std::vector<int64_t>& v);
onnx::AttributeProto attr_floats(const std::string& name, const std::vector<float>& v);
onnx::AttributeProto attr_t(const std::string& name, const Tensor& t);
// The model run_onnx loads: inputs x0.., outputs y0.., one node named test_node.
onnx::ModelProto one_node_model(int opset, const std::string& op_type, const std::vector<Tensor>& inputs,
                                const std::vector<onnx::AttributeProto>& attrs, int n_out);
std::vector<Tensor> run_onnx(int opset, const std::string& op_type, const std::vector<Tensor>& inputs,
                             const std::vector<onnx::AttributeProto>& attrs = {}, int n_out = 1, int first_const = 1);
std::string error_of(const std::function<void()>& f);
onnx::ModelProto one_node_model(int opset, const std::string& op_type, const std::vector<Tensor>& inputs,
                                const std::vector<onnx::AttributeProto>& attrs, int n_out);
// `refused`: case names onnxdp refuses by design (tests/conformance/exclusions.txt); they must fail.
void check_node_tests(const std::set<std::string>& ops, int min_passed, const std::set<std::string>& refused = {});
}  // namespace onnxdp::optest
