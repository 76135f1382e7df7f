// Host side of the CUDA elementwise ops: a Node and its tensors become EwLaunch descriptions for
// exec/cuda/elementwise.cu. Broadcasting uses the CPU's BroadcastLoop (exec/cpu/broadcast.h), so
// both backends merge and stride dims the same way.
#include "exec/cuda/elementwise.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>

#include "exec/cpu/broadcast.h"
#include "exec/cuda/check.h"
#include "exec/cuda/elementwise_launch.h"

namespace onnxdp::cuda {

namespace {

const char* ew_op_name(EwOp op) {
  switch (op) {
    case EwOp::Add: return "Add";
    case EwOp::Sub: return "Sub";
    case EwOp::Mul: return "Mul";
    case EwOp::Div: return "Div";
    case EwOp::Min: return "Min";
    case EwOp::Max: return "Max";
    case EwOp::Pow: return "Pow";
    case EwOp::Identity: return "Identity";
    case EwOp::Neg: return "Neg";
    case EwOp::Abs: return "Abs";
    case EwOp::Relu: return "Relu";
    case EwOp::Clip: return "Clip";
    case EwOp::Sqrt: return "Sqrt";
    case EwOp::Exp: return "Exp";
    case EwOp::Log: return "Log";
    case EwOp::Reciprocal: return "Reciprocal";
    case EwOp::LeakyRelu: return "LeakyRelu";
    case EwOp::Sigmoid: return "Sigmoid";
    case EwOp::Tanh: return "Tanh";
    case EwOp::Erf: return "Erf";
    case EwOp::Gelu: return "Gelu";
    case EwOp::GeluTanh: return "Gelu(tanh)";
    case EwOp::GeluGrad: return "GeluGrad";
    case EwOp::GeluTanhGrad: return "GeluGrad(tanh)";
    case EwOp::Softplus: return "Softplus";
    case EwOp::Sin: return "Sin";
    case EwOp::Cos: return "Cos";
    case EwOp::HardSigmoid: return "HardSigmoid";
    case EwOp::HardSwish: return "HardSwish";
    case EwOp::Mod: return "Mod";
    case EwOp::PRelu: return "PRelu";
    case EwOp::Sign: return "Sign";
    case EwOp::Elu: return "Elu";
    case EwOp::Selu: return "Selu";
    case EwOp::Celu: return "Celu";
    case EwOp::Mish: return "Mish";
    case EwOp::Equal: return "Equal";
    case EwOp::Less: return "Less";
    case EwOp::Greater: return "Greater";
    case EwOp::LessOrEqual: return "LessOrEqual";
    case EwOp::GreaterOrEqual: return "GreaterOrEqual";
    case EwOp::And: return "And";
    case EwOp::Or: return "Or";
    case EwOp::Xor: return "Xor";
    case EwOp::Not: return "Not";
    case EwOp::IsNaN: return "IsNaN";
    case EwOp::IsInf: return "IsInf";
    case EwOp::Where: return "Where";
  }
  return "?";
}

const char* ew_type_name(EwType t) {
  switch (t) {
    case EwType::f32: return "float32";
    case EwType::f64: return "float64";
    case EwType::i32: return "int32";
    case EwType::i64: return "int64";
    case EwType::boolean: return "bool";
    case EwType::u16: return "16-bit";
  }
  return "?";
}

// The graph op as a kernel op; false for ops that are not elementwise here.
bool ew_op(const Node& n, EwOp* out) {
  switch (n.op) {
    case Op::Add: *out = EwOp::Add; return true;
    case Op::Sub: *out = EwOp::Sub; return true;
    case Op::Mul: *out = EwOp::Mul; return true;
    case Op::Div: *out = EwOp::Div; return true;
    case Op::Pow: *out = EwOp::Pow; return true;
    case Op::Min: *out = EwOp::Min; return true;
    case Op::Max: *out = EwOp::Max; return true;
    case Op::Sqrt: *out = EwOp::Sqrt; return true;
    case Op::Exp: *out = EwOp::Exp; return true;
    case Op::Log: *out = EwOp::Log; return true;
    case Op::Neg: *out = EwOp::Neg; return true;
    case Op::Abs: *out = EwOp::Abs; return true;
    case Op::Reciprocal: *out = EwOp::Reciprocal; return true;
    case Op::Relu: *out = EwOp::Relu; return true;
    case Op::LeakyRelu: *out = EwOp::LeakyRelu; return true;
    case Op::Sigmoid: *out = EwOp::Sigmoid; return true;
    case Op::Tanh: *out = EwOp::Tanh; return true;
    case Op::Erf: *out = EwOp::Erf; return true;
    case Op::Gelu: *out = n.s("approximate") == "tanh" ? EwOp::GeluTanh : EwOp::Gelu; return true;
    case Op::GeluGrad: *out = n.s("approximate") == "tanh" ? EwOp::GeluTanhGrad : EwOp::GeluGrad; return true;
    case Op::Softplus: *out = EwOp::Softplus; return true;
    case Op::Sin: *out = EwOp::Sin; return true;
    case Op::Cos: *out = EwOp::Cos; return true;
    case Op::HardSigmoid: *out = EwOp::HardSigmoid; return true;
    case Op::HardSwish: *out = EwOp::HardSwish; return true;
    case Op::Mod: *out = EwOp::Mod; return true;
    case Op::PRelu: *out = EwOp::PRelu; return true;
    case Op::Sign: *out = EwOp::Sign; return true;
    case Op::Elu: *out = EwOp::Elu; return true;
    case Op::Selu: *out = EwOp::Selu; return true;
    case Op::Celu: *out = EwOp::Celu; return true;
    case Op::Mish: *out = EwOp::Mish; return true;
    case Op::Clip: *out = EwOp::Clip; return true;
    case Op::Identity: *out = EwOp::Identity; return true;
    case Op::Equal: *out = EwOp::Equal; return true;
    case Op::Less: *out = EwOp::Less; return true;
    case Op::Greater: *out = EwOp::Greater; return true;
    case Op::LessOrEqual: *out = EwOp::LessOrEqual; return true;
    case Op::GreaterOrEqual: *out = EwOp::GreaterOrEqual; return true;
    case Op::And: *out = EwOp::And; return true;
    case Op::Or: *out = EwOp::Or; return true;
    case Op::Xor: *out = EwOp::Xor; return true;
    case Op::Not: *out = EwOp::Not; return true;
    case Op::IsNaN: *out = EwOp::IsNaN; return true;
    case Op::IsInf: *out = EwOp::IsInf; return true;
    case Op::Where: *out = EwOp::Where; return true;
    default: return false;
  }
}

// The kernel element type of a dtype. Where copies bytes, so there every dtype has one (by size).
bool ew_type(DType t, bool by_size, EwType* out) {
  switch (t) {
    case DType::f32: *out = EwType::f32; return true;
    case DType::f64: *out = EwType::f64; return true;
    case DType::i32: *out = EwType::i32; return true;
    case DType::i64: *out = EwType::i64; return true;
    case DType::boolean: *out = EwType::boolean; return true;
    case DType::f16:
    case DType::bf16: *out = EwType::u16; return by_size;
    case DType::i8:
    case DType::u8: *out = EwType::boolean; return by_size;
  }
  return false;
}

// Merged dims and strides of `ins` read as `out`'s shape.
template <size_t N>
EwLayout layout_of(const Node& n, const Shape& out, const std::array<const Shape*, N>& ins) {
  EwLayout l;
  l.numel = shape_numel(out);
  bool same_or_scalar = true;
  for (size_t k = 0; k < N; ++k) {
    l.scalar[k] = shape_numel(*ins[k]) == 1 && l.numel != 1;
    same_or_scalar = same_or_scalar && (*ins[k] == out || shape_numel(*ins[k]) == 1);
  }
  if (same_or_scalar) {
    l.contiguous = true;
    l.rank = 1;
    l.dims[0] = l.numel;
    return l;
  }
  const BroadcastLoop<N> loop(out, ins);
  if (loop.dims.size() > size_t(kEwMaxRank))
    fail("{}: CUDA elementwise kernels take at most {} broadcast dims after merging, got {}", n.describe(),
         kEwMaxRank, loop.dims.size());
  l.rank = int(loop.dims.size());
  for (int d = 0; d < l.rank; ++d) {
    l.dims[d] = loop.dims[size_t(d)];
    for (size_t k = 0; k < N; ++k) l.strides[k][d] = loop.strides[k][size_t(d)];
  }
  return l;
}

EwType input_type(const Node& n, DType t, bool by_size = false) {
  EwType e;
  if (!ew_type(t, by_size, &e)) fail("{}: no CUDA kernel for dtype {}", n.describe(), dtype_name(t));
  return e;
}

// A bound of Clip as the input's kernel type.
template <class T>
T clip_value(const Tensor* b, T dflt) {
  if (!b) return dflt;
  if (b->dtype() == DType::f32) return T(*b->as<float>());
  if (b->dtype() == DType::f64) return T(*b->as<double>());
  if (b->dtype() == DType::i32) return T(*b->as<int32_t>());
  if (b->dtype() == DType::i64) return T(*b->as<int64_t>());
  fail("Clip bound of dtype {} has no CUDA kernel", dtype_name(b->dtype()));
}

void set_clip(EwLaunch& l, const ClipBounds& c) {
  switch (l.type) {
    case EwType::f32:
      l.clip_lo_f = clip_value<float>(c.lo, std::numeric_limits<float>::lowest());
      l.clip_hi_f = clip_value<float>(c.hi, std::numeric_limits<float>::max());
      break;
    case EwType::f64:
      l.clip_lo_f = clip_value<double>(c.lo, std::numeric_limits<double>::lowest());
      l.clip_hi_f = clip_value<double>(c.hi, std::numeric_limits<double>::max());
      break;
    case EwType::i32:
      l.clip_lo_i = clip_value<int32_t>(c.lo, std::numeric_limits<int32_t>::lowest());
      l.clip_hi_i = clip_value<int32_t>(c.hi, std::numeric_limits<int32_t>::max());
      break;
    case EwType::i64:
      l.clip_lo_i = clip_value<int64_t>(c.lo, std::numeric_limits<int64_t>::lowest());
      l.clip_hi_i = clip_value<int64_t>(c.hi, std::numeric_limits<int64_t>::max());
      break;
    default: break;
  }
}

}  // namespace

void elementwise_no_kernel(const EwLaunch& l) {
  fail("no CUDA elementwise kernel for {} on {}{}{}", ew_op_name(l.op), ew_type_name(l.type),
       l.op == EwOp::Pow ? " with exponent " : "", l.op == EwOp::Pow ? ew_type_name(l.type1) : "");
}

bool is_elementwise(Op op) {
  Node n;
  n.op = op;
  EwOp e;
  return ew_op(n, &e);
}

bool elementwise_runs(const Graph& g, const Node& n) {
  EwOp op;
  if (!ew_op(n, &op) || n.inputs.empty() || !n.has_input(0)) return false;
  const bool where = op == EwOp::Where;
  if (where && !n.has_input(1)) return false;
  EwType t, t1 = EwType::f32;
  if (!ew_type(g.value(n.inputs[where ? 1 : 0]).dtype, where, &t)) return false;
  if (op == EwOp::Pow && (!n.has_input(1) || !ew_type(g.value(n.inputs[1]).dtype, false, &t1))) return false;
  return elementwise_supported(op, t, t1);
}

namespace {

// elementwise_forward, or with `emulate` the same launches run on the host (host pointers).
void forward(const Node& n, const std::vector<DeviceRef>& in, const DeviceRef& out, const ClipBounds& clip,
             void* stream, bool emulate) {
  EwOp op;
  if (!ew_op(n, &op)) fail("{}: not an elementwise op", n.describe());
  if (in.empty() || (!in[0].data && in[0].numel)) fail("{}: input 0 missing", n.describe());
  EwLaunch l;
  l.op = op;
  l.out = out.data;
  const Shape& os = *out.shape;
  auto launch = [&] {
    if (emulate) elementwise_emulate(l);
    else elementwise_launch(l, stream);
  };

  switch (op) {
    case EwOp::Where:
      l.type = input_type(n, in.at(1).dtype, true);
      l.in[0] = in[0].data, l.in[1] = in[1].data, l.in[2] = in.at(2).data;
      l.layout = layout_of<3>(n, os, {in[0].shape, in[1].shape, in[2].shape});
      return launch();
    case EwOp::Min:
    case EwOp::Max:
      // Variadic: out = f(in0, in1), then out = f(out, in_k) in place (out already has the full
      // shape, each element is read and written at its own index). One input: a broadcast copy.
      l.type = input_type(n, in[0].dtype);
      if (in.size() == 1) {
        l.op = EwOp::Identity;
        l.in[0] = in[0].data;
        l.layout = layout_of<1>(n, os, {in[0].shape});
        return launch();
      }
      for (size_t k = 1; k < in.size(); ++k) {
        const DeviceRef& a = k == 1 ? in[0] : out;
        l.in[0] = a.data, l.in[1] = in[k].data;
        l.layout = layout_of<2>(n, os, {a.shape, in[k].shape});
        launch();
      }
      return;
    case EwOp::Add:
    case EwOp::Sub:
    case EwOp::Mul:
    case EwOp::Div:
    case EwOp::Mod:
    case EwOp::PRelu:
    case EwOp::Pow:
    case EwOp::GeluGrad:
    case EwOp::GeluTanhGrad:
    case EwOp::Equal:
    case EwOp::Less:
    case EwOp::Greater:
    case EwOp::LessOrEqual:
    case EwOp::GreaterOrEqual:
    case EwOp::And:
    case EwOp::Or:
    case EwOp::Xor:
      l.type = input_type(n, in[0].dtype);
      if (op == EwOp::Pow) l.type1 = input_type(n, in.at(1).dtype);
      if (op == EwOp::Mod) l.fmod = n.i("fmod") != 0;
      l.in[0] = in[0].data, l.in[1] = in.at(1).data;
      l.layout = layout_of<2>(n, os, {in[0].shape, in[1].shape});
      return launch();
    default:  // unary
      l.type = input_type(n, in[0].dtype);
      if (op == EwOp::LeakyRelu || op == EwOp::HardSigmoid || op == EwOp::Elu || op == EwOp::Selu || op == EwOp::Celu)
        l.alpha = n.f("alpha");
      if (op == EwOp::HardSigmoid) l.beta = n.f("beta");
      if (op == EwOp::Selu) l.gamma = n.f("gamma");
      if (op == EwOp::IsInf) {
        l.inf_negative = n.i("detect_negative") != 0;
        l.inf_positive = n.i("detect_positive") != 0;
      }
      if (op == EwOp::Clip) set_clip(l, clip);
      l.in[0] = in[0].data;
      l.layout = layout_of<1>(n, os, {in[0].shape});
      return launch();
  }
}

}  // namespace

void elementwise_forward(const Node& n, const std::vector<DeviceRef>& inputs, const DeviceRef& out,
                         const ClipBounds& clip, void* stream) {
  forward(n, inputs, out, clip, stream, false);
}

bool copy_op_runs(const Graph& g, const Node& n) {
  if ((n.op != Op::Transpose && n.op != Op::Expand) || !n.has_input(0)) return false;
  const Value& x = g.value(n.inputs[0]);
  EwType t;
  // A copy: any element of the kernels' sizes (16-bit floats as their bits).
  if (!ew_type(x.dtype, true, &t) || !elementwise_supported(EwOp::Identity, t)) return false;
  return n.op == Op::Expand || x.shape.size() <= size_t(kEwMaxRank);
}

void copy_op_forward(const Node& n, const DeviceRef& in, const DeviceRef& out, void* stream, bool emulate) {
  EwLaunch l;
  l.op = EwOp::Identity;
  l.type = input_type(n, in.dtype, true);
  l.in[0] = in.data;
  l.out = out.data;
  const Shape& os = *out.shape;
  if (n.op == Op::Expand) {
    l.layout = layout_of<1>(n, os, {in.shape});
  } else {  // Transpose: out[.., j, ..] = in[.., perm[j], ..]
    const int r = int(in.shape->size());
    if (r > kEwMaxRank) fail("{}: CUDA Transpose takes at most {} dims, got {}", n.describe(), kEwMaxRank, r);
    std::vector<int64_t> perm(static_cast<size_t>(r), 0);
    if (n.has("perm")) perm = n.ints("perm");
    else for (int d = 0; d < r; ++d) perm[size_t(d)] = r - 1 - d;
    int64_t stride[kEwMaxRank], acc = 1;
    for (int d = r - 1; d >= 0; --d) stride[d] = acc, acc *= (*in.shape)[size_t(d)];
    l.layout.rank = std::max(r, 1);
    l.layout.numel = shape_numel(os);
    l.layout.dims[0] = 1;
    for (int d = 0; d < r; ++d) {
      l.layout.dims[d] = os[size_t(d)];
      l.layout.strides[0][d] = stride[perm[size_t(d)]];
    }
  }
  if (emulate) elementwise_emulate(l);
  else elementwise_launch(l, stream);
}

void elementwise_emulate_forward(const Node& n, const std::vector<DeviceRef>& inputs, const DeviceRef& out,
                                 const ClipBounds& clip) {
  forward(n, inputs, out, clip, nullptr, true);
}

DeviceCount device_count() {
  DeviceCount d;
  cudaError_t e = cudaGetDeviceCount(&d.count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    d.count = 0;
    d.reason = cudaGetErrorString(e);
  } else if (d.count == 0) {
    d.reason = "no CUDA device";
  }
  return d;
}

}  // namespace onnxdp::cuda
