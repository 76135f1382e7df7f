// A training or evaluation dataset: the .npz arrays the model needs (its graph inputs and the
// label), axis 0 the sample, checked against the model's inputs before step 1.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "graph/tensor.h"
#include "importer/importer.h"

namespace onnxdp {

struct Dataset {
  std::map<std::string, Tensor> arrays;  // graph inputs + label, axis 0 = sample
  int64_t samples = 0;
};

// Reads `path` and checks the arrays the model m needs (dtype, rank, fixed dims, equal sample
// counts); every problem names the array. need_label: the label array `label` must be there too.
Dataset load_dataset(const std::string& path, const onnx::ModelProto& m, const std::string& label, bool need_label);

// Rows `idx` of every array.
std::map<std::string, Tensor> take_rows(const Dataset& d, const std::vector<int64_t>& idx);

// cross_entropy: every value of the label array in [0, classes), else an error naming the data,
// the position, the value and the class count (a label out of range would otherwise select no
// class and train on a loss of 0 for that position).
void check_class_labels(const Dataset& d, const std::string& path, const std::string& label, int64_t classes);

// Import options for batches of `batch` rows of d: every array's shape with axis 0 = batch.
ImportOptions shapes_for(const Dataset& d, int64_t batch);

}  // namespace onnxdp
