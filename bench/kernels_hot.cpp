// The CPU kernels of issue 25 alone: the convolution engine's three (exec/cpu/conv_gemm.h: its own
// loops, oneDNN, the im2col engine, as each takes them) on resnet's shapes (batch 32, the
// activations channel-blocked where a step keeps them so), the sample cnn's (batch 256), ConvNeXt's
// 7x7 depthwise window and bench/depthwise.py's others ("dw"; batch 8; "dw-blk" the same windows
// blocked); and the matrix products of gpt_small's step (exec/cpu/blas.h, as MatMul, Gemm and
// FusedMatMul call them). Each shape runs twice:
//   hot   the same tensors again and again (best of 10 after 2 warm-ups): what the kernel does
//         when its operands are in cache, as the sgemm figure is measured;
//   cold  a 64 MB buffer written between calls, so the operands come from memory as they mostly
//         do in a training step (another op wrote them last, megabytes ago).
// GFLOP/s (2 x multiply-adds, every tap counted, padding included), and hot as a percentage of
// the sgemm figure --profile prints (exec/profile.h), taken just before the pass (three rounds,
// the median ratio: hot_beside_figure). One thread.
// Beside them, each convolution pass's bound: the most GFLOP/s its bytes allow, from the time to
// read its inputs once and write its output once, hot, by AVX-512 loads and stores (its own
// buffers; of x only the lines the window reads, where they lie), or the sgemm figure where that
// is lower. "% bound" is hot over it: a pass far under the figure but near its bound waits
// for its operands' bytes, not for its multiply-adds (bench/results/2026-12-07-kernels-bound.md).
// Not part of the default build:
//   cmake --build build --target kernels_hot && build/kernels_hot [model]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu/avx512.h"
#include "exec/cpu/blas.h"
#include "exec/cpu/conv_gemm.h"
#include "exec/cpu/threads.h"
#include "exec/profile.h"

using namespace onnxdp;

namespace {

struct Shape2 {
  const char* model;
  int64_t n, c, h, w, m, k, stride, pad, groups;
  bool x_blocked, y_blocked;
  bool input_grad = true;  // false for a first layer: a step computes no gradient of the data
};

// Buffers that start on a 64-byte line, as the engine's tensors do (kPlanAlign, graph/tensor.h).
// std::vector's large blocks start 16 bytes past a page, where every vector load of a row splits
// two lines: the cnn's 1 -> 8 filter gradient ran at 92 against 108 GFLOP/s on aligned buffers.
template <class T>
struct Aligned {
  using value_type = T;
  Aligned() = default;
  template <class U>
  Aligned(const Aligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const Aligned&) const { return true; }
};
using Floats = std::vector<float, Aligned<float>>;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<float> flush_buffer(size_t(16) << 20);

void flush() {
  for (size_t i = 0; i < flush_buffer.size(); i += 16) flush_buffer[i] += 1.f;
}

template <class F>
double best_seconds(bool cold, const F& f) {
  double best = 1e30;
  for (int r = 0; r < 12; ++r) {
    if (cold) flush();
    const double t0 = now();
    f();
    const double t = now() - t0;
    if (r >= 2) best = std::min(best, t);
  }
  return best;
}

// A pass's hot GFLOP/s beside the sgemm figure taken just before it, three times; the round
// whose ratio is the median. On a shared VM the figure alone moves within minutes (109-205 GFLOP/s
// within one run of 2026-12-07), so one figure at the start measured later rows against another
// machine state (bench/results/2026-12-07-row-figure.md).
struct Hot {
  double gflops, figure;
};

template <class F>
Hot hot_beside_figure(double flops, const F& f) {
  Hot round[3];
  for (Hot& r : round) {
    r.figure = blas_sgemm_gflops(512);
    r.gflops = flops / best_seconds(false, f) * 1e-9;
  }
  std::sort(std::begin(round), std::end(round),
            [](const Hot& a, const Hot& b) { return a.gflops / a.figure < b.gflops / b.figure; });
  return round[1];
}

#ifdef ONNXDP_AVX512_LOOPS
float stream_sink;

// Reads every float of `in` once, and the 64-byte lines of x at `lines` (offsets in floats) where
// they lie, and writes every float of `out` once: the bytes a pass must move.
ONNXDP_AVX512 void stream(std::initializer_list<const Floats*> in, Floats& out, const Floats* x = nullptr,
                          const std::vector<int64_t>* lines = nullptr) {
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  if (x != nullptr)
    for (size_t i = 0; i < lines->size(); ++i)
      s[i % 4] = _mm512_add_ps(s[i % 4], _mm512_load_ps(x->data() + (*lines)[i]));
  for (const Floats* v : in) {
    const float* p = v->data();
    const size_t n = v->size();
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
      for (int k = 0; k < 4; ++k) s[k] = _mm512_add_ps(s[k], _mm512_load_ps(p + i + 16 * k));
    for (; i < n; ++i) stream_sink += p[i];
  }
  const __m512 c = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
  float* q = out.data();
  const size_t n = out.size();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_store_ps(q + i, c);
  for (; i < n; ++i) q[i] = stream_sink;
  stream_sink += _mm512_reduce_add_ps(c);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  // kernels_hot [model]: that model's rows alone ("gpt": the products).
  const std::string only = argc > 1 ? argv[1] : "";
  set_cpu_threads(1);
  const std::vector<Shape2> shapes = {
      {"resnet", 32, 3, 32, 32, 16, 3, 1, 1, 1, false, true, false},  // the stem: x plain (3 channels)
      {"resnet", 32, 16, 32, 32, 16, 3, 1, 1, 1, true, true},
      {"resnet", 32, 16, 32, 32, 32, 3, 2, 1, 1, true, true},
      {"resnet", 32, 32, 16, 16, 32, 3, 1, 1, 1, true, true},
      {"resnet", 32, 32, 16, 16, 64, 3, 2, 1, 1, true, true},
      {"resnet", 32, 64, 8, 8, 64, 3, 1, 1, 1, true, true},
      {"resnet", 32, 16, 32, 32, 32, 1, 2, 0, 1, true, true},     // projections
      {"resnet", 32, 32, 16, 16, 64, 1, 2, 0, 1, true, true},
      {"cnn", 256, 1, 8, 8, 8, 3, 1, 1, 1, false, false, false},
      {"cnn", 256, 8, 4, 4, 16, 3, 1, 1, 1, false, false},
      {"convnext", 8, 96, 56, 56, 96, 7, 1, 3, 96, false, false},  // depthwise
      // bench/depthwise.py's other windows (batch 8): ConvNeXt's third stage, a 5x5, MobileNet's 3x3.
      {"dw", 8, 384, 14, 14, 384, 7, 1, 3, 384, false, false},
      {"dw", 8, 64, 28, 28, 64, 5, 1, 2, 64, false, false},
      {"dw", 8, 64, 28, 28, 64, 3, 1, 1, 64, false, false},
      {"dw", 8, 96, 56, 56, 96, 3, 1, 1, 96, false, false},
      {"dw", 8, 32, 112, 112, 32, 3, 1, 1, 32, false, false},
      // The same windows blocked (graph/passes/block_channels.h keeps a depthwise window so where
      // its neighbours are convolutions, BatchNormalizations, Relus and Adds: MobileNet's blocks).
      {"dw-blk", 8, 96, 56, 56, 96, 7, 1, 3, 96, true, true},
      {"dw-blk", 8, 384, 14, 14, 384, 7, 1, 3, 384, true, true},
      {"dw-blk", 8, 64, 28, 28, 64, 5, 1, 2, 64, true, true},
      {"dw-blk", 8, 64, 28, 28, 64, 3, 1, 1, 64, true, true},
      {"dw-blk", 8, 96, 56, 56, 96, 3, 1, 1, 96, true, true},
      {"dw-blk", 8, 32, 112, 112, 32, 3, 1, 1, 32, true, true},
  };
  std::printf("sgemm figure %.1f GFLOP/s at the start (512^3, one thread); each row's taken beside it\n",
              blas_sgemm_gflops(512));
  std::printf("%-8s %-26s %-9s %14s %14s %8s %8s %8s %8s\n", "model", "shape", "pass", "hot GFLOP/s", "cold GFLOP/s",
              "figure", "hot %", "bound", "% bound");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Shape2& s : shapes) {
    if (!only.empty() && only != s.model) continue;
    const int64_t oh = (s.h + 2 * s.pad - s.k) / s.stride + 1, ow = (s.w + 2 * s.pad - s.k) / s.stride + 1;
    ConvWindows g;
    g.iter = {oh, ow};
    g.bound = {s.h, s.w};
    g.kernel = {s.k, s.k};
    g.strides = {s.stride, s.stride};
    g.dilations = {1, 1};
    g.pad_begin = {s.pad, s.pad};
    const ConvChannels fwd{s.n, s.groups, s.c / s.groups, s.m / s.groups, s.x_blocked, s.y_blocked};
    const ConvChannels bwd{s.n, s.groups, s.m / s.groups, s.c / s.groups, s.y_blocked, s.x_blocked};
    Floats x(size_t(s.n * s.c * s.h * s.w)), dx(x.size()), w(size_t(s.m * (s.c / s.groups) * s.k * s.k)),
        dw(w.size()), y(size_t(s.n * s.m * oh * ow));
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : y) v = u(rng);
    const double flops = 2.0 * double(s.n) * double(s.m) * double(oh * ow) * double(s.c / s.groups) * double(s.k * s.k);
    char name[64];
    std::snprintf(name, sizeof name, "%lld->%lld %lldx%lld k%lld s%lld%s", (long long)s.c, (long long)s.m,
                  (long long)s.h, (long long)s.w, (long long)s.k, (long long)s.stride, s.groups > 1 ? " dw" : "");
    // The lines of x a window reads at all, where they lie: a 1x1 window at stride 2 reads a
    // quarter of the positions, which are a quarter of a blocked tensor's lines (16 channels a
    // line) and half of a plain one's (every other row, all its lines). (A compacted copy of that
    // part, which fits L2 where x does not, read resnet's 16 -> 32 projection as bound by the
    // figure; in place, its lines come from L3: 2026-12-07-small-filter.md.)
    const auto rows_read = [&](int64_t size, int64_t out) {
      std::vector<char> read(size_t(size), 0);
      for (int64_t o = 0; o < out; ++o)
        for (int64_t t = 0; t < s.k; ++t)
          if (const int64_t at = o * s.stride - s.pad + t; at >= 0 && at < size) read[size_t(at)] = 1;
      return read;
    };
    const std::vector<char> hr = rows_read(s.h, oh), wr = rows_read(s.w, ow);
    std::vector<int64_t> x_lines;
    for (int64_t i = 0; i < int64_t(x.size()); i += 16) {  // line i / 16: its first float's position
      bool read = false;
      for (int64_t f = i; f < i + 16 && !read; ++f) {
        const int64_t pos = s.x_blocked ? f / 16 % (s.h * s.w) : f % (s.h * s.w);
        read = hr[size_t(pos / s.w)] && wr[size_t(pos % s.w)];
      }
      if (read) x_lines.push_back(i);
    }
    const struct {
      const char* pass;
      std::function<void()> run, moves;  // the pass, and its operands' bytes alone
    } passes[] = {
        {"forward", [&] { conv_forward<float>(g, fwd, x.data(), w.data(), nullptr, y.data()); },
         [&] { stream({&w}, y, &x, &x_lines); }},
        {"input", [&] { conv_transpose<float>(g, bwd, y.data(), w.data(), nullptr, dx.data()); },
         [&] { stream({&y, &w}, dx); }},
        {"filter", [&] { conv_filter_grad<float>(g, fwd, x.data(), y.data(), dw.data()); },
         [&] { stream({&y}, dw, &x, &x_lines); }},
    };
    for (const auto& p : passes) {
      if (!s.input_grad && std::string(p.pass) == "input") continue;
      const Hot hot = hot_beside_figure(flops, p.run);
      const double cold = flops / best_seconds(true, p.run) * 1e-9;
      double bound = hot.figure;
#ifdef ONNXDP_AVX512_LOOPS
      if (cpu_has_avx512()) bound = std::min(hot.figure, flops / best_seconds(false, p.moves) * 1e-9);
#endif
      std::printf("%-8s %-26s %-9s %14.1f %14.1f %8.1f %7.0f%% %8.1f %7.0f%%\n", s.model, name, p.pass, hot.gflops,
                  cold, hot.figure, 100.0 * hot.gflops / hot.figure, bound, 100.0 * hot.gflops / bound);
    }
  }

  // gpt_small's products (batch 8 x context 128 = 1024 rows), as its profile names them: the
  // Linear forwards with their bias (NT), the input gradients (NN), the weight gradients (TN).
  struct Product {
    char ta, tb;
    int64_t m, n, k;
    bool bias;
  };
  const std::vector<Product> products = {
      {'N', 'T', 1024, 1024, 256, true}, {'N', 'T', 1024, 256, 1024, true}, {'N', 'T', 1024, 768, 256, true},
      {'N', 'T', 1024, 256, 256, true},  {'N', 'N', 1024, 256, 1024, false}, {'N', 'N', 1024, 1024, 256, false},
      {'N', 'N', 1024, 256, 768, false}, {'N', 'N', 1024, 256, 256, false},  {'T', 'N', 1024, 256, 1024, false},
      {'T', 'N', 256, 1024, 1024, false}, {'T', 'N', 768, 256, 1024, false}, {'T', 'N', 256, 256, 1024, false},
  };
  if (!only.empty() && only != "gpt") return 0;
  std::printf("\n%-8s %-26s %-9s %14s %14s %8s %8s\n", "model", "product", "", "hot GFLOP/s", "cold GFLOP/s", "figure",
              "hot %");
  for (const Product& q : products) {
    const bool ta = q.ta == 'T', tb = q.tb == 'T';
    Floats a(size_t(q.m * q.k)), b(size_t(q.k * q.n)), bias(size_t(q.n)), c(size_t(q.m * q.n));
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    for (float& v : bias) v = u(rng);
    const int64_t lda = ta ? q.m : q.k, ldb = tb ? q.k : q.n;
    const std::function<void()> run = [&] {
      if (q.bias) blas_gemm_bias(tb, q.m, q.n, q.k, a.data(), lda, b.data(), ldb, bias.data(), c.data(), q.n);
      else blas_gemm(ta, tb, q.m, q.n, q.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), q.n);
    };
    const double flops = 2.0 * double(q.m) * double(q.n) * double(q.k);
    const Hot hot = hot_beside_figure(flops, run);
    const double cold = flops / best_seconds(true, run) * 1e-9;
    char name[64];
    std::snprintf(name, sizeof name, "m%lld n%lld k%lld %c%c%s", (long long)q.m, (long long)q.n, (long long)q.k, q.ta,
                  q.tb, q.bias ? " +bias" : "");
    std::printf("%-8s %-26s %-9s %14.1f %14.1f %8.1f %7.0f%%\n", "gpt", name, "", hot.gflops, cold, hot.figure,
                100.0 * hot.gflops / hot.figure);
  }
}
