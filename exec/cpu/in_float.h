// A product on float16 / bfloat16 tensors (MatMul, Gemm, the convolutions) as PyTorch and ONNX
// Runtime compute it on the CPU: every present input widened to float, the float kernel's sums,
// the result rounded once to the inputs' 16-bit type. Inputs of other dtypes are not taken.
#pragma once
#include <vector>

#include "exec/kernel.h"

namespace onnxdp {

inline bool is_16bit_float(DType t) { return t == DType::f16 || t == DType::bf16; }

template <class FloatKernel>
void in_float(KernelCtx& c, const FloatKernel& kernel) {
  const DType t = c.in(0).dtype;
  auto widen = [&](const TensorRef& r) {
    if (r.dtype != t) c.fail("inputs are {} and {}; a 16-bit product takes one type", dtype_name(t), dtype_name(r.dtype));
    std::vector<float> f(size_t(r.numel));
    for (int64_t i = 0; i < r.numel; ++i)
      f[size_t(i)] = half_to_f32(t, r.as<uint16_t>()[i]);
    return f;
  };
  std::vector<std::vector<float>> ins;
  ins.reserve(c.inputs.size());
  KernelCtx fc{c.node, {}, {}, c.run, c.index};
  for (const TensorRef& r : c.inputs) {
    if (!r.present()) {
      fc.inputs.push_back(r);
      continue;
    }
    ins.push_back(widen(r));
    fc.inputs.push_back(TensorRef{ins.back().data(), DType::f32, r.shape, r.numel});
  }
  const TensorRef& y = c.out(0);
  std::vector<float> out(size_t(y.numel));
  fc.outputs.push_back(TensorRef{out.data(), DType::f32, y.shape, y.numel});
  kernel(fc);
  for (int64_t i = 0; i < y.numel; ++i)
    y.as<uint16_t>()[i] = f32_to_half(t, out[size_t(i)]);
}

}  // namespace onnxdp
