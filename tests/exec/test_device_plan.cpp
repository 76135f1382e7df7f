// Plans on a device (exec/device_backend.h): --devices parsing, and the device path of Plan and the
// trainer run on the emulated CUDA device (host memory, the CUDA kernels' host emulations) against
// the CPU. These check the host side of the CUDA backend: the device arena and parameter buffer,
// uploads and downloads, which nodes run where, the CPU fallback with its copies and collectives.
// They prove nothing about device code (tests/gpu/ runs that on a GPU).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "exec/device.h"
#include "exec/device_backend.h"
#include "exec/plan.h"
#include "parallel/communicator.h"
#include "tests/test_util.h"
#include "tests/train_util.h"
#if defined(ONNXDP_HAVE_CUDA)
#include "tests/gpu/cuda_test_util.h"
#endif
#include "train/checkpoint.h"
#include "train/npz.h"
#include "train/trainer.h"

using namespace onnxdp;
using namespace onnxdp::test;

TEST_CASE("devices: --devices strings name the kind and one device index per local replica") {
  CHECK(parse_devices("cpu").kind == DeviceKind::cpu);
  CHECK(parse_devices("cpu").index == std::vector<int>{0});
  CHECK(parse_devices("cpu:3").index == std::vector<int>{0, 1, 2});
  CHECK(parse_devices("cuda-emulated").kind == DeviceKind::cuda_emulated);
  CHECK(parse_devices("cuda-emulated:2").index == std::vector<int>{0, 1});
  for (const char* bad : {"cpu:0", "cpu:x", "cpu:", "gpu", "cuda-emulated:0", "cpu:2000"}) {
    CAPTURE(bad);
    CHECK(contains(error_of([&] { parse_devices(bad); }), "--devices"));
  }
  const CudaInfo info = cuda_info();
  if (info.device_count == 0) {
    // auto falls back to one CPU replica and says why; naming a GPU is an error that says why.
    DeviceList a = parse_devices("auto");
    CHECK(a.kind == DeviceKind::cpu);
    CHECK(a.index.size() == 1);
    CHECK(!a.why_cpu.empty());
    for (const char* cuda : {"cuda", "cuda:0", "cuda:0,1"}) {
      CAPTURE(cuda);
      const std::string e = error_of([&] { parse_devices(cuda); });
      CHECK(contains(e, "no GPU is usable here"));
      CHECK(contains(e, cuda));
    }
  } else {
    CHECK(parse_devices("auto").kind == DeviceKind::cuda);
    CHECK(int(parse_devices("cuda").index.size()) == info.device_count);
    CHECK(parse_devices("cuda", 0, 2).index == std::vector<int>{0});  // under a launcher: the local rank's GPU
    CHECK(contains(error_of([&] { parse_devices("cuda:0,0"); }), "named twice"));
    CHECK(contains(error_of([&] { parse_devices("cuda:99"); }), "there is no cuda:99"));
  }
}

#if defined(ONNXDP_HAVE_CUDA)
namespace {

std::string model_path(const std::string& name) { return std::string(ONNXDP_SOURCE_DIR) + "/models/" + name + "/model.onnx"; }

// y = Softmax(AllReduce(Relu(x * w + b))) with w, b parameters: Mul/Add/Relu/Softmax have
// (emulated) CUDA kernels; the AllReduce runs on the CPU between device kernels, as every
// collective of a device that has not joined a world does (here a world of one: a copy).
Graph small_graph(bool host_node = true) {
  Graph g;
  auto value = [&](const char* name, ValueKind kind, Tensor data) {
    Value v;
    v.name = name;
    v.shape = kind == ValueKind::input ? Shape{2, 3} : Shape{3};
    v.kind = kind;
    v.data = std::move(data);
    return g.add_value(std::move(v));
  };
  ValueId x = value("x", ValueKind::input, Tensor());
  g.inputs = {x};
  Tensor w(DType::f32, {3}), b(DType::f32, {3});
  for (int k = 0; k < 3; ++k) w.as<float>()[k] = 0.5f + float(k), b.as<float>()[k] = -1.0f + float(k);
  ValueId wv = value("w", ValueKind::parameter, w), bv = value("b", ValueKind::parameter, b);
  int m = g.add_node(Op::Mul, "mul", {x, wv}, {"xw"});
  int a = g.add_node(Op::Add, "add", {g.nodes[size_t(m)].outputs[0], bv}, {"xwb"});
  int r = g.add_node(Op::Relu, "relu", {g.nodes[size_t(a)].outputs[0]}, {"h"});
  ValueId h = g.nodes[size_t(r)].outputs[0];
  if (host_node) h = g.nodes[size_t(g.add_node(Op::AllReduce, "allreduce", {h}, {"hc"}))].outputs[0];
  int s = g.add_node(Op::Softmax, "softmax", {h}, {"y"}, {{"axis", Attr(int64_t(-1))}});
  g.outputs = {g.nodes[size_t(s)].outputs[0], g.nodes[size_t(a)].outputs[0]};
  verify(g);
  return g;
}

void check_close(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.as<float>()[i] == doctest::Approx(b.as<float>()[i]).epsilon(1e-6));
}

// Within 1e-5 relative (+1e-6): the emulated GEMMs sum in another order than the CPU's BLAS.
void check_near(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  int bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.as<float>()[i], y = b.as<float>()[i];
    bad += !(std::abs(x - y) <= 1e-5f * std::abs(x) + 1e-6f);
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("device plan: elementwise nodes on the device, a node on the CPU between them, outputs equal the CPU's") {
  Plan cpu(small_graph());
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  Plan gpu(small_graph(), PlanOptions{.device = dev});
  CHECK(dev->name() == "cuda-emulated:0");
  CHECK(gpu.host_ops() == "AllReduce");
  CHECK(cpu.host_ops().empty());
  CHECK(gpu.device_bytes() >= gpu.arena_bytes() + 2 * 3 * 4);
  CHECK(cpu.device_bytes() == 0);
  Tensor x(DType::f32, {2, 3});
  for (int k = 0; k < 6; ++k) x.as<float>()[k] = float(k) * 0.7f - 2.0f;
  std::map<std::string, Tensor> in{{"x", x}};
  auto a = cpu.run(in), b = gpu.run(in);
  check_close(a.at("y"), b.at("y"));
  check_close(a.at("xwb"), b.at("xwb"));

  // Parameters change on the host between runs (the optimizer): every run uploads them.
  for (Plan* p : {&cpu, &gpu}) {
    Value& w = const_cast<Graph&>(p->graph()).value(p->graph().find("w"));
    w.data.as<float>()[1] = -3.0f;
  }
  a = cpu.run(in), b = gpu.run(in);
  check_close(a.at("y"), b.at("y"));
  check_close(a.at("xwb"), b.at("xwb"));
  CHECK(b.at("xwb").as<float>()[1] == doctest::Approx((0.7f - 2.0f) * -3.0f + 0.0f));
}

TEST_CASE("device plan: parameters changed on the host are uploaded every run, the others before the first run only") {
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  PlanOptions po{.device = dev};
  po.changed_on_host = std::set<std::string>{"b"};
  Plan gpu(small_graph(false), po);
  Plan every(small_graph(false), PlanOptions{.device = dev});  // unset: every parameter, every run
  Tensor x(DType::f32, {2, 3});
  for (int k = 0; k < 6; ++k) x.as<float>()[k] = float(k);
  for (int run = 0; run < 2; ++run) {
    CAPTURE(run);
    if (run == 1)
      for (Plan* p : {&gpu, &every}) {
        Graph& g = const_cast<Graph&>(p->graph());
        g.value(g.find("w")).data.as<float>()[0] = 10.0f;  // w: not announced as changing
        g.value(g.find("b")).data.as<float>()[0] = 20.0f;
      }
    const float xwb = gpu.run({{"x", x}}).at("xwb").as<float>()[0];
    const float all = every.run({{"x", x}}).at("xwb").as<float>()[0];
    // x[0] = 0: xwb[0] = 0 * w[0] + b[0]; x[3] = 3 on row 1 shows w[0].
    CHECK(xwb == (run == 0 ? -1.0f : 20.0f));
    CHECK(all == xwb);
    const Tensor row1 = gpu.run({{"x", x}}).at("xwb");
    CHECK(row1.as<float>()[3] == 3.0f * 0.5f + (run == 0 ? -1.0f : 20.0f));  // still the first w[0] = 0.5
    CHECK(every.run({{"x", x}}).at("xwb").as<float>()[3] == 3.0f * (run == 0 ? 0.5f : 10.0f) + (run == 0 ? -1.0f : 20.0f));
  }
}

TEST_CASE("device plan: the second run is recorded and later runs replay it, with fresh inputs and parameters") {
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  Plan cpu(small_graph(false));
  Plan gpu(small_graph(false), PlanOptions{.device = dev});
  Plan eager(small_graph(false), PlanOptions{.device = dev, .device_graph = false});
  Plan mixed(small_graph(true), PlanOptions{.device = dev});  // a node on the CPU: never recorded
  for (int run = 0; run < 4; ++run) {
    CAPTURE(run);
    Tensor x(DType::f32, {2, 3});
    for (int k = 0; k < 6; ++k) x.as<float>()[k] = float(k * (run + 1)) * 0.3f - 1.0f;
    if (run == 3)  // the optimizer's update between steps reaches a replayed run
      for (Plan* p : {&cpu, &gpu, &eager})
        const_cast<Graph&>(p->graph()).value(p->graph().find("w")).data.as<float>()[2] = 4.0f;
    std::map<std::string, Tensor> in{{"x", x}};
    auto a = cpu.run(in), b = gpu.run(in), c = eager.run(in);
    mixed.run(in);
    check_close(a.at("y"), b.at("y"));
    check_close(a.at("xwb"), b.at("xwb"));
    check_close(a.at("y"), c.at("y"));
    CHECK(gpu.replays_graph() == (run >= 1));
    CHECK(!eager.replays_graph());
    CHECK(!mixed.replays_graph());
  }
}

TEST_CASE("device plan: after_run's device work is recorded with the nodes and replayed with them") {
  auto dev = make_device_backend(DeviceKind::cuda_emulated, 0);
  int calls = 0;
  float* kept = static_cast<float*>(dev->alloc(6 * sizeof(float)));  // a copy of y, made on the device
  PlanOptions po{.device = dev};
  po.after_run = [&](Plan& p) {
    ++calls;
    dev->copy_on_device(kept, p.device_data(p.graph().find("y")), 6 * sizeof(float));
  };
  Plan gpu(small_graph(false), po);
  Plan cpu(small_graph(false));
  for (int run = 0; run < 4; ++run) {
    CAPTURE(run);
    Tensor x(DType::f32, {2, 3});
    for (int k = 0; k < 6; ++k) x.as<float>()[k] = float(k + run) * 0.4f - 1.0f;
    auto want = cpu.run({{"x", x}}).at("y");
    gpu.run({{"x", x}});
    std::vector<float> got(6);
    dev->to_host(got.data(), kept, 6 * sizeof(float));
    for (int k = 0; k < 6; ++k) CHECK(got[size_t(k)] == doctest::Approx(want.as<float>()[k]).epsilon(1e-6));
  }
  // Called when run 0 went node by node and while run 1 was recorded; runs 2 and 3 replayed it.
  CHECK(gpu.replays_graph());
  CHECK(calls == 2);
  dev->release(kept);
}

TEST_CASE("device plan: all-reduces run on the device once it joined the world, on the CPU before") {
  Graph g;
  Value x;
  x.name = "x";
  x.shape = {5};
  x.kind = ValueKind::input;
  ValueId xv = g.add_value(std::move(x));
  g.inputs = {xv};
  int n = g.add_node(Op::AllReduce, "sum", {xv}, {"y"}, {{"async", Attr(int64_t(1))}});
  g.outputs = {g.nodes[size_t(n)].outputs[0]};
  verify(g);
  CommWorld world = make_in_process_world(2);
  std::vector<std::string> before(2), after(2);
  std::vector<std::vector<float>> sums(2);
  run_replicas(world, [&](Communicator& c) {
    auto dev = make_device_backend(DeviceKind::cuda_emulated, c.rank());
    before[size_t(c.rank())] = Plan(g, PlanOptions{.device = dev}).host_ops();
    dev->connect(&c);
    Plan p(g, PlanOptions{.device = dev});
    after[size_t(c.rank())] = p.host_ops();
    Tensor in(DType::f32, {5});
    for (int k = 0; k < 5; ++k) in.as<float>()[k] = float(k * (c.rank() + 1));
    RunState rs;
    rs.comm = &c;
    Tensor y = p.run({{"x", in}}, rs).at("y");
    sums[size_t(c.rank())].assign(y.as<float>(), y.as<float>() + 5);
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(before[size_t(r)] == "AllReduce");
    CHECK(after[size_t(r)].empty());
    for (int k = 0; k < 5; ++k) CHECK(sums[size_t(r)][size_t(k)] == float(3 * k));
  }
}

TEST_CASE("device plan: all-gathers of uneven shards run on the device once it joined the world") {
  // 5 rows over 2 replicas: 3 + 2, each row of 2 floats.
  auto graph_for = [](int64_t rows) {
    Graph g;
    Value x;
    x.name = "x";
    x.shape = {rows, 2};
    x.kind = ValueKind::input;
    ValueId xv = g.add_value(std::move(x));
    g.inputs = {xv};
    int n = g.add_node(Op::AllGather, "gather", {xv}, {"y"}, {{"rows", Attr(int64_t(5))}});
    g.outputs = {g.nodes[size_t(n)].outputs[0]};
    verify(g);
    return g;
  };
  CommWorld world = make_in_process_world(2);
  std::vector<std::string> where(2);
  std::vector<std::vector<float>> got(2);
  run_replicas(world, [&](Communicator& c) {
    auto dev = make_device_backend(DeviceKind::cuda_emulated, c.rank());
    dev->connect(&c);
    const int64_t rows = c.rank() == 0 ? 3 : 2;
    Plan p(graph_for(rows), PlanOptions{.device = dev});
    where[size_t(c.rank())] = p.host_ops();
    Tensor in(DType::f32, {rows, 2});
    for (int64_t k = 0; k < rows * 2; ++k) in.as<float>()[k] = float(100 * c.rank() + k);
    RunState rs;
    rs.comm = &c;
    Tensor y = p.run({{"x", in}}, rs).at("y");
    got[size_t(c.rank())].assign(y.as<float>(), y.as<float>() + 10);
  });
  const std::vector<float> want = {0, 1, 2, 3, 4, 5, 100, 101, 102, 103};
  for (int r = 0; r < 2; ++r) {
    CHECK(where[size_t(r)].empty());  // on the device, not the CPU fallback
    CHECK(got[size_t(r)] == want);
  }
}

TEST_CASE("device plan: mlp, tiny_lm and cnn train on the emulated CUDA device as on the CPU") {
  struct Case {
    const char* model;
    int64_t batch;
  };
  for (Case c : {Case{"mlp", 97}, Case{"tiny_lm", 30}, Case{"cnn", 50}}) {
    CAPTURE(c.model);
    TrainOptions o = momentum_run(c.model, c.batch, 6, 11);
    TrainResult cpu = train(o);
    o.devices = "cuda-emulated";
    TrainResult dev = train(o);
    CHECK(dev.device_bytes > 0);
    CHECK(cpu.device_bytes == 0);
    check_same_training(cpu, dev);
  }
}

TEST_CASE("device plan: a recorded step (nodes, all-reduces, optimizer) replays as it runs node by node, Dropout's masks new every step") {
  for (const char* model : {"mlp", "cnn"}) {
    CAPTURE(model);
    TrainOptions o = momentum_run(model, 50, 6, 11);
    o.devices = "cuda-emulated:2";
    // The full step's plan runs wholly on the device (the optimizer inside): it is recorded.
    CHECK(check_recorded_equals_launched(o) == 1);
  }
}

TEST_CASE("device plan: --tf32 trains within TF32's rounding of the CPU, and not fp32-exactly") {
  TrainOptions o = momentum_run("mlp", 64, 8, 11);
  TrainResult cpu = train(o);
  o.devices = "cuda-emulated";
  TrainResult fp32 = train(o);
  o.tf32 = true;
  TrainResult tf32 = train(o);
  check_same_training(cpu, fp32);
  REQUIRE(tf32.losses.size() == cpu.losses.size());
  float worst = 0;
  for (size_t s = 0; s < cpu.losses.size(); ++s) worst = std::max(worst, std::abs(tf32.losses[s] - cpu.losses[s]) / cpu.losses[s]);
  CHECK(worst < 1e-3f);
  CHECK(worst > 1e-6f);  // the GEMMs' inputs were rounded
}

TEST_CASE("device plan: the optimizer on the device: momentum with clipping, evaluation and checkpoints as on the CPU") {
  TempDir tmp;
  auto run = [&](const char* devices, const std::string& dir) {
    TrainOptions o;
    o.model = model_path("mlp");
    o.batch_size = 64;
    o.steps = 12;
    o.seed = 3;
    o.quiet = true;
    o.devices = devices;
    // Momentum (Adam would turn rounding-size gradient differences into lr-size steps), Nesterov.
    o.optimizer.kind = OptimizerKind::momentum;
    o.optimizer.nesterov = true;
    o.optimizer.lr = 0.05f;
    o.optimizer.max_grad_norm = 0.5f;  // below the gradients' norm: every step is clipped
    o.eval_data = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/eval.npz";
    o.eval_every = 5;
    o.checkpoint_dir = tmp.file(dir);
    o.checkpoint_every = 5;
    return train(o);
  };
  TrainResult cpu = run("cpu", "cpu"), dev = run("cuda-emulated", "dev");
  check_same_training(cpu, dev);
  CHECK(dev.eval_loss == doctest::Approx(cpu.eval_loss).epsilon(1e-5));
  // The checkpoints hold the device's parameters and optimizer state, not stale host copies.
  for (const char* step : {"checkpoint-5", "checkpoint-10"}) {
    CAPTURE(step);
    auto a = read_safetensors(tmp.file("cpu") + "/" + step + "/model.safetensors");
    auto b = read_safetensors(tmp.file("dev") + "/" + step + "/model.safetensors");
    REQUIRE(a.size() == b.size());
    for (const auto& [name, t] : a) check_near(t, b.at(name));
    auto ma = read_safetensors(tmp.file("cpu") + "/" + step + "/optimizer.safetensors");
    auto mb = read_safetensors(tmp.file("dev") + "/" + step + "/optimizer.safetensors");
    REQUIRE(ma.size() == mb.size());
    for (const auto& [name, t] : ma) check_near(t, mb.at(name));
  }
}

TEST_CASE("device plan: on the device, 20 steps straight equal 10 steps, stop, resume, 10 steps") {
  TempDir tmp;
  auto base = [&](const std::string& dir, int64_t steps) {
    TrainOptions o;
    o.model = model_path("mlp");
    o.batch_size = 128;
    o.steps = steps;
    o.seed = 7;
    o.quiet = true;
    o.devices = "cuda-emulated";
    o.checkpoint_dir = tmp.file(dir);
    return o;
  };
  TrainResult a = train(base("a", 20));
  train(base("b", 10));
  TrainOptions second = base("b", 20);
  second.resume = true;
  TrainResult b = train(second);
  REQUIRE(b.losses.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(b.losses[i] == a.losses[10 + i]);
  for (const auto& [name, t] : a.parameters)
    CHECK_MESSAGE(std::memcmp(t.data(), b.parameters.at(name).data(), t.nbytes()) == 0, name);
}

TEST_CASE("device plan: two emulated devices train as cpu:2, each gradient bucket one all-reduce over the flat device buffer") {
  TrainOptions o = momentum_run("mlp", 97, 8, 11);
  o.bucket_mb = 0.01;  // several buckets
  o.devices = "cpu:2";
  TrainResult cpu = train(o);
  o.devices = "cuda-emulated:2";
  TrainResult dev = train(o);
  CHECK(dev.world_size == 2);
  check_same_training(cpu, dev);
  CHECK(dev.bucket_bytes.size() >= 2);
  CHECK(dev.contiguous_buckets == int(dev.bucket_bytes.size()));
  // and with gradient accumulation (the accumulators are the flat device buffer, added to in place)
  o.grad_accum = 2;
  o.batch_size = 49;
  o.devices = "cpu:2";
  cpu = train(o);
  o.devices = "cuda-emulated:2";
  dev = train(o);
  check_same_training(cpu, dev);
  CHECK(dev.contiguous_buckets == int(dev.bucket_bytes.size()));
}

TEST_CASE("device plan: the CLI trains and runs on cuda-emulated, saying what runs where") {
  TempDir tmp;
  const std::string model = model_path("mlp");
  CliResult t = onnxdp_cli(tmp, "train " + q(model) + " --devices cuda-emulated --steps 3 --batch-size 64 --output-dir " +
                                    q(tmp.file("run")));
  REQUIRE_MESSAGE(t.rc == 0, t.out);
  CHECK(contains(t.out, "cuda-emulated:0 holds"));
  CHECK((contains(t.out, "every op runs there") || contains(t.out, "ops without a kernel there run on the CPU with copies")));
  CHECK(contains(t.out, "device memory per replica on cuda-emulated:0"));
  const std::string data = std::string(ONNXDP_SOURCE_DIR) + "/models/mlp/model.npz";
  // Batches of 97 rows: shards of 49 and 48 (the last batch 23 and 22), gathered on the devices.
  CliResult a = onnxdp_cli(tmp, "run " + q(model) + " --data " + q(data) + " --out " + q(tmp.file("cpu.npz")) +
                                    " --devices cpu --batch-size 97");
  CliResult b = onnxdp_cli(tmp, "run " + q(model) + " --data " + q(data) + " --out " + q(tmp.file("dev.npz")) +
                                    " --devices cuda-emulated:2 --batch-size 97");
  REQUIRE_MESSAGE(a.rc == 0, a.out << a.err);
  REQUIRE_MESSAGE(b.rc == 0, b.out << b.err);
  auto x = read_npz(tmp.file("cpu.npz")), y = read_npz(tmp.file("dev.npz"));
  REQUIRE(x.size() == y.size());
  for (const auto& [name, t] : x) check_close(t, y.at(name));
}
#endif
