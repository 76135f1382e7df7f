// CPU kernels of the generator ops (see graph/op_table.h).
#include <cstring>

#include "exec/functors.h"
#include "exec/kernel.h"
#include "graph/shape_helpers.h"

namespace onnxdp {

void Constant_forward(KernelCtx& c) {
  const Tensor& v = c.node.t("value");
  if (v.nbytes()) std::memcpy(c.out(0).data, v.data(), v.nbytes());
}

// Every element is the value attribute's one element (default 0 f32, i.e. zero bytes).
void ConstantOfShape_forward(KernelCtx& c) {
  const TensorRef& out = c.out(0);
  const size_t es = dtype_size(out.dtype);
  uint64_t bits = 0;
  if (c.node.has("value")) std::memcpy(&bits, c.node.t("value").data(), es);
  dispatch_bytes(es, [&]<class U>() {
    U v;
    std::memcpy(&v, &bits, sizeof(U));
    U* o = out.as<U>();
    for (int64_t i = 0; i < out.numel; ++i) o[i] = v;
  });
}

// output[i] = start + i * delta for the output's length (the shape rule's count); integers exactly,
// floats in double rounded once to the output type.
void Range_forward(KernelCtx& c) {
  const TensorRef& out = c.out(0);
  dispatch_elem(out.dtype, [&]<class E>() {
    using T = typename E::T;
    const T start = *c.in(0).as<const T>(), delta = *c.in(2).as<const T>();
    T* o = out.as<T>();
    if constexpr (E::kind == ElemKind::floating) {
      const double s = E::to_f64(start), d = E::to_f64(delta);
      for (int64_t i = 0; i < out.numel; ++i) o[i] = E::from_f64(s + double(i) * d);
    } else {
      const int64_t s = E::to_i64(start), d = E::to_i64(delta);
      // start + i * delta lies in [start, limit) but i * delta alone may not fit: wrapping
      // arithmetic gives the exact value (fn::Wrap).
      for (int64_t i = 0; i < out.numel; ++i) o[i] = E::from_i64(fn::Wrap<int64_t>::add(s, fn::Wrap<int64_t>::mul(i, d)));
    }
  });
}

}  // namespace onnxdp
