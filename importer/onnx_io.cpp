#include "importer/onnx_io.h"

#include "importer/export_metadata.h"
#include "importer/export_ties.h"
#include "importer/model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "graph/error.h"
#include "graph/input_file.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {

// Protobuf cannot parse messages past 2 GiB: a model or tensor file larger than that is refused
// before it is read.
constexpr uint64_t kMaxProtoFile = uint64_t(2) << 30;

// Validates an external-data location relative to model_dir and returns the full path.
std::string external_path(const std::string& location, const std::string& model_dir, const std::string& tensor) {
  if (location.empty()) fail("tensor '{}': external data has no location", tensor);
  fs::path loc(location);
  if (loc.is_absolute() || location[0] == '/' || location[0] == '\\')
    fail("tensor '{}': external data location '{}' is an absolute path; it must be relative to the model's folder",
         tensor, location);
  for (const auto& part : loc)
    if (part == "..")
      fail("tensor '{}': external data location '{}' leaves the model's folder ('..')", tensor, location);
  if (location.find('\\') != std::string::npos || location.find(':') != std::string::npos)
    fail("tensor '{}': external data location '{}' has a '\\' or ':'", tensor, location);
  fs::path full = fs::path(model_dir.empty() ? "." : model_dir) / loc;
  // Refuse links anywhere under the model folder: a symlink or hard link can point outside it.
  fs::path walk = fs::path(model_dir.empty() ? "." : model_dir);
  for (const auto& part : loc) {
    walk /= part;
    struct stat st;
    if (lstat(walk.c_str(), &st) != 0) fail("tensor '{}': external data file '{}' does not exist", tensor, full.string());
    if (S_ISLNK(st.st_mode)) fail("tensor '{}': external data location '{}' is a symbolic link", tensor, location);
  }
  struct stat st;
  if (lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    fail("tensor '{}': external data '{}' is not a regular file", tensor, full.string());
  if (st.st_nlink > 1) fail("tensor '{}': external data '{}' is a hard link", tensor, full.string());
  return full.string();
}

int64_t parse_i64(const std::string& s, const std::string& tensor, const char* key) {
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    if (pos != s.size() || v < 0) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    fail("tensor '{}': external data {} '{}' is not a non-negative integer", tensor, key, s);
  }
}

}  // namespace

namespace {

// The model file's bytes mapped read-only (not read into memory: its large initializers are read
// from it later, each straight into its tensor), and its identity. Like the mapped data files
// (train/data_files.h), a file another program truncates while it is parsed ends the process
// (SIGBUS): not guarded.
struct MappedModel {
  ModelFileId id;
  const char* bytes = nullptr;
  size_t size = 0;
  bool mapped = false;
  std::string read;  // the bytes where the file could not be mapped

  explicit MappedModel(const std::string& path) {
    input_file_size(path, "model file", kMaxProtoFile, "ONNX model files (protobuf's limit)");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("model file '{}': cannot open it: {}", path, std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > kMaxProtoFile) {
      ::close(fd);
      fail("model file '{}': it changed while being opened", path);
    }
    id = {fs::absolute(path).string(), uint64_t(st.st_dev), uint64_t(st.st_ino), uint64_t(st.st_size),
          int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    size = size_t(st.st_size);
    void* p = size ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    if (p != MAP_FAILED) {
      mapped = p != nullptr;
      bytes = static_cast<const char*>(p);
    } else {  // a file system that cannot map files: read it whole, as before
      read.resize(size);
      for (size_t got = 0; got < size;) {
        const ssize_t k = ::pread(fd, read.data() + got, size - got, off_t(got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          const int err = errno;
          ::close(fd);
          fail("model file '{}': reading it failed after {} of {} bytes{}", path, got, size,
               k < 0 ? std::string(": ") + std::strerror(err) : std::string());
        }
        got += size_t(k);
      }
      bytes = read.data();
    }
    ::close(fd);
  }
  ~MappedModel() {
    if (mapped) ::munmap(const_cast<char*>(bytes), size);
  }
  MappedModel(const MappedModel&) = delete;
  MappedModel& operator=(const MappedModel&) = delete;
};

}  // namespace

onnx::ModelProto load_model_proto(const std::string& path, std::vector<std::string>* notes) {
  onnx::ModelProto m;
  {
    const MappedModel file(path);
    // The large initializers' raw_data stays in the file (importer/model_file.h); a file without
    // any, or whose wire format the walk leaves to protobuf, is parsed whole.
    const std::optional<std::string> lean = model_bytes_without_large_raw_data({file.bytes, file.size}, file.id);
    const bool parsed = lean ? m.ParseFromString(*lean) : m.ParseFromArray(file.bytes, int(file.size));
    if (!parsed) fail("model file '{}' is not a valid ONNX model (protobuf parsing failed: truncated or not ONNX)", path);
  }
  if (!m.has_graph()) fail("model file '{}' has no graph", path);
  // What trains is what the source model trains: the exporters' merges of distinct parameters are
  // undone, their second copies of one parameter become nodes of it (importer/export_ties.h).
  std::vector<std::string> changes = untie_merged_parameters(m);
  auto add = [&](const std::vector<std::string>& more) { changes.insert(changes.end(), more.begin(), more.end()); };
  add(untie_deduplicated_initializers(m));
  add(tie_transposed_copies(m, fs::path(path).parent_path().string()));
  // Zero biases the dynamo exporter dropped come back as trainable zeros (export_metadata.h).
  add(restore_dropped_parameters(m));
  if (notes) notes->insert(notes->end(), changes.begin(), changes.end());
  return m;
}

Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& model_dir) {
  const std::string& name = t.name();
  DType dt;
  if (!dtype_from_onnx(t.data_type(), &dt))
    fail("tensor '{}' has element type {}, which onnxdp does not support", name, onnx_type_name(t.data_type()));
  Shape shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0) fail("tensor '{}' has a negative dimension in {}", name, shape_str(shape));
  int64_t numel;
  try {
    numel = shape_numel(shape);
  } catch (const Error&) {
    fail("tensor '{}': dims {} multiply past 2^62 elements", name, shape_str(shape));
  }
  const size_t esize = dtype_size(dt);
  if (numel > int64_t((size_t(1) << 40) / esize)) fail("tensor '{}' of shape {} is larger than 1 TiB", name, shape_str(shape));
  const size_t want = size_t(numel) * esize;
  // Every source of the bytes is checked against what the shape needs BEFORE the tensor is
  // allocated: a few bytes of dims may claim terabytes, and only the data that is really there
  // may decide how much memory a model takes.
  auto size_mismatch = [&](size_t got, const char* where) {
    fail("tensor '{}': {} holds {} bytes, but {} {} needs {}", name, where, got, dtype_name(dt), shape_str(shape), want);
  };

  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = parse_i64(kv.value(), name, "offset");
      else if (kv.key() == "length") length = parse_i64(kv.value(), name, "length");
    }
    std::string full = external_path(location, model_dir, name);
    int64_t fsize = int64_t(fs::file_size(full));
    if (offset > fsize) fail("tensor '{}': external data offset {} is past the end of '{}' ({} bytes)", name, offset, location, fsize);
    if (length < 0) length = fsize - offset;
    if (length > fsize - offset)
      fail("tensor '{}': external data offset {} + length {} is past the end of '{}' ({} bytes)", name, offset, length, location, fsize);
    if (size_t(length) != want) size_mismatch(size_t(length), "its external data");
    Tensor out(dt, shape);
    std::ifstream f(full, std::ios::binary);
    f.seekg(offset);
    if (want && !f.read(static_cast<char*>(out.data()), std::streamsize(want)))
      fail("tensor '{}': reading {} bytes of external data from '{}' failed", name, want, location);
    return out;
  }

  if (const InFileData in_file = in_file_data(t); in_file.in_file) {  // raw_data left in the model file
    if (in_file.length != want) size_mismatch(size_t(in_file.length), "raw_data");
    Tensor out(dt, shape);
    if (want) read_in_file_data(name, in_file, out.data());
    return out;
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != want) size_mismatch(t.raw_data().size(), "raw_data");
    Tensor out(dt, shape);
    if (want) std::memcpy(out.data(), t.raw_data().data(), want);
    return out;
  }
  // The typed field that holds this dtype's values, and its count.
  int64_t count = 0;
  const char* field = "int32_data";
  switch (dt) {
    case DType::f32: count = t.float_data_size(), field = "float_data"; break;
    case DType::f64: count = t.double_data_size(), field = "double_data"; break;
    case DType::i64: count = t.int64_data_size(), field = "int64_data"; break;
    case DType::i32: case DType::i8: case DType::u8: case DType::boolean: case DType::f16: case DType::bf16:
      count = t.int32_data_size();
      break;
  }
  if (count != numel)
    fail("tensor '{}': {} has {} values, but shape {} needs {}", name, field, count, shape_str(shape), numel);
  Tensor out(dt, shape);
  for (int64_t i = 0; i < numel; ++i) {
    const int k = int(i);  // numel == count, a protobuf repeated field's int size
    switch (dt) {
      case DType::f32: out.as<float>()[i] = t.float_data(k); break;
      case DType::f64: out.as<double>()[i] = t.double_data(k); break;
      case DType::i64: out.as<int64_t>()[i] = t.int64_data(k); break;
      case DType::i32: out.as<int32_t>()[i] = t.int32_data(k); break;
      case DType::i8: out.as<int8_t>()[i] = int8_t(t.int32_data(k)); break;
      case DType::u8: out.as<uint8_t>()[i] = uint8_t(t.int32_data(k)); break;
      case DType::boolean: out.as<bool>()[i] = t.int32_data(k) != 0; break;
      case DType::f16: case DType::bf16: out.as<uint16_t>()[i] = uint16_t(t.int32_data(k)); break;
    }
  }
  return out;
}

namespace {

// p's dims and data type t's, its values in no field yet.
void set_tensor_header(const Tensor& t, onnx::TensorProto* p) {
  p->clear_dims();
  for (int64_t d : t.shape()) p->add_dims(d);
  p->set_data_type(dtype_to_onnx(t.dtype()));
  p->clear_float_data();
  p->clear_double_data();
  p->clear_int32_data();
  p->clear_int64_data();
  p->clear_external_data();
  p->clear_data_location();
  p->clear_raw_data();
}

}  // namespace

void tensor_to_proto(const Tensor& t, onnx::TensorProto* p) {
  set_tensor_header(t, p);
  p->set_raw_data(std::string(static_cast<const char*>(t.data()), t.nbytes()));
}

Tensor load_tensor_pb(const std::string& path, std::string* name) {
  std::string bytes = read_input_file(path, "tensor file", kMaxProtoFile, "TensorProto files (protobuf's limit)");
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) fail("tensor file '{}' is not a valid TensorProto", path);
  if (name) *name = t.name();
  return tensor_from_proto(t, fs::path(path).parent_path().string());
}

void export_model(const std::string& in_path, const std::string& out_path, const std::map<std::string, Tensor>& values) {
  onnx::ModelProto m = load_model_proto(in_path);
  // Every replacement is checked before anything is written: a refused export writes nothing.
  for (const auto& [name, t] : values) {
    const onnx::TensorProto* init = nullptr;
    for (const auto& i : m.graph().initializer())
      if (i.name() == name) init = &i;
    if (!init) fail("export: the model has no initializer named '{}'", name);
    Shape dims(init->dims().begin(), init->dims().end());
    if (dims != t.shape() || init->data_type() != dtype_to_onnx(t.dtype()))
      fail("export: initializer '{}' is {} {} in the model but {} {} was given", name,
           onnx_type_name(init->data_type()), shape_str(dims), dtype_name(t.dtype()), shape_str(t.shape()));
  }
  fs::path out(out_path);
  std::string data_name = out.filename().string() + ".data";
  fs::path data_path = out.parent_path() / data_name;
  // Both files are written under temporary names and renamed at the end: the output's data file
  // may be the one the input reads from (export in place), which must stay whole until then.
  std::string tmp = out_path + ".tmp", data_tmp = data_path.string() + ".tmp";
  std::ofstream data;
  bool wrote_data = false;
  int64_t data_offset = 0;
  std::string in_dir = fs::path(in_path).parent_path().string();
  // The raw_data of initializer k, written from here as the model is written (write_model in
  // importer/model_file.h): a trained tensor, or the input file where the parse left it. The
  // message never holds a copy of the weights.
  std::vector<std::optional<RawDataSource>> sources(size_t(m.graph().initializer_size()));
  try {
    for (int k = 0; k < m.graph().initializer_size(); ++k) {
      onnx::TensorProto& init = *m.mutable_graph()->mutable_initializer(k);
      auto it = values.find(init.name());
      bool external = init.data_location() == onnx::TensorProto::EXTERNAL;
      if (it == values.end() && !external) {
        if (const InFileData d = in_file_data(init); d.in_file) sources[size_t(k)] = RawDataSource{init.name(), nullptr, 0, d};
        continue;
      }
      if (!external) {
        set_tensor_header(it->second, &init);
        sources[size_t(k)] = RawDataSource{init.name(), it->second.data(), it->second.nbytes(), {}};
        continue;
      }
      // External initializers move to the new data file whether replaced or not, so the output
      // never points back into the input's folder.
      Tensor t = it != values.end() ? it->second : tensor_from_proto(init, in_dir);
      set_tensor_header(t, &init);
      if (!data.is_open()) {
        data.open(data_tmp, std::ios::binary | std::ios::trunc);
        if (!data) fail("export: cannot write '{}'", data_tmp);
      }
      init.set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const char* k, const std::string& v) {
        auto* e = init.add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", data_name);
      add("offset", std::to_string(data_offset));
      add("length", std::to_string(t.nbytes()));
      if (!data.write(static_cast<const char*>(t.data()), std::streamsize(t.nbytes())))
        fail("export: writing '{}' failed", data_tmp);
      data_offset += int64_t(t.nbytes());
    }
    if (data.is_open()) {
      wrote_data = true;
      data.close();
      if (!data) fail("export: writing '{}' failed", data_tmp);
    }
    {
      errno = 0;  // a failed write's reason (a full disk: ENOSPC) in the error
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) fail("export: cannot write '{}'{}", tmp, errno ? std::string(": ") + std::strerror(errno) : "");
      write_model(m, sources, f, tmp);
      f.close();
      if (!f) fail("export: writing '{}' failed{}", tmp, errno ? std::string(": ") + std::strerror(errno) : "");
    }
    std::error_code ec;
    if (wrote_data) {
      fs::rename(data_tmp, data_path, ec);
      if (ec) fail("export: cannot rename '{}' to '{}': {}", data_tmp, data_path.string(), ec.message());
    }
    fs::rename(tmp, out_path, ec);
    if (ec) fail("export: cannot rename '{}' to '{}': {}", tmp, out_path, ec.message());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    fs::remove(data_tmp, ec);
    throw;
  }
}

}  // namespace onnxdp
