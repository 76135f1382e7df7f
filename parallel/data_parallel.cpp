#include "parallel/data_parallel.h"

#include <algorithm>
#include <map>

namespace onnxdp {


namespace {

// Appends nodes to g; names are unique under a prefix.
struct Emitter {
  Graph& g;
  std::string prefix;
  int n = 0;
  std::vector<ValueId> emit_n(Op op, std::vector<ValueId> ins, std::map<std::string, Attr> attrs, int n_out) {
    std::string base = fmt::format("{}/{}{}", prefix, op_name(op), n++);
    std::vector<std::string> outs;
    for (int k = 0; k < n_out; ++k) outs.push_back(n_out == 1 ? base : fmt::format("{}_{}", base, k));
    int idx = g.add_node(op, base, std::move(ins), outs, std::move(attrs));
    return g.nodes[size_t(idx)].outputs;
  }
  ValueId emit(Op op, std::vector<ValueId> ins, std::map<std::string, Attr> attrs = {}) {
    return emit_n(op, std::move(ins), std::move(attrs), 1)[0];
  }
  ValueId constant(Tensor t) {
    Value v;
    v.name = fmt::format("{}/const{}", prefix, n++);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.kind = ValueKind::constant;
    v.data = std::move(t);
    return g.add_value(std::move(v));
  }
  ValueId scalar(double x, DType t) {
    Tensor s(t, {});
    if (t == DType::f64) s.as<double>()[0] = x;
    else if (t == DType::f32) s.as<float>()[0] = float(x);
    else fail("{}: a {} constant is not supported", prefix, dtype_name(t));
    return constant(std::move(s));
  }
  ValueId ints(const std::vector<int64_t>& v) { return constant(Tensor::from_i64(v)); }
  // An Identity writing into an existing value id (so its consumers are kept).
  void alias(ValueId from, ValueId to) {
    Node n;
    n.name = fmt::format("{}/Identity{}", prefix, n_id());
    n.op = Op::Identity;
    n.inputs = {from};
    n.outputs = {to};
    g.value(to).producer = int(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }
  int n_id() { return n++; }
};

// Puts each new node right after the node of index `first` (-1: before every node), new nodes
// after the same node in the order given; returns their indices in the reordered g.nodes.
std::vector<int> insert_after(Graph& g, std::vector<std::pair<int, Node>> inserts) {
  std::vector<Node> old = std::move(g.nodes);
  g.nodes.clear();
  std::vector<int> where(inserts.size());
  for (int ni = -1; ni < int(old.size()); ++ni) {
    if (ni >= 0) g.nodes.push_back(std::move(old[size_t(ni)]));
    for (size_t k = 0; k < inserts.size(); ++k)
      if (inserts[k].first == ni) {
        where[k] = int(g.nodes.size());
        g.nodes.push_back(std::move(inserts[k].second));
      }
  }
  index_producers(g);
  return where;
}

// Training-mode BatchNormalization with statistics over the global batch, from ordinary ops:
//   mean = AllReduce(sum x) / n,  var = AllReduce(sum (x - mean)^2) / n  (biased, as ONNX),
//   y = (x - mean) / sqrt(var + eps) * scale + bias, running = running * m + batch * (1 - m),
// n = global rows * spatial. With unbiased_running_var (set by the trainer, graph/op_table.h) the
// running var's batch term is AllReduce(sum (x - mean)^2) / (n - 1), as PyTorch's SyncBatchNorm;
// n = 1 keeps the biased 0, as the kernels (exec/cpu/norm.cpp).
void global_batchnorm(Graph& g, const Node& bn, const DataParallelOptions& o, Emitter& e) {
  ValueId x = bn.inputs[0];
  const Shape xs = g.value(x).shape;
  const DType t = g.value(x).dtype;
  const int64_t r = int64_t(xs.size());
  std::vector<int64_t> axes = {0};
  int64_t spatial = 1;
  for (int64_t a = 2; a < r; ++a) axes.push_back(a), spatial *= xs[size_t(a)];
  const double count = double(o.global_batch) * double(spatial);
  Shape cshape(size_t(r), 1);
  cshape[1] = xs[1];
  std::map<std::string, Attr> keep = {{"keepdims", Attr(int64_t(1))}};
  ValueId inv_n = e.scalar(1.0 / count, t);
  ValueId s1 = e.emit(Op::ReduceSum, {x, e.ints(axes)}, keep);
  ValueId mean = e.emit(Op::Mul, {e.emit(Op::AllReduce, {s1}), inv_n});
  ValueId d = e.emit(Op::Sub, {x, mean});
  ValueId s2 = e.emit(Op::ReduceSum, {e.emit(Op::Mul, {d, d}), e.ints(axes)}, keep);
  ValueId s2_all = e.emit(Op::AllReduce, {s2});
  ValueId var = e.emit(Op::Mul, {s2_all, inv_n});
  ValueId inv_std = e.emit(Op::Reciprocal, {e.emit(Op::Sqrt, {e.emit(Op::Add, {var, e.scalar(bn.f("epsilon"), t)})})});
  ValueId scale = e.emit(Op::Reshape, {bn.inputs[1], e.ints(cshape)});
  ValueId bias = e.emit(Op::Reshape, {bn.inputs[2], e.ints(cshape)});
  ValueId y = e.emit(Op::Add, {e.emit(Op::Mul, {e.emit(Op::Mul, {d, inv_std}), scale}), bias});
  e.alias(y, bn.outputs[0]);
  const double m = bn.f("momentum");
  const bool unbiased = bn.i("unbiased_running_var") != 0 && count > 1;
  for (int k = 1; k < 3 && k < int(bn.outputs.size()); ++k) {
    if (bn.outputs[size_t(k)] == kNoValue) continue;
    ValueId stat = k == 1 ? mean : var;
    if (k == 2 && unbiased) stat = e.emit(Op::Mul, {s2_all, e.scalar(1.0 / (count - 1), t)});
    ValueId batch = e.emit(Op::Reshape, {stat, e.ints({xs[1]})});
    ValueId run = e.emit(Op::Add, {e.emit(Op::Mul, {bn.inputs[size_t(k + 2)], e.scalar(m, t)}),
                                   e.emit(Op::Mul, {batch, e.scalar(1.0 - m, t)})});
    e.alias(run, bn.outputs[size_t(k)]);
  }
}

// --local-bn: the node keeps its per-replica statistics; its running statistics are averaged so
// every replica keeps identical buffers (with unbiased_running_var, each replica's variance is
// unbiased over its own rows, as DDP's per-replica BatchNorm).
void local_batchnorm(Graph& g, Node bn, const DataParallelOptions& o, Emitter& e) {
  std::vector<std::pair<ValueId, ValueId>> averaged;  // (local value, original id)
  for (int k = 1; k < 3 && k < int(bn.outputs.size()); ++k) {
    ValueId orig = bn.outputs[size_t(k)];
    if (orig == kNoValue) continue;
    Value v = g.value(orig);
    v.name += "/local";
    ValueId local = g.add_value(std::move(v));
    bn.outputs[size_t(k)] = local;
    averaged.emplace_back(local, orig);
  }
  int idx = int(g.nodes.size());
  for (ValueId out : bn.outputs)
    if (out != kNoValue) g.value(out).producer = idx;
  g.nodes.push_back(bn);
  for (auto [local, orig] : averaged) {
    DType t = g.value(local).dtype;
    ValueId avg = e.emit(Op::Mul, {e.emit(Op::AllReduce, {local}), e.scalar(1.0 / o.world_size, t)});
    e.alias(avg, orig);
  }
}

}  // namespace

void data_parallel_forward(Graph& g, const DataParallelOptions& o, const std::vector<std::string>& batch_inputs) {
  if (o.world_size <= 1) return;
  const int64_t rows = shard_rows(o.global_batch, o.world_size)[size_t(o.replica)];
  // Scatter: the graph input keeps its name with the global batch's shape; its old value (read
  // by the model) becomes the Scatter's output.
  std::vector<Node> scatters;
  for (const std::string& name : batch_inputs) {
    ValueId local = g.find(name);
    if (local == kNoValue) fail("data parallel: the graph has no input '{}'", name);
    auto it = std::find(g.inputs.begin(), g.inputs.end(), local);
    if (it == g.inputs.end()) fail("data parallel: '{}' is not a graph input", name);
    Value& lv = g.value(local);
    if (lv.shape.empty() || lv.shape[0] != rows)
      fail("data parallel: input '{}' has shape {}, expected {} rows for replica {}", name, shape_str(lv.shape), rows,
           o.replica);
    Value global = lv;
    global.shape[0] = o.global_batch;
    lv.name = name + "/shard";
    lv.kind = ValueKind::activation;
    ValueId gid = g.add_value(std::move(global));
    *std::find(g.inputs.begin(), g.inputs.end(), local) = gid;
    Node s;
    s.name = name + "/Scatter";
    s.op = Op::Scatter;
    s.inputs = {gid};
    s.outputs = {local};
    s.attrs["rows"] = Attr(rows);
    scatters.push_back(std::move(s));
  }
  std::vector<Node> old = std::move(g.nodes);
  g.nodes = std::move(scatters);
  Emitter e{g, "dp"};
  for (Node& n : old) {
    bool training_bn = n.op == Op::BatchNormalization && n.i("training_mode") != 0;
    if (!training_bn) {
      g.nodes.push_back(std::move(n));
      continue;
    }
    e.prefix = (n.name.empty() ? std::string("BatchNormalization") : n.name) + "/dp";
    if (o.local_bn) local_batchnorm(g, n, o, e);
    else global_batchnorm(g, n, o, e);
  }
  index_producers(g);
}

std::vector<size_t> production_order(const Graph& g, const std::vector<ValueId>& grads) {
  std::vector<size_t> order;
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i] != kNoValue) order.push_back(i);
  auto producer = [&](size_t i) { return g.value(grads[i]).producer; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return producer(a) < producer(b); });
  return order;
}

std::vector<Bucket> data_parallel_gradients(Graph& g, std::vector<ValueId>& grads, const DataParallelOptions& o) {
  std::vector<Bucket> buckets;
  if (o.world_size <= 1) return buckets;
  std::vector<std::vector<size_t>> members;
  size_t cap = size_t(o.first_bucket_mb * 1024 * 1024), used = 0;
  for (size_t i : production_order(g, grads)) {
    const Value& v = g.value(grads[i]);
    size_t bytes = size_t(shape_numel(v.shape)) * dtype_size(v.dtype);
    if (members.empty() || (used > 0 && used + bytes > cap)) {
      if (!members.empty()) cap = size_t(o.bucket_mb * 1024 * 1024);
      members.emplace_back();
      buckets.emplace_back();
      used = 0;
    }
    members.back().push_back(i);
    buckets.back().grads.push_back(grads[i]);
    buckets.back().index.push_back(i);
    buckets.back().bytes += bytes;
    used += bytes;
  }
  // A Cast node from `from` into a new value of `from`'s shape, named `name`, of dtype `to`.
  auto cast = [&](ValueId from, const std::string& name, DType to) {
    Value v = g.value(from);
    v.name = name;
    v.dtype = to;
    v.data = Tensor();
    Node n;
    n.name = name;
    n.op = Op::Cast;
    n.inputs = {from};
    n.outputs = {g.add_value(std::move(v))};
    n.attrs["to"] = Attr(int64_t(dtype_to_onnx(to)));
    return n;
  };
  // Each bucket's AllReduce goes right after the node producing its last gradient (with bf16 the
  // casts in: each after its gradient's producer; the casts out after the bucket).
  std::vector<std::pair<int, Node>> inserts;
  std::vector<size_t> bucket_insert;
  for (size_t b = 0; b < buckets.size(); ++b) {
    Node n;
    n.name = fmt::format("dp/grad_bucket{}", b);
    n.op = o.zero_stage >= 1 ? Op::ReduceScatter : Op::AllReduce;
    n.attrs["async"] = Attr(int64_t(1));
    int last = -1;
    std::vector<Node> casts_out;
    for (size_t i : members[b]) {
      ValueId gid = grads[i];
      const int producer = g.value(gid).producer;
      last = std::max(last, producer);
      const bool compress = o.grad_dtype == DType::bf16 && g.value(gid).dtype == DType::f32;
      if (compress) {
        Node in = cast(gid, g.value(gid).name + "/bf16", DType::bf16);
        gid = in.outputs[0];
        inserts.emplace_back(producer, std::move(in));
      }
      n.inputs.push_back(gid);
      Value v = g.value(gid);
      v.name = g.value(gid).name + (o.zero_stage >= 1 ? "/reducescatter" : "/allreduce");
      ValueId out = g.add_value(std::move(v));
      n.outputs.push_back(out);
      if (compress) {
        casts_out.push_back(cast(out, g.value(grads[i]).name + "/allreduce", DType::f32));
        out = casts_out.back().outputs[0];
      }
      grads[i] = out;
    }
    bucket_insert.push_back(inserts.size());
    inserts.emplace_back(last, std::move(n));
    for (Node& c : casts_out) inserts.emplace_back(last, std::move(c));
  }
  std::vector<int> where = insert_after(g, std::move(inserts));
  for (size_t b = 0; b < buckets.size(); ++b) buckets[b].node = where[bucket_insert[b]];
  return buckets;
}

void accumulate_gradients(Graph& g, std::vector<ValueId>& grads, const std::vector<std::string>& names,
                          ValueId& loss) {
  // sum = v + input "grad_accum/<name>" (shaped like v), appended to g.nodes for now.
  auto accumulate = [&](ValueId v, const std::string& name) {
    Value in;
    in.name = "grad_accum/" + name;
    in.dtype = g.value(v).dtype;
    in.shape = g.value(v).shape;
    in.kind = ValueKind::input;
    ValueId acc = g.add_value(std::move(in));
    g.inputs.push_back(acc);
    int n = g.add_node(Op::Add, "grad_accum/" + name + "/add", {v, acc}, {g.value(v).name + "/accumulated"});
    return g.nodes[size_t(n)].outputs[0];
  };
  const size_t first_new = g.nodes.size();
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i] != kNoValue) grads[i] = accumulate(grads[i], names[i]);
  loss = accumulate(loss, "loss");
  // Each Add moves to just after the node producing its gradient (or the loss).
  std::vector<std::pair<int, Node>> inserts;
  for (size_t k = first_new; k < g.nodes.size(); ++k) {
    const int producer = g.value(g.nodes[k].inputs[0]).producer;
    inserts.emplace_back(producer, std::move(g.nodes[k]));
  }
  g.nodes.resize(first_new);
  insert_after(g, std::move(inserts));
}

}  // namespace onnxdp
