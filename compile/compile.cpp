#include "compile/compile.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "exec/cpu/conv_depthwise.h"
#include "exec/cpu/onednn.h"
#include "exec/kernel.h"
#include "graph/autodiff.h"
#include "graph/passes/autocast.h"
#include "graph/passes/dead_nodes.h"
#include "graph/passes/fold.h"
#include "graph/passes/fold_transposes.h"
#include "graph/passes/fold_scales.h"
#include "graph/passes/block_channels.h"
#include "graph/passes/fuse_epilogues.h"
#include "graph/passes/fuse_attention.h"
#include "graph/passes/fuse_bias_grad.h"
#include "graph/passes/fuse_clip_grad.h"
#include "graph/passes/fuse_masked_softmax.h"
#include "graph/passes/fuse_relu_grad.h"
#include "graph/passes/fuse_gelu.h"
#include "graph/passes/inference_mode.h"
#include "importer/onnx_io.h"
#include "importer/trainability.h"

namespace onnxdp {

namespace {

// Constant folding runs nodes with their CPU kernels.
void fold(Graph& g) {
  infer_and_fold(g, [](const Graph& graph, const Node& n, const std::vector<const Tensor*>& inputs) {
    return run_node(graph, n, inputs);
  });
}

// What the passes of one compile share.
struct Compilation {
  const onnx::ModelProto& proto;
  const std::string& model_dir;
  const CompileOptions& o;
  Compiled c;
  std::vector<ValueId> stats;  // BatchNormalization running-statistic parameters (never trained)
  std::vector<ValueId> wrt;    // train: the trainable parameters, in c.trainable's order
  ValueId seed = kNoValue;     // train with fp16: the loss-scale input that seeds backward
  std::optional<Trainability> decided;  // decide_trainability's, made once (trainability())
  const Trainability& trainability() {
    if (!decided) decided = decide_trainability(proto, {o.freeze, o.trainable});
    return *decided;
  }
  int64_t rows() const { return shard_rows(o.batch, o.world)[size_t(o.rank)]; }
  int64_t step_rows() const { return o.step_rows > 0 ? o.step_rows : o.batch; }
  DataParallelOptions dp() const {
    DataParallelOptions dp;
    dp.world_size = o.world;
    dp.replica = o.rank;
    dp.global_batch = o.batch;
    dp.local_bn = o.local_bn;
    dp.bucket_mb = o.bucket_mb;
    dp.zero_stage = o.zero_stage;
    dp.grad_dtype = o.grad_dtype;
    dp.first_bucket_mb = std::min(dp.first_bucket_mb, o.bucket_mb);  // never larger than the others
    return dp;
  }
  // The values the passes after autodiff must keep (fusions may not swallow them).
  std::vector<ValueId> read_after() const {
    std::vector<ValueId> v = c.grads;
    if (c.loss != kNoValue) v.push_back(c.loss);
    for (const auto& [value, name] : c.running_stats) v.push_back(value);
    return v;
  }
};

using Mode = CompileMode;

void pass_import(Compilation& x) { x.c.g = load_graph(x.proto, x.model_dir, x.o.import); }

// Running statistics: BatchNormalization inputs 3/4, updated from its training-mode outputs as
// PyTorch does, running_var with the unbiased batch variance (ONNX's op, as `onnxdp run` and the
// conformance tests run it, takes the biased one): graph/op_table.h. Each micro-batch of
// --grad-accum updates them with its own statistics, as in PyTorch.
void pass_running_stats(Compilation& x) {
  Graph& g = x.c.g;
  for (Node& n : g.nodes)
    if (n.op == Op::BatchNormalization) {
      for (int k = 3; k < 5; ++k) x.stats.push_back(n.inputs[size_t(k)]);
      if (!n.i("training_mode")) continue;
      n.attrs["unbiased_running_var"] = Attr(int64_t(1));
      for (int k = 1; k < 3; ++k)
        if (k < int(n.outputs.size()) && n.outputs[size_t(k)] != kNoValue)
          x.c.running_stats.emplace_back(n.outputs[size_t(k)], g.value(n.inputs[size_t(k + 2)]).name);
    }
}

void pass_loss(Compilation& x) {
  Graph& g = x.c.g;
  LossOptions lo = x.o.loss;
  if (x.o.mode == Mode::eval) {
    x.c.prediction = g.outputs[0];
    x.c.loss = lo.kind == LossKind::none ? g.outputs[0] : add_loss(g, lo);
    g.outputs = {x.c.prediction, x.c.loss};
    return;
  }
  x.c.prediction = g.outputs[0];
  if (x.o.world > 1 || x.step_rows() != x.o.batch) {  // this graph's rows are a share of the step's mean
    lo.global_batch = x.step_rows();
    lo.shard_fraction = double(x.rows()) / double(x.step_rows());
  }
  x.c.loss = add_loss(g, lo);
}

// The parameters whose values never change: those decide_trainability freezes as constants, by
// --freeze or as unable to train (not those it leaves to the gradient check). A pass may read
// them as constants (fuse_attention's scales and masks in a dynamo export's initializers).
std::vector<ValueId> fixed_parameters(Compilation& x) {
  const Trainability& decision = x.trainability();
  std::vector<ValueId> fixed;
  for (ValueId p : x.c.g.parameters()) {
    const InitializerRole* role = decision.find(x.c.g.value(p).name);
    if (role && !role->trainable() && role->why != InitializerRole::Why::unreached) fixed.push_back(p);
  }
  return fixed;
}

// Trainable: what the decision says trains (importer/trainability.h), is float32, is no running
// statistic, and has a gradient path to the loss (autodiff on a copy decides that).
void pass_trainability(Compilation& x) {
  Graph& g = x.c.g;
  const Trainability& decision = x.trainability();
  std::vector<ValueId> candidates;
  for (ValueId p : g.parameters()) {
    const Value& v = g.value(p);
    const InitializerRole* role = decision.find(v.name);
    using Why = InitializerRole::Why;
    const bool stat = std::find(x.stats.begin(), x.stats.end(), p) != x.stats.end();
    std::string why = role && role->why != Why::trains && role->why != Why::unreached ? role->reason
                      : stat ? "BatchNormalization running statistic"
                      : v.dtype != DType::f32 ? fmt::format("{} (onnxdp trains f32 parameters)", dtype_name(v.dtype))
                                              : "";
    if (why.empty()) {
      candidates.push_back(p);
    } else {
      x.c.frozen.push_back(v.name);
      x.c.frozen_reason[v.name] = why;
    }
  }
  Graph probe = g;
  std::vector<ValueId> probe_grads = autodiff(probe, x.c.loss, candidates);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& name = g.value(candidates[i]).name;
    if (probe_grads[i] == kNoValue) {
      x.c.frozen.push_back(name);
      x.c.frozen_reason[name] = "no gradient path to the loss";
    } else {
      x.c.trainable.push_back(name);
      x.wrt.push_back(candidates[i]);
    }
  }
  if (x.c.trainable.empty()) fail("the model has no trainable parameters that reach the loss");
}

void pass_data_parallel_forward(Compilation& x) { data_parallel_forward(x.c.g, x.dp(), x.o.batch_inputs); }

// `run` over several replicas: every output is gathered from the shards in sample order, under
// its own name.
void pass_gather_outputs(Compilation& x) {
  Graph& g = x.c.g;
  const int64_t rows = x.rows();
  for (ValueId& out : g.outputs) {
    const Value& v = g.value(out);
    if (v.shape.empty() || v.shape[0] != rows)
      fail("output '{}' has shape {} for {} of the batch's {} samples: its axis 0 is not the samples, so the "
           "replicas' parts cannot be gathered; run it with --devices cpu",
           v.name, shape_str(v.shape), rows, x.o.batch);
    if (v.kind != ValueKind::activation)
      fail("output '{}' is a graph input or initializer, not computed: run it with --devices cpu", v.name);
    const std::string name = v.name;
    g.value(out).name = name + "/shard";  // the gathered value keeps the output's name
    int n = g.add_node(Op::AllGather, "dp/gather/" + name, {out}, {name}, {{"rows", Attr(x.o.batch)}});
    out = g.nodes[size_t(n)].outputs[0];
  }
}

// fp16: backward of loss * amp/loss_scale, fed every step.
void pass_loss_scale_input(Compilation& x) {
  Graph& g = x.c.g;
  Value in;
  in.name = kLossScaleInput;
  in.shape = g.value(x.c.loss).shape;
  in.kind = ValueKind::input;
  x.seed = g.add_value(std::move(in));
  g.inputs.push_back(x.seed);
}

void pass_autodiff(Compilation& x) { x.c.grads = autodiff(x.c.g, x.c.loss, x.wrt, x.seed); }

void pass_accumulate_gradients(Compilation& x) { accumulate_gradients(x.c.g, x.c.grads, x.c.trainable, x.c.loss); }

void pass_gradient_buckets(Compilation& x) {
  x.c.order = production_order(x.c.g, x.c.grads);
  if (x.o.sync) x.c.buckets = data_parallel_gradients(x.c.g, x.c.grads, x.dp());
}

// The step's loss over the global batch, for the metrics.
void pass_loss_all_reduce(Compilation& x) {
  int idx = x.c.g.add_node(Op::AllReduce, "dp/loss", {x.c.loss}, {"dp/loss"}, {{"async", Attr(int64_t(1))}});
  x.c.loss = x.c.g.nodes[size_t(idx)].outputs[0];
}

void pass_training_outputs(Compilation& x) {
  Graph& g = x.c.g;
  g.outputs = {x.c.loss};
  for (ValueId gr : x.c.grads) g.outputs.push_back(gr);
  for (const auto& [v, name] : x.c.running_stats) g.outputs.push_back(v);
}

struct Pass {
  const char* name;
  bool (*applies)(const CompileOptions& o);
  void (*run)(Compilation& x);
};

bool train(const CompileOptions& o) { return o.mode == Mode::train; }
bool inference(const CompileOptions& o) { return o.mode == Mode::eval || (o.mode == Mode::infer && !o.train_mode); }

// THE pass list: every compile runs the passes that apply to its options, in this order.
const std::vector<Pass>& compile_passes() {
  static const std::vector<Pass> passes = {
      {"import", [](const CompileOptions&) { return true; }, pass_import},
      {"fuse_gelu", [](const CompileOptions&) { return true; }, [](Compilation& x) { fuse_gelu(x.c.g); }},
      {"merge_transposes", [](const CompileOptions&) { return true; },
       [](Compilation& x) { merge_transposes(x.c.g, x.read_after()); }},
      {"inference_mode", inference, [](Compilation& x) { inference_mode(x.c.g); }},
      {"remove_dead_nodes", [](const CompileOptions& o) { return o.mode == Mode::infer && !o.train_mode; },
       [](Compilation& x) { remove_dead_nodes(x.c.g); }},
      {"running_stats", train, pass_running_stats},
      {"autocast", [](const CompileOptions&) { return true; },
       [](Compilation& x) { autocast(x.c.g, x.o.mixed_precision); }},
      // After autocast (a product it casts is not matched), before autodiff (Attention's gradient).
      {"fuse_attention", [](const CompileOptions& o) { return o.cpu; },
       [](Compilation& x) { fuse_attention(x.c.g, x.read_after(), fixed_parameters(x)); }},
      {"loss", [](const CompileOptions& o) { return o.mode != Mode::infer; }, pass_loss},
      {"trainability", train, pass_trainability},
      {"data_parallel_forward", [](const CompileOptions& o) { return train(o) || (o.mode == Mode::infer && o.world > 1); },
       pass_data_parallel_forward},
      {"gather_outputs", [](const CompileOptions& o) { return o.mode == Mode::infer && o.world > 1; }, pass_gather_outputs},
      {"loss_scale_input", [](const CompileOptions& o) { return train(o) && o.mixed_precision == "fp16"; },
       pass_loss_scale_input},
      {"autodiff", train, pass_autodiff},
      // Before the passes that keep node indices.
      {"fuse_epilogues", [](const CompileOptions&) { return true; },
       [](Compilation& x) { fuse_epilogues(x.c.g, x.read_after()); }},
      {"fuse_relu_grad", train, [](Compilation& x) { fuse_relu_grad(x.c.g, x.read_after()); }},
      {"fuse_bias_grad", [](const CompileOptions& o) { return train(o) && o.cpu; },
       [](Compilation& x) { fuse_bias_grad(x.c.g, x.read_after()); }},
      {"fuse_clip_grad", [](const CompileOptions& o) { return train(o) && o.cpu; },
       [](Compilation& x) { fuse_clip_grad(x.c.g, x.read_after()); }},
      {"fuse_masked_softmax", [](const CompileOptions& o) { return o.cpu; },
       [](Compilation& x) { fuse_masked_softmax(x.c.g, x.read_after()); }},
      {"fold_transposes", [](const CompileOptions&) { return true; },
       [](Compilation& x) { fold_transposes(x.c.g, x.read_after()); }},
      {"fold_scales", [](const CompileOptions&) { return true; },
       [](Compilation& x) { fold_scales(x.c.g, x.read_after()); }},
      // After the fusions (they match plain nodes); oneDNN's layout, so only where it runs.
      {"block_channels", [](const CompileOptions& o) { return o.cpu && dnnl_enabled(); },
       [](Compilation& x) { block_channels(x.c.g, x.read_after(), depthwise_blocked_loops()); }},
      {"accumulate_gradients", [](const CompileOptions& o) { return train(o) && o.accumulate; }, pass_accumulate_gradients},
      {"gradient_buckets", train, pass_gradient_buckets},
      {"loss_all_reduce", [](const CompileOptions& o) { return train(o) && o.world > 1 && o.sync; }, pass_loss_all_reduce},
      {"training_outputs", train, pass_training_outputs},
      {"verify", [](const CompileOptions&) { return true; }, [](Compilation& x) { verify(x.c.g); }},
  };
  return passes;
}

}  // namespace

Compiled compile(const onnx::ModelProto& m, const std::string& model_dir, const CompileOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) fail("internal: replica {} of a world of {}", o.rank, o.world);
  Compilation x{m, model_dir, o, {}};
  for (const Pass& p : compile_passes())
    if (p.applies(o)) {
      p.run(x);
      x.c.passes.push_back(p.name);
    }
  return std::move(x.c);
}

Graph load_graph(const onnx::ModelProto& m, const std::string& model_dir, const ImportOptions& options) {
  ImportOptions opt = options;
  if (!opt.infer_shapes) opt.infer_shapes = fold;  // the recurrent composites unroll over static shapes
  Graph g = import_graph(m, model_dir, opt);
  fold(g);
  remove_dead_nodes(g);
  verify(g);
  return g;
}

Graph load_graph(const std::string& model_path, const ImportOptions& options) {
  onnx::ModelProto m = load_model_proto(model_path);
  return load_graph(m, std::filesystem::path(model_path).parent_path().string(), options);
}

}  // namespace onnxdp
