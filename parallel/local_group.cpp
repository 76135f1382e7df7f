#include "parallel/local_group.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "graph/error.h"
#include "graph/tensor.h"  // bf16_to_f32, f32_to_bf16

namespace onnxdp {

std::string format_seconds(double s) { return fmt::format("{:g} s", s); }

std::string describe_call(const CollectiveCall& c) {
  std::string what = fmt::format("{} #{}", c.op, c.index);
  if (std::strcmp(c.op, "all_reduce") == 0 || std::strcmp(c.op, "reduce_scatter") == 0)
    return fmt::format("{} ({} {})", what, c.count, dtype_name(c.dtype));
  if (std::strcmp(c.op, "broadcast") == 0) return fmt::format("{} ({} bytes, root {})", what, c.count, c.root);
  return what;
}

void check_reduce_dtype(DType dtype) {
  if (dtype != DType::f32 && dtype != DType::f64 && dtype != DType::i64 && dtype != DType::i32 && dtype != DType::bf16)
    fail("all_reduce_sum: dtype {} is not supported (f32, f64, i64, i32, bf16)", dtype_name(dtype));
}

namespace {

bool same_call(const CollectiveCall& a, const CollectiveCall& b) {
  if (std::strcmp(a.op, b.op) != 0 || a.count != b.count || a.root != b.root) return false;
  return (std::strcmp(a.op, "all_reduce") != 0 && std::strcmp(a.op, "reduce_scatter") != 0) || a.dtype == b.dtype;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += i + 1 == names.size() ? " and " : ", ";
    s += names[i];
  }
  return s;
}

}  // namespace

LocalGroup::LocalGroup(int n, CommOptions opts, std::vector<std::string> member_names)
    : n_(n), opts_(opts), names_(std::move(member_names)), reached_(n, 0), at_arrive_(n, 0), calls_(n),
      left_(n, false) {}

void LocalGroup::arrive(int me, const CollectiveCall& call) {
  std::unique_lock<std::mutex> lk(mu_);
  calls_[me] = call;
  left_[me] = false;
  uint64_t target = ++reached_[me];
  at_arrive_[me] = target;
  cv_.notify_all();
  wait_all(lk, me, target, 0.0);
  // Every member compares every call with member 0's, so all of them throw the same message.
  for (int j = 1; j < n_; ++j) {
    if (same_call(calls_[0], calls_[j])) continue;
    std::string msg = fmt::format(
        "collective mismatch: {} called {} while {} called {}: every replica must make the same "
        "collectives, with the same sizes, in the same order",
        names_[0], describe_call(calls_[0]), names_[j], describe_call(calls_[j]));
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = msg;
      cv_.notify_all();
    }
    throw Error(msg);
  }
}

void LocalGroup::sync(int me, double extra_s) {
  std::unique_lock<std::mutex> lk(mu_);
  uint64_t target = ++reached_[me];
  cv_.notify_all();
  wait_all(lk, me, target, extra_s);
}

void LocalGroup::wait_all(std::unique_lock<std::mutex>& lk, int me, uint64_t target, double extra_s) {
  const auto start = SpinCondition::Clock::now();
  const auto spin_until = start + SpinCondition::kSpin;
  const CollectiveCall& mine = calls_[me];
  // An untimed wait: a deadline ten years out (abort and a finished member still end it).
  const double limit_s = mine.untimed ? 3.2e8 : opts_.timeout_s + extra_s;
  auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(limit_s));
  for (;;) {
    // Aborted first: a member that failed may have freed the buffer it published.
    if (aborted_) throw Error(fmt::format("{} aborted: {}", describe_call(mine), abort_reason_));
    std::vector<int> late;
    for (int j = 0; j < n_; ++j)
      if (reached_[j] < target) late.push_back(j);
    if (late.empty()) return;
    for (int j : late) {
      if (!left_[j]) continue;
      std::string msg = fmt::format(
          "{} has finished (its last collective was {}) and will not reach {}: every replica must make "
          "the same collectives (the same number of steps and batches)",
          names_[j], at_arrive_[j] ? describe_call(calls_[j]) : "none", describe_call(mine));
      aborted_ = true;
      abort_reason_ = msg;
      cv_.notify_all();
      throw Error(msg);
    }
    if (cv_.wait_until(lk, spin_until, deadline)) continue;
    if (aborted_) throw Error(fmt::format("{} aborted: {}", describe_call(mine), abort_reason_));
    late.clear();
    for (int j = 0; j < n_; ++j)
      if (reached_[j] < target) late.push_back(j);
    if (late.empty()) return;
    // Name who is missing: those that never arrived at this collective, else those stuck in it.
    std::vector<std::string> absent, stuck;
    std::string last;
    for (int j : late) {
      if (at_arrive_[j] < at_arrive_[me]) {
        absent.push_back(names_[j]);
        if (last.empty()) last = at_arrive_[j] ? describe_call(calls_[j]) : "none";
      } else {
        stuck.push_back(names_[j]);
      }
    }
    double waited = opts_.timeout_s + extra_s;
    std::string msg;
    if (!absent.empty())
      msg = fmt::format("{} did not reach {} within {}: it may have died or be stuck (last collective "
                        "reached: {})",
                        join_names(absent), describe_call(mine), format_seconds(waited), last);
    else
      msg = fmt::format("{} did not finish {} within {}: it may have died or be stuck", join_names(stuck),
                        describe_call(mine), format_seconds(waited));
    aborted_ = true;
    abort_reason_ = msg;
    cv_.notify_all();
    throw Error(msg);
  }
}

void LocalGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
  cv_.notify_all();
}

bool LocalGroup::aborted(std::string* reason) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (aborted_ && reason) *reason = abort_reason_;
  return aborted_;
}

void LocalGroup::leave(int me, bool left) {
  std::lock_guard<std::mutex> lk(mu_);
  left_[me] = left;
  cv_.notify_all();
}

void reduce_slice(int64_t count, int n, int m, int64_t* lo, int64_t* hi) {
  // Slices are whole 64-byte lines (16 elements of 4 bytes) so members do not share cache lines.
  const int64_t unit = 16;
  int64_t units = (count + unit - 1) / unit;
  int64_t base = units / n, rem = units % n;
  int64_t first = m * base + std::min<int64_t>(m, rem);
  int64_t len = base + (m < rem ? 1 : 0);
  *lo = std::min(count, first * unit);
  *hi = std::min(count, (first + len) * unit);
}

namespace {

// The type sums are accumulated in: integers as unsigned (wrapping, no undefined overflow).
template <class T, bool = std::is_integral_v<T>>
struct Accum {
  using type = T;
};
template <class T>
struct Accum<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <class T>
void sum_range_typed(const std::vector<void*>& bufs, const std::vector<void*>& dests, int64_t lo, int64_t hi) {
  // Floats add in member order: element i gets ((b0[i] + b1[i]) + b2[i]) + ….
  using A = typename Accum<T>::type;
  constexpr int64_t kBlock = 2048;
  A acc[kBlock];
  for (int64_t s = lo; s < hi; s += kBlock) {
    int64_t m = std::min(kBlock, hi - s);
    std::memcpy(acc, static_cast<const T*>(bufs[0]) + s, m * sizeof(T));
    for (size_t j = 1; j < bufs.size(); ++j) {
      const A* b = reinterpret_cast<const A*>(static_cast<const T*>(bufs[j]) + s);
      for (int64_t k = 0; k < m; ++k) acc[k] += b[k];
    }
    for (void* d : dests) std::memcpy(static_cast<T*>(d) + s, acc, m * sizeof(T));
  }
}

// bfloat16 (--grad-dtype bf16): added in member order in float, rounded to bfloat16 once.
void sum_range_bf16(const std::vector<void*>& bufs, const std::vector<void*>& dests, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    float acc = bf16_to_f32(static_cast<const uint16_t*>(bufs[0])[i]);
    for (size_t j = 1; j < bufs.size(); ++j) acc += bf16_to_f32(static_cast<const uint16_t*>(bufs[j])[i]);
    const uint16_t r = f32_to_bf16(acc);
    for (void* d : dests) static_cast<uint16_t*>(d)[i] = r;
  }
}

}  // namespace

void sum_range(const std::vector<void*>& bufs, const std::vector<void*>& dests, int64_t lo, int64_t hi,
               DType dtype) {
  if (lo >= hi) return;
  switch (dtype) {
    case DType::f32: return sum_range_typed<float>(bufs, dests, lo, hi);
    case DType::f64: return sum_range_typed<double>(bufs, dests, lo, hi);
    case DType::i64: return sum_range_typed<int64_t>(bufs, dests, lo, hi);
    case DType::i32: return sum_range_typed<int32_t>(bufs, dests, lo, hi);
    case DType::bf16: return sum_range_bf16(bufs, dests, lo, hi);
    default: check_reduce_dtype(dtype);
  }
}

}  // namespace onnxdp
