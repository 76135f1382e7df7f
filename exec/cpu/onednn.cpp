// oneDNN behind the CPU backend's float convolutions and products (see exec/cpu/onednn.h).
#include "exec/cpu/onednn.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "exec/cpu/threads.h"

#ifdef ONNXDP_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
// libgomp's, which Debian's libdnnl runs its threads on (declared here: clang's builds may not
// find GCC's omp.h).
extern "C" void omp_set_num_threads(int);
#endif

namespace onnxdp {

namespace {
// -1: not read yet; else 0 (off) or 1 (on).
std::atomic<int> dnnl_switch{-1};
}  // namespace

bool dnnl_enabled() {
  if (!dnnl_built()) return false;
  int on = dnnl_switch.load();
  if (on < 0) {
    const char* s = std::getenv("ONNXDP_DNNL");
    const std::string v = s ? s : "";
    if (v.empty() || v == "1") on = 1;
    else if (v == "0") on = 0;
    else throw std::invalid_argument("ONNXDP_DNNL is '" + v + "'; expected 0 (oneDNN off) or 1 (on)");
    dnnl_switch = on;
  }
  return on == 1;
}

void set_dnnl_enabled(bool on) { dnnl_switch = on ? 1 : 0; }

#ifndef ONNXDP_HAVE_DNNL

bool dnnl_built() { return false; }
void dnnl_one_thread() {}
bool dnnl_conv_forward(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*, float*) {
  return false;
}
bool dnnl_conv_transpose(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*, float*) {
  return false;
}
bool dnnl_conv_filter_grad(const ConvWindows&, const ConvChannels&, const float*, const float*, float*) { return false; }

#else

bool dnnl_built() { return true; }

void dnnl_one_thread() {
  thread_local bool once = (omp_set_num_threads(1), true);  // onnxdp's team splits the work instead
  (void)once;
}

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// The three convolutions, each named by what oneDNN calls it. In all three the window reads the
// bound grid ("src" to oneDNN) and iterates over the other ("dst"); ConvTranspose is the backward
// data pass of the convolution whose dst is its input.
enum class Kind { forward, backward_data, backward_weights };

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One argument of a primitive: the caller's plain tensor, and where the primitive's layout differs,
// the primitive's own buffer and the reorder between the two.
struct Slot {
  int arg = 0;
  bool output = false, moved = false;
  memory user, inner;
  dnnl::reorder move;
};

// A primitive of one shape with its slots, made once per thread.
struct Prim {
  dnnl::primitive prim;
  std::vector<Slot> slots;
  std::unordered_map<int, memory> args;
};

// Plain layouts of 1, 2 and 3 spatial dims.
Tag activation_tag(size_t n) { return n == 1 ? Tag::ncw : n == 2 ? Tag::nchw : Tag::ncdhw; }
Tag weight_tag(size_t n, bool grouped) {
  if (grouped) return n == 1 ? Tag::goiw : n == 2 ? Tag::goihw : Tag::goidhw;
  return n == 1 ? Tag::oiw : n == 2 ? Tag::oihw : Tag::oidhw;
}

void add_slot(Prim& p, int arg, bool output, const memory::desc& plain, const memory::desc& inner) {
  Slot s;
  s.arg = arg;
  s.output = output;
  s.user = memory(plain, cpu_engine(), DNNL_MEMORY_NONE);
  s.moved = plain != inner;
  if (s.moved) {
    s.inner = memory(inner, cpu_engine());
    s.move = output ? dnnl::reorder(s.inner, s.user) : dnnl::reorder(s.user, s.inner);
  }
  p.args[arg] = s.moved ? s.inner : s.user;
  p.slots.push_back(std::move(s));
}

// The primitive for `images` images of a geometry: src channels per group `cs`, dst `cd`. Null
// where oneDNN refuses it.
std::unique_ptr<Prim> make_prim(Kind kind, const ConvWindows& g, int64_t groups, int64_t cs, int64_t cd,
                                int64_t images, bool bias) {
  const size_t n = g.iter.size();
  if (n < 1 || n > 3) return nullptr;
  memory::dims src{images, groups * cs}, dst{images, groups * cd}, wei, strides, dilates, pad_l, pad_r;
  if (groups > 1) wei.push_back(groups);
  wei.push_back(cd);
  wei.push_back(cs);
  for (size_t i = 0; i < n; ++i) {
    if (g.pad_begin[i] < 0 || g.dilations[i] < 1 || g.strides[i] < 1) return nullptr;
    src.push_back(g.bound[i]);
    dst.push_back(g.iter[i]);
    wei.push_back(g.kernel[i]);
    strides.push_back(g.strides[i]);
    dilates.push_back(g.dilations[i] - 1);
    pad_l.push_back(g.pad_begin[i]);
    // What the far side pads; a negative value short of a stride (input the last window never
    // reaches: a strided window's remainder, ConvTranspose's output_padding) is oneDNN's 0.
    const int64_t span = (g.kernel[i] - 1) * g.dilations[i] + 1;
    int64_t r = (g.iter[i] - 1) * g.strides[i] + span - g.bound[i] - g.pad_begin[i];
    if (r < 0 && r > -g.strides[i]) r = 0;
    pad_r.push_back(r);
  }
  const auto f32 = memory::data_type::f32;
  const memory::desc src_plain(src, f32, activation_tag(n)), dst_plain(dst, f32, activation_tag(n)),
      wei_plain(wei, f32, weight_tag(n, groups > 1)), bias_plain({groups * cd}, f32, Tag::x);
  // A 1x1 window runs in the plain layouts (oneDNN's gemm path): there the blocked ones, with their
  // reorders from and to NCHW, were slower on every shape measured (one thread, batch 32: 16->32
  // at 32x32 stride 2 forward 29 GFLOP/s against 43, 64->64 at 8x8 stride 1 94 against 132;
  // bench/results/2026-12-05-conv-engines.md). Other windows: the layouts oneDNN picks (blocked).
  const bool pointwise = std::all_of(g.kernel.begin(), g.kernel.end(), [](int64_t k) { return k == 1; });
  const memory::desc src_any = pointwise ? src_plain : memory::desc(src, f32, Tag::any),
                     dst_any = pointwise ? dst_plain : memory::desc(dst, f32, Tag::any),
                     wei_any = pointwise ? wei_plain : memory::desc(wei, f32, Tag::any);
  const auto algo = dnnl::algorithm::convolution_direct;
  try {
    using Fwd = dnnl::convolution_forward;
    const Fwd::desc fd = bias ? Fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, bias_plain,
                                          dst_any, strides, dilates, pad_l, pad_r)
                              : Fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, dst_any, strides,
                                          dilates, pad_l, pad_r);
    const Fwd::primitive_desc fpd(fd, cpu_engine());
    auto p = std::make_unique<Prim>();
    if (kind == Kind::forward) {
      p->prim = Fwd(fpd);
      add_slot(*p, DNNL_ARG_SRC, false, src_plain, fpd.src_desc());
      add_slot(*p, DNNL_ARG_WEIGHTS, false, wei_plain, fpd.weights_desc());
      if (bias) add_slot(*p, DNNL_ARG_BIAS, false, bias_plain, bias_plain);
      add_slot(*p, DNNL_ARG_DST, true, dst_plain, fpd.dst_desc());
    } else if (kind == Kind::backward_data) {
      using Bwd = dnnl::convolution_backward_data;
      const Bwd::primitive_desc pd(Bwd::desc(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r),
                                   cpu_engine(), fpd);
      p->prim = Bwd(pd);
      add_slot(*p, DNNL_ARG_DIFF_DST, false, dst_plain, pd.diff_dst_desc());
      add_slot(*p, DNNL_ARG_WEIGHTS, false, wei_plain, pd.weights_desc());
      add_slot(*p, DNNL_ARG_DIFF_SRC, true, src_plain, pd.diff_src_desc());
    } else {
      using Bww = dnnl::convolution_backward_weights;
      const Bww::primitive_desc pd(Bww::desc(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r),
                                   cpu_engine(), fpd);
      p->prim = Bww(pd);
      add_slot(*p, DNNL_ARG_SRC, false, src_plain, pd.src_desc());
      add_slot(*p, DNNL_ARG_DIFF_DST, false, dst_plain, pd.diff_dst_desc());
      add_slot(*p, DNNL_ARG_DIFF_WEIGHTS, true, wei_plain, pd.diff_weights_desc());
    }
    return p;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

// This thread's primitive for the shape (made on first use; null kept for a refused shape).
Prim* prim_for(Kind kind, const ConvWindows& g, int64_t groups, int64_t cs, int64_t cd, int64_t images, bool bias) {
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<Prim>> cache;
  dnnl_one_thread();
  std::vector<int64_t> key{int64_t(kind), groups, cs, cd, images, bias};
  for (const auto* v : {&g.iter, &g.bound, &g.kernel, &g.strides, &g.dilations, &g.pad_begin}) {
    key.push_back(int64_t(v->size()));
    key.insert(key.end(), v->begin(), v->end());
  }
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(std::move(key), make_prim(kind, g, groups, cs, cd, images, bias)).first;
  return it->second.get();
}

// Runs p with the caller's tensors (in the order of its slots): inputs into the primitive's
// layout, the primitive, its outputs back.
void run(Prim& p, std::initializer_list<const float*> tensors) {
  thread_local dnnl::stream stream(cpu_engine());
  size_t i = 0;
  for (const float* t : tensors) p.slots[i++].user.set_data_handle(const_cast<float*>(t));
  for (Slot& s : p.slots)
    if (s.moved && !s.output) s.move.execute(stream, s.user, s.inner);
  p.prim.execute(stream, p.args);
  for (Slot& s : p.slots)
    if (s.moved && s.output) s.move.execute(stream, s.inner, s.user);
  stream.wait();
}

// How many ranges of images a call's batch is cut into: one per thread of this thread's team (one
// when nested in a share or given one image).
int shares_of(int64_t images) { return in_thread_share() ? 1 : int(std::min<int64_t>(cpu_threads(), images)); }

// Calls work(share, first image, end image) for each of the batch's shares_of(images) ranges.
template <class Work>
void over_images(int64_t images, const Work& work) {
  const int n = shares_of(images);
  if (n <= 1) return work(0, 0, images);
  run_shares(n, [&](int t, int shares) { work(t, images * t / shares, images * (t + 1) / shares); });
}

bool usable(const ConvChannels& ch) { return dnnl_enabled() && ch.images > 0; }

// The first share's size: whether oneDNN takes a geometry does not depend on the batch, so the
// calling thread asks for that share's primitive before any work starts.
int64_t first_share(int64_t images) { return images / std::max(shares_of(images), 1); }

}  // namespace

bool dnnl_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w, const float* bias,
                       float* y) {
  if (!usable(ch)) return false;
  const int64_t G = ch.groups, S = g.bound_size(), P = g.iter_size();
  if (!prim_for(Kind::forward, g, G, ch.in, ch.out, first_share(ch.images), bias != nullptr)) return false;
  over_images(ch.images, [&](int, int64_t lo, int64_t hi) {
    Prim* p = prim_for(Kind::forward, g, G, ch.in, ch.out, hi - lo, bias != nullptr);
    if (!p) throw std::runtime_error("oneDNN refused a Conv it took for another batch size");
    if (bias)
      run(*p, {x + lo * G * ch.in * S, w, bias, y + lo * G * ch.out * P});
    else
      run(*p, {x + lo * G * ch.in * S, w, y + lo * G * ch.out * P});
  });
  return true;
}

bool dnnl_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                         const float* bias, float* y) {
  if (!usable(ch)) return false;
  // The backward data pass of the convolution from y's grid (src, ch.out per group) to x's (dst).
  const int64_t G = ch.groups, S = g.bound_size(), P = g.iter_size();
  if (!prim_for(Kind::backward_data, g, G, ch.out, ch.in, first_share(ch.images), false)) return false;
  over_images(ch.images, [&](int, int64_t lo, int64_t hi) {
    Prim* p = prim_for(Kind::backward_data, g, G, ch.out, ch.in, hi - lo, false);
    if (!p) throw std::runtime_error("oneDNN refused a ConvTranspose it took for another batch size");
    float* yl = y + lo * G * ch.out * S;
    run(*p, {x + lo * G * ch.in * P, w, yl});
    if (bias)
      for (int64_t i = 0; i < (hi - lo) * G * ch.out; ++i) {
        const float b = bias[i % (G * ch.out)];
        for (float *v = yl + i * S, *e = v + S; v < e; ++v) *v += b;
      }
  });
  return true;
}

bool dnnl_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy, float* dw) {
  if (!usable(ch)) return false;
  const int64_t G = ch.groups, S = g.bound_size(), P = g.iter_size(), wsize = G * ch.out * ch.in * g.kernel_size();
  if (!prim_for(Kind::backward_weights, g, G, ch.in, ch.out, first_share(ch.images), false)) return false;
  // Share 0 writes dw, the others their own sums, added in share order at the end.
  std::vector<std::vector<float>> partial;
  partial.resize(size_t(std::max(shares_of(ch.images), 1)));
  over_images(ch.images, [&](int t, int64_t lo, int64_t hi) {
    Prim* p = prim_for(Kind::backward_weights, g, G, ch.in, ch.out, hi - lo, false);
    if (!p) throw std::runtime_error("oneDNN refused a ConvGradFilter it took for another batch size");
    float* out = dw;
    if (t > 0) {
      partial[size_t(t)].resize(size_t(wsize));
      out = partial[size_t(t)].data();
    }
    run(*p, {x + lo * G * ch.in * S, dy + lo * G * ch.out * P, out});
  });
  for (size_t t = 1; t < partial.size(); ++t)
    if (!partial[t].empty())
      for (int64_t i = 0; i < wsize; ++i) dw[i] += partial[t][size_t(i)];
  return true;
}

#endif

}  // namespace onnxdp
