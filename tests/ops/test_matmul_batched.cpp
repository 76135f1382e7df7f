// Batched MatMul on the CPU: the path where threads split the batch (each product single-threaded
// BLAS) and the one-GEMM path for a weight shared by every batch, against a plain triple loop.
#include <doctest/doctest.h>
#include <cblas.h>

#include <random>

#include "exec/cpu/threads.h"
#include "exec/kernel.h"

using namespace onnxdp;

namespace {

template <class T>
Tensor random_tensor(DType dt, Shape s, std::mt19937& rng) {
  Tensor t(dt, std::move(s));
  std::uniform_int_distribution<int> u(-4, 4);  // small integers: every dtype's sums are exact
  for (int64_t i = 0; i < t.numel(); ++i) t.as<T>()[i] = T(u(rng));
  return t;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  Graph g;
  std::vector<ValueId> ids;
  for (const Tensor* t : {&a, &b}) {
    Value v;
    v.name = "in" + std::to_string(ids.size());
    v.dtype = t->dtype();
    v.shape = t->shape();
    v.kind = ValueKind::constant;
    v.data = *t;
    ids.push_back(g.add_value(std::move(v)));
  }
  int ni = g.add_node(Op::MatMul, "n", ids, {"y"});
  return run_node(g, g.nodes[size_t(ni)], {&a, &b})[0];
}

// y[i] = a[i % batches of a] @ b[i % batches of b] for a [ba, m, k], b [bb, k, n] (ba, bb each
// 1 or the batch), by the definition.
template <class T>
std::vector<T> reference(const Tensor& a, const Tensor& b, int64_t batch, int64_t m, int64_t k, int64_t n) {
  const int64_t ba = a.numel() / (m * k), bb = b.numel() / (k * n);
  std::vector<T> y(size_t(batch * m * n));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        T acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += a.as<T>()[(i % ba) * m * k + r * k + p] * b.as<T>()[(i % bb) * k * n + p * n + c];
        y[size_t((i * m + r) * n + c)] = acc;
      }
  return y;
}

template <class T>
void check_batched(DType dt, std::mt19937& rng) {
  const int64_t m = 80, k = 80, n = 128;  // 6 or more batches: above blas_split_min_work()
  struct Shapes {
    Shape a, b, y;
    int64_t batch;
  };
  for (const Shapes& s : {Shapes{{8, m, k}, {8, k, n}, {8, m, n}, 8},           // both batched
                          Shapes{{2, 3, m, k}, {2, 3, k, n}, {2, 3, m, n}, 6},  // 2 batch dims
                          Shapes{{9, m, k}, {1, k, n}, {9, m, n}, 9},           // b shared, [1, k, n]
                          Shapes{{1, m, k}, {10, k, n}, {10, m, n}, 10},        // a shared
                          Shapes{{5, m, k}, {5, k, n}, {5, m, n}, 5}}) {        // uneven split: serial
    INFO("a " << shape_str(s.a) << " b " << shape_str(s.b));
    Tensor a = random_tensor<T>(dt, s.a, rng), b = random_tensor<T>(dt, s.b, rng);
    Tensor y = matmul(a, b);
    REQUIRE(y.shape() == s.y);
    std::vector<T> want = reference<T>(a, b, s.batch, m, k, n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < y.numel(); ++i) wrong += y.as<T>()[i] != want[size_t(i)];
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("math: MatMul: batches split among threads match the definition, BLAS stays on one thread") {
  std::mt19937 rng(7);
  const int threads_before = cpu_threads();
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    set_cpu_threads(threads);
    check_batched<float>(DType::f32, rng);
    check_batched<double>(DType::f64, rng);
    check_batched<int64_t>(DType::i64, rng);
    CHECK(openblas_get_num_threads() == 1);  // onnxdp threads the products (exec/cpu/blas.h)
  }
  set_cpu_threads(threads_before);
}
