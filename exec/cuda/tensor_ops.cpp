// Host side of the CUDA tensor ops (exec/cuda/kernels.h): a node becomes launches of
// exec/cuda/tensor_ops_launch.h, run by the kernels of exec/cuda/tensor_ops.cu or, on the emulated
// device, by their host loops. The per-dim arithmetic is the CPU kernels' (exec/cpu/tensor.cpp,
// exec/cpu/grad.cpp, exec/cpu/nn.cpp) through the same helpers (graph/shape_helpers.h).
//
// What runs here (anything else stays on the CPU kernel, which is correct):
//   Gather        any data dtype, int64 / int32 indices (negative ones count from the back).
//   GatherGrad    f32 / f64, int64 / int32 indices; deterministic and bit-identical to the CPU
//                 (a stable sort of the indices, then one thread per dx element summing its rows
//                 in increasing index order: no float atomics).
//   Cast          between f32, f64, f16, bf16, i64, i32, i8, u8, bool (the CPU's conversions).
//   Concat, Split any dtype.
//   Slice         any dtype, starts / ends / axes / steps constant, at most 8 dims after merging.
//   Pad           any dtype, constant / reflect / edge / wrap, pads / axes / value constant.
//   Tile          any dtype, at most 8 dims after merging [reps, dim] pairs.
//   Trilu         any dtype, k absent or constant.
//   Dropout       ratio / training_mode absent or constant; training on f32 / f64 with the CPU's
//                 Philox stream (exec/philox.h), so masks are bit-identical; inference (or ratio
//                 0) a copy with an all-true mask, any dtype.
//
// Out-of-range indices (Gather, GatherGrad) cannot throw on the device: the kernel records the
// first bad element in the plan's check slots (exec/run_scalars.h) and a one-thread launch after
// it the value there; the Plan reads the slots once after the run, recorded or not, and fails with
// the CPU kernel's message (tensor_check_message). No synchronisation per node; constant indices
// were checked by the shape rule and are not checked again (Gather).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "exec/cuda/check.h"
#include "exec/cuda/kernels.h"
#include "exec/cuda/tensor_ops_launch.h"
#include "graph/shape_helpers.h"

namespace onnxdp::cuda {

namespace {

cudaStream_t stream_of(const CudaContext& cc) { return static_cast<cudaStream_t>(cc.stream); }

// The host value of input k when it is known before the run (a constant or an initializer), else
// null (computed at run time: the kernels cannot read it on the host).
const Tensor* known(const Graph& g, const Node& n, int k) {
  if (!n.has_input(k)) return nullptr;
  const Tensor& t = g.value(n.inputs[size_t(k)]).data;
  return t.empty() ? nullptr : &t;
}
bool absent_or_known(const Graph& g, const Node& n, int k) { return !n.has_input(k) || known(g, n, k); }

// Fills l's iteration space from per-dim sizes and strides: size-1 dims dropped, neighbours that
// both sides read as one dim merged. False when more than kTsMaxRank dims remain.
bool set_dims(CopyLaunch& l, const Shape& dims, const std::vector<int64_t>& src_st, const std::vector<int64_t>& dst_st) {
  std::vector<int64_t> d, s, t;
  l.numel = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    l.numel *= dims[k];
    if (dims[k] == 1) continue;
    if (!d.empty() && s.back() == src_st[k] * dims[k] && t.back() == dst_st[k] * dims[k]) {
      d.back() *= dims[k];
      s.back() = src_st[k];
      t.back() = dst_st[k];
    } else {
      d.push_back(dims[k]);
      s.push_back(src_st[k]);
      t.push_back(dst_st[k]);
    }
  }
  if (d.size() > size_t(kTsMaxRank)) return false;
  l.rank = int(d.size());
  for (int k = 0; k < l.rank; ++k) {
    l.dims[k] = d[size_t(k)];
    l.src_st[k] = s[size_t(k)];
    l.dst_st[k] = t[size_t(k)];
  }
  return true;
}

// The integer values of a known input (Slice's starts, Pad's pads ...).
std::vector<int64_t> ints_of(const Graph& g, const Node& n, int k) { return known(g, n, k)->to_i64(); }

// Slice as a strided copy (the CPU kernel's plan); false past kTsMaxRank merged dims.
bool slice_launch(const Graph& g, const Node& n, const Shape& in, const Shape& out, CopyLaunch& l) {
  std::vector<int64_t> starts = ints_of(g, n, 1), ends = ints_of(g, n, 2), axes, steps;
  if (n.has_input(3)) axes = ints_of(g, n, 3);
  if (n.has_input(4)) steps = ints_of(g, n, 4);
  auto plan = slice_plan(in, starts, ends, n.has_input(3) ? &axes : nullptr, n.has_input(4) ? &steps : nullptr, n);
  const std::vector<int64_t> in_st = row_major_strides(in);
  std::vector<int64_t> st(plan.size());
  l.src_base = 0;
  for (size_t d = 0; d < plan.size(); ++d) {
    l.src_base += plan[d].start * in_st[d];
    st[d] = plan[d].step * in_st[d];
  }
  return set_dims(l, out, st, row_major_strides(out));
}

// Tile's output [r0*d0, r1*d1, ...] read as [r0, d0, r1, d1, ...] with stride 0 on the r dims.
bool tile_launch(const Shape& in, const Shape& out, CopyLaunch& l) {
  const std::vector<int64_t> in_st = row_major_strides(in);
  Shape dims;
  std::vector<int64_t> st;
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t reps = in[d] == 0 ? 0 : out[d] / in[d];
    dims.insert(dims.end(), {reps, in[d]});
    st.insert(st.end(), {0, in_st[d]});
  }
  return set_dims(l, dims, st, row_major_strides(dims));
}

// Dropout's effective ratio and mode, read as the CPU kernel reads them.
struct DropoutArgs {
  double ratio = 0.5;
  bool training = false;
};
DropoutArgs dropout_args(const Graph& g, const Node& n) {
  DropoutArgs a;
  a.ratio = n.has_input(1) ? known(g, n, 1)->to_f64().at(0) : double(n.f("ratio"));
  a.training = n.i("training_mode") != 0;
  if (n.has_input(2)) a.training = known(g, n, 2)->as<bool>()[0];
  return a;
}

CastType cast_type(DType t) {
  switch (t) {
    case DType::f32: return CastType::f32;
    case DType::f64: return CastType::f64;
    case DType::f16: return CastType::f16;
    case DType::bf16: return CastType::bf16;
    case DType::i64: return CastType::i64;
    case DType::i32: return CastType::i32;
    case DType::i8: return CastType::i8;
    case DType::u8: return CastType::u8;
    case DType::boolean: return CastType::boolean;
  }
  return CastType::f32;
}

// ---- device scratch memory (stream-ordered), host memory when emulated -------------------------

class Scratch {
 public:
  Scratch(const CudaContext& cc, size_t bytes) : cc_(cc) {
    if (bytes == 0) return;
    if (cc.emulate) {
      host_.resize(bytes);
      p_ = host_.data();
    } else {
      ONNXDP_CUDA_CHECK(cudaMallocAsync(&p_, bytes, stream_of(cc)));
    }
  }
  ~Scratch() {
    // On an error path only (release() ran otherwise); a failure here has nobody to report to.
    if (p_ && !cc_.emulate) cudaFreeAsync(p_, stream_of(cc_));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(p_); }
  void release() {
    if (p_ && !cc_.emulate) ONNXDP_CUDA_CHECK(cudaFreeAsync(p_, stream_of(cc_)));
    p_ = nullptr;
  }

 private:
  const CudaContext& cc_;
  void* p_ = nullptr;
  std::vector<uint8_t> host_;
};

void copy_bytes(const CudaContext& cc, void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (cc.emulate) return void(std::memcpy(dst, src, bytes));
  ONNXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(cc)));
}

void fill_bytes(const CudaContext& cc, void* dst, int value, size_t bytes) {
  if (!bytes) return;
  if (cc.emulate) return void(std::memset(dst, value, bytes));
  ONNXDP_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_of(cc)));
}

// Node c's index checks go to its plan's check slots; the value at the first bad element is
// recorded after the launch, while the indices are still there.
unsigned long long* check_slots(const KernelCtx& c) {
  if (!c.run.device_checks || c.index < 0) c.fail("internal: indices checked on CUDA need a Plan's check slots");
  return c.run.device_checks;
}
void record_bad_value(const CudaContext& cc, const KernelCtx& c, const TensorRef& idx) {
  if (cc.emulate) bad_value_emulate(c.run.device_checks, c.index, idx.data, idx.dtype == DType::i64);
  else bad_value_launch(c.run.device_checks, c.index, idx.data, idx.dtype == DType::i64, cc.stream);
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// ---- the ops ----------------------------------------------------------------------------------

void run_copy(const CudaContext& cc, const CopyLaunch& l) { cc.emulate ? copy_emulate(l) : copy_launch(l, cc.stream); }

void gather(const Graph& g, KernelCtx& c, const CudaContext& cc) {
  const TensorRef &data = c.in(0), &idx = c.in(1), &out = c.out(0);
  const int r = data.rank();
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  GatherLaunch l;
  l.esize = int(dtype_size(data.dtype));
  l.idx64 = idx.dtype == DType::i64;
  l.dim = data.dim(int(axis));
  l.n = idx.numel;
  l.outer = l.inner = 1;
  for (int d = 0; d < r; ++d) {
    if (d < axis) l.outer *= data.dim(d);
    if (d > axis) l.inner *= data.dim(d);
  }
  l.data = data.data;
  l.idx = idx.data;
  l.out = out.data;
  if (l.n == 0) return;  // an empty output, no index to check
  // Constant indices were checked by the shape rule; others are checked by the launch.
  if (!known(g, c.node, 1)) {
    l.checks = check_slots(c);
    l.node = c.index;
  }
  cc.emulate ? gather_emulate(l) : gather_launch(l, cc.stream);
  if (l.checks) record_bad_value(cc, c, idx);
}

void gather_grad(KernelCtx& c, const CudaContext& cc) {
  const TensorRef &dy = c.in(0), &idx = c.in(1), &dx = c.out(0);
  const Shape& ds = *dx.shape;
  const int64_t axis = normalize_axis(c.node.i("axis"), int64_t(ds.size()), c.node);
  GatherGradLaunch l;
  l.f64 = dy.dtype == DType::f64;
  l.idx64 = idx.dtype == DType::i64;
  l.dim = ds[size_t(axis)];
  l.n = idx.numel;
  l.outer = l.inner = 1;
  for (size_t d = 0; d < ds.size(); ++d) {
    if (int64_t(d) < axis) l.outer *= ds[d];
    if (int64_t(d) > axis) l.inner *= ds[d];
  }
  l.dy = dy.data;
  l.idx = idx.data;
  l.dx = dx.data;
  // Scratch: keys, pos, sorted keys, sorted pos [n] each, starts [dim + 1], cub's temp.
  const size_t nb = align256(size_t(l.n) * 4), sb = align256(size_t(l.dim + 1) * 4);
  const size_t sort_bytes = cc.emulate ? 0 : gather_grad_sort_bytes(l.n, l.dim);
  Scratch tmp(cc, 4 * nb + sb + sort_bytes);
  uint8_t* p = tmp.get();
  l.keys = reinterpret_cast<uint32_t*>(p);
  l.pos = reinterpret_cast<uint32_t*>(p + nb);
  l.sorted_keys = reinterpret_cast<uint32_t*>(p + 2 * nb);
  l.sorted_pos = reinterpret_cast<uint32_t*>(p + 3 * nb);
  l.starts = reinterpret_cast<uint32_t*>(p + 4 * nb);
  // Bad indices: the keys step sees every index once (constant ones too: GatherGrad's shape rule
  // does not check them).
  l.checks = check_slots(c);
  l.node = c.index;
  if (cc.emulate) gather_grad_emulate(l);
  else gather_grad_launch(l, p + 4 * nb + sb, sort_bytes, cc.stream);
  if (l.n > 0) record_bad_value(cc, c, idx);
  tmp.release();
}

void cast(KernelCtx& c, const CudaContext& cc) {
  const TensorRef &in = c.in(0), &out = c.out(0);
  if (in.dtype == out.dtype) return copy_bytes(cc, out.data, in.data, size_t(in.numel) * dtype_size(in.dtype));
  CastLaunch l;
  l.from = cast_type(in.dtype);
  l.to = cast_type(out.dtype);
  l.numel = in.numel;
  l.src = in.data;
  l.dst = out.data;
  cc.emulate ? cast_emulate(l) : cast_launch(l, cc.stream);
}

// Output [outer, sum of the inputs' axis dims, inner]: input k fills its block of every outer row.
void concat(KernelCtx& c, const CudaContext& cc) {
  const TensorRef& out = c.out(0);
  const int r = out.rank();
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < r; ++d) {
    if (d < axis) outer *= out.dim(d);
    if (d > axis) inner *= out.dim(d);
  }
  const int64_t out_row = out.dim(int(axis)) * inner;
  int64_t offset = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const TensorRef& in = c.in(int(k));
    const int64_t row = in.dim(int(axis)) * inner;
    CopyLaunch l;
    l.esize = int(dtype_size(out.dtype));
    set_dims(l, {outer, row}, {row, 1}, {out_row, 1});  // two dims: never too many
    l.dst_base = offset;
    l.src = in.data;
    l.dst = out.data;
    if (l.numel) run_copy(cc, l);
    offset += row;
  }
}

// The reverse of Concat; each output's size along the axis is in its shape.
void split(KernelCtx& c, const CudaContext& cc) {
  const TensorRef& in = c.in(0);
  const int r = in.rank();
  const int64_t axis = normalize_axis(c.node.i("axis"), r, c.node);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < r; ++d) {
    if (d < axis) outer *= in.dim(d);
    if (d > axis) inner *= in.dim(d);
  }
  const int64_t in_row = in.dim(int(axis)) * inner;
  int64_t offset = 0;
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const TensorRef& out = c.out(int(k));
    if (!out.present()) continue;
    const int64_t row = out.dim(int(axis)) * inner;
    CopyLaunch l;
    l.esize = int(dtype_size(in.dtype));
    set_dims(l, {outer, row}, {in_row, 1}, {row, 1});
    l.src_base = offset;
    l.src = in.data;
    l.dst = out.data;
    if (l.numel) run_copy(cc, l);
    offset += row;
  }
}

bool pad_launch_of(const Graph& g, const Node& n, const Shape& in, const Shape& out, PadLaunch& l) {
  const int r = int(in.size());
  if (r > kTsMaxRank) return false;
  const std::string& mode = n.s("mode");
  if (mode == "constant") l.mode = PadMode::constant;
  else if (mode == "reflect") l.mode = PadMode::reflect;
  else if (mode == "edge") l.mode = PadMode::edge;
  else if (mode == "wrap") l.mode = PadMode::wrap;
  else return false;
  std::vector<int64_t> pads = ints_of(g, n, 1), axes;
  if (n.has_input(3)) axes = ints_of(g, n, 3);
  const std::vector<int64_t> amounts = pad_amounts(r, pads, n.has_input(3) ? &axes : nullptr, n);
  l.rank = r;
  l.numel = shape_numel(out);
  for (int d = 0; d < r; ++d) {
    l.in_dims[d] = in[size_t(d)];
    l.out_dims[d] = out[size_t(d)];
    l.begin[d] = amounts[size_t(d)];
  }
  // The constant as the data's element bytes (opsets < 11 give an f32 value for any data dtype).
  l.value_bits = 0;
  const Tensor* v = known(g, n, 2);
  if (l.mode == PadMode::constant && v && v->numel() > 0) {
    const DType dt = g.value(n.inputs[0]).dtype;
    if (v->dtype() == dt) {
      std::memcpy(&l.value_bits, v->data(), dtype_size(dt));
    } else {
      const double x = v->to_f64()[0];
      dispatch_elem(dt, [&]<class E>() {
        typename E::T t = E::from_f64(x);
        std::memcpy(&l.value_bits, &t, sizeof(t));
      });
    }
  }
  return true;
}

void dropout(const Graph& g, KernelCtx& c, const CudaContext& cc) {
  const TensorRef& x = c.in(0);
  const DropoutArgs a = dropout_args(g, c.node);
  if (!a.training || a.ratio == 0) {  // a copy and an all-true mask
    copy_bytes(cc, c.out(0).data, x.data, size_t(x.numel) * dtype_size(x.dtype));
    if (c.has_out(1)) fill_bytes(cc, c.out(1).data, 1, size_t(x.numel));
    return;
  }
  DropoutLaunch l;
  l.f64 = x.dtype == DType::f64;
  l.numel = x.numel;
  // Element j of this replica's rows is element base + j of the step's global batch (exec/cpu/nn.cpp).
  l.row = x.rank() > 0 && x.dim(0) > 0 ? x.numel / x.dim(0) : 0;
  if (!c.run.device) c.fail("internal: Dropout on {} needs the run's scalars in device memory (a Plan's run)", "CUDA");
  l.run = c.run.device;
  l.has_seed = c.node.has("seed");
  l.seed = l.has_seed ? uint64_t(c.node.i("seed")) : 0;
  l.stream = philox_stream_id(c.node.name.c_str());
  l.threshold = float(a.ratio);
  l.scale = 1.0 / (1.0 - a.ratio);
  l.x = x.data;
  l.y = c.out(0).data;
  l.mask = c.has_out(1) ? c.out(1).as<bool>() : nullptr;
  cc.emulate ? dropout_emulate(l) : dropout_launch(l, cc.stream);
}

}  // namespace

std::string tensor_check_message(const Graph& g, const Node& n, int64_t element, int64_t value) {
  // Gather: the axis of the data (input 0); GatherGrad: the axis of its output (the data's shape).
  const Shape& s = g.value(n.op == Op::Gather ? n.inputs[0] : n.outputs[0]).shape;
  const int64_t axis = normalize_axis(n.i("axis"), int64_t(s.size()), n);
  return fmt::format("index {} (element {} of the indices) is out of range for axis {} of size {}", value, element, axis,
                     s[size_t(axis)]);
}

bool tensor_runs(const Graph& g, const Node& n) {
  auto in_dtype = [&](int k) { return g.value(n.inputs[size_t(k)]).dtype; };
  auto in_shape = [&](int k) -> const Shape& { return g.value(n.inputs[size_t(k)]).shape; };
  auto out_shape = [&](int k) -> const Shape& { return g.value(n.outputs[size_t(k)]).shape; };
  auto index_type = [](DType t) { return t == DType::i64 || t == DType::i32; };
  switch (n.op) {
    case Op::Gather:
      return index_type(in_dtype(1));  // any data dtype: elements are copied by size
    case Op::GatherGrad: {
      const DType t = in_dtype(0);
      if ((t != DType::f32 && t != DType::f64) || !index_type(in_dtype(1))) return false;
      const Shape& ds = out_shape(0);
      const int64_t axis = normalize_axis(n.i("axis"), int64_t(ds.size()), n);
      // 32-bit keys and positions in the sort
      return ds[size_t(axis)] < (int64_t(1) << 32) - 1 && shape_numel(in_shape(1)) < (int64_t(1) << 32);
    }
    case Op::Cast:
    case Op::CastLike:
    case Op::Concat:
    case Op::Split:
      return true;
    case Op::Slice: {
      for (int k = 1; k < 5; ++k)
        if (!absent_or_known(g, n, k)) return false;
      CopyLaunch l;
      return slice_launch(g, n, in_shape(0), out_shape(0), l);
    }
    case Op::Tile: {
      CopyLaunch l;
      return tile_launch(in_shape(0), out_shape(0), l);
    }
    case Op::Pad: {
      for (int k = 1; k < 4; ++k)
        if (!absent_or_known(g, n, k)) return false;
      PadLaunch l;
      return pad_launch_of(g, n, in_shape(0), out_shape(0), l);
    }
    case Op::Trilu:
      return absent_or_known(g, n, 1);
    case Op::Dropout: {
      if (!absent_or_known(g, n, 1) || !absent_or_known(g, n, 2)) return false;
      const DropoutArgs a = dropout_args(g, n);
      if (!a.training || a.ratio == 0) return true;  // a copy: any dtype
      // Training: the CPU kernel's dtypes; a ratio outside [0, 1) fails there with its message.
      return (in_dtype(0) == DType::f32 || in_dtype(0) == DType::f64) && a.ratio > 0 && a.ratio < 1;
    }
    default:
      return false;
  }
}

void tensor_forward(const Graph& g, KernelCtx& c, const CudaContext& cc) {
  const Node& n = c.node;
  switch (n.op) {
    case Op::Gather: return gather(g, c, cc);
    case Op::GatherGrad: return gather_grad(c, cc);
    case Op::Cast:
    case Op::CastLike: return cast(c, cc);
    case Op::Concat: return concat(c, cc);
    case Op::Split: return split(c, cc);
    case Op::Slice: {
      CopyLaunch l;
      if (!slice_launch(g, n, *c.in(0).shape, *c.out(0).shape, l)) c.fail("more than {} dims after merging", kTsMaxRank);
      l.esize = int(dtype_size(c.in(0).dtype));
      l.src = c.in(0).data;
      l.dst = c.out(0).data;
      if (l.numel) run_copy(cc, l);
      return;
    }
    case Op::Tile: {
      CopyLaunch l;
      if (!tile_launch(*c.in(0).shape, *c.out(0).shape, l)) c.fail("more than {} dims after merging", kTsMaxRank);
      l.esize = int(dtype_size(c.in(0).dtype));
      l.src = c.in(0).data;
      l.dst = c.out(0).data;
      if (l.numel) run_copy(cc, l);
      return;
    }
    case Op::Pad: {
      PadLaunch l;
      if (!pad_launch_of(g, n, *c.in(0).shape, *c.out(0).shape, l)) c.fail("no CUDA kernel for this Pad");
      l.esize = int(dtype_size(c.in(0).dtype));
      l.src = c.in(0).data;
      l.dst = c.out(0).data;
      if (l.numel) cc.emulate ? pad_emulate(l) : pad_launch(l, cc.stream);
      return;
    }
    case Op::Trilu: {
      const TensorRef &in = c.in(0), &out = c.out(0);
      TriluLaunch l;
      l.esize = int(dtype_size(in.dtype));
      l.upper = n.i("upper") != 0;
      l.k = n.has_input(1) ? ints_of(g, n, 1).at(0) : 0;
      l.rows = in.dim(in.rank() - 2);
      l.cols = in.dim(in.rank() - 1);
      l.numel = in.numel;
      l.src = in.data;
      l.dst = out.data;
      if (l.numel) cc.emulate ? trilu_emulate(l) : trilu_launch(l, cc.stream);
      return;
    }
    case Op::Dropout: return dropout(g, c, cc);
    default: c.fail("no CUDA tensor kernel for {}", op_name(n.op));
  }
}

}  // namespace onnxdp::cuda
