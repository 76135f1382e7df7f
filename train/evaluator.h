// Held-out evaluation with the current parameters (--eval-data, --eval-every): the mean loss over
// the samples and, for cross_entropy, the accuracy over every classified position. The graph is
// compile()'s eval mode (inference mode, evaluated as trained: --mixed-precision too); a plan per
// batch size is kept.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "exec/plan.h"
#include "train/dataset.h"
#include "train/trainer.h"

namespace onnxdp {

class Communicator;
class DeviceBackend;

class Evaluator {
 public:
  Evaluator(const std::string& path, const onnx::ModelProto& proto, const std::string& model_dir, const LossOptions& lo,
            const TrainOptions& o, std::shared_ptr<DeviceBackend> device);

  struct Result {
    double loss = 0, accuracy = -1;  // accuracy < 0: not a classifier
  };
  // cross_entropy: the held-out labels in [0, classes) (train/dataset.h), checked before step 1.
  void check_labels(int64_t classes) { check_class_labels(data_, path_, o_.label, classes); }
  // parameters: the trainer's tensors by initializer name (the plans read their bytes). With comm
  // every replica calls it: replica r takes the batches k with k % world == r, and the sums (loss,
  // hits, positions) are all-reduced, so each replica's plans and memory are its share and every
  // replica gets the whole result.
  Result run(const std::map<std::string, Tensor>& parameters, Communicator* comm = nullptr);

 private:
  struct EvalPlan {
    std::unique_ptr<Plan> plan;
    ValueId prediction = kNoValue, loss = kNoValue;
  };
  EvalPlan& plan_for(int64_t rows, const std::map<std::string, Tensor>& parameters);
  // Counts the positions of a batch whose largest logit is the label (`labels`: the batch's).
  int64_t correct(const TensorRef& logits, const Tensor& labels, int64_t* positions);

  std::string path_;
  const onnx::ModelProto& proto_;
  std::string model_dir_;
  LossOptions lo_;
  const TrainOptions& o_;
  Dataset data_;
  std::shared_ptr<DeviceBackend> device_;
  std::map<int64_t, EvalPlan> plans_;
};

}  // namespace onnxdp
