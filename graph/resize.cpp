#include "graph/resize.h"

#include <cmath>

namespace onnxdp {

bool ResizeNearest::identity(size_t axis) const {
  const auto& s = src[axis];
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != int64_t(i)) return false;
  return true;
}

ResizeNearest resize_nearest(const Node& n, const Shape& in, const Tensor* scales, const Tensor* sizes) {
  const std::string& mode = n.s("mode");
  if (mode != "nearest")
    fail("{}: Resize mode '{}' is not supported; onnxdp resizes with mode 'nearest'", n.describe(), mode);
  if (n.i("antialias") != 0) fail("{}: antialias is not supported", n.describe());
  const std::string& ct = n.s("coordinate_transformation_mode");
  const std::string& nearest = n.s("nearest_mode");
  if (ct != "half_pixel" && ct != "pytorch_half_pixel" && ct != "align_corners" && ct != "asymmetric" &&
      ct != "tf_half_pixel_for_nn")
    fail("{}: coordinate_transformation_mode '{}' is not supported", n.describe(), ct);
  if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" && nearest != "ceil")
    fail("{}: nearest_mode '{}' is not supported", n.describe(), nearest);
  if ((scales && scales->numel() > 0) == (sizes && sizes->numel() > 0))
    fail("{}: give exactly one of scales (input 2) and sizes (input 3)", n.describe());
  if (sizes && n.s("keep_aspect_ratio_policy") != "stretch")
    fail("{}: keep_aspect_ratio_policy '{}' is not supported", n.describe(), n.s("keep_aspect_ratio_policy"));

  const int64_t r = int64_t(in.size());
  std::vector<int64_t> axes;  // the axes the scales / sizes list (opset 18's axes attribute)
  if (n.has("axes")) {
    for (int64_t a : n.ints("axes")) axes.push_back(normalize_axis(a, r, n));
  } else {
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  }
  const std::vector<double> given = scales && scales->numel() ? scales->to_f64() : std::vector<double>{};
  const std::vector<int64_t> want = sizes && sizes->numel() ? sizes->to_i64() : std::vector<int64_t>{};
  const size_t listed = given.empty() ? want.size() : given.size();
  if (listed != axes.size())
    fail("{}: {} has {} elements for {} axes", n.describe(), given.empty() ? "sizes" : "scales", listed, axes.size());

  ResizeNearest rz;
  rz.out = in;
  std::vector<double> scale(size_t(r), 1.0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t a = size_t(axes[k]);
    if (!given.empty()) {
      if (!(given[k] > 0)) fail("{}: scale {} of axis {} is not positive", n.describe(), given[k], a);
      scale[a] = given[k];
      rz.out[a] = int64_t(std::floor(double(in[a]) * given[k]));
    } else {
      if (want[k] < 0) fail("{}: size {} of axis {} is negative", n.describe(), want[k], a);
      rz.out[a] = want[k];
      scale[a] = in[a] ? double(want[k]) / double(in[a]) : 1.0;
    }
  }
  rz.src.resize(size_t(r));
  for (int64_t a = 0; a < r; ++a) {
    const int64_t n_in = in[size_t(a)], n_out = rz.out[size_t(a)];
    if (n_in == 0 && n_out > 0) fail("{}: axis {} is empty and cannot be resized to {}", n.describe(), a, n_out);
    const double s = scale[size_t(a)];
    auto& idx = rz.src[size_t(a)];
    idx.resize(size_t(n_out));
    for (int64_t i = 0; i < n_out; ++i) {
      const double x = double(i);
      double orig;
      if (ct == "half_pixel") orig = (x + 0.5) / s - 0.5;
      else if (ct == "pytorch_half_pixel") orig = n_out > 1 ? (x + 0.5) / s - 0.5 : 0.0;
      else if (ct == "align_corners") orig = n_out == 1 ? 0.0 : x * double(n_in - 1) / double(n_out - 1);
      else if (ct == "asymmetric") orig = x / s;
      else orig = (x + 0.5) / s;  // tf_half_pixel_for_nn
      double k;
      if (nearest == "floor") k = std::floor(orig);
      else if (nearest == "ceil") k = std::ceil(orig);
      else if (orig - std::floor(orig) == 0.5) k = nearest == "round_prefer_floor" ? std::floor(orig) : std::ceil(orig);
      else k = std::round(orig);
      idx[size_t(i)] = std::min<int64_t>(std::max<int64_t>(int64_t(k), 0), std::max<int64_t>(n_in - 1, 0));
    }
  }
  return rz;
}

}  // namespace onnxdp
