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
#include "exec/cuda/kernels.h"

namespace onnxdp::cuda {

namespace {

// A tensor as the launches see it: a device pointer (host with emulation) with its dtype and shape;
// data nullptr for an absent optional input.
struct DeviceRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  const Shape* shape = nullptr;
  int64_t numel = 0;
};

DeviceRef device_ref(const TensorRef& t) { return {t.data, t.dtype, t.shape, t.numel}; }
DeviceRef host_ref(const Tensor& t) { return {const_cast<void*>(t.data()), t.dtype(), &t.shape(), t.numel()}; }

// Clip's bounds as host values of the input's dtype (f64 input with f32 bounds allowed, as on the
// CPU); absent: the type's range.
struct ClipBounds {
  const Tensor* lo = nullptr;
  const Tensor* hi = nullptr;
};

const char* ew_op_name(EwOp op) {
  switch (op) {
#define ONNXDP_X(op, ...) \
  case EwOp::op: return #op;
    ONNXDP_CUDA_ELEMENTWISE(ONNXDP_X) ONNXDP_CUDA_ELEMENTWISE_FORMS(ONNXDP_X)
#undef ONNXDP_X
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

// The graph op as a kernel op (exec/cuda/ops.h); false for ops that are not elementwise here.
// Gelu and GeluGrad with approximate = "tanh" take the tanh form's kernel.
bool ew_op(const Node& n, EwOp* out) {
  switch (n.op) {
#define ONNXDP_X(op, ...) \
  case Op::op: *out = EwOp::op; break;
    ONNXDP_CUDA_ELEMENTWISE(ONNXDP_X)
#undef ONNXDP_X
    default: return false;
  }
  if ((n.op == Op::Gelu || n.op == Op::GeluGrad) && n.s("approximate") == "tanh")
    *out = n.op == Op::Gelu ? EwOp::GeluTanh : EwOp::GeluTanhGrad;
  return true;
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

// Input k of n is read on the host, not by the kernel: Clip's bounds (inputs 1, 2).
bool read_on_host(const Node& n, size_t k) {
  EwOp op;
  return k > 0 && ew_op(n, &op) && ew_family(op) == EwFamily::clip;
}

}  // namespace

void elementwise_no_kernel(const EwLaunch& l) {
  fail("no CUDA elementwise kernel for {} on {}{}{}", ew_op_name(l.op), ew_type_name(l.type),
       l.op == EwOp::Pow ? " with exponent " : "", l.op == EwOp::Pow ? ew_type_name(l.type1) : "");
}

bool is_elementwise(Op op) { return kernel_family(op) == KernelFamily::elementwise; }

bool elementwise_runs(const Graph& g, const Node& n) {
  EwOp op;
  // One output: GeluGrad's optional db (a CPU graph's, graph/passes/fuse_bias_grad.h) is not one.
  if (!ew_op(n, &op) || n.inputs.empty() || !n.has_input(0) || n.outputs.size() != 1) return false;
  const EwFamily family = ew_family(op);
  const bool where = family == EwFamily::where;
  if (where && !n.has_input(1)) return false;
  EwType t, t1 = EwType::f32;
  if (!ew_type(g.value(n.inputs[where ? 1 : 0]).dtype, where, &t)) return false;
  if (family == EwFamily::pow && (!n.has_input(1) || !ew_type(g.value(n.inputs[1]).dtype, false, &t1))) return false;
  return elementwise_supported(op, t, t1);
}

bool elementwise_bounds_known(const Graph& g, const Node& n) {
  for (size_t k = 0; k < n.inputs.size(); ++k)
    if (read_on_host(n, k) && n.has_input(int(k)) && g.value(n.inputs[k]).data.empty()) return false;
  return true;
}

namespace {

// The attributes the functors take (exec/cuda/ops.h), by name from the row's schema.
void set_attributes(EwLaunch& l, const Node& n) {
  const OpInfo& row = op_info(n.op);
  if (row.find_attr("alpha")) l.alpha = n.f("alpha");
  if (row.find_attr("beta")) l.beta = n.f("beta");
  if (row.find_attr("gamma")) l.gamma = n.f("gamma");
  if (row.find_attr("fmod")) l.fmod = n.i("fmod") != 0;
  if (row.find_attr("detect_negative")) l.inf_negative = n.i("detect_negative") != 0;
  if (row.find_attr("detect_positive")) l.inf_positive = n.i("detect_positive") != 0;
}

// elementwise_forward, or with `emulate` the same launches run on the host (host pointers).
void forward(const Node& n, const std::vector<DeviceRef>& in, const DeviceRef& out, const ClipBounds& clip,
             void* stream, bool emulate) {
  EwOp op;
  if (!ew_op(n, &op)) fail("{}: not an elementwise op", n.describe());
  if (in.empty() || (!in[0].data && in[0].numel)) fail("{}: input 0 missing", n.describe());
  EwLaunch l;
  l.op = op;
  l.out = out.data;
  set_attributes(l, n);
  const Shape& os = *out.shape;
  auto launch = [&] {
    if (emulate) elementwise_emulate(l);
    else elementwise_launch(l, stream);
  };

  const EwFamily family = ew_family(op);
  switch (ew_arity(family)) {
    case 3:  // Where (cond, x, y): the element type is x's
      l.type = input_type(n, in.at(1).dtype, true);
      l.in[0] = in[0].data, l.in[1] = in[1].data, l.in[2] = in.at(2).data;
      l.layout = layout_of<3>(n, os, {in[0].shape, in[1].shape, in[2].shape});
      return launch();
    case 2:
      l.type = input_type(n, in[0].dtype);
      if (family == EwFamily::pow) l.type1 = input_type(n, in.at(1).dtype);
      if (in.size() == 1) {  // a variadic row (Min, Max) of one input: a broadcast copy
        l.op = EwOp::Identity;
        l.in[0] = in[0].data;
        l.layout = layout_of<1>(n, os, {in[0].shape});
        return launch();
      }
      // out = f(in0, in1); a variadic row (Min, Max) goes on with out = f(out, in_k) in place (out
      // already has the full shape, each element is read and written at its own index).
      for (size_t k = 1; k < in.size(); ++k) {
        const DeviceRef& a = k == 1 ? in[0] : out;
        l.in[0] = a.data, l.in[1] = in[k].data;
        l.layout = layout_of<2>(n, os, {a.shape, in[k].shape});
        launch();
      }
      return;
    default:
      l.type = input_type(n, in[0].dtype);
      if (family == EwFamily::clip) set_clip(l, clip);
      l.in[0] = in[0].data;
      l.layout = layout_of<1>(n, os, {in[0].shape});
      return launch();
  }
}

}  // namespace

void elementwise_forward(const Graph& g, const Node& n, const std::vector<TensorRef>& inputs, const TensorRef& out,
                         void* stream, bool emulate) {
  std::vector<DeviceRef> ins;
  ClipBounds clip;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!read_on_host(n, k)) {
      ins.push_back(device_ref(inputs[k]));
    } else if (n.has_input(int(k))) {
      (k == 1 ? clip.lo : clip.hi) = &g.value(n.inputs[k]).data;
    }
  }
  forward(n, ins, device_ref(out), clip, stream, emulate);
}

bool copy_op_runs(const Graph& g, const Node& n) {
  if (kernel_family(n.op) != KernelFamily::copy || !n.has_input(0)) return false;
  const Value& x = g.value(n.inputs[0]);
  EwType t;
  // A copy: any element of the kernels' sizes (16-bit floats as their bits).
  if (!ew_type(x.dtype, true, &t) || !elementwise_supported(EwOp::Identity, t)) return false;
  return n.op == Op::Expand || x.shape.size() <= size_t(kEwMaxRank);
}

void copy_op_forward(const Node& n, const TensorRef& in, const TensorRef& out, void* stream, bool emulate) {
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
