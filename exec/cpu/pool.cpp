// CPU kernels of MaxPool, AveragePool and GlobalAveragePool, N-D. The windows, their padding and
// count_include_pad: exec/cpu/pool_windows.h. Threads split the (n, c) planes.
#include <cmath>
#include <limits>
#include <vector>

#include "exec/cpu/clones.h"
#include "exec/cpu/pool_windows.h"
#include "exec/kernel.h"

namespace onnxdp {

namespace {

// Planes lo..hi of MaxPool over uniform windows (PoolWindows::flat [window, out_size]): y
// [planes, out_size] starts as each window's first tap, then every later tap of all outputs in
// one pass, `v > best ? v : best` (a max instruction: no branch to mispredict on random data).
// A NaN loses there but must win (takes_max), so a plane that holds one is redone window by window.
template <class T>
ONNXDP_CPU_CLONES void max_pool_flat(const T* x, T* y, int64_t lo, int64_t hi, int64_t in_size, int64_t out_size,
                                     const int32_t* flat, int64_t window) {
  for (int64_t plane = lo; plane < hi; ++plane) {
    const T* xp = x + plane * in_size;
    T* yp = y + plane * out_size;
    bool nan = false;
    for (int64_t p = 0; p < out_size; ++p) {
      const T v = xp[flat[p]];
      yp[p] = v;
      nan |= v != v;
    }
    for (int64_t k = 1; k < window; ++k) {
      const int32_t* taps = flat + k * out_size;
      for (int64_t p = 0; p < out_size; ++p) {
        const T v = xp[taps[p]], best = yp[p];
        yp[p] = v > best ? v : best;
        nan |= v != v;
      }
    }
    if (!nan) continue;
    for (int64_t p = 0; p < out_size; ++p) {
      T best = xp[flat[p]];
      for (int64_t k = 1; k < window; ++k)
        if (takes_max(xp[flat[k * out_size + p]], best)) best = xp[flat[k * out_size + p]];
      yp[p] = best;
    }
  }
}

template <class T>
void max_pool(KernelCtx& c) {
  const PoolWindows w = pool_windows(c.node, *c.in(0).shape, *c.out(0).shape);
  const size_t n = w.in.size();
  const int64_t planes = c.in(0).dim(0) * c.in(0).dim(1);
  const bool column_major = c.node.i("storage_order") == 1;
  const T* x = c.in(0).as<T>();
  T* y = c.out(0).as<T>();
  int64_t* indices = c.has_out(1) ? c.out(1).as<int64_t>() : nullptr;
  const bool parallel = c.in(0).numel > parallel_min_elements();

  if (w.window > 0 && !indices) {
    split_rows(planes, parallel, [&](int, int64_t lo, int64_t hi) {
      max_pool_flat(x, y, lo, hi, w.in_size, w.out_size, w.flat.data(), w.window);
    });
    return;
  }
  parallel_for(planes, parallel, [&](int64_t plane) {
    const T* xp = x + plane * w.in_size;
    for (int64_t p = 0; p < w.out_size; ++p) {
      T best = std::numeric_limits<T>::lowest();
      int64_t best_at = -1;  // row-major offset in the plane; the first maximum wins
      w.for_each_tap(p, [&](int64_t off) {
        if (best_at < 0 || takes_max(xp[off], best)) best = xp[off], best_at = off;
      });
      y[plane * w.out_size + p] = best;
      if (!indices) continue;
      int64_t at = best_at;
      if (column_major && at >= 0) {
        // storage_order 1: the same element's index with the first spatial dim varying fastest.
        int64_t rem = at, col = 0, stride = 1;
        std::vector<int64_t> coord(n);
        for (size_t i = n; i-- > 0;) coord[i] = rem % w.in[i], rem /= w.in[i];
        for (size_t i = 0; i < n; ++i) col += coord[i] * stride, stride *= w.in[i];
        at = col;
      }
      indices[plane * w.out_size + p] = at < 0 ? -1 : plane * w.in_size + at;
    }
  });
}

template <class T>
void average_pool(KernelCtx& c) {
  const PoolWindows w = pool_windows(c.node, *c.in(0).shape, *c.out(0).shape);
  const int64_t planes = c.in(0).dim(0) * c.in(0).dim(1);
  const bool include_pad = c.node.i("count_include_pad") == 1;
  const T* x = c.in(0).as<T>();
  T* y = c.out(0).as<T>();

  parallel_for(planes, c.in(0).numel > parallel_min_elements(), [&](int64_t plane) {
    const T* xp = x + plane * w.in_size;
    for (int64_t p = 0; p < w.out_size; ++p) {
      double sum = 0;
      const int64_t count = include_pad ? w.padded[size_t(p)] : w.taps(p);
      w.for_each_tap(p, [&](int64_t off) { sum += double(xp[off]); });
      // A window entirely in padding (count_include_pad=0 with pads as large as the kernel) is 0/0.
      y[plane * w.out_size + p] = T(count > 0 ? sum / double(count) : std::nan(""));
    }
  });
}

template <class T>
void global_average_pool(KernelCtx& c) {
  const TensorRef& xr = c.in(0);
  const int64_t planes = xr.dim(0) * xr.dim(1);
  const int64_t size = planes ? xr.numel / planes : 0;
  const T* x = xr.as<T>();
  T* y = c.out(0).as<T>();
  parallel_for(planes, c.in(0).numel > parallel_min_elements(), [&](int64_t p) {
    double s = 0;
    for (int64_t i = 0; i < size; ++i) s += double(x[p * size + i]);
    y[p] = T(s / double(size));
  });
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
