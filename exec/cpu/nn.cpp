// CPU kernels of the nn ops (see graph/op_table.h): Dropout and the two losses here; Conv and
// ConvTranspose in conv.cpp, the pools in pool.cpp, the normalisations in norm.cpp.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "exec/cpu/clones.h"
#include "exec/kernel.h"
#include "exec/philox.h"

namespace onnxdp {

namespace {

double scalar_value(const KernelCtx& c, int k) {
  const TensorRef& t = c.in(k);
  switch (t.dtype) {
    case DType::f32: return t.as<float>()[0];
    case DType::f64: return t.as<double>()[0];
    case DType::f16: return f16_to_f32(t.as<uint16_t>()[0]);
    case DType::bf16: return bf16_to_f32(t.as<uint16_t>()[0]);
    default: c.fail("input {} is {}; expected a float scalar", k, dtype_name(t.dtype));
  }
}

// data [d0, ..] -> output, mask. Training keeps element p of the global batch when its Philox
// uniform (exec/philox.h) is >= ratio and scales it by 1/(1-ratio); p = j + (sample_offset +
// batch_offset) * (numel / d0) for element j of this replica's rows, so masks depend neither on the
// split over replicas nor on the split into micro-batches.
template <class T>
void dropout(KernelCtx& c, double ratio) {
  const TensorRef& xr = c.in(0);
  const T* x = xr.as<T>();
  T* y = c.out(0).as<T>();
  bool* mask = c.has_out(1) ? c.out(1).as<bool>() : nullptr;
  const int64_t n = xr.numel;
  // Elements per batch row; a scalar has no batch dim and no offset.
  const int64_t row = xr.rank() > 0 && xr.dim(0) > 0 ? n / xr.dim(0) : 0;
  const uint64_t base = uint64_t((c.run.sample_offset + c.run.batch_offset) * row);
  const uint64_t seed = c.node.has("seed") ? uint64_t(c.node.i("seed")) : c.run.seed;
  const uint64_t step = c.run.step;
  const uint32_t stream = philox_stream_id(c.node.name.c_str());
  const float threshold = float(ratio);
  const T scale = T(1.0 / (1.0 - ratio));
  // dropout_uniform's values, each Philox block drawn once for the (up to) four elements whose
  // words it holds, not once per element: the cnn's two Dropouts 0.14 -> 0.055 ms a step.
  split_rows(n, n > parallel_min_elements(), [&](int, int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi;) {
      const uint64_t pos = base + uint64_t(j);
      const Philox4x32 r = dropout_block(seed, step, stream, pos >> 2);
      for (uint64_t w = pos & 3; w < 4 && j < hi; ++w, ++j) {
        const bool keep = philox_to_unit(r.v[w]) >= threshold;
        y[j] = keep ? T(x[j] * scale) : T(0);
        if (mask) mask[j] = keep;
      }
    }
  });
}

// Which losses count and with what weight: labels [N, D] against scores [N, C, D].
struct LossTerms {
  std::vector<double> weight;  // [N*D]; 0 for ignored labels
  std::vector<int64_t> label;  // [N*D]; -1 for ignored labels
};

LossTerms loss_terms(const KernelCtx& c, int64_t classes) {
  const TensorRef& lr = c.in(1);
  const int64_t count = lr.numel;
  const bool has_ignore = c.node.has("ignore_index");
  const int64_t ignore = has_ignore ? c.node.i("ignore_index") : 0;
  std::vector<double> w;
  if (c.has_in(2)) {
    const TensorRef& wr = c.in(2);
    w.resize(size_t(classes));
    for (int64_t k = 0; k < classes; ++k)
      w[size_t(k)] = wr.dtype == DType::f64 ? wr.as<double>()[k] : double(wr.as<float>()[k]);
  }
  LossTerms t;
  t.weight.resize(size_t(count));
  t.label.resize(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t l = lr.dtype == DType::i64 ? lr.as<int64_t>()[i] : int64_t(lr.as<int32_t>()[i]);
    if (has_ignore && l == ignore) {
      t.label[size_t(i)] = -1;
      t.weight[size_t(i)] = 0;
      continue;
    }
    if (l < 0 || l >= classes)
      c.fail("label {} at flat index {} is outside [0, {}){}", l, i, classes,
             has_ignore ? fmt::format(" and is not ignore_index {}", ignore) : std::string());
    t.label[size_t(i)] = l;
    t.weight[size_t(i)] = w.empty() ? 1.0 : w[size_t(l)];
  }
  return t;
}

// loss[i] = -weight[i] * logp[n, label[i], d] (i = n*D + d), then the reduction: none keeps
// [N, D]; sum adds; mean divides the sum by the total weight of the counted labels.
template <class T>
void reduce_loss(KernelCtx& c, const LossTerms& t, const std::vector<double>& picked) {
  T* out = c.out(0).as<T>();
  const std::string& reduction = c.node.s("reduction");
  if (reduction == "none") {
    for (size_t i = 0; i < picked.size(); ++i) out[i] = T(picked[i]);
    return;
  }
  double sum = 0, wsum = 0;
  for (size_t i = 0; i < picked.size(); ++i) {
    sum += picked[i];
    wsum += t.weight[i];
  }
  out[0] = T(reduction == "sum" ? sum : sum / wsum);  // all ignored: 0/0 = NaN, as numpy and torch
}

// x [N, C, D] (D = product of the dims after C) holds log-probabilities (NLL) or logits (SCE, which
// writes log_softmax over C to output 1 when present).
template <class T>
void nll(KernelCtx& c, bool softmax) {
  const TensorRef& xr = c.in(0);
  const int64_t N = xr.dim(0), C = xr.dim(1), D = N * C != 0 ? xr.numel / (N * C) : 1;
  const LossTerms t = loss_terms(c, C);
  const T* x = xr.as<T>();
  std::vector<double> picked(size_t(N * D), 0.0);
  T* log_prob = softmax && c.has_out(1) ? c.out(1).as<T>() : nullptr;
  parallel_for(N * D, xr.numel > parallel_min_elements(), [&](int64_t i) {
    const int64_t n = i / D, d = i % D;
    const T* xi = x + n * C * D + d;  // class k at xi[k * D]
    double lse = 0;
    if (softmax) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < C; ++k) mx = std::max(mx, double(xi[k * D]));
      double s = 0;
      for (int64_t k = 0; k < C; ++k) s += std::exp(double(xi[k * D]) - mx);
      lse = mx + std::log(s);
      if (log_prob)
        for (int64_t k = 0; k < C; ++k) log_prob[n * C * D + k * D + d] = T(double(xi[k * D]) - lse);
    }
    const int64_t l = t.label[size_t(i)];
    if (l >= 0) picked[size_t(i)] = -t.weight[size_t(i)] * (double(xi[l * D]) - lse);
  });
  reduce_loss<T>(c, t, picked);
}

}  // namespace

void Dropout_forward(KernelCtx& c) {
  const TensorRef& xr = c.in(0);
  double ratio = c.has_in(1) ? scalar_value(c, 1) : double(c.node.f("ratio"));
  bool training = c.node.i("training_mode") != 0;
  if (c.has_in(2)) training = c.in(2).as<bool>()[0];
  if (training && !(ratio >= 0 && ratio < 1)) c.fail("ratio {} is outside [0, 1)", ratio);
  if (!training || ratio == 0) {
    // A copy (the plan never aliases an output with its input) and an all-true mask.
    if (xr.numel) std::memcpy(c.out(0).data, xr.data, size_t(xr.numel) * dtype_size(xr.dtype));
    if (c.has_out(1)) std::memset(c.out(1).data, 1, size_t(xr.numel));
    return;
  }
  switch (xr.dtype) {
    case DType::f32: return dropout<float>(c, ratio);
    case DType::f64: return dropout<double>(c, ratio);
    default: c.fail("input 0 is {}; training-mode Dropout runs on float32 and float64", dtype_name(xr.dtype));
  }
}

void SoftmaxCrossEntropyLoss_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return nll<float>(c, true);
    case DType::f64: return nll<double>(c, true);
    default: c.fail("input 0 is {}; SoftmaxCrossEntropyLoss runs on float32 and float64", dtype_name(c.in(0).dtype));
  }
}

void NegativeLogLikelihoodLoss_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return nll<float>(c, false);
    case DType::f64: return nll<double>(c, false);
    default:
      c.fail("input 0 is {}; NegativeLogLikelihoodLoss runs on float32 and float64", dtype_name(c.in(0).dtype));
  }
}

}  // namespace onnxdp
