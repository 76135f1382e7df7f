// See block_channels.h.
#include "graph/passes/block_channels.h"

#include <algorithm>
#include <numeric>

namespace onnxdp {

namespace {

bool listed(const Node& n, const char* attr, int k) {
  auto it = n.attrs.find(attr);
  if (it == n.attrs.end()) return false;
  const auto* ks = std::get_if<std::vector<int64_t>>(&it->second);
  return ks && std::find(ks->begin(), ks->end(), int64_t(k)) != ks->end();
}

// Whether node n may read (input) or write (output) slot k in the blocked layout, and whether
// that slot is tied to the node's other tied slots (same layout) rather than free.
enum class Role { refuses, free, tied };

// Ops whose every output element is computed from the same element of each operand (or from a
// scalar): they run in any layout, as long as their full-size operands and outputs share it.
bool elementwise(Op op) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Min: case Op::Max:
    case Op::Sqrt: case Op::Exp: case Op::Log: case Op::Neg: case Op::Abs: case Op::Reciprocal:
    case Op::Relu: case Op::LeakyRelu: case Op::Sigmoid: case Op::Tanh: case Op::Erf: case Op::Gelu:
    case Op::Softplus: case Op::HardSigmoid: case Op::HardSwish: case Op::Elu: case Op::Selu:
    case Op::Celu: case Op::Mish: case Op::Softsign: case Op::Sign: case Op::Clip: case Op::Equal:
    case Op::Less: case Op::Greater: case Op::Not: case Op::LessOrEqual: case Op::GreaterOrEqual:
    case Op::And: case Op::Or: case Op::Xor: case Op::Where: case Op::IsNaN: case Op::IsInf:
    case Op::Identity: case Op::ReluGrad: case Op::GeluGrad: case Op::ClipGrad:
      return true;
    default:
      return false;
  }
}

// Ops whose kernels read an operand broadcast over the spatial dims only (a bias or a layer
// scale [C, 1, 1], a squeeze-and-excitation [N, C, 1, 1]) as plain memory beside a blocked output
// (exec/cpu/blocked.h's storage shapes): the operand stays plain, the output may be blocked.
bool reads_channel_operands(Op op) {
  return op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div || op == Op::Expand;
}

// An elementwise node's slot: tied where the value has the output's shape, free where it is a
// scalar (numel 1, the same in any layout), refused (kept plain) where it is a channel operand of
// an op that reads one; any other broadcast rules the node out. Expand's input 1 is its shape.
Role elementwise_role(const Graph& g, const Node& n, bool input, int k) {
  const Shape& s = g.value(n.outputs[0]).shape;
  const auto scalar = [&](ValueId u) {
    int64_t numel = 1;
    for (int64_t d : g.value(u).shape) numel *= d;
    return numel == 1;
  };
  const auto channel = [&](ValueId u) { return reads_channel_operands(n.op) && channel_operand(g.value(u).shape, s); };
  if (n.outputs.size() != 1) return Role::refuses;  // GeluGrad's bias gradient
  if (n.op == Op::Expand && input && k == 1) return Role::free;
  const size_t operands = n.op == Op::Expand ? 1 : n.inputs.size();
  for (size_t j = 0; j < operands; ++j) {
    const ValueId u = n.inputs[j];
    if (u != kNoValue && g.value(u).shape != s && !scalar(u) && !channel(u)) return Role::refuses;
  }
  const ValueId v = input ? n.inputs[size_t(k)] : n.outputs[size_t(k)];
  return g.value(v).shape == s ? Role::tied : scalar(v) ? Role::free : Role::refuses;
}

// A reduction (ReduceSum, ReduceMean) reads blocked x when it reduces every spatial dim (its
// output, [N, C] or less, is plain in the order the storage's reduction leaves).
bool reduces_spatial_dims(const Graph& g, const Node& n) {
  const int64_t r = int64_t(g.value(n.inputs[0]).shape.size());
  std::vector<int64_t> axes;
  if (n.inputs.size() > 1 && n.inputs[1] != kNoValue) {
    const Value& a = g.value(n.inputs[1]);
    if (a.kind != ValueKind::constant) return false;
    axes = a.data.to_i64();
  }
  if (axes.empty()) return n.i("noop_with_empty_axes") == 0;  // all dims, or none
  std::vector<bool> red(size_t(r), false);
  for (int64_t a : axes) {
    if (a < -r || a >= r) return false;
    red[size_t(a < 0 ? a + r : a)] = true;
  }
  for (int64_t d = 2; d < r; ++d)
    if (!red[size_t(d)]) return false;
  return true;
}

// A depthwise node (Conv, ConvTranspose, ConvGradFilter) whose window the blocked loops take:
// x and the other activation (y, or the filter gradient's dy) of one channel count, the group.
// Explicit pads only (the gradients' nodes have them; an imported auto_pad stays plain).
bool blocked_depthwise(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2) return false;
  const Shape& x = g.value(n.inputs[0]).shape;
  const ValueId other = n.op == Op::ConvGradFilter ? n.inputs[1] : n.outputs[0];
  const std::string auto_pad = n.has("auto_pad") ? n.s("auto_pad") : "NOTSET";
  if (x.size() != 4 || other == kNoValue || x[1] != n.i("group") ||
      g.value(other).shape.size() != 4 || g.value(other).shape[1] != x[1] || auto_pad != "NOTSET" ||
      n.has("output_shape"))
    return false;
  std::vector<int64_t> kernel;
  if (n.has("kernel_shape")) kernel = n.ints("kernel_shape");
  else if (n.op != Op::ConvGradFilter) {
    const Shape& w = g.value(n.inputs[1]).shape;
    kernel.assign(w.begin() + std::min<size_t>(2, w.size()), w.end());
  }
  const std::vector<int64_t> pads = n.ints_or("pads", std::vector<int64_t>(4, 0));
  if (kernel.size() != 2 || pads.size() != 4) return false;
  return blocked_depthwise_window(kernel, n.ints_or("strides", {1, 1}), n.ints_or("dilations", {1, 1}),
                                  {pads[0], pads[1]});
}

Role role(const Graph& g, const Node& n, bool input, int k, bool depthwise) {
  switch (n.op) {
    // Of one group: oneDNN runs either layout on each side. Depthwise: the blocked loops take both
    // sides blocked or neither.
    case Op::Conv:
    case Op::ConvTranspose:
      if (k != 0) return Role::refuses;
      return n.i("group") == 1 ? Role::free : depthwise && blocked_depthwise(g, n) ? Role::tied : Role::refuses;
    case Op::ConvGradFilter:
      if (!input) return Role::refuses;
      return n.i("group") == 1 ? Role::free : depthwise && blocked_depthwise(g, n) ? Role::tied : Role::refuses;
    case Op::BatchNormalization:
      return k == 0 ? Role::tied : Role::refuses;
    case Op::BatchNormalizationGrad:
      return (input ? k != 2 : k == 0) ? Role::tied : Role::refuses;
    // Either side in either layout: the copy walks the storages (exec/cpu/tensor.cpp).
    case Op::Transpose:
      return Role::free;
    case Op::ReduceSum:
    case Op::ReduceMean:
      return input && (k == 1 || reduces_spatial_dims(g, n)) ? Role::free : Role::refuses;
    default:
      return elementwise(n.op) || n.op == Op::Expand ? elementwise_role(g, n, input, k) : Role::refuses;
  }
}

struct Groups {
  std::vector<ValueId> parent;
  explicit Groups(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), ValueId(0)); }
  ValueId find(ValueId v) {
    while (parent[size_t(v)] != v) v = parent[size_t(v)] = parent[size_t(parent[size_t(v)])];
    return v;
  }
  void tie(ValueId a, ValueId b) { parent[size_t(find(a))] = find(b); }
};

}  // namespace

bool blocked_depthwise_window(const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& dilations, const std::vector<int64_t>& pad_begin) {
  if (kernel.size() != 2 || strides.size() != 2 || dilations.size() != 2 || pad_begin.size() != 2) return false;
  for (size_t d = 0; d < 2; ++d)
    if (strides[d] != 1 || dilations[d] != 1 || pad_begin[d] < 0 || pad_begin[d] >= kernel[d]) return false;
  return kernel[0] >= 1 && kernel[0] <= 16 && (kernel[1] == 3 || kernel[1] == 5 || kernel[1] == 7);
}

bool channel_operand(const Shape& a, const Shape& out) {
  if (a.size() > out.size()) return false;
  for (size_t d = 2; d < out.size(); ++d)
    if (d + a.size() >= out.size() && a[d + a.size() - out.size()] != 1) return false;
  return true;
}

bool blocked_input(const Node& n, int k) { return listed(n, kBlockedInputs, k); }
bool blocked_output(const Node& n, int k) { return listed(n, kBlockedOutputs, k); }

int block_channels(Graph& g, const std::vector<ValueId>& keep, bool depthwise) {
  const size_t values = g.values.size();
  std::vector<bool> ok(values, false);
  for (size_t v = 0; v < values; ++v) {
    const Value& x = g.value(ValueId(v));
    // bool: the masks elementwise gradients compute (a Clip's, x < min), which no convolution reads.
    ok[v] = x.kind == ValueKind::activation && x.producer >= 0 &&
            (x.dtype == DType::f32 || x.dtype == DType::boolean) && x.shape.size() >= 3 && x.shape.size() <= 5 &&
            x.shape[1] > 0 && x.shape[1] % 16 == 0;
  }
  for (ValueId v : g.outputs) ok[size_t(v)] = false;
  for (ValueId v : keep)
    if (v != kNoValue) ok[size_t(v)] = false;

  // Every slot's role: a refusing one rules its value out; tied slots of a node join one group.
  Groups groups(values);
  for (const Node& n : g.nodes) {
    ValueId first_tied = kNoValue;
    const auto visit = [&](ValueId v, bool input, int k) {
      if (v == kNoValue) return;
      const Role r = role(g, n, input, k, depthwise);
      if (r == Role::refuses) ok[size_t(v)] = false;
      if (r != Role::tied) return;
      if (first_tied == kNoValue) first_tied = v;
      else groups.tie(v, first_tied);
    };
    for (size_t k = 0; k < n.inputs.size(); ++k) visit(n.inputs[k], true, int(k));
    for (size_t k = 0; k < n.outputs.size(); ++k) visit(n.outputs[k], false, int(k));
  }
  // A group is blocked when all its values may be.
  std::vector<bool> group_ok(values, true);
  for (size_t v = 0; v < values; ++v)
    if (!ok[v]) group_ok[size_t(groups.find(ValueId(v)))] = false;
  std::vector<bool> blocked(values, false);
  int count = 0;
  for (size_t v = 0; v < values; ++v) {
    blocked[v] = ok[v] && group_ok[size_t(groups.find(ValueId(v)))];
    count += blocked[v];
  }
  if (count == 0) return 0;
  for (Node& n : g.nodes) {
    // The other elementwise ops compute the same in any layout, one for all their operands.
    if (!op_info(n.op).find_attr(kBlockedInputs)) continue;
    std::vector<int64_t> ins, outs;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] != kNoValue && blocked[size_t(n.inputs[k])]) ins.push_back(int64_t(k));
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] != kNoValue && blocked[size_t(n.outputs[k])]) outs.push_back(int64_t(k));
    if (!ins.empty()) n.attrs[kBlockedInputs] = Attr(ins);
    if (!outs.empty()) n.attrs[kBlockedOutputs] = Attr(outs);
  }
  return count;
}

}  // namespace onnxdp
