// `onnxdp graph MODEL [--train] [--devices cpu:N] [--mixed-precision bf16|fp16] --out FILE.onnx`:
// writes the graph onnxdp runs as an ONNX file (open it in Netron), exactly as compile() makes it
// (compile/compile.h): the graph `onnxdp run` runs (inference mode unless --train-mode, fusions
// applied, Scatter / AllGather with several replicas), or with --train the SPMD training graph of
// one replica, with loss, backward and the collectives (domain onnxdp) where the data-parallel
// pass put them; --mixed-precision adds autocast's Casts (and with fp16 and --train the
// loss-scale input amp/loss_scale that seeds backward). --passes lists the passes that ran.
#include <filesystem>
#include <fstream>
#include <set>

#include "cli/commands.h"
#include "compile/compile.h"
#include "importer/graph_export.h"
#include "importer/onnx_io.h"
#include "train/outputs.h"
#include "train/trainer.h"

namespace onnxdp::cli {

Command add_graph_command(CLI::App& parent) {
  auto o = std::make_shared<TrainOptions>();
  auto out = std::make_shared<std::string>();
  auto training = std::make_shared<bool>(false);
  auto replica = std::make_shared<int>(0);
  auto loss = std::make_shared<std::string>("cross_entropy");
  auto train_mode = std::make_shared<bool>(false);
  auto list_passes = std::make_shared<bool>(false);
  CLI::App* sub = parent.add_subcommand("graph", "Write the graph onnxdp runs (forward, or the training graph) as ONNX");
  sub->add_option("model", o->model, "The .onnx model")->required();
  sub->add_option("--out", *out, "The .onnx file to write")->required();
  sub->add_flag("--train", *training, "The training graph: loss, backward, collectives");
  sub->add_flag("--train-mode", *train_mode, "Without --train: the forward graph as exported, as run --train-mode runs it");
  sub->add_flag("--passes", *list_passes, "Also print the compile passes that made the graph, in order");
  sub->add_option("--devices", o->devices, "cpu or cpu:N: the world whose replica graph to write")->capture_default_str();
  sub->add_option("--replica", *replica, "Which replica's graph (shards differ when the batch splits unevenly)")
      ->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "Global batch size")->capture_default_str();
  sub->add_option("--loss", *loss, "cross_entropy | mse | bce_with_logits | l1 | none")->capture_default_str();
  sub->add_option("--label", o->label, "Name of the target input")->capture_default_str();
  sub->add_option("--freeze", o->freeze, "Initializers not to train (regex, repeatable)");
  sub->add_option("--trainable", o->trainable, "Initializers to train although taken for constants (regex, repeatable)");
  sub->add_flag("--local-bn", o->local_bn, "Per-replica BatchNormalization statistics");
  sub->add_option("--bucket-mb", o->bucket_mb, "Gradient bucket size in MB")->capture_default_str();
  sub->add_option("--grad-dtype", o->grad_dtype, "bf16: the gradient all-reduces in bfloat16")->capture_default_str();
  sub->add_option("--zero-stage", o->zero_stage, "1: the buckets as ZeRO-1 runs them (ReduceScatter)")->capture_default_str();
  sub->add_option("--mixed-precision", o->mixed_precision, "bf16 or fp16: the graph as train / run compute it")
      ->check(CLI::IsMember({"no", "bf16", "fp16"}))
      ->capture_default_str();
  return Command{sub, [=] {
                   check_outputs_apart({{"--out", *out}}, {{"the model", o->model}});
                   const int world = local_replicas(o->devices);
                   if (*replica < 0 || *replica >= world) fail("--replica {} is not in a world of {}", *replica, world);
                   o->loss = loss_kind_from_name(*loss);
                   Compiled c;
                   if (*training) {
                     c = training_graph(*o, world, *replica);
                   } else {  // the graph `onnxdp run` compiles for a batch of --batch-size
                     CompileOptions co;
                     co.mode = CompileMode::infer;
                     co.world = world;
                     co.rank = *replica;
                     co.batch = o->batch_size;
                     co.import.batch_size = shard_rows(o->batch_size, world)[size_t(*replica)];
                     co.train_mode = *train_mode;
                     co.mixed_precision = o->mixed_precision;
                     onnx::ModelProto m = load_model_proto(o->model);
                     std::set<std::string> initializers;
                     for (const auto& t : m.graph().initializer()) initializers.insert(t.name());
                     for (const auto& vi : m.graph().input())  // the batched inputs, as run feeds them
                       if (!initializers.count(vi.name()) && vi.type().tensor_type().shape().dim_size() > 0)
                         co.batch_inputs.push_back(vi.name());
                     c = compile(m, std::filesystem::path(o->model).parent_path().string(), co);
                   }
                   onnx::ModelProto m = graph_to_onnx(c.g);
                   std::ofstream f(*out, std::ios::binary | std::ios::trunc);
                   if (!f || !m.SerializeToOstream(&f)) fail("cannot write '{}'", *out);
                   std::printf("wrote %s: %zu nodes\n", out->c_str(), c.g.nodes.size());
                   if (*list_passes) {
                     std::string line;
                     for (const std::string& p : c.passes) line += (line.empty() ? "" : ", ") + p;
                     std::printf("passes: %s\n", line.c_str());
                   }
                   return 0;
                 }};
}

}  // namespace onnxdp::cli
