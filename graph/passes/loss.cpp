#include "graph/passes/loss.h"

namespace onnxdp {

LossKind loss_kind_from_name(const std::string& s) {
  if (s == "cross_entropy") return LossKind::cross_entropy;
  if (s == "mse") return LossKind::mse;
  if (s == "bce_with_logits") return LossKind::bce_with_logits;
  if (s == "l1") return LossKind::l1;
  if (s == "none") return LossKind::none;
  fail("unknown loss '{}': use cross_entropy, mse, bce_with_logits, l1 or none", s);
}

namespace {

struct Builder {
  Graph& g;
  int n = 0;
  ValueId emit(Op op, std::vector<ValueId> ins, std::map<std::string, Attr> attrs = {}) {
    std::string nm = fmt::format("loss/{}{}", op_name(op), n++);
    int idx = g.add_node(op, nm, std::move(ins), {nm}, std::move(attrs));
    return g.nodes[size_t(idx)].outputs[0];
  }
  ValueId constant(Tensor t) {
    Value v;
    v.name = fmt::format("loss/const{}", n++);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.kind = ValueKind::constant;
    v.data = std::move(t);
    return g.add_value(std::move(v));
  }
  int64_t global_batch = 0;
  // Mean over every element of x [rows, ...]; over the global batch's elements when it is split.
  ValueId mean_all(ValueId x) {
    const Value& v = g.value(x);
    int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    if (global_batch <= 0 || global_batch == rows) return emit(Op::ReduceMean, {x}, {{"keepdims", Attr(int64_t(0))}});
    double per_row = rows ? double(shape_numel(v.shape)) / double(rows) : 0;
    Tensor k(v.dtype, {});
    double inv = 1.0 / (double(global_batch) * per_row);
    if (v.dtype == DType::f64) k.as<double>()[0] = inv;
    else k.as<float>()[0] = float(inv);
    ValueId sum = emit(Op::ReduceSum, {x}, {{"keepdims", Attr(int64_t(0))}});
    return emit(Op::Mul, {sum, constant(std::move(k))});
  }
};

}  // namespace

ValueId add_loss(Graph& g, const LossOptions& o) {
  if (g.outputs.empty()) fail("the model has no outputs to compute a loss from");
  ValueId out = g.outputs[0];
  Builder b{g};
  b.global_batch = o.global_batch;
  const Value outv = g.value(out);
  if (o.kind == LossKind::none) {
    if (shape_numel(outv.shape) != 1 || !dtype_is_float(outv.dtype))
      fail("--loss none needs the model's first output '{}' to be a floating scalar loss; it is {} {}", outv.name,
           dtype_name(outv.dtype), shape_str(outv.shape));
    ValueId loss = outv.shape.empty() ? out : b.emit(Op::Reshape, {out, b.constant(Tensor::from_i64({}, {0}))});
    if (o.shard_fraction == 1) return loss;
    Tensor k(outv.dtype, {});
    if (outv.dtype == DType::f64) k.as<double>()[0] = o.shard_fraction;
    else k.as<float>()[0] = float(o.shard_fraction);
    return b.emit(Op::Mul, {loss, b.constant(std::move(k))});
  }
  if (!dtype_is_float(outv.dtype)) fail("the model's first output '{}' is {}, a loss needs floats", outv.name, dtype_name(outv.dtype));

  Value label;
  label.name = o.label_name;
  label.kind = ValueKind::input;
  label.dtype = o.label_dtype;
  int64_t r = int64_t(outv.shape.size());
  if (o.kind == LossKind::cross_entropy) {
    if (r < 1) fail("cross_entropy needs logits with a class axis; output '{}' is a scalar", outv.name);
    int64_t axis = o.class_axis < 0 ? r - 1 : o.class_axis;
    if (axis >= r) fail("--class-axis {} is out of range for output '{}' of shape {}", o.class_axis, outv.name, shape_str(outv.shape));
    int64_t classes = outv.shape[size_t(axis)];
    label.shape = outv.shape;
    label.shape.erase(label.shape.begin() + axis);
    if (!dtype_is_integer(o.label_dtype)) fail("cross_entropy needs integer class labels, '{}' is {}", o.label_name, dtype_name(o.label_dtype));
    ValueId y = g.add_value(std::move(label));
    g.inputs.push_back(y);
    ValueId yl = o.label_dtype == DType::i64 ? y : b.emit(Op::Cast, {y}, {{"to", Attr(int64_t(7))}});
    // one-hot [.., C, ..] = (label unsqueezed at the class axis) == [0, 1, .., C-1] along that axis
    std::vector<int64_t> ids(static_cast<size_t>(classes));
    for (int64_t c = 0; c < classes; ++c) ids[size_t(c)] = c;
    Shape range_shape(size_t(r), 1);
    range_shape[size_t(axis)] = classes;
    ValueId range = b.constant(Tensor::from_i64(ids, range_shape));
    ValueId yu = b.emit(Op::Unsqueeze, {yl, b.constant(Tensor::from_i64({axis}))});
    ValueId onehot = b.emit(Op::Cast, {b.emit(Op::Equal, {yu, range})}, {{"to", Attr(int64_t(dtype_to_onnx(outv.dtype)))}});
    ValueId lsm = b.emit(Op::LogSoftmax, {out}, {{"axis", Attr(axis)}});
    ValueId picked = b.emit(Op::ReduceSum, {b.emit(Op::Mul, {lsm, onehot}), b.constant(Tensor::from_i64({axis}))},
                            {{"keepdims", Attr(int64_t(0))}});
    return b.emit(Op::Neg, {b.mean_all(picked)});
  }
  label.shape = outv.shape;
  if (label.dtype != outv.dtype)
    fail("the {} loss needs '{}' as {} like the model's output, the data has {}",
         o.kind == LossKind::mse ? "mse" : o.kind == LossKind::l1 ? "l1" : "bce_with_logits", o.label_name,
         dtype_name(outv.dtype), dtype_name(label.dtype));
  ValueId y = g.add_value(std::move(label));
  g.inputs.push_back(y);
  switch (o.kind) {
    case LossKind::mse: {
      ValueId d = b.emit(Op::Sub, {out, y});
      return b.mean_all(b.emit(Op::Mul, {d, d}));
    }
    case LossKind::l1: return b.mean_all(b.emit(Op::Abs, {b.emit(Op::Sub, {out, y})}));
    case LossKind::bce_with_logits:  // softplus(x) - x*y, PyTorch's BCEWithLogitsLoss
      return b.mean_all(b.emit(Op::Sub, {b.emit(Op::Softplus, {out}), b.emit(Op::Mul, {out, y})}));
    default: break;
  }
  fail("unreachable loss kind");
}

}  // namespace onnxdp
