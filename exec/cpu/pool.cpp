// CPU kernels of MaxPool, AveragePool and GlobalAveragePool, N-D.
//
// x [N, C, D1..Dn] -> y [N, C, O1..On] (the shape rule gives O). A window is the Cartesian
// product of per-dim tap lists: output coordinate o of dim i covers the input coordinates
// o*stride - pad_begin + k*dilation, k < kernel; taps outside [0, D) are padding. For
// AveragePool's count_include_pad, a padding tap counts when it lies in the explicit (or auto)
// pads, i.e. in [-pad_begin, D + pad_end); taps past that (from ceil_mode) never count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

namespace {

// Per spatial dim and output coordinate: the window's taps inside the input, as offsets
// (coordinate * the dim's row-major stride in the input plane), and how many of its taps lie
// within the input plus its pads.
struct DimTaps {
  std::vector<std::vector<int64_t>> offsets;  // [O][taps inside the input]
  std::vector<int64_t> padded_count;          // [O]
};

struct PoolGeom {
  std::vector<int64_t> in, out;     // spatial dims
  std::vector<DimTaps> dims;
  int64_t in_size = 1, out_size = 1;
};

PoolGeom pool_geom(const KernelCtx& c) {
  const Shape &xs = *c.in(0).shape, &ys = *c.out(0).shape;
  const size_t n = xs.size() - 2;
  const Node& node = c.node;
  std::vector<int64_t> kernel = node.ints("kernel_shape");
  std::vector<int64_t> strides = node.ints_or("strides", std::vector<int64_t>(n, 1));
  std::vector<int64_t> dil = node.ints_or("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = node.ints_or("pads", std::vector<int64_t>(2 * n, 0));
  const std::string& ap = node.s("auto_pad");
  PoolGeom g;
  g.in.assign(xs.begin() + 2, xs.end());
  g.out.assign(ys.begin() + 2, ys.end());
  std::vector<int64_t> row_stride(n, 1);
  for (size_t i = n - 1; i-- > 0;) row_stride[i] = row_stride[i + 1] * g.in[i + 1];
  for (size_t i = 0; i < n; ++i) {
    g.in_size *= g.in[i];
    g.out_size *= g.out[i];
    int64_t span = (kernel[i] - 1) * dil[i] + 1, pb = 0, pe = 0;
    if (ap == "NOTSET") {
      pb = pads[i], pe = pads[i + n];
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * strides[i] + span - g.in[i]);
      pb = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    }
    DimTaps d;
    for (int64_t o = 0; o < g.out[i]; ++o) {
      std::vector<int64_t> valid;
      int64_t padded = 0;
      for (int64_t k = 0; k < kernel[i]; ++k) {
        int64_t x = o * strides[i] - pb + k * dil[i];
        if (x >= 0 && x < g.in[i]) valid.push_back(x * row_stride[i]);
        if (x >= -pb && x < g.in[i] + pe) ++padded;
      }
      d.offsets.push_back(std::move(valid));
      d.padded_count.push_back(padded);
    }
    g.dims.push_back(std::move(d));
  }
  return g;
}

// The taps of one output position: per dim, the offsets of its window in that dim.
using Window = std::vector<const std::vector<int64_t>*>;

// Calls f(p, o, window) for every output position p (multi-index o) in row-major order.
template <class F>
void for_each_output(const PoolGeom& g, F&& f) {
  const size_t n = g.in.size();
  std::vector<int64_t> o(n, 0);
  Window window(n);
  for (int64_t p = 0; p < g.out_size; ++p) {
    for (size_t i = 0; i < n; ++i) window[i] = &g.dims[i].offsets[size_t(o[i])];
    f(p, o, window);
    for (size_t i = n; i-- > 0;) {
      if (++o[i] < g.out[i]) break;
      o[i] = 0;
    }
  }
}

// Calls tap(offset) for every input position of a window (offset: flat, within the plane).
template <class F>
void for_each_tap(const Window& window, F&& tap) {
  const size_t n = window.size();
  auto walk = [&](auto& self, size_t i, int64_t base) -> void {
    if (i + 1 == n) {
      for (int64_t off : *window[i]) tap(base + off);
      return;
    }
    for (int64_t off : *window[i]) self(self, i + 1, base + off);
  };
  walk(walk, 0, 0);
}

template <class T>
void max_pool(KernelCtx& c) {
  const PoolGeom g = pool_geom(c);
  const size_t n = g.in.size();
  const int64_t planes = c.in(0).dim(0) * c.in(0).dim(1);
  const bool column_major = c.node.i("storage_order") == 1;
  const T* x = c.in(0).as<T>();
  T* y = c.out(0).as<T>();
  int64_t* indices = c.has_out(1) ? c.out(1).as<int64_t>() : nullptr;

#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * g.in_size;
    for_each_output(g, [&](int64_t p, const std::vector<int64_t>&, const Window& win) {
      T best = std::numeric_limits<T>::lowest();
      int64_t best_at = -1;  // row-major offset in the plane; the first maximum wins
      for_each_tap(win, [&](int64_t off) {
        if (best_at < 0 || xp[off] > best) best = xp[off], best_at = off;
      });
      y[plane * g.out_size + p] = best;
      if (!indices) return;
      int64_t at = best_at;
      if (column_major && at >= 0) {
        // storage_order 1: the same element's index with the first spatial dim varying fastest.
        int64_t rem = at, col = 0, stride = 1;
        std::vector<int64_t> coord(n);
        for (size_t i = n; i-- > 0;) coord[i] = rem % g.in[i], rem /= g.in[i];
        for (size_t i = 0; i < n; ++i) col += coord[i] * stride, stride *= g.in[i];
        at = col;
      }
      indices[plane * g.out_size + p] = at < 0 ? -1 : plane * g.in_size + at;
    });
  }
}

template <class T>
void average_pool(KernelCtx& c) {
  const PoolGeom g = pool_geom(c);
  const size_t n = g.in.size();
  const int64_t planes = c.in(0).dim(0) * c.in(0).dim(1);
  const bool include_pad = c.node.i("count_include_pad") == 1;
  const T* x = c.in(0).as<T>();
  T* y = c.out(0).as<T>();

#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * g.in_size;
    for_each_output(g, [&](int64_t p, const std::vector<int64_t>& o, const Window& win) {
      double sum = 0;
      int64_t count = 1;
      for (size_t i = 0; i < n; ++i)
        count *= include_pad ? g.dims[i].padded_count[size_t(o[i])] : int64_t(win[i]->size());
      for_each_tap(win, [&](int64_t off) { sum += double(xp[off]); });
      // A window entirely in padding (count_include_pad=0 with pads as large as the kernel) is 0/0.
      y[plane * g.out_size + p] = T(count > 0 ? sum / double(count) : std::nan(""));
    });
  }
}

template <class T>
void global_average_pool(KernelCtx& c) {
  const TensorRef& xr = c.in(0);
  const int64_t planes = xr.dim(0) * xr.dim(1);
  const int64_t size = planes ? xr.numel / planes : 0;
  const T* x = xr.as<T>();
  T* y = c.out(0).as<T>();
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    double s = 0;
    for (int64_t i = 0; i < size; ++i) s += double(x[p * size + i]);
    y[p] = T(s / double(size));
  }
}

}  // namespace

void MaxPool_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return max_pool<float>(c);
    case DType::f64: return max_pool<double>(c);
    case DType::i8: return max_pool<int8_t>(c);
    case DType::u8: return max_pool<uint8_t>(c);
    default: c.fail("input 0 is {}; MaxPool runs on float32, float64, int8 and uint8", dtype_name(c.in(0).dtype));
  }
}

void AveragePool_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return average_pool<float>(c);
    case DType::f64: return average_pool<double>(c);
    default: c.fail("input 0 is {}; AveragePool runs on float32 and float64", dtype_name(c.in(0).dtype));
  }
}

void GlobalAveragePool_forward(KernelCtx& c) {
  switch (c.in(0).dtype) {
    case DType::f32: return global_average_pool<float>(c);
    case DType::f64: return global_average_pool<double>(c);
    default: c.fail("input 0 is {}; GlobalAveragePool runs on float32 and float64", dtype_name(c.in(0).dtype));
  }
}

}  // namespace onnxdp
