#include "importer/model_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "graph/error.h"

namespace onnxdp {

namespace {

// The external_data key of a reference into the model file: random per process, so a file cannot
// hold one (a file naming it would otherwise read any file it knows the identity of).
const std::string& in_file_key() {
  static const std::string key = [] {
    std::random_device rd;
    std::string k = "onnxdp-in-model-file-";
    for (int i = 0; i < 4; ++i) k += fmt::format("{:08x}", uint32_t(rd()));
    return k;
  }();
  return key;
}

// Protobuf's wire format (https://protobuf.dev/programming-guides/encoding/): records of a varint
// tag (field number << 3 | wire type) and a payload.
enum Wire { kVarint = 0, kI64 = 1, kLen = 2, kI32 = 5 };
// The fields walked: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data and
// TensorProto.external_data (onnx/onnx.proto).
constexpr uint64_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9, kTensorExternalData = 13;

struct Record {
  uint64_t field = 0;
  int wire = 0;
  std::string_view whole;    // tag to the end of the payload
  std::string_view payload;  // a kLen record's bytes
};

// A varint of at most max_bytes (protobuf reads tags and lengths as 32-bit varints: a longer or
// larger one is left to protobuf, whose parse of the whole file then decides).
bool read_varint(std::string_view& s, uint64_t* v, int max_bytes = 10) {
  uint64_t r = 0;
  for (int shift = 0; shift < 7 * max_bytes && !s.empty(); shift += 7) {
    const uint8_t b = uint8_t(s.front());
    s.remove_prefix(1);
    r |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

// The next record of s; false at a malformed one or a group (wire types 3 and 4, which the walk
// leaves to protobuf).
bool next_record(std::string_view& s, Record* r) {
  const char* start = s.data();
  uint64_t tag = 0, n = 0;
  if (!read_varint(s, &tag, 5) || tag > UINT32_MAX || (tag >> 3) == 0) return false;
  r->field = tag >> 3;
  r->wire = int(tag & 7);
  switch (r->wire) {
    case kVarint:
      if (!read_varint(s, &n)) return false;
      break;
    case kI64:
    case kI32: {
      const size_t k = r->wire == kI64 ? 8 : 4;
      if (s.size() < k) return false;
      s.remove_prefix(k);
      break;
    }
    case kLen:
      if (!read_varint(s, &n, 5) || n > INT32_MAX || n > s.size()) return false;
      r->payload = s.substr(0, size_t(n));
      s.remove_prefix(size_t(n));
      break;
    default:
      return false;
  }
  r->whole = std::string_view(start, size_t(s.data() - start));
  return true;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void put_len(std::string& out, uint64_t field, std::string_view payload) {
  put_varint(out, field << 3 | kLen);
  put_varint(out, payload.size());
  out.append(payload);
}

struct Walk {
  std::string_view file;
  const ModelFileId& id;
  bool changed = false;

  // A TensorProto's bytes, its last raw_data left in the file when it is large.
  bool tensor(std::string_view t, std::string& out) {
    std::string_view s = t, raw;
    bool any_raw = false;
    Record r;
    while (!s.empty()) {
      if (!next_record(s, &r)) return false;
      if (r.field == kTensorRawData) {
        if (r.wire != kLen) return false;
        raw = r.payload, any_raw = true;
      }
    }
    if (!any_raw || raw.size() < kInFileBytes) {
      out.append(t);
      return true;
    }
    s = t;
    while (!s.empty()) {
      next_record(s, &r);
      if (r.field != kTensorRawData) out.append(r.whole);
    }
    const uint64_t offset = uint64_t(raw.data() - file.data());
    onnx::StringStringEntryProto e;
    e.set_key(in_file_key());
    e.set_value(fmt::format("{} {} {} {} {} {} {}", offset, raw.size(), id.device, id.inode, id.size, id.mtime_ns, id.path));
    put_len(out, kTensorExternalData, e.SerializeAsString());
    changed = true;
    return true;
  }

  // A message's bytes with the kLen records of `field` rewritten by `inner`.
  template <class Inner>
  bool message(std::string_view m, uint64_t field, std::string& out, Inner inner) {
    Record r;
    std::string sub;
    while (!m.empty()) {
      if (!next_record(m, &r)) return false;
      if (r.field != field) {
        out.append(r.whole);
        continue;
      }
      if (r.wire != kLen) return false;
      sub.clear();
      if (!inner(r.payload, sub)) return false;
      put_len(out, field, sub);
    }
    return true;
  }
};

[[noreturn]] void changed_file(const std::string& tensor, const ModelFileId& f, const char* how) {
  fail("initializer '{}' is read from the model file '{}' as it is needed, but the file {} since onnxdp parsed it; "
       "load the model again", tensor, f.path, how);
}

}  // namespace

std::optional<std::string> model_bytes_without_large_raw_data(std::string_view file, const ModelFileId& id) {
  Walk w{file, id};
  std::string out;
  const bool ok = w.message(file, kModelGraph, out, [&](std::string_view g, std::string& g_out) {
    return w.message(g, kGraphInitializer, g_out, [&](std::string_view t, std::string& t_out) { return w.tensor(t, t_out); });
  });
  if (!ok || !w.changed) return std::nullopt;
  return out;
}

InFileData in_file_data(const onnx::TensorProto& t) {
  InFileData d;
  for (const auto& kv : t.external_data()) {
    if (kv.key() != in_file_key()) continue;
    // "<offset> <length> <device> <inode> <size> <mtime_ns> <path>", as the walk wrote it.
    const char* p = kv.value().c_str();
    char* end = nullptr;
    uint64_t* fields[] = {&d.offset, &d.length, &d.file.device, &d.file.inode, &d.file.size};
    for (uint64_t* f : fields) {
      *f = std::strtoull(p, &end, 10);
      p = end;
    }
    d.file.mtime_ns = std::strtoll(p, &end, 10);
    if (*end != ' ') fail("internal: initializer '{}' has a malformed reference into its model file", t.name());
    d.file.path = end + 1;
    d.in_file = true;
  }
  return d;
}

namespace {

// The model file d refers to, opened, or an Error when it is no longer the file parsed.
struct OpenModelFile {
  int fd = -1;
  OpenModelFile(const std::string& tensor, const InFileData& d) {
    const ModelFileId& f = d.file;
    fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) changed_file(tensor, f, "cannot be opened any more");
    auto refuse = [&](const char* how) {
      ::close(fd);
      changed_file(tensor, f, how);
    };
    struct stat st;
    if (::fstat(fd, &st) != 0 || uint64_t(st.st_dev) != f.device || uint64_t(st.st_ino) != f.inode) refuse("was replaced");
    if (uint64_t(st.st_size) != f.size || int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec != f.mtime_ns)
      refuse("was written");
    if (d.offset > f.size || d.length > f.size - d.offset) refuse("is shorter");
  }
  ~OpenModelFile() { ::close(fd); }
  OpenModelFile(const OpenModelFile&) = delete;
  OpenModelFile& operator=(const OpenModelFile&) = delete;

  // n bytes at `offset` into dst.
  void read(const std::string& tensor, const InFileData& d, char* dst, uint64_t n, uint64_t offset) const {
    for (uint64_t got = 0; got < n;) {
      const ssize_t k = ::pread(fd, dst + got, size_t(n - got), off_t(offset + got));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0)
        fail("initializer '{}': reading {} bytes at offset {} of the model file '{}' failed{}", tensor, n - got,
             offset + got, d.file.path, k < 0 ? std::string(": ") + std::strerror(errno) : " (end of file)");
      got += uint64_t(k);
    }
  }
};

}  // namespace

void read_in_file_data(const std::string& tensor, const InFileData& d, size_t piece,
                       const std::function<void(const char*, size_t)>& take) {
  const OpenModelFile f(tensor, d);
  std::vector<char> buffer(size_t(std::min<uint64_t>(piece, d.length)));
  for (uint64_t done = 0; done < d.length;) {
    const uint64_t n = std::min<uint64_t>(piece, d.length - done);
    f.read(tensor, d, buffer.data(), n, d.offset + done);
    take(buffer.data(), size_t(n));
    done += n;
  }
}

void read_in_file_data(const std::string& tensor, const InFileData& d, void* out) {
  OpenModelFile(tensor, d).read(tensor, d, static_cast<char*>(out), d.length, d.offset);
}

namespace {

// The output of write_model: bytes, and the raw_data of sources in between.
struct Piece {
  std::string bytes;
  const RawDataSource* raw = nullptr;
};
using Pieces = std::vector<Piece>;

size_t size_of(const Pieces& pieces) {
  size_t n = 0;
  for (const Piece& p : pieces) n += p.raw ? p.raw->bytes() : p.bytes.size();
  return n;
}

void add_bytes(Pieces& pieces, std::string_view s) {
  if (pieces.empty() || pieces.back().raw) pieces.emplace_back();
  pieces.back().bytes.append(s);
}

void add_len_header(Pieces& pieces, uint64_t field, size_t size) {
  std::string h;
  put_varint(h, field << 3 | kLen);
  put_varint(h, size);
  add_bytes(pieces, h);
}

void add_pieces(Pieces& pieces, Pieces&& more) {
  for (Piece& p : more) {
    if (p.raw) pieces.push_back(std::move(p));
    else add_bytes(pieces, p.bytes);
  }
}

bool is_in_file_entry(std::string_view payload) {
  onnx::StringStringEntryProto e;
  return e.ParseFromArray(payload.data(), int(payload.size())) && e.key() == in_file_key();
}

}  // namespace

void write_model(const onnx::ModelProto& m, const std::vector<std::optional<RawDataSource>>& sources,
                 std::ostream& out, const std::string& out_name) {
  const std::string lean = m.SerializeAsString();  // the graph, without the sources' bytes
  auto next = [](std::string_view& s, Record* r) {
    if (!next_record(s, r)) fail("internal: onnxdp's own serialisation of a model does not walk");
  };
  Pieces model;
  Record r;
  for (std::string_view s = lean; !s.empty();) {
    next(s, &r);
    if (r.field != kModelGraph || r.wire != kLen) {
      add_bytes(model, r.whole);
      continue;
    }
    Pieces graph;
    size_t index = 0;  // protobuf writes the initializers in order
    Record g;
    for (std::string_view gs = r.payload; !gs.empty();) {
      next(gs, &g);
      if (g.field != kGraphInitializer || g.wire != kLen) {
        add_bytes(graph, g.whole);
        continue;
      }
      const size_t k = index++;
      const RawDataSource* source = k < sources.size() && sources[k] ? &*sources[k] : nullptr;
      if (!source) {
        add_bytes(graph, g.whole);
        continue;
      }
      Pieces tensor;
      Record t;
      for (std::string_view ts = g.payload; !ts.empty();) {
        next(ts, &t);
        if (t.field == kTensorRawData || (t.field == kTensorExternalData && is_in_file_entry(t.payload))) continue;
        add_bytes(tensor, t.whole);
      }
      add_len_header(tensor, kTensorRawData, source->bytes());
      tensor.push_back({{}, source});
      add_len_header(graph, kGraphInitializer, size_of(tensor));
      add_pieces(graph, std::move(tensor));
    }
    add_len_header(model, kModelGraph, size_of(graph));
    add_pieces(model, std::move(graph));
  }
  if (const size_t total = size_of(model); total > size_t(INT32_MAX))
    fail("export: the model '{}' would be {} bytes, past protobuf's limit of 2 GiB", out_name, total);
  auto write = [&](const char* p, size_t n) {
    errno = 0;  // a failed write's reason (a full disk: ENOSPC) in the error
    if (!out.write(p, std::streamsize(n)))
      fail("export: cannot write '{}'{}", out_name, errno ? std::string(": ") + std::strerror(errno) : "");
  };
  for (const Piece& p : model) {
    if (!p.raw) write(p.bytes.data(), p.bytes.size());
    else if (!p.raw->in_file.in_file) write(static_cast<const char*>(p.raw->data), p.raw->size);
    else read_in_file_data(p.raw->name, p.raw->in_file, size_t(4) << 20, write);
  }
}

}  // namespace onnxdp
