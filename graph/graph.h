// The IR: Op (from the op table), typed attributes, Value, Node, Graph.
#pragma once
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "graph/error.h"
#include "graph/op_table.h"
#include "graph/tensor.h"

namespace onnxdp {

enum class Op : uint16_t {
#define ONNXDP_X(op, ...) op,
  ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X
};
inline constexpr int kOpCount = 0
#define ONNXDP_X(op, ...) +1
    ONNXDP_OPS(ONNXDP_X)
#undef ONNXDP_X
    ;
static_assert(kOpCount == ONNXDP_OP_COUNT, "op table row count changed: update ONNXDP_OP_COUNT");

enum class AttrKind : uint8_t { i, f, s, ints, floats, t };
using Attr = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>, Tensor>;

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<Attr> default_value;
};

struct OpInfo {
  Op op;
  const char* name;
  const char* category;
  int in_min, in_max, out_min, out_max;
  std::vector<AttrSpec> attrs;
  const AttrSpec* find_attr(const std::string& name) const;
};

const OpInfo& op_info(Op op);
const char* op_name(Op op);
std::optional<Op> op_from_name(const std::string& name);
// A composite op (graph/op_table.h's ONNXDP_COMPOSITES): the row its node starts as on import.
std::optional<Op> composite_from_name(const std::string& name);
// Whether onnxdp imports the default-domain ONNX op `name`: a row of the table or a composite.
inline bool imports_op(const std::string& name) { return op_from_name(name) || composite_from_name(name); }

using ValueId = int;
inline constexpr ValueId kNoValue = -1;  // an absent optional input

enum class ValueKind : uint8_t {
  input,        // fed by the caller every run
  parameter,    // an initializer: persistent, may be trained
  constant,     // known at compile time (Constant nodes, folded shape arithmetic, integer initializers)
  activation,   // produced by a node
};

struct Value {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  ValueKind kind = ValueKind::activation;
  Tensor data;     // for parameter and constant
  int producer = -1;  // node index for activations
};

struct Node {
  std::string name;
  Op op;
  std::vector<ValueId> inputs;   // kNoValue for absent optional inputs
  std::vector<ValueId> outputs;
  std::map<std::string, Attr> attrs;

  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  // Typed attribute access; falls back to the op table's default, else fails naming the node.
  int64_t i(const std::string& a) const;
  float f(const std::string& a) const;
  const std::string& s(const std::string& a) const;
  const std::vector<int64_t>& ints(const std::string& a) const;
  const std::vector<float>& floats(const std::string& a) const;
  const Tensor& t(const std::string& a) const;
  std::vector<int64_t> ints_or(const std::string& a, std::vector<int64_t> dflt) const;

  bool has_input(int k) const { return k < int(inputs.size()) && inputs[k] != kNoValue; }
  // "node /b1/Conv (Conv)" for error messages.
  std::string describe() const;
};

struct Graph {
  std::string name;
  std::deque<Value> values;     // a deque: references stay valid while passes append values
  std::vector<Node> nodes;       // topological order
  std::vector<ValueId> inputs;   // graph inputs fed each run
  std::vector<ValueId> outputs;

  ValueId add_value(Value v);
  ValueId find(const std::string& name) const;  // kNoValue if none
  Value& value(ValueId id) { return values.at(size_t(id)); }
  const Value& value(ValueId id) const { return values.at(size_t(id)); }
  // Appends a node, runs its shape rule to create typed outputs named `out_names`.
  // Inputs must already exist; returns the index of the node.
  int add_node(Op op, std::string node_name, std::vector<ValueId> inputs,
               std::vector<std::string> out_names, std::map<std::string, Attr> attrs = {});
  std::vector<ValueId> parameters() const;
};

// Shape-rule interface. A rule reads inputs (dtype, shape, and data when constant) and sets each
// output's dtype and shape; errors go through ctx.fail, which names the node.
struct ShapeCtx {
  const Graph& graph;
  const Node& node;
  std::vector<Value*> out;

  int num_inputs() const { return int(node.inputs.size()); }
  bool has(int k) const { return node.has_input(k); }
  const Value& in(int k) const;
  const Shape& shape(int k) const { return in(k).shape; }
  DType dtype(int k) const { return in(k).dtype; }
  // The input's value when it is known at compile time, else nullptr.
  const Tensor* constant(int k) const;
  // Like constant(), but fails with a clear message when the value is not known.
  const Tensor& require_constant(int k, const char* what) const;
  // Sets output k's type; absent optional outputs (and k past the node's outputs) are skipped.
  void set(int k, DType t, Shape s) {
    if (k >= int(out.size()) || !out[size_t(k)]) return;
    out[size_t(k)]->dtype = t;
    out[size_t(k)]->shape = std::move(s);
  }
  bool has_out(int k) const { return k < int(out.size()) && out[size_t(k)]; }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(node.describe() + ": " + fmt::format(f, std::forward<Args>(args)...));
  }
};
using ShapeRule = void (*)(ShapeCtx&);
ShapeRule shape_rule(Op op);
// Runs the node's shape rule, filling the dtype/shape of its outputs in g.
void infer_node(Graph& g, int node_index);

// Sets each node output's producer to its node's index: after a pass inserted, moved or removed
// nodes.
void index_producers(Graph& g);
// Per value: how many node inputs read it (a node reading it twice counts twice).
std::vector<int> count_readers(const Graph& g);

// Helpers shape rules share.
Shape broadcast_shapes(const Shape& a, const Shape& b);  // numpy rules; throws Error if incompatible
int64_t normalize_axis(int64_t axis, int64_t rank, const Node& n);  // -rank..rank-1 -> 0..rank-1

// Verifier: every value defined once, inputs defined before use (so no cycles), arity within the
// op table, attributes known and of the right kind, shapes and dtypes equal what the shape rules
// give. Throws Error naming the first problem.
void verify(const Graph& g);

// Readable listing of the graph, one node a line.
std::string print_graph(const Graph& g);

}  // namespace onnxdp
