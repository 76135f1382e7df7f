// .npz reading and writing. Fixtures in tests/fixtures/npz/ were written by NumPy
// (make_fixtures.py there); the values checked here are the literals of that script.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "train/npz.h"
#include "tests/test_util.h"

using namespace onnxdp;
namespace fs = std::filesystem;

namespace {

using onnxdp::test::TempDir;

std::string fixture(const std::string& name) {
  return std::string(ONNXDP_SOURCE_DIR) + "/tests/fixtures/npz/" + name;
}

using onnxdp::test::error_of;

// A zip holding raw members (name -> bytes), stored or deflated.
void write_zip(const std::string& path, const std::map<std::string, std::string>& members, bool deflate = false) {
  int code = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  REQUIRE(za);
  for (const auto& [name, bytes] : members) {
    zip_source_t* src = zip_source_buffer(za, bytes.data(), bytes.size(), 0);
    REQUIRE(src);
    zip_int64_t idx = zip_file_add(za, name.c_str(), src, 0);
    REQUIRE(idx >= 0);
    zip_set_file_compression(za, zip_uint64_t(idx), deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0);
  }
  REQUIRE(zip_close(za) == 0);
}

// A version 1.0 .npy with the given header dict and data bytes (no padding rules needed to read).
std::string npy(const std::string& dict, const std::string& data) {
  std::string h = dict + "\n";
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(h.size() & 0xff);
  out += char(h.size() >> 8);
  return out + h + data;
}

std::string f32_bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void check_numpy_fixture(const std::map<std::string, Tensor>& a) {
  REQUIRE(a.size() == 11);
  const Tensor& f32 = a.at("f32");
  CHECK(f32.dtype() == DType::f32);
  CHECK(f32.shape() == Shape{2, 3});
  CHECK(f32.to_f64() == std::vector<double>{1.5, -2.0, 3.25, 0.0, double(1e-3f), -7.5});

  const Tensor& f64 = a.at("f64");
  CHECK(f64.dtype() == DType::f64);
  CHECK(f64.to_f64() == std::vector<double>{0.1, -1e100, 3.0});

  const Tensor& f16 = a.at("f16");
  CHECK(f16.dtype() == DType::f16);
  REQUIRE(f16.numel() == 3);
  CHECK(f16.as<uint16_t>()[0] == 0x3c00);  // 1.0
  CHECK(f16.as<uint16_t>()[1] == 0xb800);  // -0.5
  CHECK(f16.as<uint16_t>()[2] == 0x7bff);  // 65504

  const Tensor& i64 = a.at("i64");
  CHECK(i64.dtype() == DType::i64);
  CHECK(i64.shape() == Shape{2, 2});
  CHECK(i64.to_i64() == std::vector<int64_t>{1, -2, int64_t(1) << 40, -(int64_t(1) << 40)});

  CHECK(a.at("i32").dtype() == DType::i32);
  CHECK(a.at("i32").to_i64() == std::vector<int64_t>{7, -8, 2147483647});
  CHECK(a.at("i8").dtype() == DType::i8);
  CHECK(a.at("i8").to_i64() == std::vector<int64_t>{-128, -1, 0, 127});
  CHECK(a.at("u8").dtype() == DType::u8);
  CHECK(a.at("u8").to_i64() == std::vector<int64_t>{0, 1, 255});

  const Tensor& mask = a.at("mask");
  CHECK(mask.dtype() == DType::boolean);
  CHECK(mask.shape() == Shape{2, 2});
  CHECK(mask.to_i64() == std::vector<int64_t>{1, 0, 0, 1});

  const Tensor& scalar = a.at("scalar");
  CHECK(scalar.dtype() == DType::f32);
  CHECK(scalar.shape().empty());
  CHECK(scalar.numel() == 1);
  CHECK(scalar.as<float>()[0] == 2.5f);

  CHECK(a.at("empty").shape() == Shape{0, 3});
  CHECK(a.at("empty").numel() == 0);

  CHECK(a.at("dir/nested").shape() == Shape{1, 2, 3});
  CHECK(a.at("dir/nested").to_i64() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
}

}  // namespace

TEST_CASE("npz: reads files written by np.savez and np.savez_compressed") {
  SUBCASE("stored") { check_numpy_fixture(read_npz(fixture("savez.npz"))); }
  SUBCASE("deflated") { check_numpy_fixture(read_npz(fixture("savez_compressed.npz"))); }
}

TEST_CASE("npz: reads .npy format versions 1.0, 2.0 and 3.0") {
  auto a = read_npz(fixture("versions.npz"));
  for (const char* k : {"v1", "v2", "v3"}) {
    CAPTURE(k);
    REQUIRE(a.count(k));
    CHECK(a.at(k).shape() == Shape{2, 2});
    CHECK(a.at(k).to_f64() == std::vector<double>{1, 2, 3, 4});
  }
}

TEST_CASE("npz: round trip, compressed and stored, every dtype") {
  TempDir tmp;
  for (bool compressed : {true, false}) {
    CAPTURE(compressed);
    std::map<std::string, Tensor> in = read_npz(fixture("savez.npz"));
    // A larger array, so deflate has something to do, and a header past the 64-byte pad.
    std::vector<float> big(1000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = float(i % 17) * 0.25f;
    in["big"] = Tensor::from_f32(big, {10, 100});
    std::string path = tmp.file(compressed ? "c.npz" : "s.npz");
    write_npz(path, in, compressed);
    auto out = read_npz(path);
    REQUIRE(out.size() == in.size());
    for (const auto& [name, t] : in) {
      CAPTURE(name);
      REQUIRE(out.count(name));
      const Tensor& u = out.at(name);
      CHECK(u.dtype() == t.dtype());
      CHECK(u.shape() == t.shape());
      REQUIRE(u.nbytes() == t.nbytes());
      CHECK(std::memcmp(u.data(), t.data(), t.nbytes()) == 0);
    }
    // The header is padded so the data starts 64-byte aligned, as NumPy writes it.
    if (!compressed) {
      std::string bytes = read_bytes(path);
      CHECK(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (10, 100), }") != std::string::npos);
      CHECK(bytes.find("'shape': (), }") != std::string::npos);
      CHECK(bytes.find("'shape': (3,), }") != std::string::npos);
    }
  }
  // No temporary file is left beside the output.
  int files = 0;
  for (const auto& e : fs::directory_iterator(tmp.path)) files += e.is_regular_file();
  CHECK(files == 2);
}

TEST_CASE("npz: writing replaces an existing file, and a refused write leaves it alone") {
  TempDir tmp;
  std::string path = tmp.file("out.npz");
  write_npz(path, {{"a", Tensor::from_f32({1, 2})}});
  write_npz(path, {{"b", Tensor::from_f32({3})}});
  auto r = read_npz(path);
  CHECK(r.size() == 1);
  CHECK(r.count("b") == 1);

  std::string msg = error_of([&] { write_npz(path, {{"h", Tensor(DType::bf16, {2})}}); });
  CHECK(msg.find("bf16") != std::string::npos);
  CHECK(msg.find("'h'") != std::string::npos);
  CHECK(read_npz(path).count("b") == 1);
  int files = 0;
  for (const auto& e : fs::directory_iterator(tmp.path)) files += e.is_regular_file();
  CHECK(files == 1);

  CHECK(error_of([&] { write_npz(tmp.file("no/such/dir/x.npz"), {{"a", Tensor::from_f32({1})}}); })
            .find("does not exist") != std::string::npos);
}

TEST_CASE("npz: refused arrays name the file, the array and the reason") {
  struct Case {
    const char* file;
    const char* reason;
  };
  for (Case c : {Case{"fortran.npz", "Fortran order"}, Case{"bigendian.npz", "big-endian"},
                 Case{"uint16.npz", "'<u2' is not supported"}, Case{"structured.npz", "structured"},
                 Case{"objects.npz", "Python objects"}}) {
    CAPTURE(c.file);
    std::string msg = error_of([&] { read_npz(fixture(c.file)); });
    CHECK(msg.find(c.file) != std::string::npos);
    CHECK(msg.find("array 'x'") != std::string::npos);
    CHECK(msg.find(c.reason) != std::string::npos);
  }
}

TEST_CASE("npz: malformed files are errors, never crashes") {
  TempDir tmp;
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";

  SUBCASE("missing file") {
    CHECK(error_of([&] { read_npz(tmp.file("nope.npz")); }).find("does not exist") != std::string::npos);
  }
  SUBCASE("not a zip") {
    std::ofstream(tmp.file("t.npz")) << "hello, not a zip";
    CHECK(error_of([&] { read_npz(tmp.file("t.npz")); }).find("not a readable zip") != std::string::npos);
  }
  SUBCASE("truncated archive") {
    std::string bytes = read_bytes(fixture("savez_compressed.npz"));
    std::ofstream(tmp.file("t.npz"), std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
    std::string msg = error_of([&] { read_npz(tmp.file("t.npz")); });
    CHECK(msg.find(tmp.file("t.npz")) != std::string::npos);
  }
  SUBCASE("corrupted member data (CRC)") {
    write_zip(tmp.file("c.npz"), {{"x.npy", npy(ok_dict, f32_bytes({1, 2}))}});
    std::string bytes = read_bytes(tmp.file("c.npz"));
    size_t at = bytes.find(f32_bytes({1, 2}));
    REQUIRE(at != std::string::npos);
    bytes[at + 1] ^= 0x55;
    std::ofstream(tmp.file("c.npz"), std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    std::string msg = error_of([&] { read_npz(tmp.file("c.npz")); });
    CHECK(msg.find("array 'x'") != std::string::npos);
    CHECK(msg.find("CRC") != std::string::npos);
  }
  SUBCASE("bad magic") {
    write_zip(tmp.file("m.npz"), {{"x.npy", "\x93NUMPX" + npy(ok_dict, f32_bytes({1, 2})).substr(6)}});
    std::string msg = error_of([&] { read_npz(tmp.file("m.npz")); });
    CHECK(msg.find("array 'x'") != std::string::npos);
    CHECK(msg.find("bad magic") != std::string::npos);
  }
  SUBCASE("header does not match the byte count") {
    for (bool deflate : {false, true}) {
      write_zip(tmp.file("h.npz"), {{"x.npy", npy(ok_dict, f32_bytes({1, 2, 3}))}}, deflate);
      std::string msg = error_of([&] { read_npz(tmp.file("h.npz")); });
      CHECK(msg.find("array 'x'") != std::string::npos);
      CHECK(msg.find("8 bytes of data") != std::string::npos);
      write_zip(tmp.file("h.npz"), {{"x.npy", npy(ok_dict, f32_bytes({1}))}}, deflate);
      CHECK(error_of([&] { read_npz(tmp.file("h.npz")); }).find("8 bytes of data") != std::string::npos);
    }
  }
  SUBCASE("member shorter than its header") {
    write_zip(tmp.file("s.npz"), {{"x.npy", npy(ok_dict, "").substr(0, 30)}});
    CHECK(error_of([&] { read_npz(tmp.file("s.npz")); }).find("truncated") != std::string::npos);
  }
  SUBCASE("shape overflow") {
    write_zip(tmp.file("o.npz"),
              {{"x.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "")}});
    std::string msg = error_of([&] { read_npz(tmp.file("o.npz")); });
    CHECK(msg.find("array 'x'") != std::string::npos);
    CHECK(msg.find("2^62") != std::string::npos);
    write_zip(tmp.file("o.npz"),
              {{"x.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "")}});
    CHECK(error_of([&] { read_npz(tmp.file("o.npz")); }).find("2^62") != std::string::npos);
  }
  SUBCASE("garbled header dicts") {
    for (const char* dict : {"{'descr': '<f4', 'fortran_order': False, }", "{'descr': '<f4' 'shape': ()}",
                             "{'descr': '<f4', 'fortran_order': Maybe, 'shape': ()}",
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "not a dict",
                             "{'descr: '<f4'", ""}) {
      CAPTURE(dict);
      write_zip(tmp.file("g.npz"), {{"x.npy", npy(dict, "")}});
      std::string msg = error_of([&] { read_npz(tmp.file("g.npz")); });
      CHECK(msg.find("malformed .npy header") != std::string::npos);
      CHECK(msg.find("array 'x'") != std::string::npos);
    }
  }
  SUBCASE("unknown format version, non-.npy member") {
    std::string v9 = npy(ok_dict, f32_bytes({1, 2}));
    v9[6] = 9;
    write_zip(tmp.file("v.npz"), {{"x.npy", v9}});
    CHECK(error_of([&] { read_npz(tmp.file("v.npz")); }).find("version 9.0") != std::string::npos);
    write_zip(tmp.file("n.npz"), {{"readme.txt", "hi"}});
    CHECK(error_of([&] { read_npz(tmp.file("n.npz")); }).find("'readme.txt' is not a .npy") != std::string::npos);
  }
}

TEST_CASE("npz: bool arrays normalise nonzero bytes to true") {
  TempDir tmp;
  write_zip(tmp.file("b.npz"),
            {{"b.npy", npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x02\x01", 3))}});
  auto a = read_npz(tmp.file("b.npz"));
  CHECK(a.at("b").to_i64() == std::vector<int64_t>{0, 1, 1});
}
