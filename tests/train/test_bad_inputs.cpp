// The bad-input corpus of the readers other than the model loader (tests/bad_inputs/, made by
// make_bad_inputs.py; the models are tests/bad_models/): each file must end in exactly one
// onnxdp::Error naming the file and the culprit, never another exception, a crash or memory
// beyond what the file holds. Each is the smallest form of a finding of the fuzz targets
// (tests/fuzz/) or of issue 22's hostile inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "train/checkpoint.h"
#include "train/npz.h"
#include "train/plot.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace onnxdp;

namespace {

const fs::path kCorpus = fs::path(ONNXDP_SOURCE_DIR) / "tests" / "bad_inputs";

struct BadInput {
  std::string file;
  std::function<void(const std::string& path)> read;
  std::vector<std::string> culprits;  // substrings the error message must hold
};

std::vector<BadInput> bad_inputs() {
  auto npz = [](const std::string& p) { read_npz(p); };
  auto metrics = [](const std::string& p) { read_metrics_log(p); };
  auto checkpoint = [](const std::string& p) { load_checkpoint(p); };
  return {
      {"checkpoint_shape_past_offsets", checkpoint,
       {"tensor 'W' is F32 [2305843009213693952] but its data_offsets [0, 8] span 8 bytes"}},
      {"checkpoint_float_dimension", checkpoint, {"bad entry for 'W'", "shape holds a value that is not a dimension"}},
      {"checkpoint_files_bytes_string", checkpoint, {"records no checksum of model.safetensors"}},
      {"checkpoint_files_not_object", checkpoint, {"records no checksum of model.safetensors"}},
      {"checkpoint_loss_scale_past_float", checkpoint, {"'loss_scale' is 1e+300, not a positive float"}},
      {"npz_bzip2_bomb.npz", npz, {"455 bytes inflate to 300 MiB", "zip bomb", "np.savez"}},
      {"metrics_number_overflow.jsonl", metrics, {"line 2: not JSON", "2e308"}},
  };
}

}  // namespace

TEST_CASE("bad inputs: each gives one clear onnxdp::Error naming the file and the culprit") {
  for (const BadInput& c : bad_inputs()) {
    CAPTURE(c.file);
    const std::string path = (kCorpus / c.file).string();
    std::string msg;
    try {
      c.read(path);
      FAIL_CHECK("no error");
    } catch (const Error& e) {
      msg = e.what();
    } catch (const std::exception& e) {
      FAIL_CHECK("not an onnxdp::Error: " << std::string(e.what()));
      continue;
    }
    CAPTURE(msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    for (const std::string& s : c.culprits) {
      CAPTURE(s);
      CHECK(msg.find(s) != std::string::npos);
    }
  }
}

TEST_CASE("bad inputs: every file of the corpus has its case") {
  std::vector<std::string> listed;
  for (const BadInput& c : bad_inputs()) listed.push_back(c.file);
  for (const auto& e : fs::recursive_directory_iterator(kCorpus)) {
    if (!e.is_regular_file() || e.path().extension() == ".py") continue;
    const std::string rel = fs::relative(e.path(), kCorpus).string();
    const bool in_case = std::any_of(listed.begin(), listed.end(), [&](const std::string& f) {
      return rel == f || rel.rfind(f + "/", 0) == 0;
    });
    CHECK_MESSAGE(in_case, rel << " is in tests/bad_inputs/ but no case reads it");
  }
}
