// importer/model_file.h: initializers of 64 KiB or more stay in the model file. Their values read
// back exactly (from the formula that wrote them), the parsed ModelProto does not hold them, the
// last raw_data of a TensorProto wins as protobuf has it (protobuf's own parse of the same bytes is
// the reference), a file changed after loading is refused rather than read, a file cannot name the
// private reference key, export writes such initializers back inline, and trainability reads their
// values (non-finite, mask) as it reads inline ones.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "compile/compile.h"
#include "graph/error.h"
#include "importer/model_file.h"
#include "importer/onnx_io.h"
#include "importer/trainability.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace onnxdp;
using onnxdp::test::TempDir;

namespace {

constexpr int64_t kRows = 128, kCols = 160;  // 20480 floats: 80 KiB, over kInFileBytes
static_assert(kRows * kCols * 4 >= int64_t(kInFileBytes));

// Exact in float32: multiples of 0.25 below 64.
float w_value(int64_t i, int salt = 0) { return float((i * 7 + salt) % 251) * 0.25f - 3.0f; }

std::string f32_bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

std::vector<float> w_values(int salt = 0) {
  std::vector<float> v(size_t(kRows * kCols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = w_value(int64_t(i), salt);
  return v;
}

onnx::TensorProto f32_tensor(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(f32_bytes(v));
  return t;
}

void add_io(onnx::ValueInfoProto* vi, const std::string& name, std::vector<int64_t> dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in, std::string out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("n_" + out);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

// y = x [1, 128] @ W [128, 160] + b [160]: W large (stays in the file), b small (inline).
onnx::ModelProto linear_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("linear");
  add_io(g->add_input(), "x", {1, kRows});
  *g->add_initializer() = f32_tensor("W", {kRows, kCols}, w_values());
  *g->add_initializer() = f32_tensor("b", {kCols}, std::vector<float>(size_t(kCols), 0.5f));
  add_node(g, "MatMul", {"x", "W"}, "h");
  add_node(g, "Add", {"h", "b"}, "y");
  add_io(g->add_output(), "y", {1, kCols});
  return m;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(f.good());
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> values(const Tensor& t) {
  REQUIRE(t.dtype() == DType::f32);
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
}

const onnx::TensorProto& initializer(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer())
    if (t.name() == name) return t;
  FAIL("no initializer " << name);
  throw;
}

// Protobuf's wire format by hand, for TensorProtos protobuf itself never writes (two raw_data).
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(char(uint8_t(v) | 0x80));
  out.push_back(char(v));
}
void put_len(std::string& out, int field, const std::string& payload) {
  put_varint(out, uint64_t(field) << 3 | 2);
  put_varint(out, payload.size());
  out += payload;
}

}  // namespace

TEST_CASE("model file: a large initializer reads back exactly, and the parsed model does not hold its bytes") {
  TempDir dir;
  const std::string path = dir.file("model.onnx");
  write_file(path, linear_model().SerializeAsString());

  const onnx::ModelProto m = load_model_proto(path);
  CHECK(m.ByteSizeLong() < kInFileBytes);  // the 80 KiB of W are not in the proto
  CHECK_FALSE(initializer(m, "W").has_raw_data());
  CHECK(initializer(m, "b").has_raw_data());  // small: inline as parsed
  CHECK(initializer(m, "W").data_location() != onnx::TensorProto::EXTERNAL);  // not the file's external data
  CHECK(values(tensor_from_proto(initializer(m, "W"), dir.path.string())) == w_values());

  const Graph g = load_graph(path);
  CHECK(values(g.value(g.find("W")).data) == w_values());
  CHECK(values(g.value(g.find("b")).data) == std::vector<float>(size_t(kCols), 0.5f));
}

TEST_CASE("model file: the last raw_data of a TensorProto is its value, as protobuf parses it") {
  const std::string large_a = f32_bytes(w_values(1)), large_b = f32_bytes(w_values(2));
  struct Case {
    const char* what;
    std::string first, last;
  };
  const std::string small_last = f32_bytes(std::vector<float>(size_t(kRows * kCols), 1.5f)).substr(0, 4096);
  for (const Case& c : {Case{"large then large", large_a, large_b}, Case{"small then large", small_last, large_b},
                        Case{"large then small", large_a, small_last}}) {
    CAPTURE(c.what);
    onnx::ModelProto m = linear_model();
    onnx::TensorProto w = m.graph().initializer(0);
    w.clear_raw_data();
    std::string tensor = w.SerializeAsString();
    put_len(tensor, 9, c.first);  // TensorProto.raw_data, twice
    put_len(tensor, 9, c.last);
    m.mutable_graph()->mutable_initializer()->DeleteSubrange(0, 1);
    std::string graph = m.graph().SerializeAsString();
    put_len(graph, 5, tensor);  // GraphProto.initializer
    m.clear_graph();
    std::string model = m.SerializeAsString();
    put_len(model, 7, graph);  // ModelProto.graph

    onnx::ModelProto reference;
    REQUIRE(reference.ParseFromString(model));
    REQUIRE(initializer(reference, "W").raw_data() == c.last);

    TempDir dir;
    const std::string path = dir.file("model.onnx");
    write_file(path, model);
    const onnx::ModelProto loaded = load_model_proto(path);
    if (c.last.size() == large_b.size()) {
      const Tensor t = tensor_from_proto(initializer(loaded, "W"), dir.path.string());
      CHECK(std::memcmp(t.data(), c.last.data(), c.last.size()) == 0);
    } else {  // 4096 bytes for a [128, 160] float tensor: refused as protobuf's value would be
      CHECK_THROWS_WITH_AS(tensor_from_proto(initializer(loaded, "W"), dir.path.string()),
                           doctest::Contains("raw_data holds 4096 bytes"), Error);
    }
  }
}

TEST_CASE("model file: a model file written or replaced after loading is refused, not read") {
  TempDir dir;
  const std::string path = dir.file("model.onnx");
  const std::string bytes = linear_model().SerializeAsString();
  write_file(path, bytes);
  {
    const onnx::ModelProto m = load_model_proto(path);
    write_file(path, bytes + std::string(1, '\0'));  // a byte longer: written since
    const std::string named = "model file '" + fs::absolute(path).string() + "' as it is needed, but the file was written since";
    CHECK_THROWS_WITH_AS(tensor_from_proto(initializer(m, "W"), dir.path.string()), doctest::Contains(named.c_str()),
                         Error);
  }
  write_file(path, bytes);
  {
    const onnx::ModelProto m = load_model_proto(path);
    write_file(dir.file("other.onnx"), bytes);
    fs::rename(dir.file("other.onnx"), path);  // the same bytes in another file
    CHECK_THROWS_WITH_AS(tensor_from_proto(initializer(m, "W"), dir.path.string()),
                         doctest::Contains("was replaced since onnxdp parsed it"), Error);
  }
  {
    const onnx::ModelProto m = load_model_proto(path);
    fs::remove(path);
    CHECK_THROWS_WITH_AS(tensor_from_proto(initializer(m, "W"), dir.path.string()),
                         doctest::Contains("cannot be opened any more"), Error);
  }
}

TEST_CASE("model file: a file cannot name the reference key itself") {
  // A reference in the key's form but not this process's (its suffix is random per process): the
  // entry is an unknown external_data key, and the tensor has no data.
  onnx::ModelProto m = linear_model();
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  auto* e = w->add_external_data();
  e->set_key("onnxdp-in-model-file-00000000000000000000000000000000");
  e->set_value("0 81920 0 0 0 0 /etc/passwd");
  TempDir dir;
  const std::string path = dir.file("model.onnx");
  write_file(path, m.SerializeAsString());
  const onnx::ModelProto loaded = load_model_proto(path);
  CHECK_FALSE(in_file_data(initializer(loaded, "W")).in_file);
  CHECK_THROWS_WITH_AS(tensor_from_proto(initializer(loaded, "W"), dir.path.string()),
                       doctest::Contains("float_data has 0 values"), Error);
}

TEST_CASE("model file: export writes initializers left in the file back inline, and trained ones from their tensors") {
  TempDir dir;
  const std::string in = dir.file("model.onnx"), out = dir.file("trained.onnx");
  write_file(in, linear_model().SerializeAsString());
  Tensor b(DType::f32, {kCols});
  for (int64_t i = 0; i < kCols; ++i) b.as<float>()[i] = float(i);
  export_model(in, out, {{"b", b}});  // W not replaced: it comes from the input file
  onnx::ModelProto written;
  REQUIRE(written.ParseFromString(read_file(out)));
  const onnx::TensorProto& w = initializer(written, "W");
  CHECK(w.raw_data() == f32_bytes(w_values()));
  CHECK(w.external_data_size() == 0);
  CHECK(w.data_location() != onnx::TensorProto::EXTERNAL);
  CHECK(initializer(written, "b").raw_data() == f32_bytes(std::vector<float>(b.as<float>(), b.as<float>() + kCols)));
  CHECK_FALSE(fs::exists(out + ".data"));
  // W replaced too, in place: its new values written from the tensor, the rest of the model kept.
  Tensor w2(DType::f32, {kRows, kCols});
  const std::vector<float> w2_values = w_values(5);
  std::memcpy(w2.data(), w2_values.data(), w2.nbytes());
  export_model(out, out, {{"W", w2}});
  onnx::ModelProto again;
  REQUIRE(again.ParseFromString(read_file(out)));
  CHECK(initializer(again, "W").raw_data() == f32_bytes(w2_values));
  CHECK(initializer(again, "b").raw_data() == initializer(written, "b").raw_data());
  written.mutable_graph()->mutable_initializer(0)->set_raw_data(f32_bytes(w2_values));
  CHECK(again.SerializeAsString() == written.SerializeAsString());  // nothing else changed
}

TEST_CASE("model file: trainability reads the values of initializers left in the file") {
  // y = Max(x @ W, fill) with fill [128, 160] large; scores = h + Slice(mask) -> Softmax.
  auto model = [](const std::vector<float>& fill, const std::vector<float>& mask) {
    onnx::ModelProto m = linear_model();
    onnx::GraphProto* g = m.mutable_graph();
    g->mutable_node()->RemoveLast();  // the Add of b
    g->mutable_initializer()->RemoveLast();
    g->clear_output();
    *g->add_initializer() = f32_tensor("fill", {kRows, kCols}, fill);
    *g->add_initializer() = f32_tensor("mask", {kRows, kCols}, mask);
    onnx::TensorProto* zero = g->add_initializer();
    zero->set_name("zero");
    zero->set_data_type(onnx::TensorProto::INT64);
    zero->add_int64_data(0);
    add_node(g, "Slice", {"mask", "zero", "zero"}, "ms");
    add_node(g, "Add", {"h", "ms"}, "scores");
    add_node(g, "Softmax", {"scores"}, "attn");
    add_node(g, "Max", {"attn", "fill"}, "y");
    add_io(g->add_output(), "y", {kRows, kCols});
    return m;
  };
  auto reasons = [](const onnx::ModelProto& m) {
    TempDir dir;
    write_file(dir.file("model.onnx"), m.SerializeAsString());
    const Trainability t = decide_trainability(load_model_proto(dir.file("model.onnx")));
    auto why = [&](const char* name) {
      const InitializerRole* r = t.find(name);
      REQUIRE(r != nullptr);
      return r->trainable() ? std::string("trains") : r->reason;
    };
    return std::make_pair(why("fill"), why("mask"));
  };
  std::vector<float> fill = w_values(), mask(size_t(kRows * kCols), 0.f);
  for (size_t i = 0; i < mask.size(); i += 3) mask[i] = -1e9f;
  // Past the scan's first blocks of 1024 values: -inf at 17000, NaN at 19000; the first is named.
  fill[17000] = -INFINITY;
  fill[19000] = NAN;
  auto [fill_why, mask_why] = reasons(model(fill, mask));
  CHECK(fill_why == "holds non-finite values (-inf): a mask or fill value");
  CHECK(mask_why == "a mask added to scores before a Softmax (node 'n_scores')");
  // One value that is no mask's (0.5 at the very end) and the fill finite: both train.
  mask.back() = 0.5f;
  fill[17000] = fill[19000] = 1.f;
  std::tie(fill_why, mask_why) = reasons(model(fill, mask));
  CHECK(fill_why == "trains");
  CHECK(mask_why == "trains");
}

TEST_CASE("model file: a wire format the walk leaves to protobuf is parsed whole, as before") {
  // An unknown group (wire types 3 and 4, field 100) after the graph: protobuf skips it; the walk
  // does not take groups, so the file is parsed whole and W is held inline, with its values.
  std::string bytes = linear_model().SerializeAsString();
  put_varint(bytes, 100 << 3 | 3);
  put_varint(bytes, 1 << 3 | 0);  // field 1 of the group: varint 5
  put_varint(bytes, 5);
  put_varint(bytes, 100 << 3 | 4);
  onnx::ModelProto reference;
  REQUIRE(reference.ParseFromString(bytes));
  TempDir dir;
  const std::string path = dir.file("model.onnx");
  write_file(path, bytes);
  const onnx::ModelProto m = load_model_proto(path);
  CHECK(initializer(m, "W").has_raw_data());
  CHECK(values(tensor_from_proto(initializer(m, "W"), dir.path.string())) == w_values());
  // The same model without the group: W stays in the file.
  write_file(path, linear_model().SerializeAsString());
  CHECK_FALSE(initializer(load_model_proto(path), "W").has_raw_data());
}
