"""Flax (nnx) models for the zoo, exported by jax2onnx with its default settings, with plain JAX
SGD and optax.adamw per-step training losses as the reference.

Re-make them (jax, flax, optax, jax2onnx, onnxruntime):
    /work/main/.venvs/jax/bin/python models/zoo/make_jax.py   # flax_mlp, flax_attention, flax_causal_lm
    /work/main/.venvs/jax/bin/python models/zoo/make_jax.py flax_attention  # only some
The output is the same on every run with the same versions (fixed seeds, fixed zip timestamps).

Choices, each for a reason:
- Weights are Flax's own initialisers from nnx.Rngs(0), except that biases start from small random
  values (normal, stddev 0.1) and LayerNorm scales from 1 + normal(0.1) instead of zeros and ones:
  jax2onnx stores every parameter as an anonymous initializer (`const_3`, `kernel2d_0`, ...), so the
  zoo maps parameters to initializers by value, and zeros or ones shared by several parameters
  would be ambiguous. (jax2onnx keeps zero biases: this is not needed to keep them in the file.)
- No dropout (framework RNG cannot be matched).
- Loss: optax.softmax_cross_entropy_with_integer_labels(logits, label).mean(), onnxdp's
  cross_entropy. The loss of each batch is taken before its update (jax.value_and_grad).
- Optimizers: plain SGD (params - lr * grads, as jax.tree.map) and optax.adamw(lr) with its
  defaults b1 0.9, b2 0.999, eps 1e-8, eps_root 0, weight_decay 1e-4 on every parameter (mask None).
  optax's adam update m_hat / (sqrt(v_hat) + eps) and its decoupled decay (lr * wd * p, from the
  parameter before the step) are torch's AdamW, so onnxdp gets `--optimizer adamw --weight-decay 1e-4`.
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import flax  # noqa: E402
from flax import nnx  # noqa: E402
import jax2onnx  # noqa: E402
from jax2onnx import to_onnx  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfjax_common import check_onnxruntime, map_by_value, onnx_opset, teacher_data, write_zoo  # noqa: E402

BATCH, STEPS = 8, 16
N = BATCH * STEPS

bias_init = nnx.initializers.normal(0.1)


def scale_init(key, shape, dtype=jnp.float32):
    return 1.0 + 0.1 * jax.random.normal(key, shape, dtype)


class MLP(nnx.Module):
    """[B, 12] -> Linear 32 + ReLU -> Linear 32 + ReLU -> Linear 5."""

    def __init__(self, rngs):
        self.l1 = nnx.Linear(12, 32, bias_init=bias_init, rngs=rngs)
        self.l2 = nnx.Linear(32, 32, bias_init=bias_init, rngs=rngs)
        self.l3 = nnx.Linear(32, 5, bias_init=bias_init, rngs=rngs)

    def __call__(self, x):
        return self.l3(nnx.relu(self.l2(nnx.relu(self.l1(x)))))


class AttentionBlock(nnx.Module):
    """[B, T=6, D=8] -> pre-LN transformer block (x + MHA(LN(x)) with 2 heads, softmax attention;
    x + MLP(LN(x)) with Linear 8->16, gelu (jax.nn.gelu's default tanh form), Linear 16->8) ->
    mean over T -> Linear 5."""

    def __init__(self, rngs, d=8, heads=2):
        self.ln1 = nnx.LayerNorm(d, scale_init=scale_init, bias_init=bias_init, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False, dropout_rate=0.0,
                                           bias_init=bias_init, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d, scale_init=scale_init, bias_init=bias_init, rngs=rngs)
        self.fc1 = nnx.Linear(d, 16, bias_init=bias_init, rngs=rngs)
        self.fc2 = nnx.Linear(16, d, bias_init=bias_init, rngs=rngs)
        self.head = nnx.Linear(d, 5, bias_init=bias_init, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc2(nnx.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(axis=1))


class CausalLM(nnx.Module):
    """tokens int32 [B, T=8], vocabulary 16 -> nnx.Embed 16 + a learned position table (nnx.Param
    [8, 16]) -> x + causal MHA(LN(x)) (2 heads, mask nnx.make_causal_mask) -> LN -> Linear 16:
    next-token logits [B, 8, 16]."""

    def __init__(self, rngs, vocab=16, d=16, t=8):
        self.embed = nnx.Embed(vocab, d, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (t, d)))
        self.ln1 = nnx.LayerNorm(d, scale_init=scale_init, bias_init=bias_init, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=2, in_features=d, decode=False, dropout_rate=0.0,
                                           bias_init=bias_init, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d, scale_init=scale_init, bias_init=bias_init, rngs=rngs)
        self.head = nnx.Linear(d, vocab, bias_init=bias_init, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens) + self.pos[None]
        x = x + self.attn(self.ln1(x), mask=nnx.make_causal_mask(tokens))
        return self.head(self.ln2(x))


def progressions(rng, n, t=8, vocab=16):
    """n sequences of t + 1 tokens: arithmetic progressions mod vocab (random start and step).
    Returns (tokens int32 [n, t], next tokens int64 [n, t])."""
    start = rng.integers(0, vocab, size=(n, 1))
    step = rng.integers(1, 4, size=(n, 1))
    seq = (start + step * np.arange(t + 1)[None]) % vocab
    return seq[:, :t].astype(np.int32), seq[:, 1:].astype(np.int64)


MODELS = {
    "flax_mlp": (MLP, (12,), 3,
                 "flax.nnx MLP [B,12]: Linear 32, relu, Linear 32, relu, Linear 5; biases normal(0.1)"),
    "flax_attention": (AttentionBlock, (6, 8), 4,
                       "flax.nnx pre-LN transformer block on [B,6,8]: LayerNorm, MultiHeadAttention (2 heads, "
                       "softmax, no mask), residual, LayerNorm, Linear 16, gelu (tanh form), Linear 8, residual, "
                       "mean over the 6 positions, Linear 5; biases normal(0.1), LayerNorm scales 1+normal(0.1)"),
    "flax_causal_lm": (CausalLM, (8,), 5,
                       "flax.nnx causal LM on int32 tokens [B,8], vocabulary 16: Embed 16 + learned positions "
                       "(nnx.Param [8,16]), x + MultiHeadAttention(LayerNorm(x)) with 2 heads and "
                       "nnx.make_causal_mask, LayerNorm, Linear 16 -> next-token logits [B,8,16]; "
                       "data: arithmetic progressions mod 16; biases normal(0.1), LayerNorm scales 1+normal(0.1)"),
}


def path_name(path):
    """['attn']['value']['kernel'].value -> 'attn.value.kernel' (the trailing attribute `.value` is
    the nnx.Variable's payload, not part of the name)."""
    return ".".join(str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey))


def loss_fn(graphdef, params, rest, x, y):
    logits = nnx.merge(graphdef, params, rest)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def train(graphdef, params, rest, x, y, run):
    lr = run["lr"]
    grad = jax.jit(jax.value_and_grad(lambda p, xb, yb: loss_fn(graphdef, p, rest, xb, yb)))
    opt = optax.adamw(lr) if run["name"] == "adamw" else None
    state = opt.init(params) if opt else None
    losses = []
    for i in range(STEPS):
        xb, yb = x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]
        loss, g = grad(params, xb, yb)
        losses.append(float(loss))
        if opt:
            updates, state = opt.update(g, state, params)
            params = optax.apply_updates(params, updates)
        else:
            params = jax.tree.map(lambda p, gp: p - lr * gp, params, g)
    return losses


RUNS = [
    {"name": "sgd", "lr": 0.05, "args": ["--optimizer", "sgd", "--lr", "0.05"]},
    {"name": "adamw", "lr": 0.003, "args": ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.0001"]},
]


def make(name):
    cls, shape, seed, source = MODELS[name]
    model = cls(nnx.Rngs(0))
    if cls is CausalLM:
        iname = "tokens"
        x, y = progressions(np.random.default_rng(seed), N)
    else:
        iname = "x"
        x, y = teacher_data(np.random.default_rng(seed), shape, 5, N)
    spec = jax.ShapeDtypeStruct(("B",) + shape, x.dtype)
    proto = to_onnx(model, [spec], input_names=[iname], output_names=["logits"])  # default opset
    check_onnxruntime(proto, {iname: x[:16]}, np.asarray(model(jnp.asarray(x[:16]))), "Flax")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    mapping = map_by_value(proto, [(path_name(p), np.asarray(v)) for p, v in leaves])
    runs = []
    for run in RUNS:
        losses = train(graphdef, params, rest, jnp.asarray(x), jnp.asarray(y), run)
        runs.append({"name": run["name"],
                     "args": ["--loss", "cross_entropy", "--label", "label", "--batch-size", str(BATCH),
                              "--steps", str(STEPS), "--no-shuffle"] + run["args"],
                     "losses": losses})
    info = {"source": source,
            "framework": f"jax {jax.__version__} / flax {flax.__version__} / optax {optax.__version__}",
            "exporter": f"jax2onnx {jax2onnx.__version__ if hasattr(jax2onnx, '__version__') else version('jax2onnx')}"
                        f" (to_onnx on the nnx module, default opset {onnx_opset(proto)})"}
    write_zoo(name, proto, {iname: x, "label": y}, info, runs, mapping)


def version(pkg):
    from importlib.metadata import version as v
    return v(pkg)


if __name__ == "__main__":
    for name in sys.argv[1:] or list(MODELS):
        make(name)
