"""Keras models for the zoo, exported by tf2onnx with its default settings, with Keras's own
per-step training losses as the reference.

Re-make them (tensorflow-cpu, keras 3, tf2onnx, onnxruntime):
    /work/main/.venvs/tf/bin/python models/zoo/make_keras.py  # keras_cnn, keras_layernorm, keras_attention
    /work/main/.venvs/tf/bin/python models/zoo/make_keras.py keras_cnn  # only some
    /work/main/.venvs/tf/bin/python models/zoo/make_keras.py --erfc-demo /tmp/erfc.onnx
The last writes the keras_layernorm architecture with Keras's default (exact) GELU, which tf2onnx
turns into an `Erfc` node, not an ONNX op: it is not a zoo model, only the demonstration of that
quirk (see models/zoo/README.md, "Keras and JAX").
The output is the same on every run with the same versions (fixed seeds, fixed zip timestamps,
one process per model with PYTHONHASHSEED=0), except keras_attention's model.onnx: tf2onnx's
einsum optimizer (which turns MultiHeadAttention's einsums into MatMul/Reshape/Transpose) names its
int64 shape constants after Python object ids (`einsum140558644876752_ba_ones__114`), and which of
two equal such constants survives its de-duplication follows those names. The nodes, the float
initializers and their names, and every computed value are the same on every run.

Choices, each for a reason:
- Weights are Keras's own initialisers from keras.utils.set_random_seed(0), except that every
  bias (and LayerNormalization's beta) starts from small random values (RandomNormal stddev 0.1)
  instead of zeros: tf2onnx removes an Add of an all-zero bias (and a zero beta) from the graph,
  and nothing in its file records that a parameter was there, so onnxdp could not train it.
  Non-zero biases keep the file complete, and make every parameter identifiable by value.
- No Dropout (framework RNG cannot be matched).
- The reference is Keras's own training: model.compile(optimizer, SparseCategoricalCrossentropy(
  from_logits=True)) and train_on_batch on batch i = rows [i*B, (i+1)*B), whose return value is the
  loss of that batch before its update (the loss tracker is reset on every call). jit_compile=False:
  TensorFlow's own kernels, not XLA's.
- Optimizers: SGD, and SGD with momentum 0.9. Keras's velocity form (v = 0.9 v - lr g; w += v) is
  torch's (b = 0.9 b + g; w -= lr b) with v = -lr b while lr is constant. Keras's Adam cannot be
  expressed with onnxdp's flags: Keras adds epsilon (default 1e-7) to sqrt(v) before the bias
  correction (w -= lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps)), torch and onnxdp after it
  (w -= lr/(1-b1^t) m / (sqrt(v)/sqrt(1-b2^t) + eps), eps 1e-8, no flag), i.e. torch's eps would have
  to be 1e-7/sqrt(1-b2^t), changing every step.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
import tf2onnx  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfjax_common import check_onnxruntime, map_by_value, onnx_opset, teacher_data, write_zoo  # noqa: E402

BATCH, STEPS = 8, 16
N = BATCH * STEPS


def bias_init(seed):
    return keras.initializers.RandomNormal(stddev=0.1, seed=seed)


def keras_cnn():
    """NHWC [B, 8, 8, 3] -> Conv2D 3x3 same (8) + ReLU -> MaxPooling2D 2 -> Conv2D 3x3 same (16)
    + ReLU -> Flatten (NHWC order) -> Dense 10."""
    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 3), name="x")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu", bias_initializer=bias_init(1), name="conv1")(x)
    h = keras.layers.MaxPooling2D(2, name="pool")(h)
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu", bias_initializer=bias_init(2), name="conv2")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    out = keras.layers.Dense(10, bias_initializer=bias_init(3), name="logits")(h)
    model = keras.Model(x, out, name="keras_cnn")
    data_x, y = teacher_data(np.random.default_rng(1), (8, 8, 3), 10, N)
    return model, (None, 8, 8, 3), data_x, y, "Keras 3 functional CNN, NHWC input [B,8,8,3]: Conv2D 3x3 same (8) + ReLU, MaxPooling2D 2, Conv2D 3x3 same (16) + ReLU, Flatten, Dense 10; biases RandomNormal(0.1) (tf2onnx drops zero biases)"


def gelu_erf(t):
    """Keras's exact GELU, 0.5 x erfc(-x / sqrt 2), written with erf: tf2onnx exports Erf, an ONNX op."""
    return 0.5 * t * (1.0 + keras.ops.erf(t * np.float32(1 / np.sqrt(2))))


def keras_layernorm(exact_gelu=False):
    """[B, 12] -> Dense 32 -> LayerNormalization (epsilon 1e-3) -> Dense 32 + GELU (tanh form) ->
    Dense 5."""
    keras.utils.set_random_seed(0)
    x = keras.Input((12,), name="x")
    h = keras.layers.Dense(32, bias_initializer=bias_init(1), name="dense1")(x)
    h = keras.layers.LayerNormalization(beta_initializer=bias_init(4), name="norm")(h)
    gelu = {False: lambda t: keras.activations.gelu(t, approximate=True), True: "gelu", "erf": gelu_erf}[exact_gelu]
    h = keras.layers.Dense(32, activation=gelu, bias_initializer=bias_init(2), name="dense2")(h)
    out = keras.layers.Dense(5, bias_initializer=bias_init(3), name="logits")(h)
    model = keras.Model(x, out, name="keras_layernorm")
    data_x, y = teacher_data(np.random.default_rng(2), (12,), 5, N)
    return model, (None, 12), data_x, y, "Keras 3 functional MLP [B,12]: Dense 32, LayerNormalization (epsilon 1e-3, beta RandomNormal(0.1)), Dense 32 with gelu(approximate=True), Dense 5; biases RandomNormal(0.1) (tf2onnx drops zero biases and a zero beta)"


def keras_attention():
    """tokens [B, 6] (int32, vocabulary 20) -> Embedding 8 -> x + MultiHeadAttention(2 heads, key_dim 4)
    (self-attention, no mask) -> LayerNormalization -> GlobalAveragePooling1D -> Dense 5."""
    keras.utils.set_random_seed(0)
    t = keras.Input((6,), dtype="int32", name="tokens")
    e = keras.layers.Embedding(20, 8, name="embed")(t)
    a = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")(e, e)
    h = keras.layers.LayerNormalization(beta_initializer=bias_init(4), name="norm")(keras.layers.Add(name="residual")([e, a]))
    h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    out = keras.layers.Dense(5, bias_initializer=bias_init(3), name="logits")(h)
    model = keras.Model(t, out, name="keras_attention")
    # MultiHeadAttention takes one bias_initializer for its four projections: with a seeded
    # initializer they would all start equal, and tf2onnx merges equal initializers into one.
    rng = np.random.default_rng(5)
    for v in model.trainable_variables:
        if v.path.startswith("mha/") and v.path.endswith("/bias"):
            v.assign((0.1 * rng.standard_normal(v.shape)).astype(np.float32))
    x = np.random.default_rng(3).integers(0, 20, size=(N, 6)).astype(np.int32)
    w = np.random.default_rng(4).standard_normal((20, 5))
    y = np.argmax(w[x].sum(axis=1), axis=1).astype(np.int64)
    return model, (None, 6), x, y, "Keras 3 functional attention classifier, tokens int32 [B,6], vocabulary 20: Embedding 8, residual MultiHeadAttention (2 heads, key_dim 4, self-attention, no mask), LayerNormalization (beta RandomNormal(0.1)), GlobalAveragePooling1D, Dense 5; biases random (tf2onnx drops zero biases and merges equal ones)"


MODELS = {"keras_cnn": keras_cnn, "keras_layernorm": keras_layernorm, "keras_attention": keras_attention}

RUNS = [
    ("sgd", lambda: keras.optimizers.SGD(learning_rate=0.05), ["--optimizer", "sgd", "--lr", "0.05"]),
    ("momentum", lambda: keras.optimizers.SGD(learning_rate=0.02, momentum=0.9),
     ["--optimizer", "momentum", "--lr", "0.02", "--momentum", "0.9"]),
]


def export(model, shape, name="x", dtype=tf.float32):
    spec = (tf.TensorSpec(shape, dtype, name=name),)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec)  # default opset
    return proto


def ce64(logits, y):
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))


def keras_losses(model, initial, make_opt, x, y):
    model.set_weights(initial)
    model.compile(optimizer=make_opt(), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    losses = []
    for i in range(STEPS):
        xb, yb = x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]
        before = ce64(model(xb, training=False).numpy(), yb)  # an independent look at the same loss
        loss = float(model.train_on_batch(xb, yb))
        if abs(loss - before) > 1e-5 * abs(before):
            raise SystemExit(f"train_on_batch's loss {loss} is not the batch's loss before the update {before}")
        losses.append(loss)
    return losses


def make(name):
    model, shape, x, y, source = MODELS[name]()
    iname = model.inputs[0].name
    proto = export(model, shape, iname, tf.as_dtype(x.dtype))
    check_onnxruntime(proto, {iname: x[:16]}, model(x[:16], training=False).numpy(), "Keras")
    params = [(v.path, v.numpy()) for v in model.trainable_variables]
    mapping = map_by_value(proto, params)
    initial = model.get_weights()
    runs = []
    for run_name, make_opt, args in RUNS:
        losses = keras_losses(model, initial, make_opt, x, y)
        runs.append({"name": run_name,
                     "args": ["--loss", "cross_entropy", "--label", "label", "--batch-size", str(BATCH),
                              "--steps", str(STEPS), "--no-shuffle"] + args,
                     "losses": losses})
    info = {"source": source,
            "framework": f"tensorflow-cpu {tf.__version__} / keras {keras.__version__}",
            "exporter": f"tf2onnx {tf2onnx.__version__} (from_keras, default opset {onnx_opset(proto)})"}
    write_zoo(name, proto, {iname: x, "label": y}, info, runs, mapping)


def erfc_demo(path):
    """Keras's exact GELU exports as Erfc (not an ONNX op); written with erf it exports as Erf and
    computes the same function."""
    model, shape, x, _, _ = keras_layernorm(exact_gelu=True)
    proto = export(model, shape)
    print("exact gelu ops:", sorted({n.op_type for n in proto.graph.node}))
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    workaround, _, _, _, _ = keras_layernorm(exact_gelu="erf")
    workaround.set_weights(model.get_weights())
    proto = export(workaround, shape)
    print("gelu written with erf, ops:", sorted({n.op_type for n in proto.graph.node}))
    check_onnxruntime(proto, {"x": x[:16]}, model(x[:16], training=False).numpy(), "Keras's exact gelu")


if __name__ == "__main__":
    args = sys.argv[1:]
    names = args or list(MODELS)
    if os.environ.get("PYTHONHASHSEED") != "0" or (args[:1] != ["--erfc-demo"] and len(names) > 1):
        # tf2onnx's names depend on the order it walks Python sets (PYTHONHASHSEED) and on a
        # process-wide counter of generated names: one fresh process per model, hash seed 0.
        import subprocess
        env = dict(os.environ, PYTHONHASHSEED="0")
        for job in ([args] if args[:1] == ["--erfc-demo"] else [[n] for n in names]):
            subprocess.run([sys.executable, os.path.abspath(__file__)] + job, env=env, check=True)
    elif args[:1] == ["--erfc-demo"]:
        erfc_demo(args[1])
    else:
        make(names[0])
