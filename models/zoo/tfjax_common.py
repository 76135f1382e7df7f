"""Helpers shared by make_keras.py and make_jax.py (numpy, onnx and the standard library only, so
both the tf and the jax virtualenvs can import it): reproducible .npz files, zoo.json, and the
mapping of framework parameters to the ONNX initializers that hold them (by value)."""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from npz_util import save_npz  # noqa: E402,F401  (models/npz_util.py)

HERE = os.path.dirname(os.path.abspath(__file__))


def model_dir(name):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    return d


def teacher_data(rng, shape, n_classes, n):
    """n float32 samples of `shape` (standard normal) and int64 labels from a random linear teacher,
    so that the classes are learnable."""
    x = rng.standard_normal((n,) + tuple(shape)).astype(np.float32)
    w = rng.standard_normal((int(np.prod(shape)), n_classes))
    y = np.argmax(x.reshape(n, -1).astype(np.float64) @ w, axis=1).astype(np.int64)
    return x, y


# How an exporter may store a parameter: as it is (possibly reshaped: tf2onnx stores LayerNorm's
# gamma [16] as [1, 16], jax2onnx the attention kernels [8, 2, 4] as [8, 8]), or transposed
# (tf2onnx stores a Conv2D kernel HWIO [kh, kw, cin, cout] as ONNX's OIHW [cout, cin, kh, kw]).
LAYOUTS = {
    "same values (reshaped)": lambda a: a.ravel(),
    "transposed HWIO -> OIHW": lambda a: a.transpose(3, 2, 0, 1).ravel() if a.ndim == 4 else None,
    "transposed": lambda a: a.T.ravel() if a.ndim == 2 else None,
}


def map_by_value(model_proto, params):
    """params: [(framework name, float32 array)] in the framework's order. Returns
    [(onnx initializer name, framework name, layout)], one initializer for every parameter, matched
    by exact value. A parameter that no initializer holds (the exporter dropped or folded it) or
    that several hold (equal values) is an error: the zoo's initial values are chosen so that every
    parameter is unique."""
    inits = [(t.name, numpy_helper.to_array(t)) for t in model_proto.graph.initializer]
    out, used = [], set()
    for fname, val in params:
        val = np.asarray(val, dtype=np.float32)
        hits = []
        for iname, arr in inits:
            if arr.dtype != np.float32 or arr.size != val.size:
                continue
            for layout, f in LAYOUTS.items():
                v = f(val)
                if v is not None and np.array_equal(arr.ravel(), v):
                    hits.append((iname, layout))
                    break
        if len(hits) != 1:
            raise SystemExit(f"parameter {fname} {val.shape}: {len(hits)} initializers hold its value {hits}")
        if hits[0][0] in used:
            raise SystemExit(f"initializer {hits[0][0]} holds two parameters")
        used.add(hits[0][0])
        out.append((hits[0][0], fname, hits[0][1]))
    return out


def write_zoo(dirname, model_proto, data, info, runs, mapping):
    d = model_dir(dirname)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model_proto.SerializeToString())
    save_npz(os.path.join(d, "data.npz"), data)
    zoo = dict(info)
    zoo["runs"] = runs
    zoo["trainable"] = [o for o, _, _ in mapping]
    zoo["name_map"] = {o: fw for o, fw, _ in mapping if o != fw}
    with open(os.path.join(d, "zoo.json"), "w") as f:
        json.dump(zoo, f, indent=2)
        f.write("\n")
    size = os.path.getsize(os.path.join(d, "model.onnx"))
    print(f"{dirname}: model.onnx {size} bytes, data.npz {os.path.getsize(os.path.join(d, 'data.npz'))} bytes")
    for o, fw, layout in mapping:
        print(f"  {fw:40s} -> {o}  ({layout})")
    ops = {}
    for n in model_proto.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print("  ops:", ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
    frozen = [t.name for t in model_proto.graph.initializer if t.name not in zoo["trainable"]]
    print("  other initializers (constants):", ", ".join(frozen))
    for r in runs:
        print(f"  {r['name']}: " + " ".join(f"{l:.6f}" for l in r["losses"]))


def check_onnxruntime(model_proto, feeds, expected, what):
    """ONNX Runtime on the exported file against the framework's own forward (float32)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)[0]
    err = float(np.max(np.abs(got - expected)) / (np.max(np.abs(expected)) + 1e-30))
    print(f"  onnxruntime vs {what}: max rel err {err:.2e}")
    if err > 1e-5:
        raise SystemExit(f"onnxruntime disagrees with {what}")


def onnx_opset(model_proto):
    return max(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx"))


__all__ = ["model_dir", "save_npz", "teacher_data", "map_by_value", "write_zoo", "check_onnxruntime",
           "onnx_opset", "onnx"]
