// Resize linear / cubic as passes over one axis at a time (graph/resize.h's taps), in double:
// shared by Resize's kernel (exec/cpu/tensor.cpp) and ResizeGrad's, its exact adjoint
// (exec/cpu/grad.cpp). Each pass is parallel over the leading dims; every thread writes its own
// rows in a fixed order, so both are deterministic.
#pragma once
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "exec/cpu/clones.h"
#include "exec/kernel.h"
#include "graph/resize.h"

namespace onnxdp {

// A Resize's roi, scales and sizes (inputs first .. first + 2: 1 for Resize, 2 for ResizeGrad)
// as tensors, for graph/resize.h; absent inputs are null.
struct ResizeArgs {
  std::optional<Tensor> held[3];
  const Tensor* roi() const { return held[0] ? &*held[0] : nullptr; }
  const Tensor* scales() const { return held[1] ? &*held[1] : nullptr; }
  const Tensor* sizes() const { return held[2] ? &*held[2] : nullptr; }
};
inline ResizeArgs resize_args(const KernelCtx& c, int first) {
  ResizeArgs args;
  for (int k = 0; k < 3; ++k) {
    if (!c.has_in(first + k)) continue;
    const TensorRef& r = c.in(first + k);
    Tensor t(r.dtype, *r.shape);
    if (t.nbytes()) std::memcpy(t.data(), r.data, t.nbytes());
    args.held[k] = std::move(t);
  }
  return args;
}

namespace resize_detail {

struct AxisView {  // a tensor viewed as [outer, len, inner] around one axis
  int64_t outer = 1, inner = 1;
};
inline AxisView around(const Shape& s, size_t axis) {
  AxisView v;
  for (size_t d = 0; d < s.size(); ++d) {
    if (d < axis) v.outer *= s[d];
    if (d > axis) v.inner *= s[d];
  }
  return v;
}

// y [outer, n_out, inner] = sum over taps t of w[j, t] * x [outer, src[j, t], inner].
inline void forward_axis(const std::vector<double>& x, std::vector<double>& y, AxisView v, int64_t n_in, int64_t n_out,
                         const ResizeTaps& t) {
  y.assign(size_t(v.outer * n_out * v.inner), 0.0);
  parallel_for(v.outer * n_out, int64_t(y.size()) > parallel_min_elements(), [&](int64_t row) {
    const int64_t o = row / n_out, j = row % n_out;
    double* dst = &y[size_t(row * v.inner)];
    for (int64_t k = 0; k < t.width; ++k) {
      const double w = t.weight[size_t(j * t.width + k)];
      if (w == 0) continue;
      const double* src = &x[size_t((o * n_in + t.src[size_t(j * t.width + k)]) * v.inner)];
      for (int64_t q = 0; q < v.inner; ++q) dst[q] += w * src[q];
    }
  });
}

// The adjoint: dx [outer, n_in, inner] = sum over (j, t) with src[j, t] = i of w[j, t] * dy [outer, j, inner],
// added in the order of j then t.
inline void adjoint_axis(const std::vector<double>& dy, std::vector<double>& dx, AxisView v, int64_t n_in,
                         int64_t n_out, const ResizeTaps& t) {
  dx.assign(size_t(v.outer * n_in * v.inner), 0.0);
  parallel_for(v.outer, int64_t(dy.size()) > parallel_min_elements(), [&](int64_t o) {
    for (int64_t j = 0; j < n_out; ++j) {
      const double* src = &dy[size_t((o * n_out + j) * v.inner)];
      for (int64_t k = 0; k < t.width; ++k) {
        const double w = t.weight[size_t(j * t.width + k)];
        if (w == 0) continue;
        double* dst = &dx[size_t((o * n_in + t.src[size_t(j * t.width + k)]) * v.inner)];
        for (int64_t q = 0; q < v.inner; ++q) dst[q] += w * src[q];
      }
    }
  });
}

// Sets the rows of y [.., out, ..] (shape `s`) at the indices tf_crop_and_resize puts outside the
// input to `value`, along every axis.
inline void fill_outside(std::vector<double>& y, const Shape& s, const ResizeInterp& rz, double value) {
  for (size_t a = 0; a < rz.axes.size(); ++a) {
    const ResizeTaps& t = rz.axes[a];
    if (!t.crops()) continue;
    const AxisView v = around(s, a);
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t j = 0; j < s[a]; ++j)
        if (t.outside[size_t(j)]) std::fill_n(&y[size_t((o * s[a] + j) * v.inner)], v.inner, value);
  }
}

}  // namespace resize_detail

// x (shape `in`, row-major) resized: rz.out, axis by axis in order.
inline std::vector<double> resize_interp_forward(const ResizeInterp& rz, const Shape& in, std::vector<double> x,
                                                 double extrapolation_value) {
  Shape s = in;
  std::vector<double> y;
  for (size_t a = 0; a < rz.axes.size(); ++a) {
    if (rz.axes[a].width == 0) continue;
    const resize_detail::AxisView v = resize_detail::around(s, a);
    resize_detail::forward_axis(x, y, v, s[a], rz.out[a], rz.axes[a]);
    s[a] = rz.out[a];
    x.swap(y);
  }
  resize_detail::fill_outside(x, s, rz, extrapolation_value);
  return x;
}

// dy (shape rz.out) back to the input's shape `in`: the transpose of resize_interp_forward (the
// extrapolated outputs carry no gradient), axis by axis in reverse.
inline std::vector<double> resize_interp_adjoint(const ResizeInterp& rz, const Shape& in, std::vector<double> dy) {
  Shape s = rz.out;
  resize_detail::fill_outside(dy, s, rz, 0.0);
  std::vector<double> dx;
  for (size_t a = rz.axes.size(); a-- > 0;) {
    if (rz.axes[a].width == 0) continue;
    const resize_detail::AxisView v = resize_detail::around(s, a);
    resize_detail::adjoint_axis(dy, dx, v, in[a], s[a], rz.axes[a]);
    s[a] = in[a];
    dy.swap(dx);
  }
  return dy;
}

}  // namespace onnxdp
