// CPU kernels of the logical ops (see graph/op_table.h). The comparisons live in exec/functors.h,
// numpy broadcasting in exec/cpu/broadcast.h.
#include <type_traits>

#include "exec/cpu/broadcast.h"
#include "exec/functors.h"
#include "exec/kernel.h"

namespace onnxdp {

namespace {

// bool out = f(in0, in1), inputs of one dtype (bool allowed; f16 / bf16 compared as floats).
template <class F>
void compare(KernelCtx& c, const F& f) {
  if (half_map<bool>(c.in(0).dtype, c.out(0), f, c.in(0), c.in(1))) return;
  dispatch_dtype(c.in(0).dtype, [&]<class T>() {
    if constexpr (!std::is_same_v<T, uint16_t>) broadcast_map<bool, T, T>(c.out(0), f, c.in(0), c.in(1));
  });
}

}  // namespace

void Equal_forward(KernelCtx& c) { compare(c, fn::Equal{}); }
void Less_forward(KernelCtx& c) { compare(c, fn::Less{}); }
void Greater_forward(KernelCtx& c) { compare(c, fn::Greater{}); }
void LessOrEqual_forward(KernelCtx& c) { compare(c, fn::LessOrEqual{}); }
void GreaterOrEqual_forward(KernelCtx& c) { compare(c, fn::GreaterOrEqual{}); }
void Not_forward(KernelCtx& c) { broadcast_map<bool, bool>(c.out(0), fn::Not{}, c.in(0)); }
void And_forward(KernelCtx& c) { broadcast_map<bool, bool, bool>(c.out(0), fn::And{}, c.in(0), c.in(1)); }
void Or_forward(KernelCtx& c) { broadcast_map<bool, bool, bool>(c.out(0), fn::Or{}, c.in(0), c.in(1)); }
void Xor_forward(KernelCtx& c) { broadcast_map<bool, bool, bool>(c.out(0), fn::Xor{}, c.in(0), c.in(1)); }

// Where: out = cond ? x : y with all three broadcast. Elements are copied, so any dtype works (f16
// / bf16 as their 16-bit storage).
void Where_forward(KernelCtx& c) {
  dispatch_dtype(c.in(1).dtype, [&]<class T>() {
    broadcast_map<T, bool, T, T>(c.out(0), fn::Select{}, c.in(0), c.in(1), c.in(2));
  });
}

namespace {

// bool out = f(x) for a float x (f16 / bf16 tested as floats).
template <class F>
void float_test(KernelCtx& c, const F& f) {
  if (half_map<bool>(c.in(0).dtype, c.out(0), f, c.in(0))) return;
  if (c.in(0).dtype == DType::f64) return broadcast_map<bool, double>(c.out(0), f, c.in(0));
  broadcast_map<bool, float>(c.out(0), f, c.in(0));
}

}  // namespace

void IsNaN_forward(KernelCtx& c) { float_test(c, fn::IsNaN{}); }
void IsInf_forward(KernelCtx& c) {
  float_test(c, fn::IsInf{c.node.i("detect_negative") != 0, c.node.i("detect_positive") != 0});
}

}  // namespace onnxdp
