// ONNX import of the nn ops that need one (see graph/op_table.h; the others take the default,
// importer/importer.h).
//
// Conv, ConvTranspose, the pools, LayerNormalization and the losses have had one meaning across
// opsets 7..27 (later versions only widened the type lists or added attributes with defaults that
// keep the old behaviour), so they take the default import. BatchNormalization and Dropout
// changed form and are normalised to the newest one here.
#include "importer/importer.h"

namespace onnxdp {

namespace {

// The number of outputs the proto names, not counting trailing empty names.
int named_outputs(const ImportCtx& c) {
  int n = c.proto.output_size();
  while (n > 0 && c.proto.output(n - 1).empty()) --n;
  return n;
}

}  // namespace

// Opsets 7..13 chose training by the outputs: with running mean/var outputs (and saved mean/var)
// the op trained, with Y alone it inferred. Opset 14 made that the training_mode attribute and
// dropped the saved mean/var outputs. Opsets 7/8 also had `spatial` (1: per-channel statistics).
// A file's node keeps ONNX's running_var (the biased batch variance): unbiased_running_var is
// onnxdp's own, set only by the trainer (graph/op_table.h).
void import_BatchNormalization(ImportCtx& c) {
  for (const char* own : {"unbiased_running_var", "activation"})
    if (c.node.has(own)) c.fail("attribute '{}' is onnxdp's own (set when it trains), not an ONNX attribute", own);
  if (c.opset >= 14) return;
  if (c.node.has("spatial")) {
    auto* spatial = std::get_if<int64_t>(&c.node.attrs["spatial"]);
    if (!spatial || *spatial != 1)
      c.fail("spatial=0 (statistics per activation, not per channel) is not supported; onnxdp normalises per channel");
    c.ignore_attr("spatial");  // 1 is the only meaning later opsets kept
  }
  int outs = named_outputs(c);
  if (outs > 3)
    c.fail("the saved_mean/saved_var outputs of opset < 14 training are not supported; re-export with opset >= 14 "
           "(or without those outputs)");
  if (outs > 1) c.node.attrs["training_mode"] = int64_t(1);
}

// Composite (graph/op_table.h). InstanceNormalization(x [N, C, ...], scale [C], B [C]) normalises
// each (n, c) over the spatial dims: LayerNormalization(x, ones, axis 2) with ones shaped like the
// spatial dims, then * scale + B with scale and B unsqueezed to [C, 1, ...]. The ones, the axes and
// the dtype come from Shape / Size / Range / CastLike of x, all folded to constants at load; the
// gradient is LayerNormalization's fused one.
void import_InstanceNormalization(ImportCtx& c) {
  if (c.node.inputs.size() != 3 || c.node.inputs[1] == kNoValue || c.node.inputs[2] == kNoValue)
    c.fail("needs its three inputs: x, scale and B");
  float epsilon = 1e-5f;
  if (auto it = c.node.attrs.find("epsilon"); it != c.node.attrs.end()) {
    const float* e = std::get_if<float>(&it->second);
    if (!e) c.fail("attribute 'epsilon' must be a float");
    epsilon = *e;
  }
  const ValueId x = c.node.inputs[0], scale = c.node.inputs[1], bias = c.node.inputs[2];
  auto i64 = [&](int64_t v, const char* hint) { return c.add_constant(Tensor::scalar_i64(v), hint); };
  ValueId one = c.add_node(Op::CastLike, "one", {c.add_constant(Tensor::scalar_f32(1.0f), "one_f32"), x});
  ValueId spatial = c.add_node(Op::Shape, "spatial_shape", {x}, {{"start", Attr(int64_t(2))}});
  ValueId ones = c.add_node(Op::Expand, "ones", {one, spatial});
  ValueId normed = c.add_node(Op::LayerNormalization, "normalized", {x, ones},
                              {{"axis", Attr(int64_t(2))}, {"epsilon", Attr(epsilon)}});
  ValueId rank = c.add_node(Op::Size, "rank", {c.add_node(Op::Shape, "shape", {x})});
  ValueId last = c.add_node(Op::Sub, "rank_minus_1", {rank, i64(1, "one_i64")});
  ValueId axes = c.add_node(Op::Range, "channel_axes", {i64(1, "start"), last, i64(1, "delta")});
  ValueId s = c.add_node(Op::Unsqueeze, "scale", {scale, axes});
  ValueId b = c.add_node(Op::Unsqueeze, "bias", {bias, axes});
  c.node.op = Op::Add;
  c.node.inputs = {c.add_node(Op::Mul, "scaled", {normed, s}), b};
  c.node.attrs.clear();
}

// Opset 12 turned the `ratio` attribute into input 1 and added input 2 (training_mode). Older
// models get their ratio as a constant input; without a training_mode input the op infers (a copy)
// until the training pass turns it on. Opsets 7..9 typed the mask like the data; onnxdp gives
// bool masks (opset 10 on) and rejects the older form when the mask is used.
void import_Dropout(ImportCtx& c) {
  if (c.opset >= 12) return;
  if (c.opset < 10 && named_outputs(c) > 1)
    c.fail("the mask output of opset < 10 Dropout (typed like the data) is not supported; re-export with opset >= 10");
  if (c.node.has("ratio")) {
    auto* ratio = std::get_if<float>(&c.node.attrs["ratio"]);
    if (!ratio) c.fail("attribute 'ratio' must be a float");
    if (!(*ratio >= 0.0f && *ratio < 1.0f)) c.fail("ratio {} is outside [0, 1)", *ratio);
    ValueId r = c.add_constant(Tensor::scalar_f32(*ratio), "ratio");
    c.node.attrs.erase("ratio");
    c.node.inputs.resize(1);
    c.node.inputs.push_back(r);
  }
}

}  // namespace onnxdp
