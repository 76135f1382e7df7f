// ONNX import of the math ops that need one (see graph/op_table.h; the others take the default,
// importer/importer.h).
//
// Within opsets 7..27 most math ops changed only their type lists (onnxdp's shape rules check
// dtypes), so their import has nothing to normalise; Gemm-7..10 require C and Gemm-11+ make it
// optional, both broadcasting C one way. The exceptions:
//   Clip < 11          min / max attributes -> constant inputs 1 / 2
//   Softmax, LogSoftmax < 13: axis defaulted to 1 and the input was coerced to 2-D
//                      [prod(dims[:axis]), prod(dims[axis:])]; rewritten to the opset-13 form.
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "importer/importer.h"

namespace onnxdp {

namespace {

// Softmax-1 / LogSoftmax-1 / -11 (opset < 13): y = reshape(softmax(flatten(x, axis) along its
// last dim), shape(x)), the axis defaulting to 1. That is the opset-13 op along `axis` whenever
// axis is the last dim, which is what exporters emit (torch: axis = rank - 1), so:
//   axis == -1, or axis == rank - 1 where x's rank is known now  -> keep the node, axis = -1
//   otherwise -> Shape(x), Flatten(x, axis), <op>(axis = -1), and this node becomes the Reshape.
void import_legacy_softmax(ImportCtx& c) {
  if (c.opset >= 13) return;
  int64_t axis = c.node.has("axis") ? c.node.i("axis") : 1;
  if (c.node.inputs.empty() || c.node.inputs[0] == kNoValue) c.fail("input 0 is missing");
  ValueId x = c.node.inputs[0];
  const Value& xv = c.graph.value(x);
  bool rank_known = xv.producer < 0;  // graph inputs, initializers, constants carry their shape
  if (axis == -1 || (rank_known && axis == int64_t(xv.shape.size()) - 1)) {
    c.node.attrs["axis"] = int64_t(-1);
    return;
  }
  Op op = c.node.op;
  ValueId shape = c.add_node(Op::Shape, "input_shape", {x}, {});
  ValueId flat = c.add_node(Op::Flatten, "flatten", {x}, {{"axis", Attr(axis)}});
  ValueId soft = c.add_node(op, std::string(op_name(op)) + "_2d", {flat}, {{"axis", Attr(int64_t(-1))}});
  c.node.op = Op::Reshape;
  c.node.inputs = {soft, shape};
  c.node.attrs = {{"allowzero", Attr(int64_t(1))}};
}

}  // namespace

// Clip-6 (opset < 11): float attributes min / max -> f32 scalar constant inputs 1 / 2 (the shape
// rule and kernel accept f32 bounds for an f64 input). An absent attribute leaves its input absent.
void import_Clip(ImportCtx& c) {
  if (c.opset >= 11) return;
  for (auto [attr, index] : {std::pair<const char*, size_t>{"min", 1}, {"max", 2}}) {
    auto it = c.node.attrs.find(attr);
    if (it == c.node.attrs.end()) continue;
    const float* v = std::get_if<float>(&it->second);
    if (!v) c.fail("attribute '{}' must be a float", attr);
    ValueId k = c.add_constant(Tensor::scalar_f32(*v), attr);
    c.node.attrs.erase(it);
    if (c.node.inputs.size() <= index) c.node.inputs.resize(index + 1, kNoValue);
    c.node.inputs[index] = k;
  }
}

void import_Softmax(ImportCtx& c) { import_legacy_softmax(c); }
void import_LogSoftmax(ImportCtx& c) { import_legacy_softmax(c); }

// onnxdp's own, made by graph/passes/fuse_epilogues.cpp: a model naming it fails.
void import_FusedGemm(ImportCtx& c) { c.fail("internal onnxdp op, not importable"); }
void import_FusedMatMul(ImportCtx& c) { c.fail("internal onnxdp op, not importable"); }
void import_MaskedSoftmax(ImportCtx& c) { c.fail("internal onnxdp op, not importable"); }
void import_FusedAttention(ImportCtx& c) { c.fail("internal onnxdp op, not importable"); }

// ---- Einsum (composite, graph/op_table.h) -----------------------------------------------------
//
// The equation is lowered at import to table rows, with every size read from Shape(...) slices of
// the tensors involved (folded to constants at load, when the shapes are static):
//   - a letter in one operand only that the output and the later operands lack is summed out
//     (ReduceSum) before any product;
//   - operands fold left to right: for the pair (A, B) the letters are batch (in both, needed later),
//     contracted (in both, not needed later), left-only and right-only. A is transposed to
//     [batch, left, contracted] and viewed [batch.., M, K], B to [batch, contracted, right] viewed
//     [batch.., K, N]; MatMul gives [batch.., M, N], viewed [batch.., left.., right..]. Transposes
//     and reshapes that would not move anything are left out;
//   - the result is transposed to the output's order.
// The ellipsis '...' is flattened into one dim per operand (its letter is '.' here) and restored in
// the output. Operands' ellipsis dims broadcast numpy-style; where the ellipsis is not an operand's
// first subscript, its dims must equal the broadcast result or all be 1 (checked at load: a helper
// Expand fails naming this node otherwise). An explicit output must keep the '...' (as numpy,
// which refuses to sum over it).
// Implicit output (no '->'): '...' if any operand has it, then the letters that appear exactly
// once, sorted (ONNX, numpy). A letter repeated within one operand (a diagonal, 'ii->i') first
// takes the diagonal (a mask from OneHot, then ReduceSum).

namespace {

constexpr char kEllipsis = '.';

// A value of the lowering: an existing value (>= 0) or output -(i + 1) of planned node i.
using Ref = int64_t;

struct PlannedNode {
  Op op;
  std::string suffix;
  std::vector<Ref> inputs;
  std::map<std::string, Attr> attrs;
};

// An operand (or partial product) and its letters, one per dim.
struct Term {
  Ref v;
  std::string letters;
};

class EinsumLowering {
 public:
  explicit EinsumLowering(ImportCtx& c) : c_(c) {}

  Ref node(Op op, const std::string& suffix, std::vector<Ref> inputs, std::map<std::string, Attr> attrs = {}) {
    plan_.push_back({op, suffix, std::move(inputs), std::move(attrs)});
    return -Ref(plan_.size());
  }
  Ref ints(const std::vector<int64_t>& v, const std::string& hint) {
    return Ref(c_.add_constant(Tensor::from_i64(v), hint));
  }
  // Shape(v)[start:end]; end 0: to the end.
  Ref dims(Ref v, int64_t start, int64_t end = 0) {
    std::map<std::string, Attr> a{{"start", Attr(start)}};
    if (end) a["end"] = Attr(end);
    return node(Op::Shape, "dims", {v}, std::move(a));
  }
  // [product of dims start..end-1 of t] as a 1-element int64 tensor ([1] for none).
  Ref product(const Term& t, int64_t start, int64_t end) {
    if (start == end) return ints({1}, "one");
    Ref p = dims(t.v, start, start + 1);
    for (int64_t d = start + 1; d < end; ++d) p = node(Op::Mul, "size", {p, dims(t.v, d, d + 1)});
    return p;
  }
  Ref concat(std::vector<Ref> parts) {
    if (parts.size() == 1) return parts[0];
    return node(Op::Concat, "shape", std::move(parts), {{"axis", Attr(int64_t(0))}});
  }

  // Sums out the letters of t that `keep` lacks.
  void sum_out(Term& t, const std::string& keep) {
    std::vector<int64_t> axes;
    std::string left;
    for (size_t d = 0; d < t.letters.size(); ++d) {
      if (keep.find(t.letters[d]) == std::string::npos) axes.push_back(int64_t(d));
      else left += t.letters[d];
    }
    if (axes.empty()) return;
    t.v = node(Op::ReduceSum, "sum", {t.v, ints(axes, "axes")}, {{"keepdims", Attr(int64_t(0))}});
    t.letters = left;
  }
  // Transposes t to the letter order `order` (a permutation of its letters).
  void arrange(Term& t, const std::string& order) {
    if (order == t.letters) return;
    std::vector<int64_t> perm;
    for (char l : order) perm.push_back(int64_t(t.letters.find(l)));
    t.v = node(Op::Transpose, "transpose", {t.v}, {{"perm", Attr(perm)}});
    t.letters = order;
  }

  // A letter at positions p < q of t (a diagonal, 'ii'): t * eye(n) (1 where the two indices are
  // equal; n from Shape, the eye from OneHot(Range(n)), folded at load), summed over q. Repeated
  // until every letter of t is distinct.
  void diagonals(Term& t) {
    for (size_t q = 0; q < t.letters.size(); ++q) {
      const size_t p = t.letters.find(t.letters[q]);
      if (p == q) continue;
      const int64_t r = int64_t(t.letters.size());
      Ref n = dims(t.v, int64_t(q), int64_t(q) + 1);
      Ref range = node(Op::Range, "diagonal_range", {Ref(c_.add_constant(Tensor::scalar_i64(0), "zero")), n,
                                                     Ref(c_.add_constant(Tensor::scalar_i64(1), "one"))});
      Tensor off_on(DType::f32, {2});
      off_on.as<float>()[0] = 0, off_on.as<float>()[1] = 1;
      Ref values = node(Op::CastLike, "diagonal_values", {Ref(c_.add_constant(off_on, "off_on")), t.v});
      Ref eye = node(Op::OneHot, "diagonal_eye", {range, n, values});  // [n, n]
      std::vector<int64_t> others;
      for (int64_t d = 0; d < r; ++d)
        if (d != int64_t(p) && d != int64_t(q)) others.push_back(d);
      if (!others.empty()) eye = node(Op::Unsqueeze, "diagonal_mask", {eye, ints(others, "axes")});
      Ref masked = node(Op::Mul, "diagonal_masked", {t.v, eye});
      t.v = node(Op::ReduceSum, "diagonal", {masked, ints({int64_t(q)}, "axis")}, {{"keepdims", Attr(int64_t(0))}});
      t.letters.erase(q, 1);
      --q;
    }
  }

  // The product of a and b over `contract`, keeping the other letters: [batch, left, right].
  Term combine(Term a, Term b, const std::string& keep) {
    std::string batch, left, contracted, right;
    for (char l : a.letters) {
      const bool in_b = b.letters.find(l) != std::string::npos;
      if (!in_b) left += l;
      else if (keep.find(l) != std::string::npos) batch += l;
      else contracted += l;
    }
    for (char l : b.letters)
      if (a.letters.find(l) == std::string::npos) right += l;
    arrange(a, batch + left + contracted);
    arrange(b, batch + contracted + right);
    const int64_t nb = int64_t(batch.size()), nl = int64_t(left.size()), nk = int64_t(contracted.size()),
                  nr = int64_t(right.size());
    Ref av = a.v, bv = b.v;
    if (nl != 1 || nk != 1) {  // A as [batch.., M, K]
      std::vector<Ref> s;
      if (nb) s.push_back(dims(a.v, 0, nb));
      s.push_back(product(a, nb, nb + nl));
      s.push_back(product(a, nb + nl, nb + nl + nk));
      av = node(Op::Reshape, "lhs_matrix", {a.v, concat(s)});
    }
    if (nk != 1 || nr != 1) {  // B as [batch.., K, N]
      std::vector<Ref> s;
      if (nb) s.push_back(dims(b.v, 0, nb));
      s.push_back(product(b, nb, nb + nk));
      s.push_back(product(b, nb + nk, nb + nk + nr));
      bv = node(Op::Reshape, "rhs_matrix", {b.v, concat(s)});
    }
    Term r{node(Op::MatMul, "matmul", {av, bv}), batch + left + right};
    if (nl != 1 || nr != 1) {  // [batch.., M, N] -> [batch.., left.., right..]
      std::vector<Ref> s;
      if (nb) s.push_back(dims(r.v, 0, nb));
      if (nl) s.push_back(dims(a.v, nb, nb + nl));
      if (nr) s.push_back(dims(b.v, nb + nk));
      r.v = node(Op::Reshape, "product", {r.v, s.empty() ? ints({}, "scalar") : concat(s)});
    }
    return r;
  }

  // Adds the planned nodes; the last one becomes the Einsum node itself (an Identity when nothing
  // was planned: the equation is a copy).
  void finish(Ref result) {
    if (plan_.empty() || result != -Ref(plan_.size())) result = node(Op::Identity, "copy", {result});
    std::vector<ValueId> ids(plan_.size(), kNoValue);
    auto id = [&](Ref r) { return r >= 0 ? ValueId(r) : ids[size_t(-r - 1)]; };
    for (size_t i = 0; i + 1 < plan_.size(); ++i) {
      std::vector<ValueId> in;
      for (Ref r : plan_[i].inputs) in.push_back(id(r));
      ids[i] = c_.add_node(plan_[i].op, plan_[i].suffix, std::move(in), plan_[i].attrs);
    }
    const PlannedNode& last = plan_.back();
    c_.node.op = last.op;
    c_.node.inputs.clear();
    for (Ref r : last.inputs) c_.node.inputs.push_back(id(r));
    c_.node.attrs = last.attrs;
  }

 private:
  ImportCtx& c_;
  std::vector<PlannedNode> plan_;
};

// One side of the equation's terms: letters, with '...' as kEllipsis. A letter may repeat in an
// operand (a diagonal), not in the output.
std::string parse_term(const ImportCtx& c, const std::string& eq, const std::string& term, const char* what,
                       bool repeats = false) {
  std::string out;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == '.') {
      if (term.compare(i, 3, "...") != 0 || out.find(kEllipsis) != std::string::npos)
        c.fail("equation '{}': {} '{}' has a '.' that is not one '...'", eq, what, term);
      out += kEllipsis;
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(ch))) {
      if (!repeats && out.find(ch) != std::string::npos)
        c.fail("equation '{}': letter '{}' repeats in {} '{}'", eq, ch, what, term);
      out += ch;
    } else {
      c.fail("equation '{}': '{}' in {} '{}' is not a letter", eq, ch, what, term);
    }
  }
  return out;
}

}  // namespace

void import_Einsum(ImportCtx& c) {
  auto it = c.node.attrs.find("equation");
  const std::string* eq_attr = it == c.node.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
  if (!eq_attr) c.fail("attribute 'equation' (a string) is required");
  std::string eq;
  for (char ch : *eq_attr)
    if (!std::isspace(static_cast<unsigned char>(ch))) eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(c, *eq_attr, lhs.substr(start, comma - start), "operand", true));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.node.inputs.size())
    c.fail("equation '{}' has {} operands, the node has {} inputs", *eq_attr, terms.size(), c.node.inputs.size());
  for (size_t k = 0; k < terms.size(); ++k)
    if (c.node.inputs[k] == kNoValue) c.fail("input {} is missing", k);

  bool any_ellipsis = false;
  std::map<char, int> count;
  for (const std::string& t : terms)
    for (char l : t) {
      any_ellipsis = any_ellipsis || l == kEllipsis;
      if (l != kEllipsis) ++count[l];
    }
  std::string out;
  if (arrow == std::string::npos) {  // implicit: '...', then the letters seen once, sorted
    if (any_ellipsis) out += kEllipsis;
    for (const auto& [l, n] : count)
      if (n == 1) out += l;
  } else {
    out = parse_term(c, *eq_attr, eq.substr(arrow + 2), "the output");
    for (char l : out) {
      if (l == kEllipsis && !any_ellipsis) c.fail("equation '{}': the output has '...', no operand has", *eq_attr);
      if (l != kEllipsis && !count.count(l)) c.fail("equation '{}': output letter '{}' is in no operand", *eq_attr, l);
    }
    // numpy refuses this too (unless the ellipsis covers no dims): the output must keep '...'.
    if (any_ellipsis && out.find(kEllipsis) == std::string::npos)
      c.fail("equation '{}': the operands have '...', the output does not (summing over it is not supported)", *eq_attr);
  }
  c.node.attrs.erase("equation");

  EinsumLowering low(c);
  std::vector<Term> ops;
  for (size_t k = 0; k < terms.size(); ++k) ops.push_back({Ref(c.node.inputs[k]), terms[k]});

  // The ellipsis: each operand's dims under it flattened into one; E, the broadcast of their shapes
  // (probed with ConstantOfShape + Add), restores them in the output. With several operands, one
  // whose ellipsis leads ('...ij') is first expanded to E (numpy broadcasting right-aligns it);
  // another must hold E's elements or one (checked by a helper Expand), so that the flattened
  // dims pair up element for element.
  struct Ellipsis {
    size_t operand;
    int64_t before, after;
    Ref probe;
  };
  std::vector<Ellipsis> ells;
  for (size_t k = 0; k < ops.size(); ++k) {
    const size_t at = ops[k].letters.find(kEllipsis);
    if (at == std::string::npos) continue;
    const int64_t before = int64_t(at), after = int64_t(ops[k].letters.size() - at - 1);
    Ref e = after ? low.dims(ops[k].v, before, -after) : low.dims(ops[k].v, before);
    ells.push_back({k, before, after, low.node(Op::ConstantOfShape, "ellipsis_probe", {e})});
  }
  Ref ellipsis_shape = -1, common = -1;
  if (!ells.empty()) {
    common = ells[0].probe;
    for (size_t k = 1; k < ells.size(); ++k) common = low.node(Op::Add, "ellipsis_broadcast", {common, ells[k].probe});
    ellipsis_shape = low.node(Op::Shape, "ellipsis_shape", {common});
  }
  auto numel_1d = [&](Ref probe) {  // [number of elements of probe]
    return low.node(Op::Unsqueeze, "ellipsis_size", {low.node(Op::Size, "ellipsis_numel", {probe}), low.ints({0}, "axis0")});
  };
  for (const Ellipsis& el : ells) {
    Term& t = ops[el.operand];
    Ref size = numel_1d(el.probe);
    if (ells.size() > 1 && el.before == 0) {
      std::vector<Ref> s{ellipsis_shape};
      if (el.after) s.push_back(low.dims(t.v, -el.after));
      t.v = low.node(Op::Expand, "broadcast_ellipsis", {t.v, low.concat(s)});
      size = numel_1d(common);
    } else if (ells.size() > 1) {
      Ref flat = low.node(Op::Reshape, "ellipsis_flat", {el.probe, low.ints({-1}, "minus_one")});
      low.node(Op::Expand, "ellipsis_check", {flat, numel_1d(common)});
    }
    std::vector<Ref> s;
    if (el.before) s.push_back(low.dims(t.v, 0, el.before));
    s.push_back(size);
    if (el.after) s.push_back(low.dims(t.v, -el.after));
    t.v = low.node(Op::Reshape, "flatten_ellipsis", {t.v, low.concat(s)});
  }

  // Letters still needed after operand k: the output's and those of operands k+1...
  auto needed_after = [&](size_t k) {
    std::string keep = out;
    for (size_t j = k + 1; j < ops.size(); ++j) keep += ops[j].letters;
    return keep;
  };
  for (Term& t : ops) low.diagonals(t);

  Term cur = ops[0];
  for (size_t k = 1; k < ops.size(); ++k) {
    const std::string keep = needed_after(k);
    low.sum_out(cur, keep + ops[k].letters);
    low.sum_out(ops[k], keep + cur.letters);
    cur = low.combine(cur, ops[k], keep);
  }
  low.sum_out(cur, out);
  low.arrange(cur, out);
  const size_t at = out.find(kEllipsis);
  if (at != std::string::npos) {  // [.., flattened, ..] -> [.., E.., ..]
    std::vector<Ref> s;
    if (at) s.push_back(low.dims(cur.v, 0, int64_t(at)));
    s.push_back(ellipsis_shape);
    if (at + 1 < out.size()) s.push_back(low.dims(cur.v, int64_t(at) + 1));
    cur.v = low.node(Op::Reshape, "restore_ellipsis", {cur.v, low.concat(s)});
  }
  low.finish(cur.v);
}

}  // namespace onnxdp
