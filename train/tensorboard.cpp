#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "graph/error.h"

namespace onnxdp {

namespace fs = std::filesystem;

namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial.
std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// ---- protobuf wire format, only what Event / Summary / Summary.Value need -------------------
// A field starts with the varint (field_number << 3 | wire_type); wire types: 0 varint,
// 1 fixed 64-bit, 2 length-delimited (strings, sub-messages), 5 fixed 32-bit. Little-endian.

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}

void put_fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char(uint8_t(bits >> (8 * i)));
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, 1);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, 5);
  put_fixed(out, bits, 4);
}

// int64 is a plain varint: a negative value takes 10 bytes (two's complement), as protobuf does.
void put_int64(std::string& out, int field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, uint64_t(v));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event{wall_time = 1 double, step = 2 int64, file_version = 3 string, summary = 5 Summary}
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  put_int64(e, 2, step);
  return e;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) fail("cannot create TensorBoard folder '{}': {}", dir, ec ? ec.message() : "not a folder");
  double now = unix_time_now();
  path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.onnxdp", int64_t(now), hostname())).string();
  // Append: two writers started within the same second in one folder keep both their records
  // (TensorBoard reads several file_version events in a file without complaint).
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) fail("cannot write TensorBoard event file '{}': {}", path_, std::strerror(errno));
  std::string e = event_header(now, 0);
  put_bytes(e, 3, "brain.Event:2");
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);  // fclose flushes; an error here has nobody left to tell
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, float value, double wall_time) {
  std::string v;  // Summary.Value{tag = 1 string, simple_value = 2 float}
  put_bytes(v, 1, tag);
  put_float(v, 2, value);
  std::string s;  // Summary{value = 1 repeated Summary.Value}
  put_bytes(s, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, s);
  write_record(e);
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0) fail("cannot write TensorBoard event file '{}': {}", path_, std::strerror(errno));
}

// TFRecord: uint64 length (LE), uint32 masked crc32c of those 8 bytes, the data, uint32 masked
// crc32c of the data.
void TensorBoardWriter::write_record(const std::string& data) {
  std::string rec;
  put_fixed(rec, data.size(), 8);
  put_fixed(rec, masked_crc32c(rec.data(), 8), 4);
  rec += data;
  put_fixed(rec, masked_crc32c(data.data(), data.size()), 4);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    fail("cannot write TensorBoard event file '{}': {}", path_, std::strerror(errno));
}

}  // namespace onnxdp
