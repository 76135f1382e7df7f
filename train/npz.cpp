#include "train/npz.h"

#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>

#include "graph/error.h"

namespace onnxdp {

static_assert(std::endian::native == std::endian::little, "npz I/O assumes a little-endian host");

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[] = "\x93NUMPY";   // 6 bytes, then major, minor, header length
constexpr size_t kMaxHeader = 1 << 20;    // numpy itself refuses headers past 10000 bytes
constexpr int64_t kMaxDim = int64_t(1) << 62;

const char* kSupported = "<f4 <f8 <f2 <i8 <i4 |i1 |u1 |b1";

// ---- the .npy header: a Python dict literal ------------------------------------------------
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  bool has_descr = false, has_order = false, has_shape = false;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, std::string where) : s_(text), where_(std::move(where)) {}

  NpyHeader parse() {
    NpyHeader h;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = string_lit();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[')
          bad("descr is a list: a structured (record) dtype; onnxdp reads plain numeric arrays ({})", kSupported);
        h.descr = string_lit();
        h.has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        h.has_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        h.has_shape = true;
      } else {
        bad("unknown header key '{}'", key);
      }
      skip_ws();
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() != '}') bad("expected ',' or '}}' at byte {}", p_);
    }
    ++p_;
    skip_ws();
    if (p_ != s_.size()) bad("unexpected text after the header dict at byte {}", p_);
    if (!h.has_descr || !h.has_order || !h.has_shape) bad("the header lacks 'descr', 'fortran_order' or 'shape'");
    return h;
  }

 private:
  template <class... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(where_ + ": malformed .npy header: " + fmt::format(f, std::forward<Args>(args)...));
  }
  char peek() const { return p_ < s_.size() ? s_[p_] : '\0'; }
  void skip_ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) ++p_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) bad("expected '{}' at byte {}", c, p_);
    ++p_;
  }
  std::string string_lit() {
    skip_ws();
    char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string at byte {}", p_);
    size_t end = s_.find(q, p_ + 1);
    if (end == std::string::npos) bad("unterminated string at byte {}", p_);
    std::string r = s_.substr(p_ + 1, end - p_ - 1);
    p_ = end + 1;
    return r;
  }
  bool boolean() {
    if (s_.compare(p_, 4, "True") == 0) {
      p_ += 4;
      return true;
    }
    if (s_.compare(p_, 5, "False") == 0) {
      p_ += 5;
      return false;
    }
    bad("expected True or False at byte {}", p_);
  }
  // "()", "(3,)", "(2, 3)", Python 2's "(2L, 3L)".
  Shape tuple() {
    expect('(');
    Shape dims;
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') bad("expected a dimension (a non-negative integer) at byte {}", p_);
      int64_t d = 0;
      while (peek() >= '0' && peek() <= '9') {
        d = d * 10 + (peek() - '0');
        if (d > kMaxDim) bad("dimension past 2^62 in the shape");
        ++p_;
      }
      if (peek() == 'L') ++p_;
      dims.push_back(d);
      skip_ws();
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() != ')') bad("expected ',' or ')' in the shape at byte {}", p_);
    }
    ++p_;
    if (dims.size() > 64) bad("shape has {} dimensions", dims.size());
    return dims;
  }

  const std::string& s_;
  std::string where_;
  size_t p_ = 0;
};

// '<f4' -> f32 ...; anything else is an Error naming what it is.
DType dtype_from_descr(const std::string& d, const std::string& where) {
  // Byte order '<' (little), '|' (not applicable), '=' (native, little here); '>' only for 1 byte.
  char order = d.empty() ? '\0' : d[0];
  std::string code = d;
  if (order == '<' || order == '>' || order == '|' || order == '=') code = d.substr(1);
  const bool single_byte = code == "i1" || code == "u1" || code == "b1";
  std::string why = "is not supported";
  if (order == '>' && !single_byte) {
    why = "is big-endian (convert with arr.astype(arr.dtype.newbyteorder('<')))";
  } else if (code == "f4") {
    return DType::f32;
  } else if (code == "f8") {
    return DType::f64;
  } else if (code == "f2") {
    return DType::f16;
  } else if (code == "i8") {
    return DType::i64;
  } else if (code == "i4") {
    return DType::i32;
  } else if (code == "i1") {
    return DType::i8;
  } else if (code == "u1") {
    return DType::u8;
  } else if (code == "b1") {
    return DType::boolean;
  } else if (code == "O") {
    why = "holds Python objects (pickled)";
  } else if (code == "V2") {
    why = "is a 2-byte void type (bfloat16 from ml_dtypes?); save bfloat16 arrays as float32";
  }
  fail("{}: dtype '{}' {}; onnxdp reads {}", where, d, why, kSupported);
}

std::string zip_error_message(int code) {
  zip_error_t err;
  zip_error_init_with_code(&err, code);
  std::string msg = zip_error_strerror(&err);
  zip_error_fini(&err);
  return msg;
}

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct ZipFileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// Reads exactly n bytes from a member, or fails saying what went wrong (truncated, CRC, inflate).
void read_exact(zip_file_t* f, void* dst, size_t n, const std::string& where, const char* what) {
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < n) {
    // zip_fread takes at most 2^63 bytes; read in chunks to keep the counts small.
    zip_uint64_t want = std::min<size_t>(n - done, size_t(1) << 30);
    zip_int64_t got = zip_fread(f, p + done, want);
    if (got < 0) fail("{}: reading {} failed: {}", where, what, zip_file_strerror(f));
    if (got == 0) fail("{}: member is truncated: {} ends after {} of {} bytes", where, what, done, n);
    done += size_t(got);
  }
}

Tensor read_member(zip_t* za, zip_uint64_t index, const zip_stat_t& st, const std::string& where) {
  if (!(st.valid & ZIP_STAT_SIZE)) fail("{}: the zip directory gives no size for the member", where);
  if (st.valid & ZIP_STAT_COMP_SIZE && st.valid & ZIP_STAT_COMP_METHOD) {
    // A deflated stream expands at most ~1032x: a larger claim is a corrupt or hostile directory,
    // and must not make us allocate it.
    if (st.comp_method == ZIP_CM_STORE && st.comp_size != st.size)
      fail("{}: stored member is {} bytes but the directory says {}", where, st.comp_size, st.size);
    if (st.comp_method == ZIP_CM_DEFLATE && st.size / 1100 > st.comp_size + 64)
      fail("{}: the directory claims {} bytes inflated from {} compressed bytes: corrupt archive", where, st.size,
           st.comp_size);
  }
  std::unique_ptr<zip_file_t, ZipFileCloser> f(zip_fopen_index(za, index, 0));
  if (!f) fail("{}: cannot open the member: {}", where, zip_strerror(za));

  // Prefix: magic (6), version major, minor, header length (2 bytes in 1.0, 4 in 2.0 / 3.0).
  uint8_t pre[12];
  if (st.size < 10) fail("{}: member is {} bytes, too short for a .npy file", where, st.size);
  read_exact(f.get(), pre, 8, where, "the .npy magic");
  if (std::memcmp(pre, kMagic, 6) != 0) fail("{}: not a .npy file (bad magic bytes)", where);
  const int major = pre[6], minor = pre[7];
  size_t prefix = 0, header_len = 0;
  if (major == 1) {
    read_exact(f.get(), pre + 8, 2, where, "the header length");
    prefix = 10;
    header_len = size_t(pre[8]) | size_t(pre[9]) << 8;
  } else if (major == 2 || major == 3) {
    read_exact(f.get(), pre + 8, 4, where, "the header length");
    prefix = 12;
    header_len = size_t(pre[8]) | size_t(pre[9]) << 8 | size_t(pre[10]) << 16 | size_t(pre[11]) << 24;
  } else {
    fail("{}: .npy format version {}.{} is not supported (onnxdp reads 1.0, 2.0, 3.0)", where, major, minor);
  }
  if (header_len > kMaxHeader) fail("{}: .npy header of {} bytes is too large", where, header_len);
  if (prefix + header_len > st.size)
    fail("{}: member is truncated: its .npy header needs {} bytes, the member has {}", where, prefix + header_len,
         st.size);
  std::string text(header_len, '\0');
  read_exact(f.get(), text.data(), header_len, where, "the .npy header");
  NpyHeader h = HeaderParser(text, where).parse();
  if (h.fortran_order)
    fail("{}: array is in Fortran order; onnxdp reads C order (save np.ascontiguousarray(a))", where);
  DType dt = dtype_from_descr(h.descr, where);

  int64_t numel;
  try {
    numel = shape_numel(h.shape);
  } catch (const Error&) {
    fail("{}: shape {} has more than 2^62 elements", where, shape_str(h.shape));
  }
  const size_t esize = dtype_size(dt);
  if (numel > int64_t(kMaxDim / int64_t(esize))) fail("{}: shape {} is too large", where, shape_str(h.shape));
  const uint64_t data_bytes = uint64_t(numel) * esize;
  if (st.size != prefix + header_len + data_bytes)
    fail("{}: header says {} {} ({} bytes of data), but the member holds {} bytes after its {}-byte header",
         where, h.descr, shape_str(h.shape), data_bytes, st.size - prefix - header_len, prefix + header_len);

  Tensor t(dt, h.shape);
  read_exact(f.get(), t.data(), size_t(data_bytes), where, "the array data");
  // One more read to reach the end of the stream, where libzip checks the CRC.
  uint8_t extra;
  zip_int64_t more = zip_fread(f.get(), &extra, 1);
  if (more < 0) fail("{}: reading the array data failed: {}", where, zip_file_strerror(f.get()));
  if (more > 0) fail("{}: member has bytes past the array data", where);
  if (dt == DType::boolean) {
    // Any nonzero byte is True in NumPy; C++ bool must hold exactly 0 or 1.
    auto* b = static_cast<uint8_t*>(t.data());
    for (int64_t i = 0; i < numel; ++i) b[i] = b[i] != 0;
  }
  return t;
}

std::string header_for(const Tensor& t, size_t* prefix_len) {
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + ", ";
  if (t.shape().size() > 1) shape.resize(shape.size() - 2);
  else if (t.shape().size() == 1) shape.resize(shape.size() - 1);  // "(3,)"
  shape += ")";
  std::string dict = "{'descr': '" + npy_descr(t.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that magic + length + header + '\n' is a multiple of 64 (aligned data).
  size_t prefix = dict.size() + 1 + 10 > 65535 ? 12 : 10;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, 6);
  size_t n = dict.size();
  if (prefix == 10) {
    out += char(1);
    out += char(0);
    out += char(n & 0xff);
    out += char((n >> 8) & 0xff);
  } else {
    out += char(2);
    out += char(0);
    for (int k = 0; k < 4; ++k) out += char((n >> (8 * k)) & 0xff);
  }
  *prefix_len = prefix;
  return out + dict;
}

// What an .npz may inflate to, all members together: it must fit in physical memory (every array is
// held at once), and be at most kMaxInflation times the archive's own size or kInflationFloor,
// whichever is larger. Stored members (np.savez) are never larger than the file. Real numeric data
// deflates 1x to 10x (floats, token ids); only long runs of one byte value reach deflate's ceiling
// of about 1032x, so a whole archive past 100x is nearly all one repeated value: a zip bomb, not a
// data set (a data set's mostly-constant arrays, such as masks or token type ids, sit beside arrays
// that do not compress so). The floor lets small archives of constant arrays through. An archive
// refused here that is real data is read when saved uncompressed, with np.savez.
constexpr uint64_t kMaxInflation = 100;
constexpr uint64_t kInflationFloor = uint64_t(256) << 20;

void check_inflated_size(const std::string& path, uint64_t inflated, uint64_t file_bytes) {
  const uint64_t mib = uint64_t(1) << 20;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const uint64_t memory = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
  if (inflated > memory)
    fail("npz file '{}': its arrays take {} MiB, more than this machine's {} MiB of memory", path, inflated / mib,
         memory / mib);
  const uint64_t limit = std::max(kInflationFloor, file_bytes > UINT64_MAX / kMaxInflation ? UINT64_MAX
                                                                                           : file_bytes * kMaxInflation);
  if (inflated > limit)
    fail("npz file '{}': its {} bytes inflate to {} MiB, more than {}x its size (and more than {} MiB): a zip bomb "
         "rather than data; if the arrays are real, save them uncompressed with np.savez",
         path, file_bytes, inflated / mib, kMaxInflation, kInflationFloor / mib);
}

}  // namespace

std::string npy_descr(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::i64: return "<i8";
    case DType::i32: return "<i4";
    case DType::i8: return "|i1";
    case DType::u8: return "|u1";
    case DType::boolean: return "|b1";
    case DType::bf16: break;
  }
  fail("bf16 has no NumPy dtype; convert the tensor to f32 before saving it to .npz");
}

std::map<std::string, Tensor> read_npz(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("npz file '{}' does not exist", path);
  if (!fs::is_regular_file(path, ec)) fail("npz file '{}' is not a regular file", path);
  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> za(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
  if (!za) fail("npz file '{}' is not a readable zip archive: {}", path, zip_error_message(code));
  zip_int64_t n = zip_get_num_entries(za.get(), 0);
  if (n < 0) fail("npz file '{}': cannot list the archive: {}", path, zip_strerror(za.get()));
  auto stat_member = [&](zip_int64_t i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za.get(), zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME))
      fail("npz file '{}': cannot read member {}: {}", path, i, zip_strerror(za.get()));
    return st;
  };

  // Every member is held in memory: what the directory says they inflate to (each member's .npy
  // header must then match it exactly, and no member is inflated past it) is checked against the
  // limits before a byte is inflated.
  const uint64_t file_bytes = fs::file_size(path, ec);
  uint64_t inflated = 0;
  for (zip_int64_t i = 0; i < n; ++i) {
    const zip_stat_t st = stat_member(i);
    if ((st.valid & ZIP_STAT_COMP_SIZE) && st.comp_size > file_bytes)
      fail("npz file '{}': the directory says member '{}' has {} compressed bytes, but the file has {}: corrupt archive",
           path, st.name, st.comp_size, file_bytes);
    if (st.valid & ZIP_STAT_SIZE) inflated = st.size > UINT64_MAX - inflated ? UINT64_MAX : inflated + st.size;
  }
  check_inflated_size(path, inflated, file_bytes);

  std::map<std::string, Tensor> out;
  for (zip_int64_t i = 0; i < n; ++i) {
    const zip_stat_t st = stat_member(i);
    std::string member = st.name;
    if (!member.empty() && member.back() == '/') continue;  // a directory entry
    if (member.size() < 5 || member.compare(member.size() - 4, 4, ".npy") != 0)
      fail("npz file '{}': member '{}' is not a .npy array", path, member);
    std::string name = member.substr(0, member.size() - 4);
    std::string where = fmt::format("npz file '{}', array '{}'", path, name);
    if (out.count(name)) fail("{}: the archive holds it twice", where);
    try {
      out[name] = read_member(za.get(), zip_uint64_t(i), st, where);
    } catch (const std::bad_alloc&) {
      fail("{}: out of memory reading {} bytes", where, st.size);
    }
  }
  return out;
}

void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays, bool compressed) {
  // Validate everything first: a failure must leave no file behind.
  for (const auto& [name, t] : arrays) {
    if (name.empty()) fail("npz file '{}': an array has an empty name", path);
    if (t.empty()) fail("npz file '{}', array '{}': tensor has no data", path, name);
    if (t.dtype() == DType::bf16)
      fail("npz file '{}', array '{}': bf16 has no NumPy dtype; convert it to f32 first", path, name);
  }
  fs::path target(path);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("npz file '{}': folder '{}' does not exist", path, dir.string());
  std::string tmp = (dir / fmt::format(".{}.tmp{}", target.filename().string(), getpid())).string();

  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> za(zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!za) fail("npz file '{}': cannot create '{}': {}", path, tmp, zip_error_message(code));
  auto failed = [&](const std::string& what) {
    std::string msg = fmt::format("npz file '{}': {}: {}", path, what, zip_strerror(za.get()));
    za.reset();
    fs::remove(tmp, ec);
    throw Error(msg);
  };

  // Header and data go in as two fragments of one member: the tensor bytes are not copied. The
  // headers and fragment lists must stay alive until zip_close.
  std::vector<std::string> headers;
  std::vector<std::array<zip_buffer_fragment_t, 2>> frags;
  headers.reserve(arrays.size());
  frags.reserve(arrays.size());
  for (const auto& [name, t] : arrays) {
    size_t prefix = 0;
    headers.push_back(header_for(t, &prefix));
    frags.push_back({zip_buffer_fragment_t{(zip_uint8_t*)headers.back().data(), headers.back().size()},
                     zip_buffer_fragment_t{(zip_uint8_t*)t.data(), zip_uint64_t(t.nbytes())}});
    zip_uint64_t nfrag = t.nbytes() ? 2 : 1;
    zip_source_t* src = zip_source_buffer_fragment(za.get(), frags.back().data(), nfrag, 0);
    if (!src) failed("cannot add array '" + name + "'");
    zip_int64_t idx = zip_file_add(za.get(), (name + ".npy").c_str(), src, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
      zip_source_free(src);
      failed("cannot add array '" + name + "'");
    }
    if (zip_set_file_compression(za.get(), zip_uint64_t(idx), compressed ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0)
      failed("cannot set the compression of array '" + name + "'");
  }
  if (zip_close(za.get()) != 0) failed("writing '" + tmp + "' failed");
  za.release();  // zip_close freed it
  fs::rename(tmp, target, ec);
  if (ec) {
    std::string why = ec.message();
    fs::remove(tmp, ec);
    fail("npz file '{}': cannot move the written file into place: {}", path, why);
  }
}

NpyLayout parse_npy_layout(const uint8_t* bytes, size_t avail, const std::string& where) {
  if (avail < 10 || std::memcmp(bytes, kMagic, 6) != 0) fail("{}: not a .npy file (bad magic bytes)", where);
  const int major = bytes[6], minor = bytes[7];
  size_t prefix = 0, header_len = 0;
  if (major == 1) {
    prefix = 10;
    header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8;
  } else if ((major == 2 || major == 3) && avail >= 12) {
    prefix = 12;
    header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8 | size_t(bytes[10]) << 16 | size_t(bytes[11]) << 24;
  } else {
    fail("{}: .npy format version {}.{} is not supported (onnxdp reads 1.0, 2.0, 3.0)", where, major, minor);
  }
  if (header_len > kMaxHeader) fail("{}: .npy header of {} bytes is too large", where, header_len);
  if (prefix + header_len > avail)
    fail("{}: truncated: its .npy header needs {} bytes, there are {}", where, prefix + header_len, avail);
  NpyHeader h = HeaderParser(std::string(reinterpret_cast<const char*>(bytes) + prefix, header_len), where).parse();
  if (h.fortran_order)
    fail("{}: array is in Fortran order; onnxdp reads C order (save np.ascontiguousarray(a))", where);
  NpyLayout l{dtype_from_descr(h.descr, where), h.shape, prefix + header_len};
  int64_t numel;
  try {
    numel = shape_numel(h.shape);
  } catch (const Error&) {
    fail("{}: shape {} has more than 2^62 elements", where, shape_str(h.shape));
  }
  const size_t esize = dtype_size(l.dtype);
  if (numel > int64_t(kMaxDim / int64_t(esize))) fail("{}: shape {} is too large", where, shape_str(h.shape));
  const uint64_t data_bytes = uint64_t(numel) * esize;
  if (avail - l.data_offset != data_bytes)
    fail("{}: header says {} {} ({} bytes of data), but {} bytes follow its {}-byte header{}", where, h.descr,
         shape_str(h.shape), data_bytes, avail - l.data_offset, l.data_offset,
         avail - l.data_offset < data_bytes ? " (truncated)" : "");
  return l;
}

}  // namespace onnxdp
