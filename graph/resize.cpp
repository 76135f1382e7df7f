#include "graph/resize.h"

#include <algorithm>
#include <cmath>

namespace onnxdp {

namespace {

bool one_of(const std::string& s, std::initializer_list<const char*> list) {
  for (const char* v : list)
    if (s == v) return true;
  return false;
}

// The attributes every form checks; mode-specific ones where they apply.
void check_attributes(const Node& n) {
  const std::string &mode = n.s("mode"), &ct = n.s("coordinate_transformation_mode");
  if (!one_of(mode, {"nearest", "linear", "cubic"}))
    fail("{}: Resize mode '{}' is not one of nearest, linear, cubic", n.describe(), mode);
  if (!one_of(ct, {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                   "tf_half_pixel_for_nn", "tf_crop_and_resize"}))
    fail("{}: coordinate_transformation_mode '{}' is not supported", n.describe(), ct);
  if (mode == "nearest") {
    if (n.i("antialias") != 0) fail("{}: antialias applies to modes linear and cubic, not nearest", n.describe());
    if (ct == "tf_crop_and_resize")
      fail("{}: coordinate_transformation_mode tf_crop_and_resize is supported with modes linear and cubic, not "
           "nearest",
           n.describe());
    const std::string& nearest = n.s("nearest_mode");
    if (!one_of(nearest, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}))
      fail("{}: nearest_mode '{}' is not supported", n.describe(), nearest);
  } else if (n.i("antialias") != 0 && n.i("antialias") != 1) {
    fail("{}: antialias must be 0 or 1, it is {}", n.describe(), n.i("antialias"));
  }
}

}  // namespace

std::vector<ResizeAxis> resize_axes(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales,
                                    const Tensor* sizes) {
  check_attributes(n);
  if ((scales && scales->numel() > 0) == (sizes && sizes->numel() > 0))
    fail("{}: give exactly one of scales (input 2) and sizes (input 3)", n.describe());
  const std::string& policy = n.s("keep_aspect_ratio_policy");
  if (sizes && !one_of(policy, {"stretch", "not_larger", "not_smaller"}))
    fail("{}: keep_aspect_ratio_policy '{}' is not one of stretch, not_larger, not_smaller", n.describe(), policy);

  const int64_t r = int64_t(in.size());
  std::vector<int64_t> axes;  // the axes roi / scales / sizes list (opset 18's axes attribute)
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

  std::vector<ResizeAxis> ax(static_cast<size_t>(r));
  for (int64_t a = 0; a < r; ++a) ax[size_t(a)].in = ax[size_t(a)].out = in[size_t(a)];
  const bool crop = n.s("coordinate_transformation_mode") == "tf_crop_and_resize";
  if (crop) {  // roi [starts of the axes listed, then their ends]
    const std::vector<double> box = roi ? roi->to_f64() : std::vector<double>{};
    if (box.size() != 2 * axes.size())
      fail("{}: tf_crop_and_resize needs roi (input 1) with {} values (starts, then ends), it has {}", n.describe(),
           2 * axes.size(), box.size());
    for (size_t k = 0; k < axes.size(); ++k) {
      ax[size_t(axes[k])].roi_start = box[k];
      ax[size_t(axes[k])].roi_end = box[k + axes.size()];
    }
  }
  if (!given.empty()) {
    // ONNX's text sizes a crop's output floor(in * (roi_end - roi_start) * scale), its reference
    // implementation floor(in * scale): refused rather than guessed.
    if (crop)
      fail("{}: tf_crop_and_resize with scales: the output's length is ambiguous (ONNX's text and its reference "
           "implementation differ); give sizes (input 3)",
           n.describe());
    for (size_t k = 0; k < axes.size(); ++k) {
      ResizeAxis& a = ax[size_t(axes[k])];
      if (!(given[k] > 0)) fail("{}: scale {} of axis {} is not positive", n.describe(), given[k], axes[k]);
      a.scale = given[k];
      a.out = int64_t(std::floor(double(a.in) * given[k]));
    }
  } else {
    for (size_t k = 0; k < axes.size(); ++k)
      if (want[k] < 0) fail("{}: size {} of axis {} is negative", n.describe(), want[k], axes[k]);
    if (policy == "stretch") {
      for (size_t k = 0; k < axes.size(); ++k) {
        ResizeAxis& a = ax[size_t(axes[k])];
        a.out = want[k];
        a.scale = a.in ? double(want[k]) / double(a.in) : 1.0;
      }
    } else {  // one scale for every listed axis, keeping the aspect ratio
      double s = policy == "not_larger" ? INFINITY : 0.0;
      for (size_t k = 0; k < axes.size(); ++k) {
        const int64_t len = ax[size_t(axes[k])].in;
        if (len == 0) fail("{}: axis {} is empty: no aspect ratio to keep", n.describe(), axes[k]);
        const double q = double(want[k]) / double(len);
        s = policy == "not_larger" ? std::min(s, q) : std::max(s, q);
      }
      for (int64_t a : axes) {
        ax[size_t(a)].scale = s;
        ax[size_t(a)].out = int64_t(s * double(ax[size_t(a)].in) + 0.5);  // round half up
      }
    }
  }
  for (int64_t d = 0; d < r; ++d) {
    ResizeAxis& a = ax[size_t(d)];
    if (a.in == 0 && a.out > 0) fail("{}: axis {} is empty and cannot be resized to {}", n.describe(), d, a.out);
    // As ONNX's reference: a scale within 1e-9 of 1 that keeps the length and crops nothing
    // leaves the axis as it is.
    a.resized = !(std::fabs(a.scale - 1.0) <= 1e-9 && a.out == a.in && (!crop || (a.roi_start == 0 && a.roi_end == 1)));
  }
  return ax;
}

Shape resize_output_shape(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales, const Tensor* sizes) {
  Shape out;
  for (const ResizeAxis& a : resize_axes(n, in, roi, scales, sizes)) out.push_back(a.out);
  return out;
}

double resize_source(const Node& n, const ResizeAxis& a, int64_t i) {
  const std::string& ct = n.s("coordinate_transformation_mode");
  const double x = double(i), s = a.scale, len_in = double(a.in), len_out = double(a.out);
  if (ct == "half_pixel") return (x + 0.5) / s - 0.5;
  if (ct == "pytorch_half_pixel") return a.out > 1 ? (x + 0.5) / s - 0.5 : 0.0;
  if (ct == "align_corners") return a.out == 1 ? 0.0 : x * (len_in - 1) / (len_out - 1);
  if (ct == "asymmetric") return x / s;
  if (ct == "tf_half_pixel_for_nn") return (x + 0.5) / s;
  if (ct == "half_pixel_symmetric") {  // the output's centre on the input's when in * scale is fractional
    const double adjustment = len_out / (s * len_in);
    return len_in / 2 * (1 - adjustment) + (x + 0.5) / s - 0.5;
  }
  // tf_crop_and_resize: the output's ends on the crop's ends
  const double extent = (a.roi_end - a.roi_start) * (len_in - 1);
  if (a.out == 1) return a.roi_start * (len_in - 1) + extent / 2;
  return a.roi_start * (len_in - 1) + x * extent / (len_out - 1);
}

bool ResizeNearest::identity(size_t axis) const {
  const auto& s = src[axis];
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != int64_t(i)) return false;
  return true;
}

ResizeNearest resize_nearest(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales,
                             const Tensor* sizes) {
  const std::vector<ResizeAxis> ax = resize_axes(n, in, roi, scales, sizes);
  if (n.s("mode") != "nearest") fail("{}: mode '{}' is not nearest", n.describe(), n.s("mode"));
  const std::string& nearest = n.s("nearest_mode");
  ResizeNearest rz;
  rz.src.resize(ax.size());
  for (size_t d = 0; d < ax.size(); ++d) {
    const ResizeAxis& a = ax[d];
    rz.out.push_back(a.out);
    auto& idx = rz.src[d];
    idx.resize(size_t(a.out));
    for (int64_t i = 0; i < a.out; ++i) {
      const double orig = resize_source(n, a, i);
      double k;
      if (nearest == "floor") k = std::floor(orig);
      else if (nearest == "ceil") k = std::ceil(orig);
      else if (orig - std::floor(orig) == 0.5) k = nearest == "round_prefer_floor" ? std::floor(orig) : std::ceil(orig);
      else k = std::round(orig);
      idx[size_t(i)] = std::min<int64_t>(std::max<int64_t>(int64_t(k), 0), std::max<int64_t>(a.in - 1, 0));
    }
  }
  return rz;
}

bool ResizeTaps::crops() const { return std::find(outside.begin(), outside.end(), 1) != outside.end(); }

ResizeInterp resize_interp(const Node& n, const Shape& in, const Tensor* roi, const Tensor* scales,
                           const Tensor* sizes) {
  const std::vector<ResizeAxis> ax = resize_axes(n, in, roi, scales, sizes);
  const std::string& mode = n.s("mode");
  if (mode != "linear" && mode != "cubic") fail("{}: mode '{}' is not linear or cubic", n.describe(), mode);
  const bool cubic = mode == "cubic", antialias = n.i("antialias") != 0, exclude = n.i("exclude_outside") != 0;
  const bool crop = n.s("coordinate_transformation_mode") == "tf_crop_and_resize";
  const double A = n.f("cubic_coeff_a"), radius = cubic ? 2 : 1;
  // The kernel at distance d (in input elements, times the antialias scale): the tent, or Keys' cubic.
  auto kernel = [&](double d) {
    d = std::fabs(d);
    if (!cubic) return std::max(0.0, 1 - d);
    if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
    if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
    return 0.0;
  };
  ResizeInterp rz;
  rz.axes.resize(ax.size());
  for (size_t dim = 0; dim < ax.size(); ++dim) {
    const ResizeAxis& a = ax[dim];
    rz.out.push_back(a.out);
    if (!a.resized) continue;
    ResizeTaps& t = rz.axes[dim];
    const double s = antialias ? std::min(a.scale, 1.0) : 1.0;  // antialias stretches the kernel by 1 / s
    // Taps at base + first .. base + first + width - 1 around the source x, base = floor(x) (x - 1
    // when x is whole, so the ratio x - base lies in (0, 1] as in ONNX's reference).
    const int64_t first = int64_t(std::floor(-radius / s)) + 1;
    t.width = 2 - 2 * first;
    t.src.assign(size_t(a.out * t.width), 0);
    t.weight.assign(size_t(a.out * t.width), 0.0);
    t.outside.assign(size_t(a.out), 0);
    for (int64_t j = 0; j < a.out; ++j) {
      const double x = resize_source(n, a, j);
      if (crop && (x < 0 || x > double(a.in - 1))) {
        t.outside[size_t(j)] = 1;
        continue;
      }
      double base = std::floor(x);
      if (base == x) base -= 1;
      const double ratio = x - base;
      int64_t* src = &t.src[size_t(j * t.width)];
      double* w = &t.weight[size_t(j * t.width)];
      double sum = 0;
      for (int64_t k = 0; k < t.width; ++k) {
        const int64_t i = first + k, pos = int64_t(base) + i;
        w[k] = exclude && (pos < 0 || pos >= a.in) ? 0.0 : kernel((double(i) - ratio) * s);
        src[k] = std::clamp<int64_t>(pos, 0, a.in - 1);
        sum += w[k];
      }
      if ((antialias || exclude) && sum != 0)
        for (int64_t k = 0; k < t.width; ++k) w[k] /= sum;
    }
  }
  return rz;
}

}  // namespace onnxdp
