// Tests of the fast paths of the CPU reductions (exec/cpu/reduction.cpp): reducing leading axes
// into a wide contiguous kept block (a Linear's bias gradient), and summing contiguous reduced rows
// (Softmax backward: one trailing axis; a Conv's bias gradient: N rows of H * W per channel). Each
// is compared with a plain double-precision loop, for f32 and f64, on 1 and 2 threads; the results
// must not depend on the thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>

#include "exec/cpu/threads.h"
#include "exec/kernel.h"

#include "tests/ops/op_test_util.h"

using namespace onnxdp;
using namespace onnxdp::optest;

namespace {

template <class T>
Tensor filled(DType dt, const Shape& s) {
  Tensor t(dt, s);
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  for (int64_t i = 0; i < n; ++i) t.as<T>()[i] = T(std::sin(0.37 * double(i) + 0.1) * 3.0 + 0.25);
  return t;
}

// The reference: for each output, a double sum (or max) over its reduced positions in flat
// row-major order.
std::vector<double> reference(const std::vector<double>& x, const Shape& s, const std::set<int64_t>& axes, Op op) {
  const size_t r = s.size();
  std::vector<int64_t> ostride(r, 0);
  int64_t acc = 1, n_red = 1, n = 1;
  for (size_t d = r; d-- > 0;) {
    n *= s[d];
    if (axes.count(int64_t(d))) {
      n_red *= s[d];
    } else {
      ostride[d] = acc;
      acc *= s[d];
    }
  }
  const bool is_max = op == Op::ReduceMax;
  std::vector<double> out(size_t(acc), is_max ? -INFINITY : 0.0);
  for (int64_t i = 0; i < n; ++i) {  // flat order: each output sees its positions in order
    int64_t rest = i, o = 0;
    for (size_t d = r; d-- > 0;) {
      o += (rest % s[d]) * ostride[d];
      rest /= s[d];
    }
    double& y = out[size_t(o)];
    y = is_max ? std::max(y, x[size_t(i)]) : y + x[size_t(i)];
  }
  if (op == Op::ReduceMean)
    for (double& y : out) y /= double(n_red);
  return out;
}

template <class T>
void check_case(DType dt, const Shape& s, const std::vector<int64_t>& axes, Op op, double rtol) {
  INFO("shape rank " << s.size() << " first " << s[0] << " last " << s.back() << " op " << int(op) << " dtype "
                     << int(dt));
  Tensor x = filled<T>(dt, s);
  const std::set<int64_t> ax(axes.begin(), axes.end());
  const std::vector<double> want = reference(x.to_f64(), s, ax, op);
  const int before = cpu_threads();
  std::vector<std::vector<double>> got;
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    got.push_back(run_op(op, {x, ints(axes)}, {{"keepdims", int64_t(0)}})[0].to_f64());
  }
  set_cpu_threads(before);
  REQUIRE(got[0].size() == want.size());
  CHECK(got[0] == got[1]);  // bit-identical whatever the thread count
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = double(T(want[i]));  // the reference rounded once to T
    if (std::abs(got[0][i] - w) > rtol * std::max(1.0, std::abs(w))) ++bad;
  }
  CHECK(bad == 0);
}

template <class T>
void check_all(DType dt) {
  // Leading axes reduced, a wide contiguous kept block (fast path 1): the same order as the
  // reference, so the same double sum; only the final rounding to T.
  for (Op op : {Op::ReduceSum, Op::ReduceMean, Op::ReduceMax}) {
    check_case<T>(dt, {1000, 300}, {0}, op, 0);
    check_case<T>(dt, {4, 50, 96}, {0, 1}, op, 0);
    check_case<T>(dt, {6, 600, 40}, {1}, op, 0);      // an outer kept dim
    check_case<T>(dt, {3, 7, 45, 160}, {0, 2}, op, 0);  // two separate reduced dims
    check_case<T>(dt, {2, 2, 17}, {0, 1}, op, 0);      // too small to go parallel
  }
  // Contiguous reduced rows summed (fast path 2): lanes change the order of the double sum.
  const double tol = dt == DType::f32 ? 2.5e-7 : 1e-13;
  for (Op op : {Op::ReduceSum, Op::ReduceMean}) {
    check_case<T>(dt, {96, 333}, {1}, op, tol);  // a tail after the 8-wide lanes
    check_case<T>(dt, {2, 3, 200, 128}, {3}, op, tol);
    check_case<T>(dt, {5, 40}, {1}, op, tol);
    // Several contiguous rows per output, their sums added in row order: a Conv's bias gradient.
    check_case<T>(dt, {16, 64, 32, 32}, {0, 2, 3}, op, tol);  // rows of 1024, parallel over channels
    check_case<T>(dt, {3, 5, 7, 45}, {0, 1, 3}, op, tol);     // 15 rows of 45 (a tail) per output
    check_case<T>(dt, {2, 3, 4, 33}, {0, 2, 3}, op, tol);     // too small to go parallel
  }
  check_case<T>(dt, {96, 333}, {1}, Op::ReduceMax, 0);
}

}  // namespace

TEST_CASE("ReduceSum / ReduceMean / ReduceMax fast paths match a double loop on 1 and 2 threads") {
  check_all<float>(DType::f32);
  check_all<double>(DType::f64);
}
