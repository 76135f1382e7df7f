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

#include "exec/cpu/blocked.h"
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
bool dnnl_conv_forward(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*, float*,
                       ValueTag) {
  return false;
}
bool dnnl_conv_transpose(const ConvWindows&, const ConvChannels&, const float*, const float*, const float*, float*,
                         ValueTag) {
  return false;
}
bool dnnl_conv_filter_grad(const ConvWindows&, const ConvChannels&, const float*, const float*, float*, ValueTag,
                           ValueTag) {
  return false;
}
int64_t dnnl_shared_reorders() { return 0; }
bool dnnl_matmul_bias(bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, const float*,
                      float*, int64_t) {
  return false;
}
int64_t dnnl_bias_products() { return 0; }

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

// What an input's own buffer holds: images first.. of the value `tag` names (see run()).
struct Held {
  ValueTag tag;
  int64_t first = -1;
  bool operator==(const Held&) const = default;
};

// One argument of a primitive: the caller's plain tensor, and where the primitive's layout differs,
// the primitive's own buffer and the reorder between the two (with, for an input, what the buffer
// holds now).
struct Slot {
  int arg = 0;
  bool output = false, moved = false;
  memory user, inner;
  dnnl::reorder move;
  memory move_scratch;  // the reorder's scratchpad (empty when it needs none)
  Held held;

  void reorder(dnnl::stream& stream, memory& from, memory& to) {
    std::unordered_map<int, memory> a{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    if (move_scratch) a[DNNL_ARG_SCRATCHPAD] = move_scratch;
    move.execute(stream, a);
  }
};

// Every primitive keeps its own scratchpad (oneDNN's default is one per thread, sized when a
// primitive is made on that thread), so that any thread of the team may run it.
dnnl::primitive_attr own_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

std::atomic<int64_t> shared_reorders{0};

// A primitive of one shape with its slots, made once per thread.
struct Prim {
  dnnl::primitive prim;
  std::vector<Slot> slots;
  std::unordered_map<int, memory> args;
};

// Plain layouts of 1, 2 and 3 spatial dims.
Tag activation_tag(size_t n) { return n == 1 ? Tag::ncw : n == 2 ? Tag::nchw : Tag::ncdhw; }
// onnxdp's channel-blocked layout (exec/cpu/blocked.h) of 1, 2 and 3 spatial dims.
Tag blocked_tag(size_t n) { return n == 1 ? Tag::nCw16c : n == 2 ? Tag::nChw16c : Tag::nCdhw16c; }
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
    const dnnl::reorder::primitive_desc pd = output ? dnnl::reorder::primitive_desc(s.inner, s.user, own_scratchpad())
                                                    : dnnl::reorder::primitive_desc(s.user, s.inner, own_scratchpad());
    s.move = dnnl::reorder(pd);
    if (pd.scratchpad_desc().get_size() > 0) s.move_scratch = memory(pd.scratchpad_desc(), cpu_engine());
  }
  p.args[arg] = s.moved ? s.inner : s.user;
  p.slots.push_back(std::move(s));
}

// The primitive for `images` images of a geometry: src channels per group `cs`, dst `cd`; the
// caller's src / dst tensors plain, or blocked as src_blocked / dst_blocked say. Null where oneDNN
// refuses it.
std::unique_ptr<Prim> make_prim(Kind kind, const ConvWindows& g, int64_t groups, int64_t cs, int64_t cd,
                                int64_t images, bool bias, bool src_blocked, bool dst_blocked) {
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
  const memory::desc src_plain(src, f32, src_blocked ? blocked_tag(n) : activation_tag(n)),
      dst_plain(dst, f32, dst_blocked ? blocked_tag(n) : activation_tag(n)), wei_plain(wei, f32, weight_tag(n, groups > 1)),
      bias_plain({groups * cd}, f32, Tag::x);
  // A 1x1 window runs in the plain layouts (oneDNN's gemm path): there the blocked ones, with their
  // reorders from and to NCHW, were slower on every shape measured (one thread, batch 32: 16->32
  // at 32x32 stride 2 forward 29 GFLOP/s against 43, 64->64 at 8x8 stride 1 94 against 132;
  // bench/results/2026-12-05-conv-engines.md). Other windows, and 1x1 ones with a blocked tensor
  // (no reorder of that one then): the layouts oneDNN picks (blocked).
  const bool pointwise = !src_blocked && !dst_blocked &&
                         std::all_of(g.kernel.begin(), g.kernel.end(), [](int64_t k) { return k == 1; });
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
    const dnnl::primitive_attr attr = own_scratchpad();
    const Fwd::primitive_desc fpd(fd, attr, cpu_engine());
    auto p = std::make_unique<Prim>();
    dnnl::memory::desc scratch;
    if (kind == Kind::forward) {
      p->prim = Fwd(fpd);
      scratch = fpd.scratchpad_desc();
      add_slot(*p, DNNL_ARG_SRC, false, src_plain, fpd.src_desc());
      add_slot(*p, DNNL_ARG_WEIGHTS, false, wei_plain, fpd.weights_desc());
      if (bias) add_slot(*p, DNNL_ARG_BIAS, false, bias_plain, bias_plain);
      add_slot(*p, DNNL_ARG_DST, true, dst_plain, fpd.dst_desc());
    } else if (kind == Kind::backward_data) {
      using Bwd = dnnl::convolution_backward_data;
      const Bwd::primitive_desc pd(Bwd::desc(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r), attr,
                                   cpu_engine(), fpd);
      p->prim = Bwd(pd);
      scratch = pd.scratchpad_desc();
      add_slot(*p, DNNL_ARG_DIFF_DST, false, dst_plain, pd.diff_dst_desc());
      add_slot(*p, DNNL_ARG_WEIGHTS, false, wei_plain, pd.weights_desc());
      add_slot(*p, DNNL_ARG_DIFF_SRC, true, src_plain, pd.diff_src_desc());
    } else {
      using Bww = dnnl::convolution_backward_weights;
      const Bww::primitive_desc pd(Bww::desc(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r), attr,
                                   cpu_engine(), fpd);
      // A depthwise window its depthwise kernels do not take (ConvNeXt's 7x7 on a 6x6 image) gets
      // oneDNN's gemm path: 0.71 ms per step of the zoo's ConvNeXt (batch 32, one thread) against
      // 0.26-0.28 for the engine's direct loops then (exec/cpu/conv_gemm.cpp,
      // depthwise_filter_grad_planes). Left to those.
      if (groups > 1 && cs == 1 && std::string(pd.impl_info_str()).find("gemm") != std::string::npos) return nullptr;
      p->prim = Bww(pd);
      scratch = pd.scratchpad_desc();
      add_slot(*p, DNNL_ARG_SRC, false, src_plain, pd.src_desc());
      add_slot(*p, DNNL_ARG_DIFF_DST, false, dst_plain, pd.diff_dst_desc());
      add_slot(*p, DNNL_ARG_DIFF_WEIGHTS, true, wei_plain, pd.diff_weights_desc());
    }
    if (scratch.get_size() > 0) p->args[DNNL_ARG_SCRATCHPAD] = memory(scratch, cpu_engine());
    return p;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

using PrimCache = std::map<std::vector<int64_t>, std::unique_ptr<Prim>>;

PrimCache& thread_prims() {
  thread_local PrimCache cache;
  return cache;
}

std::vector<int64_t> prim_key(Kind kind, const ConvWindows& g, int64_t groups, int64_t cs, int64_t cd, int64_t images,
                              bool bias, int share, bool src_blocked, bool dst_blocked) {
  std::vector<int64_t> key{int64_t(kind), groups, cs, cd, images, bias, share, src_blocked, dst_blocked};
  for (const auto* v : {&g.iter, &g.bound, &g.kernel, &g.strides, &g.dilations, &g.pad_begin}) {
    key.push_back(int64_t(v->size()));
    key.insert(key.end(), v->begin(), v->end());
  }
  return key;
}

// The calling thread's primitive for the shape and share of the batch (made on first use; null
// kept for a refused shape). The calling thread owns the primitives of all its call's shares,
// whichever thread of its team runs a share: share t of the next call finds what share t of this
// one left in the primitive's buffers.
Prim* prim_for(Kind kind, const ConvWindows& g, int64_t groups, int64_t cs, int64_t cd, int64_t images, bool bias,
               int share, bool src_blocked, bool dst_blocked) {
  std::vector<int64_t> key = prim_key(kind, g, groups, cs, cd, images, bias, share, src_blocked, dst_blocked);
  PrimCache& cache = thread_prims();
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(std::move(key), make_prim(kind, g, groups, cs, cd, images, bias, src_blocked, dst_blocked)).first;
  return it->second.get();
}

// The calling thread's primitive for the shape and share if it has made one, else null: with or
// without a bias, and src / dst blocked as src_blocked / dst_blocked say (-1: either way).
Prim* made_prim(Kind kind, const ConvWindows& g, int64_t groups, int64_t cs, int64_t cd, int64_t images, int share,
                int src_blocked, int dst_blocked) {
  PrimCache& cache = thread_prims();
  for (bool bias : {false, true})
    for (bool sb : {false, true})
      for (bool db : {false, true}) {
        if ((src_blocked >= 0 && sb != bool(src_blocked)) || (dst_blocked >= 0 && db != bool(dst_blocked))) continue;
        auto it = cache.find(prim_key(kind, g, groups, cs, cd, images, bias, share, sb, db));
        if (it != cache.end() && it->second) return it->second.get();
      }
  return nullptr;
}

Slot* slot_of(Prim& p, int arg) {
  for (Slot& s : p.slots)
    if (s.arg == arg) return &s;
  return nullptr;
}

// Runs p with the caller's tensors (in the order of its slots): inputs into the primitive's
// layout, the primitive, its outputs back. `first` tags the input slots' contents: slot k holds
// images first.. of the value tags[k] names (unknown tags: nothing is recorded), and a slot that
// holds them already is not reordered again. Each of `borrowed` (an input slot of another
// primitive, whose buffer holds what this one's slot of that argument would: the caller checked)
// stands in for that slot.
void run(Prim& p, std::initializer_list<const float*> tensors, int64_t first = -1,
         std::initializer_list<ValueTag> tags = {}, std::initializer_list<const Slot*> borrowed = {}) {
  thread_local dnnl::stream stream(cpu_engine());
  size_t i = 0;
  for (const float* t : tensors) p.slots[i++].user.set_data_handle(const_cast<float*>(t));
  i = 0;
  for (Slot& s : p.slots) {
    const ValueTag tag = i < tags.size() ? tags.begin()[i] : ValueTag{};
    ++i;
    if (!s.moved || s.output) continue;
    const Slot* const* lent = std::find_if(borrowed.begin(), borrowed.end(),
                                           [&](const Slot* b) { return b && b->arg == s.arg; });
    if (lent != borrowed.end()) {
      p.args[s.arg] = (*lent)->inner;
      continue;
    }
    const Held now{tag, first};
    if (tag.known() && s.held == now) {
      shared_reorders.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    s.reorder(stream, s.user, s.inner);
    s.held = tag.known() ? now : Held{};
  }
  p.prim.execute(stream, p.args);
  for (const Slot* b : borrowed)
    if (b) p.args[b->arg] = slot_of(p, b->arg)->inner;
  for (Slot& s : p.slots)
    if (s.moved && s.output) s.reorder(stream, s.inner, s.user);
  stream.wait();
}

// How many ranges of images a call's batch is cut into: one per thread of this thread's team (one
// when nested in a share or given one image).
int shares_of(int64_t images) { return in_thread_share() ? 1 : int(std::min<int64_t>(cpu_threads(), images)); }

int64_t share_begin(int64_t images, int t, int shares) { return images * t / shares; }
int64_t share_images(int64_t images, int t, int shares) {
  return share_begin(images, t + 1, shares) - share_begin(images, t, shares);
}

// Calls work(share, first image, end image) for each of the batch's shares_of(images) ranges.
template <class Work>
void over_images(int64_t images, const Work& work) {
  const int n = shares_of(images);
  if (n <= 1) return work(0, 0, images);
  run_shares(n, [&](int t, int shares) { work(t, share_begin(images, t, shares), share_begin(images, t + 1, shares)); });
}

bool usable(const ConvChannels& ch) { return dnnl_enabled() && ch.images > 0; }

// The primitive of each share of the batch, made on the calling thread before any work starts
// (the shares only read the cache); empty where oneDNN refuses the geometry (which does not
// depend on the batch).
std::vector<Prim*> share_prims(Kind kind, const ConvWindows& g, int64_t groups, int64_t cs, int64_t cd, int64_t images,
                               bool bias, bool src_blocked, bool dst_blocked) {
  dnnl_one_thread();
  const int n = std::max(shares_of(images), 1);
  std::vector<Prim*> prims;
  for (int t = 0; t < n; ++t) {
    Prim* p = prim_for(kind, g, groups, cs, cd, share_images(images, t, n), bias, t, src_blocked, dst_blocked);
    if (!p) return {};
    prims.push_back(p);
  }
  return prims;
}

// The input slot `arg` of `theirs` where its buffer holds `want` in the layout `ours` reads
// `arg` in (counted as a shared reorder), else null.
const Slot* lendable(Prim* theirs, Prim& ours, int arg, const Held& want) {
  if (!theirs || !want.tag.known()) return nullptr;
  const Slot *from = slot_of(*theirs, arg), *to = slot_of(ours, arg);
  if (!from || !to || !from->moved || !to->moved || from->held != want || from->inner.get_desc() != to->inner.get_desc())
    return nullptr;
  shared_reorders.fetch_add(1, std::memory_order_relaxed);
  return from;
}

}  // namespace

int64_t dnnl_shared_reorders() { return shared_reorders.load(); }

namespace {

// Whether a forward runs as the backward-data pass of the reversed window (below): unit strides,
// one group, and 16 channels on each side. There oneDNN's forward kernel trails its backward-data
// kernel on both CPUs measured (resnet's 16 -> 16 3x3 at 32x32, batch 32, one thread: 80-89
// against 114-120 GFLOP/s on an AMD EPYC, 133-136 against 147-149 on an Intel Xeon); with 32 or
// 64 channels the two are level (bench/results/2026-12-06-kernels-hot.md). Plain and blocked
// tensors alike, so that the layout changes no value (graph/passes/block_channels.h).
bool forward_as_backward_data(const ConvWindows& g, const ConvChannels& ch) {
  return ch.groups == 1 && ch.in == kChannelBlock && ch.out == kChannelBlock &&
         std::all_of(g.strides.begin(), g.strides.end(), [](int64_t s) { return s == 1; });
}

}  // namespace

bool dnnl_conv_forward(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w, const float* bias,
                       float* y, ValueTag x_tag) {
  if (!usable(ch)) return false;
  if (forward_as_backward_data(g, ch)) {
    // At unit strides output position o meets input position o - pad + t * dilation through tap
    // t: the transposed window of reversed taps (pad (K - 1) * dilation - pad) from x's grid to
    // y's, with the filter's two channel dims swapped: w [out, in, K] -> [in, out, K], reversed.
    ConvWindows f = g;
    std::swap(f.iter, f.bound);
    bool fits = true;
    for (size_t d = 0; d < g.kernel.size(); ++d) {
      f.pad_begin[d] = (g.kernel[d] - 1) * g.dilations[d] - g.pad_begin[d];
      fits = fits && f.pad_begin[d] >= 0;
    }
    if (fits) {
      const int64_t K = g.kernel_size();
      std::vector<float> reversed(size_t(ch.out * ch.in * K));
      for (int64_t o = 0; o < ch.out; ++o)
        for (int64_t c = 0; c < ch.in; ++c)
          for (int64_t t = 0; t < K; ++t) reversed[size_t((c * ch.out + o) * K + t)] = w[(o * ch.in + c) * K + K - 1 - t];
      if (dnnl_conv_transpose(f, ch, x, reversed.data(), bias, y, {})) return true;
    }
  }
  const int64_t G = ch.groups, S = g.bound_size(), P = g.iter_size();
  const std::vector<Prim*> prims =
      share_prims(Kind::forward, g, G, ch.in, ch.out, ch.images, bias != nullptr, ch.in_blocked, ch.out_blocked);
  if (prims.empty()) return false;
  over_images(ch.images, [&](int t, int64_t lo, int64_t) {
    dnnl_one_thread();
    Prim* p = prims[size_t(t)];
    if (bias)
      run(*p, {x + lo * G * ch.in * S, w, bias, y + lo * G * ch.out * P}, lo, {x_tag});
    else
      run(*p, {x + lo * G * ch.in * S, w, y + lo * G * ch.out * P}, lo, {x_tag});
  });
  return true;
}

bool dnnl_conv_transpose(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* w,
                         const float* bias, float* y, ValueTag x_tag) {
  if (!usable(ch)) return false;
  // The backward data pass of the convolution from y's grid (src, ch.out per group) to x's (dst).
  const int64_t G = ch.groups, S = g.bound_size(), P = g.iter_size();
  const std::vector<Prim*> prims =
      share_prims(Kind::backward_data, g, G, ch.out, ch.in, ch.images, false, ch.out_blocked, ch.in_blocked);
  if (prims.empty()) return false;
  over_images(ch.images, [&](int t, int64_t lo, int64_t hi) {
    dnnl_one_thread();
    Prim* p = prims[size_t(t)];
    float* yl = y + lo * G * ch.out * S;
    run(*p, {x + lo * G * ch.in * P, w, yl}, lo, {x_tag});
    if (bias && ch.out_blocked)
      for (int64_t n = 0; n < hi - lo; ++n)
        for (int64_t c = 0; c < G * ch.out; ++c)
          for (int64_t s = 0; s < S; ++s) yl[blocked_offset(n, c, s, G * ch.out, S)] += bias[c];
    else if (bias)
      for (int64_t i = 0; i < (hi - lo) * G * ch.out; ++i) {
        const float b = bias[i % (G * ch.out)];
        for (float *v = yl + i * S, *e = v + S; v < e; ++v) *v += b;
      }
  });
  return true;
}

bool dnnl_conv_filter_grad(const ConvWindows& g, const ConvChannels& ch, const float* x, const float* dy, float* dw,
                           ValueTag x_tag, ValueTag dy_tag) {
  if (!usable(ch)) return false;
  const int64_t G = ch.groups, S = g.bound_size(), P = g.iter_size(), wsize = G * ch.out * ch.in * g.kernel_size();
  const std::vector<Prim*> prims =
      share_prims(Kind::backward_weights, g, G, ch.in, ch.out, ch.images, false, ch.in_blocked, ch.out_blocked);
  if (prims.empty()) return false;
  // The input gradient's and the forward's primitives of the same shares, where this thread made
  // them (the forward's with or without a bias).
  std::vector<Prim*> data_prims(prims.size(), nullptr), forward_prims(prims.size(), nullptr);
  for (size_t t = 0; t < prims.size(); ++t) {
    const int64_t images = share_images(ch.images, int(t), int(prims.size()));
    if (dy_tag.known())
      data_prims[t] = made_prim(Kind::backward_data, g, G, ch.in, ch.out, images, int(t), -1, ch.out_blocked);
    if (x_tag.known()) forward_prims[t] = made_prim(Kind::forward, g, G, ch.in, ch.out, images, int(t), ch.in_blocked, -1);
  }
  // Share 0 writes dw, the others their own sums, added in share order at the end.
  std::vector<std::vector<float>> partial;
  partial.resize(prims.size());
  over_images(ch.images, [&](int t, int64_t lo, int64_t) {
    dnnl_one_thread();
    Prim* p = prims[size_t(t)];
    float* out = dw;
    if (t > 0) {
      partial[size_t(t)].resize(size_t(wsize));
      out = partial[size_t(t)].data();
    }
    // The input gradient of the same convolution (ConvTranspose, just before in a training graph)
    // reordered the same images of the same dy into its buffer of the same layout: read it there.
    // Likewise x, where the forward's buffer still holds it (no later forward of the shape).
    const Slot* dy_lent = lendable(data_prims[size_t(t)], *p, DNNL_ARG_DIFF_DST, Held{dy_tag, lo});
    const Slot* x_lent = lendable(forward_prims[size_t(t)], *p, DNNL_ARG_SRC, Held{x_tag, lo});
    run(*p, {x + lo * G * ch.in * S, dy + lo * G * ch.out * P, out}, lo, {}, {dy_lent, x_lent});
  });
  for (size_t t = 1; t < partial.size(); ++t)
    if (!partial[t].empty())
      for (int64_t i = 0; i < wsize; ++i) dw[i] += partial[t][size_t(i)];
  return true;
}

namespace {

std::atomic<int64_t> bias_products{0};

// The matmul primitive of one shape and layout, and its arguments: memories made once, their data
// set per call.
struct MatmulBias {
  dnnl::matmul prim;
  memory a, b, bias, c;
  std::unordered_map<int, memory> args;
};

// Null where oneDNN refuses the shape.
std::unique_ptr<MatmulBias> make_matmul_bias(bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                             int64_t ldc) {
  const auto f32 = memory::data_type::f32;
  const memory::desc ad({m, k}, f32, {lda, 1}), bd({k, n}, f32, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1}),
      biasd({1, n}, f32, {n, 1}), cd({m, n}, f32, {ldc, 1});
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, biasd, cd), own_scratchpad(), cpu_engine());
    auto p = std::make_unique<MatmulBias>();
    p->prim = dnnl::matmul(pd);
    p->a = memory(ad, cpu_engine(), DNNL_MEMORY_NONE);
    p->b = memory(bd, cpu_engine(), DNNL_MEMORY_NONE);
    p->bias = memory(biasd, cpu_engine(), DNNL_MEMORY_NONE);
    p->c = memory(cd, cpu_engine(), DNNL_MEMORY_NONE);
    p->args = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_BIAS, p->bias}, {DNNL_ARG_DST, p->c}};
    if (pd.scratchpad_desc().get_size() > 0) p->args[DNNL_ARG_SCRATCHPAD] = memory(pd.scratchpad_desc(), cpu_engine());
    return p;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

}  // namespace

bool dnnl_matmul_bias(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                      int64_t ldb, const float* bias, float* c, int64_t ldc) {
  if (!dnnl_enabled() || m <= 0 || n <= 0 || k <= 0) return false;
  dnnl_one_thread();
  // The calling thread's primitives (any thread of a team may run any block of a product).
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<MatmulBias>> cache;
  std::vector<int64_t> key{tb, m, n, k, lda, ldb, ldc};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(std::move(key), make_matmul_bias(tb, m, n, k, lda, ldb, ldc)).first;
  MatmulBias* p = it->second.get();
  if (!p) return false;
  thread_local dnnl::stream stream(cpu_engine());
  p->a.set_data_handle(const_cast<float*>(a));
  p->b.set_data_handle(const_cast<float*>(b));
  p->bias.set_data_handle(const_cast<float*>(bias));
  p->c.set_data_handle(c);
  p->prim.execute(stream, p->args);
  stream.wait();
  bias_products.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t dnnl_bias_products() { return bias_products.load(); }

#endif

}  // namespace onnxdp
