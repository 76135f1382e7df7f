// ONNX import of the recurrent ops LSTM, GRU and RNN: composites (graph/op_table.h) unrolled over
// the time steps into rows of the table, so their gradients (backward through time), kernels and
// mixed precision are those rows'.
//
// Shapes (D = 2 for bidirectional, else 1; G gates: LSTM 4 (i, o, f, c), GRU 3 (z, r, h), RNN 1):
//   X [T, B, I] (layout 0) or [B, T, I] (layout 1)     W [D, G*H, I]   R [D, G*H, H]
//   B [D, 2*G*H] (W's biases, then R's)                 sequence_lens [B] (int)
//   initial_h, initial_c [D, B, H] (layout 0) or [B, D, H] (layout 1)      P [D, 3*H] (i, o, f)
//   Y [T, D, B, H] (layout 0) or [B, T, D, H] (layout 1);  Y_h, Y_c like initial_h.
// Per direction the input projection X W^T (+ the biases) is one MatMul over all steps, split
// into steps; each step adds H_{t-1} R^T and applies the gates. An absent initial state is zero:
// the first step then has no recurrent term. The reverse direction runs t = T-1 .. 0.
//
// sequence_lens: step t of batch row b is valid when t < lens[b]. A row's state holds (Where)
// through its invalid steps and Y is 0 there, so Y_h / Y_c hold the state at its last valid step
// and the reverse direction starts at step lens[b] - 1, as ONNX defines (PyTorch's packed
// sequences export this way). Lengths must lie in [0, T]: checked at load when they are
// constants; a length over T fed at run time counts as T.
//
// Supported: hidden_size, direction, layout, clip (Clip on the inputs of the gate activations f
// and g, as ONNX Runtime: not on h(C_t)), GRU's linear_before_reset 0 and 1, LSTM peepholes, and
// activations naming Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid, Elu or Softplus (the last three
// with their ONNX defaults). Refused with an error: activation_alpha / activation_beta, LSTM's
// input_forget=1, other activations, unknown attributes.
#include <algorithm>
#include <cctype>

#include "importer/importer.h"

namespace onnxdp {

namespace {

constexpr int64_t kMaxTimeSteps = 1 << 16;  // unrolled steps of one RNN / GRU / LSTM node

enum class Cell { lstm, gru, rnn };

struct Activation {
  Op op;
  std::map<std::string, Attr> attrs;  // none: the ONNX defaults of alpha / beta
};

Activation activation(const ImportCtx& c, const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  static const std::pair<const char*, Op> known[] = {
      {"sigmoid", Op::Sigmoid}, {"tanh", Op::Tanh},   {"relu", Op::Relu},         {"leakyrelu", Op::LeakyRelu},
      {"hardsigmoid", Op::HardSigmoid}, {"elu", Op::Elu}, {"softplus", Op::Softplus}};
  for (const auto& [n, op] : known)
    if (lower == n) return {op, {}};
  c.fail("attribute 'activations': '{}' is not supported (onnxdp computes Sigmoid, Tanh, Relu, LeakyRelu, "
         "HardSigmoid, Elu and Softplus)",
         name);
}

// The unrolled recurrence of one node.
class Unroll {
 public:
  Unroll(ImportCtx& c, Cell cell) : c_(c), cell_(cell) {}

  void run() {
    x_ = c_.node.inputs.empty() ? kNoValue : c_.node.inputs[0];
    read_attributes();
    read_shapes();
    zero_ = c_.add_node(Op::CastLike, "zero", {c_.add_constant(Tensor::scalar_f32(0.0f), "zero_f32"), x_});
    if (c_.node.has_input(4)) {
      // ONNX types the lengths int32; Less wants both sides alike.
      lens_ = c_.add_node(Op::Cast, "lens_i64", {c_.node.inputs[4]}, {{"to", Attr(int64_t(7))}});
    }
    const std::vector<ValueId> w = per_direction(c_.node.inputs[1], 0, "W");
    const std::vector<ValueId> r = per_direction(c_.node.inputs[2], 0, "R");
    const std::vector<ValueId> b = c_.node.has_input(3) ? per_direction(c_.node.inputs[3], 0, "B") : std::vector<ValueId>();
    const int state_axis = layout_ == 0 ? 0 : 1;
    const std::vector<ValueId> h0 = c_.node.has_input(5) ? per_direction(c_.node.inputs[5], state_axis, "initial_h") : std::vector<ValueId>();
    const std::vector<ValueId> c0 = cell_ == Cell::lstm && c_.node.has_input(6) ? per_direction(c_.node.inputs[6], state_axis, "initial_c") : std::vector<ValueId>();
    const std::vector<ValueId> p = cell_ == Cell::lstm && c_.node.has_input(7) ? per_direction(c_.node.inputs[7], 0, "P") : std::vector<ValueId>();

    std::vector<ValueId> ys, hs, cs;  // per direction: Y_d, the last h, the last c
    for (int d = 0; d < dirs_; ++d) {
      const bool reverse = direction_ == "reverse" || d == 1;
      dir_ = std::string(reverse ? "bw" : "fw");
      Dir dd;
      dd.acts = std::vector<Activation>(acts_.begin() + d * acts_per_dir(), acts_.begin() + (d + 1) * acts_per_dir());
      dd.h = h0.empty() ? kNoValue : h0[size_t(d)];
      dd.c = c0.empty() ? kNoValue : c0[size_t(d)];
      std::vector<ValueId> xs = input_steps(w[size_t(d)], b.empty() ? kNoValue : b[size_t(d)], dd);
      weights(r[size_t(d)], p.empty() ? kNoValue : p[size_t(d)], dd);
      std::vector<ValueId> y(size_t(T_), kNoValue);
      for (int64_t s = 0; s < T_; ++s) {
        const int64_t t = reverse ? T_ - 1 - s : s;
        y[size_t(t)] = step(xs[size_t(t)], t, dd);
      }
      // Y_d: [T, B, H] (layout 0) or [B, T, H] (layout 1), then a direction axis before H's pair.
      const int64_t time_axis = layout_ == 0 ? 0 : 1;
      std::vector<ValueId> pieces;
      for (int64_t t = 0; t < T_; ++t) pieces.push_back(unsqueeze(y[size_t(t)], time_axis, name("y", t)));
      ValueId yd = T_ == 1 ? pieces[0] : c_.add_node(Op::Concat, dir_ + "/Y", pieces, {{"axis", Attr(time_axis)}});
      ys.push_back(yd);
      hs.push_back(dd.h);
      cs.push_back(dd.c);
    }
    // Y [T, D, B, H] or [B, T, D, H]: the node itself (Unsqueeze for one direction, Concat for two).
    const int64_t dir_axis_y = layout_ == 0 ? 1 : 2;
    c_.node.attrs.clear();
    if (dirs_ == 1) {
      c_.node.op = Op::Unsqueeze;
      c_.node.inputs = {ys[0], axes(dir_axis_y)};
    } else {
      c_.node.op = Op::Concat;
      c_.node.inputs = {unsqueeze(ys[0], dir_axis_y, "fw/Y_d"), unsqueeze(ys[1], dir_axis_y, "bw/Y_d")};
      c_.node.attrs["axis"] = Attr(dir_axis_y);
    }
    // Y_h, Y_c [D, B, H] or [B, D, H].
    if (named_output(1)) c_.bind_output(1, stack_states(hs, "Y_h"));
    if (cell_ == Cell::lstm && named_output(2)) c_.bind_output(2, stack_states(cs, "Y_c"));
  }

 private:
  struct Dir {
    std::vector<Activation> acts;  // f, g, h (LSTM); f, g (GRU); f (RNN)
    ValueId h = kNoValue, c = kNoValue;  // the state; kNoValue: zero (before the first step)
    ValueId rt = kNoValue;   // R^T [H, G*H] (GRU: the z and r columns [H, 2H])
    ValueId rht = kNoValue;  // GRU: Rh^T [H, H]
    ValueId rbh = kNoValue;  // GRU linear_before_reset=1: Rbh [H]
    ValueId pi = kNoValue, po = kNoValue, pf = kNoValue;  // LSTM peepholes [H]
  };

  int gates() const { return cell_ == Cell::lstm ? 4 : cell_ == Cell::gru ? 3 : 1; }
  int acts_per_dir() const { return cell_ == Cell::lstm ? 3 : cell_ == Cell::gru ? 2 : 1; }
  int max_inputs() const { return cell_ == Cell::lstm ? 8 : 6; }
  bool named_output(int k) const { return c_.proto.output_size() > k && !c_.proto.output(k).empty(); }

  std::string name(const char* what, int64_t t) const { return dir_ + "/t" + std::to_string(t) + "/" + what; }

  void read_attributes() {
    if (int(c_.node.inputs.size()) > max_inputs())
      c_.fail("has {} inputs, the op takes at most {}", c_.node.inputs.size(), max_inputs());
    if (!c_.node.has_input(0) || !c_.node.has_input(1) || !c_.node.has_input(2))
      c_.fail("needs its inputs X, W and R");
    for (const auto& attr : c_.node.attrs) {
      const std::string& a = attr.first;  // a name, not a structured binding: lambdas capture it (clang 14)
      static const char* known[] = {"hidden_size", "direction", "layout", "clip", "linear_before_reset", "input_forget",
                                    "activation_alpha", "activation_beta"};
      if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return a == k; }) == std::end(known))
        c_.fail("attribute '{}' is not supported", a);
    }
    auto int_attr = [&](const char* a, int64_t dflt) {
      if (!c_.node.has(a)) return dflt;
      const int64_t* v = std::get_if<int64_t>(&c_.node.attrs[a]);
      if (!v) c_.fail("attribute '{}' must be an int", a);
      return *v;
    };
    for (const char* a : {"activation_alpha", "activation_beta"})
      if (c_.node.has(a))
        c_.fail("attribute '{}' is not supported: onnxdp uses the activations' ONNX defaults only", a);
    if (c_.node.has("direction")) {
      const std::string* s = std::get_if<std::string>(&c_.node.attrs["direction"]);
      if (!s) c_.fail("attribute 'direction' must be a string");
      direction_ = *s;
    }
    if (direction_ != "forward" && direction_ != "reverse" && direction_ != "bidirectional")
      c_.fail("attribute 'direction' is '{}'; ONNX defines forward, reverse and bidirectional", direction_);
    dirs_ = direction_ == "bidirectional" ? 2 : 1;
    layout_ = int_attr("layout", 0);
    if (layout_ != 0 && layout_ != 1) c_.fail("attribute 'layout' is {}; ONNX defines 0 and 1", layout_);
    hidden_size_ = int_attr("hidden_size", -1);
    if (c_.node.has("linear_before_reset") && cell_ != Cell::gru) c_.fail("attribute 'linear_before_reset' is GRU's");
    linear_before_reset_ = int_attr("linear_before_reset", 0) != 0;
    if (c_.node.has("input_forget") && cell_ != Cell::lstm) c_.fail("attribute 'input_forget' is LSTM's");
    if (int_attr("input_forget", 0) != 0)
      c_.fail("attribute 'input_forget' = 1 (coupled input and forget gates) is not supported");
    if (c_.node.has("clip")) {
      const float* f = std::get_if<float>(&c_.node.attrs["clip"]);
      if (!f) c_.fail("attribute 'clip' must be a float");
      if (!(*f > 0.0f)) c_.fail("attribute 'clip' is {}; it must be positive", *f);
      clip_ = *f;
    }
    // activations: a list of strings, which the importer leaves in the proto for composites.
    std::vector<std::string> names;
    for (const auto& a : c_.proto.attribute())
      if (a.name() == "activations") names.assign(a.strings().begin(), a.strings().end());
    if (names.empty()) {
      if (cell_ == Cell::lstm) names = {"Sigmoid", "Tanh", "Tanh"};
      if (cell_ == Cell::gru) names = {"Sigmoid", "Tanh"};
      if (cell_ == Cell::rnn) names = {"Tanh"};
      if (dirs_ == 2) {
        const std::vector<std::string> one = names;
        names.insert(names.end(), one.begin(), one.end());
      }
    }
    if (int(names.size()) != acts_per_dir() * dirs_)
      c_.fail("attribute 'activations' names {} functions; a {} node takes {} per direction ({} in all)", names.size(),
              direction_, acts_per_dir(), acts_per_dir() * dirs_);
    for (const auto& n : names) acts_.push_back(activation(c_, n));
  }

  void read_shapes() {
    const Shape& xs = c_.static_shape(c_.node.inputs[0], "X");
    if (xs.size() != 3) c_.fail("input X has shape {}; it must have rank 3", shape_str(xs));
    T_ = layout_ == 0 ? xs[0] : xs[1];
    B_ = layout_ == 0 ? xs[1] : xs[0];
    const int64_t in = xs[2];
    if (T_ == 0) c_.fail("input X has shape {}: no time steps", shape_str(xs));
    // Each step becomes a dozen nodes: a declared length of 2^31 would take the memory of the
    // machine before any check of the data could refuse it.
    if (T_ > kMaxTimeSteps)
      c_.fail("input X has shape {}: {} time steps; onnxdp unrolls the recurrence over its steps and takes at most {}",
              shape_str(xs), T_, kMaxTimeSteps);
    const Shape rs = c_.static_shape(c_.node.inputs[2], "R");
    const int64_t g = gates();
    if (rs.size() != 3 || rs[0] != dirs_ || rs[1] % g != 0 || rs[2] * g != rs[1])
      c_.fail("input R has shape {}; a {} node needs [{}, {}*H, H]", shape_str(rs), direction_, dirs_, g);
    H_ = rs[2];
    if (hidden_size_ >= 0 && hidden_size_ != H_)
      c_.fail("attribute 'hidden_size' is {} but R has shape {} (H = {})", hidden_size_, shape_str(rs), H_);
    auto expect = [&](int k, const char* what, Shape want) {
      if (!c_.node.has_input(k)) return;
      const Shape& s = c_.static_shape(c_.node.inputs[size_t(k)], what);
      if (s != want) c_.fail("input {} has shape {}, expected {}", what, shape_str(s), shape_str(want));
    };
    expect(1, "W", {dirs_, g * H_, in});
    expect(3, "B", {dirs_, 2 * g * H_});
    expect(4, "sequence_lens", {B_});
    const Shape state = layout_ == 0 ? Shape{dirs_, B_, H_} : Shape{B_, dirs_, H_};
    expect(5, "initial_h", state);
    if (cell_ == Cell::lstm) {
      expect(6, "initial_c", state);
      expect(7, "P", {dirs_, 3 * H_});
    }
    if (c_.node.has_input(4)) {
      const Value& lv = c_.graph.value(c_.node.inputs[4]);
      if (lv.dtype != DType::i32 && lv.dtype != DType::i64)
        c_.fail("input sequence_lens is {}; it must be int32", dtype_name(lv.dtype));
      if (lv.kind == ValueKind::constant) {
        const std::vector<int64_t> lens = lv.data.to_i64();
        for (size_t k = 0; k < lens.size(); ++k)
          if (lens[k] < 0 || lens[k] > T_)
            c_.fail("sequence_lens[{}] is {}, outside [0, {}] (the sequence length)", k, lens[k], T_);
      }
    }
  }

  ValueId axes(int64_t axis) {  // one constant per axis, shared by the (Un)squeezes
    auto it = axes_.find(axis);
    if (it == axes_.end())
      it = axes_.emplace(axis, c_.add_constant(Tensor::from_i64({axis}), fmt::format("axes_{}", axis))).first;
    return it->second;
  }
  ValueId unsqueeze(ValueId v, int64_t axis, const std::string& suffix) {
    return c_.add_node(Op::Unsqueeze, suffix, {v, axes(axis)});
  }
  ValueId squeeze(ValueId v, int64_t axis, const std::string& suffix) {
    return c_.add_node(Op::Squeeze, suffix, {v, axes(axis)});
  }
  ValueId add(ValueId a, ValueId b, const std::string& suffix) {  // kNoValue is zero
    if (a == kNoValue) return b;
    if (b == kNoValue) return a;
    return c_.add_node(Op::Add, suffix, {a, b});
  }
  ValueId transpose(ValueId v, const std::string& suffix) {
    return c_.add_node(Op::Transpose, suffix, {v}, {{"perm", Attr(std::vector<int64_t>{1, 0})}});
  }
  std::vector<ValueId> split(ValueId v, int64_t axis, int n, const std::string& suffix) {
    if (n == 1) return {v};
    return c_.add_node_n(Op::Split, suffix, {v}, n, {{"axis", Attr(axis)}});
  }
  std::vector<ValueId> split_sizes(ValueId v, std::vector<int64_t> sizes, const std::string& suffix) {
    ValueId s = c_.add_constant(Tensor::from_i64(sizes), "split");
    return c_.add_node_n(Op::Split, suffix, {v, s}, int(sizes.size()), {{"axis", Attr(int64_t(0))}});
  }

  // A per-direction input's slices along `axis`, that axis removed.
  std::vector<ValueId> per_direction(ValueId v, int64_t axis, const char* what) {
    std::vector<ValueId> out;
    for (ValueId part : split(v, axis, dirs_, std::string(what) + "/directions"))
      out.push_back(squeeze(part, axis, std::string(what) + "/d" + std::to_string(out.size())));
    return out;
  }

  ValueId act(const Activation& a, ValueId x, const std::string& suffix) {
    return c_.add_node(a.op, suffix, {x}, a.attrs);
  }
  ValueId clipped(ValueId x, const std::string& suffix) {
    if (clip_ <= 0.0f) return x;
    if (clip_min_ == kNoValue) {  // X's dtype (Clip's gradient compares x with them)
      clip_min_ = c_.add_node(Op::CastLike, "clip_min", {c_.add_constant(Tensor::scalar_f32(-clip_), "clip_min_f32"), x_});
      clip_max_ = c_.add_node(Op::CastLike, "clip_max", {c_.add_constant(Tensor::scalar_f32(clip_), "clip_max_f32"), x_});
    }
    return c_.add_node(Op::Clip, suffix + "_clip", {x, clip_min_, clip_max_});
  }

  // X W^T + the input-side biases [.., G*H], split into the T steps [B, G*H].
  std::vector<ValueId> input_steps(ValueId w, ValueId b, Dir& d) {
    ValueId xw = c_.add_node(Op::MatMul, dir_ + "/XW", {x_, transpose(w, dir_ + "/W_T")});
    if (b != kNoValue) {
      // b [2*G*H]: W's biases, then R's. GRU with linear_before_reset keeps Rbh for inside r * (.).
      const int64_t gh = gates() * H_;
      if (cell_ == Cell::gru) {
        std::vector<ValueId> p = split(b, 0, 6, dir_ + "/B_parts");  // Wz Wr Wh Rz Rr Rh
        ValueId zr = c_.add_node(Op::Add, dir_ + "/B_zr",
                                 {c_.add_node(Op::Concat, dir_ + "/Wb_zr", {p[0], p[1]}, {{"axis", Attr(int64_t(0))}}),
                                  c_.add_node(Op::Concat, dir_ + "/Rb_zr", {p[3], p[4]}, {{"axis", Attr(int64_t(0))}})});
        ValueId h = linear_before_reset_ ? p[2] : c_.add_node(Op::Add, dir_ + "/B_h", {p[2], p[5]});
        if (linear_before_reset_) d.rbh = p[5];
        xw = c_.add_node(Op::Add, dir_ + "/XW_b", {xw, c_.add_node(Op::Concat, dir_ + "/B_x", {zr, h}, {{"axis", Attr(int64_t(0))}})});
      } else {
        std::vector<ValueId> wr = split_sizes(b, {gh, gh}, dir_ + "/B_parts");
        xw = c_.add_node(Op::Add, dir_ + "/XW_b", {xw, c_.add_node(Op::Add, dir_ + "/B_x", {wr[0], wr[1]})});
      }
    }
    const int64_t time_axis = layout_ == 0 ? 0 : 1;
    std::vector<ValueId> steps;
    for (ValueId s : split(xw, time_axis, int(T_), dir_ + "/XW_steps"))
      steps.push_back(squeeze(s, time_axis, name("x", int64_t(steps.size()))));
    return steps;
  }

  void weights(ValueId r, ValueId p, Dir& d) {
    if (cell_ == Cell::gru) {
      std::vector<ValueId> parts = split_sizes(r, {2 * H_, H_}, dir_ + "/R_parts");
      d.rt = transpose(parts[0], dir_ + "/R_zr_T");
      d.rht = transpose(parts[1], dir_ + "/R_h_T");
    } else {
      d.rt = transpose(r, dir_ + "/R_T");
    }
    if (p != kNoValue) {
      std::vector<ValueId> pp = split(p, 0, 3, dir_ + "/P_parts");
      d.pi = pp[0], d.po = pp[1], d.pf = pp[2];
    }
  }

  // The step's valid rows [B, 1] (bool), kNoValue without sequence_lens.
  ValueId mask(int64_t t) {
    if (lens_ == kNoValue) return kNoValue;
    if (masks_.empty()) masks_.assign(size_t(T_), kNoValue);
    ValueId& m = masks_[size_t(t)];
    if (m == kNoValue) {
      // (fmt rather than "t" + std::to_string(t): GCC 12 warns falsely (-Wrestrict) on the latter.)
      ValueId less = c_.add_node(Op::Less, fmt::format("t{}/valid", t), {c_.add_constant(Tensor::scalar_i64(t), fmt::format("t{}", t)), lens_});
      m = unsqueeze(less, 1, fmt::format("t{}/mask", t));
    }
    return m;
  }

  // Keeps the new state where the step is valid, the old one (zero if none) elsewhere.
  ValueId hold(ValueId m, ValueId next, ValueId prev, const std::string& suffix) {
    if (m == kNoValue) return next;
    return c_.add_node(Op::Where, suffix, {m, next, prev == kNoValue ? zero_ : prev});
  }

  // One time step; updates d.h (and d.c) and returns Y's piece [B, H].
  ValueId step(ValueId xt, int64_t t, Dir& d) {
    auto nm = [&](const char* what) { return name(what, t); };
    const ValueId h_prev = d.h;
    ValueId h_new = kNoValue;
    if (cell_ == Cell::lstm) {
      ValueId gsum = h_prev == kNoValue ? xt : add(xt, c_.add_node(Op::MatMul, nm("HR"), {h_prev, d.rt}), nm("gates"));
      std::vector<ValueId> g = split(gsum, 1, 4, nm("gate_parts"));  // i, o, f, c
      ValueId gi = g[0], go = g[1], gf = g[2], gc = g[3];
      if (d.c != kNoValue && d.pi != kNoValue) {
        gi = add(gi, c_.add_node(Op::Mul, nm("Pi_c"), {d.pi, d.c}), nm("i_peep"));
        gf = add(gf, c_.add_node(Op::Mul, nm("Pf_c"), {d.pf, d.c}), nm("f_peep"));
      }
      ValueId i = act(d.acts[0], clipped(gi, nm("i_in")), nm("i"));
      ValueId cc = act(d.acts[1], clipped(gc, nm("c_in")), nm("c_cand"));
      ValueId c_new = c_.add_node(Op::Mul, nm("i_c"), {i, cc});
      if (d.c != kNoValue) {
        ValueId f = act(d.acts[0], clipped(gf, nm("f_in")), nm("f"));
        c_new = add(c_new, c_.add_node(Op::Mul, nm("f_c"), {f, d.c}), nm("C"));
      }
      if (d.po != kNoValue) go = add(go, c_.add_node(Op::Mul, nm("Po_c"), {d.po, c_new}), nm("o_peep"));
      ValueId o = act(d.acts[0], clipped(go, nm("o_in")), nm("o"));
      h_new = c_.add_node(Op::Mul, nm("H"), {o, act(d.acts[2], c_new, nm("h_C"))});
      d.c = hold(mask(t), c_new, d.c, nm("C_held"));
    } else if (cell_ == Cell::gru) {
      std::vector<ValueId> g = split(xt, 1, 3, nm("x_parts"));  // z, r, h
      ValueId gz = g[0], gr = g[1];
      if (h_prev != kNoValue) {
        std::vector<ValueId> hzr = split(c_.add_node(Op::MatMul, nm("HR_zr"), {h_prev, d.rt}), 1, 2, nm("HR_parts"));
        gz = add(gz, hzr[0], nm("z_in"));
        gr = add(gr, hzr[1], nm("r_in"));
      }
      ValueId z = act(d.acts[0], clipped(gz, nm("z_in")), nm("z"));
      ValueId r = act(d.acts[0], clipped(gr, nm("r_in")), nm("r"));
      ValueId rec = kNoValue;  // the recurrent term of h's input
      if (linear_before_reset_) {
        // r * (H_{t-1} Rh^T + Rbh)
        ValueId lin = h_prev == kNoValue ? d.rbh : add(c_.add_node(Op::MatMul, nm("HR_h"), {h_prev, d.rht}), d.rbh, nm("HR_h_b"));
        if (lin != kNoValue) rec = c_.add_node(Op::Mul, nm("r_HR_h"), {r, lin});
      } else if (h_prev != kNoValue) {
        // (r * H_{t-1}) Rh^T
        rec = c_.add_node(Op::MatMul, nm("rH_R_h"), {c_.add_node(Op::Mul, nm("rH"), {r, h_prev}), d.rht});
      }
      ValueId hh = act(d.acts[1], clipped(add(g[2], rec, nm("h_in")), nm("h_in")), nm("h_cand"));
      // H = (1 - z) * hh + z * H_{t-1} = hh + z * (H_{t-1} - hh); H_{t-1} = 0: hh - z * hh.
      h_new = h_prev == kNoValue
                  ? c_.add_node(Op::Sub, nm("H"), {hh, c_.add_node(Op::Mul, nm("z_hh"), {z, hh})})
                  : add(hh, c_.add_node(Op::Mul, nm("z_dH"), {z, c_.add_node(Op::Sub, nm("dH"), {h_prev, hh})}), nm("H"));
    } else {
      ValueId gsum = h_prev == kNoValue ? xt : add(xt, c_.add_node(Op::MatMul, nm("HR"), {h_prev, d.rt}), nm("h_in"));
      h_new = act(d.acts[0], clipped(gsum, nm("h_in")), nm("H"));
    }
    const ValueId m = mask(t);
    d.h = hold(m, h_new, h_prev, nm("H_held"));
    return m == kNoValue ? h_new : c_.add_node(Op::Where, nm("Y"), {m, h_new, zero_});
  }

  // The directions' final states [B, H] stacked to [D, B, H] (layout 0) or [B, D, H] (layout 1).
  ValueId stack_states(const std::vector<ValueId>& s, const std::string& what) {
    const int64_t axis = layout_ == 0 ? 0 : 1;
    std::vector<ValueId> parts;
    for (size_t d = 0; d < s.size(); ++d) parts.push_back(unsqueeze(s[d], axis, what + "/d" + std::to_string(d)));
    if (parts.size() == 1) return parts[0];
    return c_.add_node(Op::Concat, what, parts, {{"axis", Attr(axis)}});
  }

  ImportCtx& c_;
  Cell cell_;
  std::string direction_ = "forward";
  int dirs_ = 1;
  int64_t layout_ = 0, hidden_size_ = -1;
  bool linear_before_reset_ = false;
  float clip_ = 0.0f;  // 0: no clip
  std::vector<Activation> acts_;
  int64_t T_ = 0, B_ = 0, H_ = 0;
  ValueId x_ = kNoValue, zero_ = kNoValue, lens_ = kNoValue, clip_min_ = kNoValue, clip_max_ = kNoValue;
  std::vector<ValueId> masks_;
  std::map<int64_t, ValueId> axes_;
  std::string dir_;
};

}  // namespace

void import_LSTM(ImportCtx& c) { Unroll(c, Cell::lstm).run(); }
void import_GRU(ImportCtx& c) { Unroll(c, Cell::gru).run(); }
void import_RNN(ImportCtx& c) { Unroll(c, Cell::rnn).run(); }

}  // namespace onnxdp
