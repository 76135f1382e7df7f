// Host side of the CUDA convolutions (cuDNN) and pooling (exec/cuda/conv.cu): conv_call maps a
// node to cuDNN's arguments once (exec/cuda/conv.h); the device path hands them to cuDNN, the
// emulated path to host loops with cuDNN's semantics. pool_plan maps a pooling node to a
// PoolLaunch (exec/cuda/conv_launch.h).
#include "exec/cuda/conv.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "exec/cuda/check.h"
#include "exec/cuda/kernels.h"

namespace onnxdp::cuda {

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

bool fits_int(int64_t v) { return v >= 0 && v <= kIntMax; }

bool is_conv(Op op) { return op == Op::Conv || op == Op::ConvTranspose || op == Op::ConvGradFilter; }
bool is_pool(Op op) {
  return op == Op::MaxPool || op == Op::AveragePool || op == Op::MaxPoolGrad || op == Op::AveragePoolGrad ||
         op == Op::GlobalAveragePool;
}

ConvCall conv_refused(std::string why) {
  ConvCall c;
  c.why = std::move(why);
  return c;
}

// The ONNX split of a total pad that may be negative (rounds toward -inf), as the CPU kernel.
int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

}  // namespace

// ---- the cuDNN call of a convolution node -------------------------------------------------------

ConvCall conv_call(const Node& n, const std::vector<DType>& in_types, const std::vector<Shape>& in_shapes, bool bias,
                   const Shape& out) {
  if (!is_conv(n.op)) return conv_refused(fmt::format("{} is not a convolution", op_name(n.op)));
  const size_t nin = bias ? 3 : 2;
  if (in_types.size() < nin || in_shapes.size() < nin) return conv_refused("missing inputs");
  if (bias && n.op == Op::ConvGradFilter) return conv_refused("ConvGradFilter has no bias");
  const DType type = in_types[0];
  if (type != DType::f32 && type != DType::f16 && type != DType::bf16)
    return conv_refused(fmt::format("input 0 is {}; the cuDNN kernels take float32, float16 and bfloat16", dtype_name(type)));
  for (size_t k = 1; k < nin; ++k)
    if (in_types[k] != type)
      return conv_refused(fmt::format("input {} is {}, input 0 {}", k, dtype_name(in_types[k]), dtype_name(type)));
  const Shape &a = in_shapes[0], &b = in_shapes[1];
  const size_t r = a.size();
  if (r < 3 || r > 5 || b.size() != r || out.size() != r)
    return conv_refused(fmt::format("shapes {}, {} -> {}: cuDNN takes 1-D, 2-D and 3-D convolutions", shape_str(a),
                                    shape_str(b), shape_str(out)));
  const size_t nsp = r - 2;
  // The convolution's three grids (conv.h): X (conv input), W (filter), Y (conv output).
  const Shape& X = n.op == Op::ConvTranspose ? out : a;
  const Shape& W = n.op == Op::ConvGradFilter ? out : b;
  const Shape& Y = n.op == Op::Conv ? out : n.op == Op::ConvTranspose ? a : b;
  const int64_t group = n.i("group");
  if (group < 1 || X[0] != Y[0] || X[1] % group != 0 || W[1] * group != X[1] || W[0] % group != 0 || W[0] != Y[1])
    return conv_refused(fmt::format("inconsistent shapes X {}, W {}, Y {} for group {}", shape_str(X), shape_str(W),
                                    shape_str(Y), group));
  if (bias) {
    const int64_t ch = n.op == Op::Conv ? Y[1] : X[1];
    if (in_shapes[2] != Shape{ch})
      return conv_refused(fmt::format("bias {} for {} output channels", shape_str(in_shapes[2]), ch));
  }
  const std::vector<int64_t> strides = n.ints_or("strides", std::vector<int64_t>(nsp, 1));
  const std::vector<int64_t> dil = n.ints_or("dilations", std::vector<int64_t>(nsp, 1));
  const std::vector<int64_t> pads = n.ints_or("pads", std::vector<int64_t>(2 * nsp, 0));
  if (strides.size() != nsp || dil.size() != nsp || pads.size() != 2 * nsp)
    return conv_refused("strides, dilations or pads of the wrong length");
  const std::string ap = n.op == Op::ConvGradFilter ? std::string("NOTSET") : n.s("auto_pad");

  // The leading pad per dim, as the CPU kernel resolves it (exec/cpu/conv.cpp, exec/cpu/grad.cpp).
  std::vector<int64_t> pb(nsp, 0);
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t span = (W[i + 2] - 1) * dil[i] + 1;
    if (n.op == Op::ConvTranspose) {
      const std::vector<int64_t> out_pad = n.ints_or("output_padding", std::vector<int64_t>(nsp, 0));
      if (out_pad.size() != nsp) return conv_refused("output_padding of the wrong length");
      const bool from_total = n.has("output_shape") || ap == "SAME_UPPER" || ap == "SAME_LOWER";
      if (from_total) {
        const int64_t total = strides[i] * (Y[i + 2] - 1) + out_pad[i] + span - X[i + 2];
        pb[i] = ap == "SAME_UPPER" ? floor_div2(total) : total - floor_div2(total);
      } else if (ap == "NOTSET") {
        pb[i] = pads[i];
      }
    } else if (ap == "NOTSET") {
      pb[i] = pads[i];
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (Y[i + 2] - 1) * strides[i] + span - X[i + 2]);
      pb[i] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
    }
  }

  ConvCall c;
  c.type = type;
  c.out_numel = shape_numel(out);
  c.bias = bias && n.op != Op::ConvGradFilter;
  c.bias_channels = 0;
  c.groups = int(std::min<int64_t>(group, kIntMax));
  c.x_is = n.op == Op::ConvTranspose ? -1 : 0;
  c.w_is = n.op == Op::ConvGradFilter ? -1 : 1;
  c.y_is = n.op == Op::Conv ? -1 : n.op == Op::ConvTranspose ? 0 : 1;
  for (const Shape* s : {&X, &W, &Y}) {
    for (int64_t d : *s)
      if (!fits_int(d)) return conv_refused(fmt::format("dim {} is beyond cuDNN's int range", d));
    if (!fits_int(shape_numel(*s)))
      return conv_refused(fmt::format("{} has more elements than cuDNN's int range", shape_str(*s)));
  }
  if (c.bias) c.bias_channels = int(n.op == Op::Conv ? Y[1] : X[1]);
  // 1-D as 2-D: a leading spatial dim of 1 with a 1-tap window.
  const int lead = nsp == 1 ? 1 : 0;
  c.nb_dims = int(nsp) + 2 + lead;
  for (int k = 0; k < 2; ++k) c.x_dims[k] = int(X[size_t(k)]), c.w_dims[k] = int(W[size_t(k)]), c.y_dims[k] = int(Y[size_t(k)]);
  if (lead) {
    c.x_dims[2] = c.w_dims[2] = c.y_dims[2] = 1;
    c.pads[0] = 0, c.strides[0] = 1, c.dilations[0] = 1;
  }
  for (size_t i = 0; i < nsp; ++i) {
    const size_t j = i + size_t(lead);
    c.x_dims[j + 2] = int(X[i + 2]), c.w_dims[j + 2] = int(W[i + 2]), c.y_dims[j + 2] = int(Y[i + 2]);
    if (!fits_int(strides[i]) || !fits_int(dil[i]) || !fits_int(std::max<int64_t>(pb[i], 0)))
      return conv_refused("a stride, dilation or pad beyond cuDNN's int range");
    c.strides[j] = int(strides[i]), c.dilations[j] = int(dil[i]), c.pads[j] = int(std::max<int64_t>(pb[i], 0));
  }

  c.ok = true;
  if (c.out_numel == 0) {
    c.kind = ConvCall::Kind::nothing;
    return c;
  }
  const int64_t nx = shape_numel(X), nw = shape_numel(W), ny = shape_numel(Y);
  if (nx == 0 || nw == 0 || ny == 0) {  // a sum over nothing: zeros (+ bias)
    c.kind = ConvCall::Kind::fill;
    return c;
  }
  c.kind = n.op == Op::Conv ? ConvCall::Kind::forward
           : n.op == Op::ConvTranspose ? ConvCall::Kind::backward_data
                                       : ConvCall::Kind::backward_filter;
  // cuDNN's geometry must be the node's: symmetric pad pb, output (I + 2pb - span) / s + 1.
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t I = X[i + 2], O = Y[i + 2], span = (W[i + 2] - 1) * dil[i] + 1;
    if (strides[i] < 1 || dil[i] < 1) return conv_refused("strides and dilations must be >= 1");
    if (pb[i] < 0)
      return conv_refused(fmt::format("spatial dim {}: leading pad {} is negative (cuDNN pads are >= 0)", i, pb[i]));
    const int64_t room = I + 2 * pb[i] - span;
    if (room < 0 || room / strides[i] + 1 != O)
      return conv_refused(fmt::format(
          "spatial dim {}: cuDNN's symmetric pad {} gives {} outputs from {} inputs (kernel span {}, stride {}), the "
          "node has {} (asymmetric pads)",
          i, pb[i], room < 0 ? 0 : room / strides[i] + 1, I, span, strides[i], O));
  }
  return c;
}

// ---- the emulated cuDNN calls ------------------------------------------------------------------

namespace {

// Row-major offset of (n, c, s0, s1, s2) in packed dims [nb].
int64_t offset_of(const int* dims, int nb, int64_t n, int64_t c, const int64_t* s) {
  int64_t off = n * dims[1] + c;
  for (int i = 2; i < nb; ++i) off = off * dims[i] + s[i - 2];
  return off;
}

int64_t numel_of(const int* dims, int nb) {
  int64_t p = 1;
  for (int i = 0; i < nb; ++i) p *= dims[i];
  return p;
}

// Calls f(s) for every coordinate s[0..nsp) of a spatial grid, row-major.
template <class F>
void for_each_coord(const int* dims, int nsp, F&& f) {
  int64_t s[kConvMaxDims - 2] = {};
  const int64_t total = numel_of(dims, nsp);
  for (int64_t p = 0; p < total; ++p) {
    f(static_cast<const int64_t*>(s));
    for (int i = nsp - 1; i >= 0; --i) {
      if (++s[i] < dims[i]) break;
      s[i] = 0;
    }
  }
}

// cuDNN's checks of the arguments (CUDNN_STATUS_BAD_PARAM / NOT_SUPPORTED otherwise).
void check_args(const ConvCall& c) {
  const int nb = c.nb_dims, nsp = nb - 2;
  bool ok = (nb == 4 || nb == 5) && c.groups >= 1;
  for (int i = 0; ok && i < nb; ++i) ok = c.x_dims[i] > 0 && c.w_dims[i] > 0 && c.y_dims[i] > 0;
  ok = ok && c.x_dims[0] == c.y_dims[0] && c.x_dims[1] == c.w_dims[1] * c.groups && c.w_dims[0] % c.groups == 0 &&
       c.w_dims[0] == c.y_dims[1];
  for (int i = 0; ok && i < nsp; ++i) {
    ok = c.pads[i] >= 0 && c.strides[i] >= 1 && c.dilations[i] >= 1;
    // cudnnGetConvolutionNdForwardOutputDim: 1 + (in + 2 pad - ((filter - 1) dilation + 1)) / stride.
    const int64_t room = int64_t(c.x_dims[i + 2]) + 2 * c.pads[i] - (int64_t(c.w_dims[i + 2] - 1) * c.dilations[i] + 1);
    ok = ok && room >= 0 && 1 + room / c.strides[i] == c.y_dims[i + 2];
  }
  if (!ok) fail("emulated cuDNN convolution: inconsistent descriptors (CUDNN_STATUS_BAD_PARAM)");
}

// Calls f(x_off, w_off, y_off) for every (image, output channel, output position, input channel
// of the group, tap) whose tap lands inside X: the terms of cuDNN's convolution
//   Y[n, k, o] = sum_{c < C/groups, t} X[n, g(k) C/groups + c, o*stride - pad + t*dilation] W[k, c, t'],
// t' = t (cross-correlation) or the flipped tap (convolution). Order: n, k, o, then c, t.
template <class F>
void for_each_term(const ConvCall& c, F&& f) {
  const int nb = c.nb_dims, nsp = nb - 2;
  const int64_t N = c.x_dims[0], K = c.w_dims[0], Cg = c.w_dims[1], Kg = K / c.groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for_each_coord(c.y_dims + 2, nsp, [&](const int64_t* o) {
        const int64_t y_off = offset_of(c.y_dims, nb, n, k, o);
        for (int64_t ch = 0; ch < Cg; ++ch)
          for_each_coord(c.w_dims + 2, nsp, [&](const int64_t* t) {
            int64_t pos[kConvMaxDims - 2] = {}, tw[kConvMaxDims - 2] = {};
            for (int i = 0; i < nsp; ++i) {
              pos[i] = o[i] * c.strides[i] - c.pads[i] + t[i] * c.dilations[i];
              if (pos[i] < 0 || pos[i] >= c.x_dims[i + 2]) return;
              tw[i] = c.cross_correlation ? t[i] : c.w_dims[i + 2] - 1 - t[i];
            }
            f(offset_of(c.x_dims, nb, n, (k / Kg) * Cg + ch, pos), offset_of(c.w_dims, nb, k, ch, tw), y_off);
          });
      });
}

// out[n, ch, ...] = 1 * B[ch] + 1 * out (cudnnAddTensor with a [1, C, 1..] bias).
void add_bias(const int* dims, int nb, const float* B, float* out) {
  const int64_t N = dims[0], C = dims[1], S = numel_of(dims + 2, nb - 2);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t s = 0; s < S; ++s) out[(n * C + ch) * S + s] = B[ch] + out[(n * C + ch) * S + s];
}

// The descriptor dims of the node's output (the operand that is -1).
const int* out_dims(const ConvCall& c) { return c.x_is < 0 ? c.x_dims : c.w_is < 0 ? c.w_dims : c.y_dims; }

}  // namespace

void conv_emulate(const ConvCall& c, const std::vector<TensorRef>& in, const TensorRef& out) {
  if (!c.ok) fail("conv_emulate: {}", c.why);
  if (c.kind == ConvCall::Kind::nothing) return;
  if (c.type != DType::f32) {  // 16-bit operands: the same on their float values, each result rounded
    auto wide = [&](const TensorRef& r) {
      std::vector<float> f(size_t(r.numel));
      for (int64_t i = 0; i < r.numel; ++i)
        f[size_t(i)] = half_to_f32(c.type, r.as<uint16_t>()[i]);
      return f;
    };
    std::vector<std::vector<float>> held;
    held.reserve(in.size() + 1);
    std::vector<TensorRef> fin;
    for (const TensorRef& r : in) {
      held.push_back(wide(r));
      fin.push_back(TensorRef{held.back().data(), DType::f32, r.shape, r.numel});
    }
    held.push_back(wide(out));  // read when beta != 0
    ConvCall f = c;
    f.type = DType::f32;
    f.bias = false;
    const TensorRef fout{held.back().data(), DType::f32, out.shape, out.numel};
    conv_emulate(f, fin, fout);
    uint16_t* o = out.as<uint16_t>();
    for (int64_t i = 0; i < out.numel; ++i) o[i] = f32_to_half(c.type, held.back()[size_t(i)]);
    if (c.bias) {  // cudnnAddTensor on the rounded result
      std::vector<float> sum(size_t(out.numel));
      for (int64_t i = 0; i < out.numel; ++i) sum[size_t(i)] = half_to_f32(c.type, o[i]);
      add_bias(out_dims(c), c.nb_dims, held[2].data(), sum.data());
      for (int64_t i = 0; i < out.numel; ++i) o[i] = f32_to_half(c.type, sum[size_t(i)]);
    }
    return;
  }
  auto operand = [&](int which) -> float* { return static_cast<float*>(which < 0 ? out.data : in.at(size_t(which)).data); };
  float* o = static_cast<float*>(out.data);
  const int64_t n_out = numel_of(out_dims(c), c.nb_dims);
  if (n_out != out.numel) fail("conv_emulate: the output has {} elements, the descriptor {}", out.numel, n_out);
  if (c.kind == ConvCall::Kind::fill) {
    std::memset(o, 0, size_t(n_out) * sizeof(float));
  } else {
    check_args(c);
    const float* x = operand(c.x_is);
    const float* w = operand(c.w_is);
    const float* y = operand(c.y_is);
    // out = alpha * result + beta * out; beta 0: out is not read. Results accumulate in float in a
    // scratch buffer, then are combined with out.
    std::vector<float> acc(size_t(n_out), 0.0f);
    switch (c.kind) {
      case ConvCall::Kind::forward:  // Y = X (*) W
        for_each_term(c, [&](int64_t xo, int64_t wo, int64_t yo) { acc[size_t(yo)] += x[xo] * w[wo]; });
        break;
      case ConvCall::Kind::backward_data:  // dX = the adjoint of the forward applied to dY
        for_each_term(c, [&](int64_t xo, int64_t wo, int64_t yo) { acc[size_t(xo)] += w[wo] * y[yo]; });
        break;
      case ConvCall::Kind::backward_filter:  // dW = sum over images and positions of dY X
        for_each_term(c, [&](int64_t xo, int64_t wo, int64_t yo) { acc[size_t(wo)] += x[xo] * y[yo]; });
        break;
      default: break;
    }
    for (int64_t i = 0; i < n_out; ++i) o[i] = c.beta == 0 ? c.alpha * acc[size_t(i)] : c.alpha * acc[size_t(i)] + c.beta * o[i];
  }
  if (c.bias) add_bias(out_dims(c), c.nb_dims, static_cast<const float*>(in.at(2).data), o);
}

// ---- the cuDNN calls ---------------------------------------------------------------------------

namespace {

cudnnDataType_t cudnn_type(DType t) {
  return t == DType::f16 ? CUDNN_DATA_HALF : t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(const int* dims, int nb, DType t) {
    ONNXDP_CUDA_CHECK(cudnnCreateTensorDescriptor(&d));
    int strides[kConvMaxDims];
    strides[nb - 1] = 1;
    for (int i = nb - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
    ONNXDP_CUDA_CHECK(cudnnSetTensorNdDescriptor(d, cudnn_type(t), nb, dims, strides));
  }
  ~TensorDesc() {
    if (d) cudnnDestroyTensorDescriptor(d);
  }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const int* dims, int nb, DType t) {
    ONNXDP_CUDA_CHECK(cudnnCreateFilterDescriptor(&d));
    ONNXDP_CUDA_CHECK(cudnnSetFilterNdDescriptor(d, cudnn_type(t), CUDNN_TENSOR_NCHW, nb, dims));
  }
  ~FilterDesc() {
    if (d) cudnnDestroyFilterDescriptor(d);
  }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  explicit ConvDesc(const ConvCall& c) {
    ONNXDP_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d));
    ONNXDP_CUDA_CHECK(cudnnSetConvolutionNdDescriptor(d, c.nb_dims - 2, c.pads, c.strides, c.dilations,
                                                      c.cross_correlation ? CUDNN_CROSS_CORRELATION : CUDNN_CONVOLUTION,
                                                      CUDNN_DATA_FLOAT));  // fp32 sums for every data type
    ONNXDP_CUDA_CHECK(cudnnSetConvolutionGroupCount(d, c.groups));
    // fp32 data: FMA, no TF32. 16-bit data: Tensor Cores (16-bit products, fp32 sums).
    ONNXDP_CUDA_CHECK(cudnnSetConvolutionMathType(d, c.type == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  }
  ~ConvDesc() {
    if (d) cudnnDestroyConvolutionDescriptor(d);
  }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// A stream-ordered workspace: cudaMallocAsync on the stream, cudaFreeAsync after the call.
struct Workspace {
  void* p = nullptr;
  cudaStream_t s = nullptr;
  Workspace(size_t bytes, cudaStream_t stream) : s(stream) {
    if (bytes) ONNXDP_CUDA_CHECK(cudaMallocAsync(&p, bytes, s));
  }
  ~Workspace() {
    if (p) cudaFreeAsync(p, s);  // in a destructor: nobody to report a failure to
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
};

// Algorithms that compute each output as a plain fp32 sum of products (GEMM-based or direct), so
// their error is the ordinary summation bound and results agree tightly with the CPU's im2col +
// GEMM; FFT and Winograd transforms are left out (their rounding error is of another kind).
bool plain_sum(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool plain_sum(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool plain_sum(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// The heuristics' choice: the first result with status SUCCESS and, on fp32 data, no Tensor Core
// math type (TF32; 16-bit data take Tensor Cores), preferring a plain-sum algorithm that is
// deterministic, then any plain-sum one, then any (FFT / Winograd, should cuDNN offer nothing else
// for a geometry); -1 when none.
template <class Perf>
int pick(const std::vector<Perf>& perf, int got, bool tensor_cores) {
  auto fp32 = [&](const Perf& p) {
    return p.status == CUDNN_STATUS_SUCCESS &&
           (tensor_cores || (p.mathType != CUDNN_TENSOR_OP_MATH && p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
  };
  for (int i = 0; i < got; ++i)
    if (fp32(perf[size_t(i)]) && plain_sum(perf[size_t(i)].algo) && perf[size_t(i)].determinism == CUDNN_DETERMINISTIC)
      return i;
  for (int i = 0; i < got; ++i)
    if (fp32(perf[size_t(i)]) && plain_sum(perf[size_t(i)].algo)) return i;
  for (int i = 0; i < got; ++i)
    if (fp32(perf[size_t(i)])) return i;
  return -1;
}

// The algorithm of a call, from the *_v7 heuristics, cached per device and geometry.
int algorithm(const ConvCall& c, cudnnHandle_t h, const TensorDesc& x, const FilterDesc& w, const ConvDesc& conv,
              const TensorDesc& y) {
  int device = 0;
  ONNXDP_CUDA_CHECK(cudaGetDevice(&device));
  std::vector<int> key = {device, int(c.kind), int(c.type), c.nb_dims, c.groups};
  for (int i = 0; i < c.nb_dims; ++i) key.insert(key.end(), {c.x_dims[i], c.w_dims[i], c.y_dims[i]});
  for (int i = 0; i < c.nb_dims - 2; ++i) key.insert(key.end(), {c.pads[i], c.strides[i], c.dilations[i]});
  static std::mutex mu;
  static std::map<std::vector<int>, int> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  int algo = 0, max = 0, got = 0;
  switch (c.kind) {
    case ConvCall::Kind::forward: {
      ONNXDP_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(max, 1)));
      ONNXDP_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x.d, w.d, conv.d, y.d, max, &got, perf.data()));
      const int i = pick(perf, got, c.type != DType::f32);
      algo = i >= 0 ? int(perf[size_t(i)].algo) : int(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
      break;
    }
    case ConvCall::Kind::backward_data: {
      ONNXDP_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(max, 1)));
      ONNXDP_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w.d, y.d, conv.d, x.d, max, &got, perf.data()));
      const int i = pick(perf, got, c.type != DType::f32);
      algo = i >= 0 ? int(perf[size_t(i)].algo) : int(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
      break;
    }
    case ConvCall::Kind::backward_filter: {
      ONNXDP_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(max, 1)));
      ONNXDP_CUDA_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x.d, y.d, conv.d, w.d, max, &got, perf.data()));
      const int i = pick(perf, got, c.type != DType::f32);
      algo = i >= 0 ? int(perf[size_t(i)].algo) : int(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
      break;
    }
    default: break;
  }
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = algo;
  return algo;
}

void conv_device(const ConvCall& c, const std::vector<TensorRef>& in, const TensorRef& out, const CudaContext& cc) {
  if (c.kind == ConvCall::Kind::nothing) return;
  auto h = static_cast<cudnnHandle_t>(cc.cudnn);
  auto s = static_cast<cudaStream_t>(cc.stream);
  if (!h) fail("no cuDNN handle");
  auto operand = [&](int which) -> void* { return which < 0 ? out.data : in.at(size_t(which)).data; };
  const int* od = out_dims(c);
  if (c.kind == ConvCall::Kind::fill) {
    ONNXDP_CUDA_CHECK(cudaMemsetAsync(out.data, 0, size_t(c.out_numel) * dtype_size(c.type), s));
  } else {
    const TensorDesc x(c.x_dims, c.nb_dims, c.type), y(c.y_dims, c.nb_dims, c.type);
    const FilterDesc w(c.w_dims, c.nb_dims, c.type);
    const ConvDesc conv(c);
    const int algo = algorithm(c, h, x, w, conv, y);
    size_t bytes = 0;
    switch (c.kind) {
      case ConvCall::Kind::forward: {
        const auto a = cudnnConvolutionFwdAlgo_t(algo);
        ONNXDP_CUDA_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, x.d, w.d, conv.d, y.d, a, &bytes));
        Workspace ws(bytes, s);
        ONNXDP_CUDA_CHECK(cudnnConvolutionForward(h, &c.alpha, x.d, operand(c.x_is), w.d, operand(c.w_is), conv.d, a,
                                                  ws.p, bytes, &c.beta, y.d, operand(c.y_is)));
        break;
      }
      case ConvCall::Kind::backward_data: {
        const auto a = cudnnConvolutionBwdDataAlgo_t(algo);
        ONNXDP_CUDA_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w.d, y.d, conv.d, x.d, a, &bytes));
        Workspace ws(bytes, s);
        ONNXDP_CUDA_CHECK(cudnnConvolutionBackwardData(h, &c.alpha, w.d, operand(c.w_is), y.d, operand(c.y_is), conv.d,
                                                       a, ws.p, bytes, &c.beta, x.d, operand(c.x_is)));
        break;
      }
      case ConvCall::Kind::backward_filter: {
        const auto a = cudnnConvolutionBwdFilterAlgo_t(algo);
        ONNXDP_CUDA_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x.d, y.d, conv.d, w.d, a, &bytes));
        Workspace ws(bytes, s);
        ONNXDP_CUDA_CHECK(cudnnConvolutionBackwardFilter(h, &c.alpha, x.d, operand(c.x_is), y.d, operand(c.y_is),
                                                         conv.d, a, ws.p, bytes, &c.beta, w.d, operand(c.w_is)));
        break;
      }
      default: break;
    }
  }
  if (c.bias) {
    int bdims[kConvMaxDims];
    for (int i = 0; i < c.nb_dims; ++i) bdims[i] = 1;
    bdims[1] = c.bias_channels;
    const TensorDesc b(bdims, c.nb_dims, c.type), o(od, c.nb_dims, c.type);
    const float one = 1.0f;  // float scaling factors for every data type but double
    ONNXDP_CUDA_CHECK(cudnnAddTensor(h, &one, b.d, in.at(2).data, &one, o.d, out.data));
  }
}

}  // namespace

// ---- pooling -----------------------------------------------------------------------------------

PoolPlan pool_plan(const Node& n, DType t, const Shape& x, const Shape& y) {
  PoolPlan p;
  auto refuse = [&](std::string why) {
    p.why = std::move(why);
    return p;
  };
  if (!is_pool(n.op)) return refuse(fmt::format("{} is not a pooling op", op_name(n.op)));
  const bool int_ok = n.op == Op::MaxPool;
  if (t != DType::f32 && t != DType::f64 && !(int_ok && (t == DType::i8 || t == DType::u8)))
    return refuse(fmt::format("{} is {}; the CUDA kernel takes float32, float64{}", op_name(n.op), dtype_name(t),
                              int_ok ? ", int8 and uint8" : ""));
  PoolLaunch& l = p.launch;
  l.type = t == DType::f32 ? PoolType::f32 : t == DType::f64 ? PoolType::f64 : t == DType::i8 ? PoolType::i8 : PoolType::u8;
  if (x.size() < 3 || y.size() != x.size() || x[0] != y[0] || x[1] != y[1])
    return refuse(fmt::format("shapes {} and {} are not [N, C, D..] and [N, C, O..]", shape_str(x), shape_str(y)));
  l.planes = x[0] * x[1];
  if (n.op == Op::GlobalAveragePool) {
    l.kind = PoolKind::global_avg;
    l.in_size = shape_numel(x) / std::max<int64_t>(l.planes, 1);
    if (l.planes == 0) l.in_size = 0;
    l.out_size = 1;
    p.ok = true;
    return p;
  }
  const size_t nsp = x.size() - 2;
  if (nsp > size_t(kPoolMaxSpatial)) return refuse(fmt::format("{} spatial dims; the kernels take 1 to 3", nsp));
  l.kind = n.op == Op::MaxPool       ? PoolKind::max
           : n.op == Op::AveragePool ? PoolKind::avg
           : n.op == Op::MaxPoolGrad ? PoolKind::max_grad
                                     : PoolKind::avg_grad;
  l.nsp = int(nsp);
  const std::vector<int64_t> kernel = n.ints("kernel_shape");
  const std::vector<int64_t> strides = n.ints_or("strides", std::vector<int64_t>(nsp, 1));
  const std::vector<int64_t> dil = n.ints_or("dilations", std::vector<int64_t>(nsp, 1));
  const std::vector<int64_t> pads = n.ints_or("pads", std::vector<int64_t>(2 * nsp, 0));
  if (kernel.size() != nsp || strides.size() != nsp || dil.size() != nsp || pads.size() != 2 * nsp)
    return refuse("kernel_shape, strides, dilations or pads of the wrong length");
  const std::string& ap = n.s("auto_pad");
  l.in_size = l.out_size = 1;
  for (size_t i = 0; i < nsp; ++i) {
    l.in[i] = x[i + 2], l.out[i] = y[i + 2];
    l.kernel[i] = kernel[i], l.stride[i] = strides[i], l.dil[i] = dil[i];
    if (kernel[i] < 1 || strides[i] < 1 || dil[i] < 1) return refuse("kernel, strides and dilations must be >= 1");
    const int64_t span = (kernel[i] - 1) * dil[i] + 1;
    int64_t pb = 0, pe = 0;
    if (ap == "NOTSET") {
      pb = pads[i], pe = pads[i + nsp];
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (l.out[i] - 1) * strides[i] + span - l.in[i]);
      pb = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    }
    if (pb < 0 || pe < 0) return refuse("negative pads");
    l.pb[i] = pb, l.pe[i] = pe;
    l.in_size *= l.in[i];
    l.out_size *= l.out[i];
  }
  l.include_pad = n.op != Op::MaxPool && n.op != Op::MaxPoolGrad && n.i("count_include_pad") == 1;
  l.col_major = n.op == Op::MaxPool && n.i("storage_order") == 1;
  p.ok = true;
  return p;
}

namespace {

// The pooling plan of node n in g: the dtype and the [N, C, D..] / [N, C, O..] shapes per op.
PoolPlan pool_plan_of(const Graph& g, const Node& n) {
  if (!n.has_input(0) || n.outputs.empty() || n.outputs[0] == kNoValue) return PoolPlan{};
  const Value& in0 = g.value(n.inputs[0]);
  const Value& out0 = g.value(n.outputs[0]);
  switch (n.op) {
    case Op::MaxPoolGrad:  // (x, dy) -> dx
      if (!n.has_input(1)) return PoolPlan{};
      if (g.value(n.inputs[1]).dtype != in0.dtype || out0.dtype != in0.dtype) return PoolPlan{};
      return pool_plan(n, in0.dtype, in0.shape, g.value(n.inputs[1]).shape);
    case Op::AveragePoolGrad:  // (dy, x_shape) -> dx
      if (out0.dtype != in0.dtype) return PoolPlan{};
      return pool_plan(n, in0.dtype, out0.shape, in0.shape);
    default:
      if (out0.dtype != in0.dtype) return PoolPlan{};
      return pool_plan(n, in0.dtype, in0.shape, out0.shape);
  }
}

ConvCall conv_call_of(const Graph& g, const Node& n) {
  if (!n.has_input(0) || !n.has_input(1) || n.outputs.empty() || n.outputs[0] == kNoValue)
    return conv_refused("missing operands");
  const bool bias = n.op != Op::ConvGradFilter && n.has_input(2);
  std::vector<DType> types;
  std::vector<Shape> shapes;
  for (int k = 0; k < (bias ? 3 : 2); ++k) {
    types.push_back(g.value(n.inputs[size_t(k)]).dtype);
    shapes.push_back(g.value(n.inputs[size_t(k)]).shape);
  }
  const Value& out = g.value(n.outputs[0]);
  if (out.dtype != types[0]) return conv_refused("the output's type is not the inputs'");
  return conv_call(n, types, shapes, bias, out.shape);
}

}  // namespace

bool conv_runs(const Graph& g, const Node& n) {
  if (is_conv(n.op)) return conv_call_of(g, n).ok;
  if (is_pool(n.op)) return pool_plan_of(g, n).ok;
  return false;
}

void conv_forward(const Graph& g, KernelCtx& c, const CudaContext& cc) {
  const Node& n = c.node;
  if (is_conv(n.op)) {
    const ConvCall call = conv_call_of(g, n);
    if (!call.ok) c.fail("no cuDNN kernel: {}", call.why);
    const TensorRef& out = c.out(0);
    if (out.numel != call.out_numel) c.fail("the output has {} elements, the call {}", out.numel, call.out_numel);
    if (cc.emulate) return conv_emulate(call, c.inputs, out);
    return conv_device(call, c.inputs, out, cc);
  }
  if (is_pool(n.op)) {
    PoolPlan p = pool_plan_of(g, n);
    if (!p.ok) c.fail("no CUDA pooling kernel: {}", p.why);
    PoolLaunch& l = p.launch;
    switch (n.op) {
      case Op::MaxPoolGrad:
        l.x = c.in(0).data;
        l.dy = c.in(1).data;
        break;
      case Op::AveragePoolGrad: l.dy = c.in(0).data; break;
      default: l.x = c.in(0).data; break;
    }
    l.y = c.out(0).data;
    if (n.op == Op::MaxPool && c.has_out(1)) l.indices = c.out(1).as<int64_t>();
    const int64_t expect = l.kind == PoolKind::max_grad || l.kind == PoolKind::avg_grad ? l.planes * l.in_size
                                                                                        : l.planes * l.out_size;
    if (c.out(0).numel != expect) c.fail("the output has {} elements, the kernel writes {}", c.out(0).numel, expect);
    if (cc.emulate) return pool_emulate(l);
    return pool_launch(l, cc.stream);
  }
  c.fail("not a convolution or pooling op");
}

}  // namespace onnxdp::cuda
