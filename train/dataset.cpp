#include "train/dataset.h"

#include <cstring>

#include "importer/onnx_io.h"
#include "train/npz.h"

namespace onnxdp {

Dataset load_dataset(const std::string& path, const onnx::ModelProto& m, const std::string& label, bool need_label) {
  std::map<std::string, Tensor> all = read_npz(path);
  Dataset d;
  std::vector<std::string> names;
  std::map<std::string, bool> initializer;
  for (const auto& i : m.graph().initializer()) initializer[i.name()] = true;
  for (const auto& vi : m.graph().input()) {
    if (initializer.count(vi.name())) continue;
    auto it = all.find(vi.name());
    if (it == all.end()) {
      std::string have;
      for (const auto& [k, v] : all) have += (have.empty() ? "" : ", ") + k;
      fail("data '{}' has no array '{}' for the model input of that name (arrays: {})", path, vi.name(), have);
    }
    DType want;
    int et = vi.type().tensor_type().elem_type();
    if (!dtype_from_onnx(et, &want)) fail("model input '{}' has unsupported type {}", vi.name(), onnx_type_name(et));
    if (it->second.dtype() != want)
      fail("data '{}': array '{}' is {}, the model input expects {}", path, vi.name(), dtype_name(it->second.dtype()), dtype_name(want));
    const auto& shp = vi.type().tensor_type().shape();
    if (it->second.rank() != shp.dim_size())
      fail("data '{}': array '{}' has shape {} (rank {}), the model input has rank {}", path, vi.name(),
           shape_str(it->second.shape()), it->second.rank(), shp.dim_size());
    for (int k = 1; k < shp.dim_size(); ++k)
      if (shp.dim(k).has_dim_value() && shp.dim(k).dim_value() != it->second.shape()[size_t(k)])
        fail("data '{}': array '{}' has shape {}, the model input needs dim {} = {}", path, vi.name(),
             shape_str(it->second.shape()), k, shp.dim(k).dim_value());
    names.push_back(vi.name());
  }
  if (need_label) {
    if (!all.count(label)) fail("data '{}' has no label array '{}' (use --label NAME)", path, label);
    names.push_back(label);
  }
  for (const auto& n : names) {
    const Tensor& t = all.at(n);
    if (t.rank() == 0) fail("data '{}': array '{}' is a scalar; axis 0 must index samples", path, n);
    if (d.arrays.empty()) d.samples = t.shape()[0];
    else if (t.shape()[0] != d.samples)
      fail("data '{}': array '{}' has {} samples, others have {}", path, n, t.shape()[0], d.samples);
    d.arrays[n] = t;
  }
  if (d.samples == 0) fail("data '{}' has no samples", path);
  return d;
}

std::map<std::string, Tensor> take_rows(const Dataset& d, const std::vector<int64_t>& idx) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : d.arrays) {
    Shape s = t.shape();
    s[0] = int64_t(idx.size());
    Tensor b(t.dtype(), s);
    size_t row = t.nbytes() / size_t(t.shape()[0]);
    for (size_t i = 0; i < idx.size(); ++i)
      std::memcpy(b.as<uint8_t>() + i * row, t.as<uint8_t>() + size_t(idx[i]) * row, row);
    out[name] = std::move(b);
  }
  return out;
}

ImportOptions shapes_for(const Dataset& d, int64_t batch) {
  ImportOptions io;
  io.batch_size = batch;
  for (const auto& [name, t] : d.arrays) {
    Shape s = t.shape();
    s[0] = batch;
    io.input_shapes[name] = s;
  }
  return io;
}

void check_class_labels(const Dataset& d, const std::string& path, const std::string& label, int64_t classes) {
  const Tensor& t = d.arrays.at(label);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32)
    fail("data '{}': label array '{}' is {}; --loss cross_entropy takes class indices (int64 or int32)", path, label,
         dtype_name(t.dtype()));
  const int64_t per_sample = d.samples > 0 ? t.numel() / d.samples : 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t l = t.dtype() == DType::i64 ? t.as<int64_t>()[i] : int64_t(t.as<int32_t>()[i]);
    if (l >= 0 && l < classes) continue;
    fail("data '{}': label array '{}' holds {} at sample {}{}, outside the model's {} classes [0, {}){}", path, label, l,
         per_sample > 0 ? i / per_sample : i, per_sample > 1 ? fmt::format(" (element {})", i % per_sample) : std::string(),
         classes, classes,
         l == -100 ? " (-100 is PyTorch's ignore_index: onnxdp's --loss cross_entropy ignores no label; drop those "
                     "positions or use a model whose ONNX loss has ignore_index)"
                   : "");
  }
}

}  // namespace onnxdp
