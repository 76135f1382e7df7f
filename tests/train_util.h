// Helpers of the doctest files that compare two trainings of a sample model (replicas against one
// device, a device against the CPU, sharded against unsharded).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "train/trainer.h"

namespace onnxdp::test {

// Quiet training of models/<model> with SGD + momentum: parameters move linearly in the
// gradients, so rounding differences between summation orders stay at rounding size (Adam's
// normalised step would turn a 1e-9 gradient difference on a parameter whose gradient is ~0 into
// a full learning-rate step).
inline TrainOptions momentum_run(const std::string& model, int64_t batch, int64_t steps, uint64_t seed) {
  TrainOptions o;
  o.model = std::string(ONNXDP_SOURCE_DIR) + "/models/" + model + "/model.onnx";
  o.batch_size = batch;
  o.steps = steps;
  o.seed = seed;
  o.quiet = true;
  o.optimizer.kind = OptimizerKind::momentum;
  o.optimizer.lr = 0.05f;
  return o;
}

// Every step's loss within loss_rtol relative (and 1e-6 absolute) and every final parameter
// element within param_rtol relative and atol absolute.
inline void check_same_training(const TrainResult& a, const TrainResult& b, double loss_rtol = 1e-5,
                                double param_rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(a.losses.size() == b.losses.size());
  REQUIRE(!a.losses.empty());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(double(a.losses[s]) - b.losses[s]) <= loss_rtol * std::abs(double(a.losses[s])) + 1e-6);
  }
  REQUIRE(a.parameters.size() == b.parameters.size());
  for (const auto& [name, t] : a.parameters) {
    CAPTURE(name);
    const std::vector<double> x = t.to_f64(), y = b.parameters.at(name).to_f64();
    REQUIRE(x.size() == y.size());
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = std::abs(x[i] - y[i]);
      worst = std::max(worst, d);
      bad += !(d <= atol + param_rtol * std::abs(x[i]));
    }
    INFO("largest absolute difference " << worst);
    CHECK(bad == 0);
  }
}

}  // namespace onnxdp::test
