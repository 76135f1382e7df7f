#!/usr/bin/env python3
"""The model `onnxdp train --save` writes loads in ONNX Runtime, and ONNX Runtime's outputs on it
equal `onnxdp run`'s (mlp, tiny_lm and rope_lm: graphs without training-mode BatchNorm or Dropout, where
ONNX Runtime and onnxdp's inference mode compute the same thing).

    saved_model_ort.py ONNXDP_BINARY
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(onnxdp, name, tmp):
    model = os.path.join(ROOT, "models", name, "model.onnx")
    saved = os.path.join(tmp, name + "_trained.onnx")
    subprocess.run([onnxdp, "train", model, "--steps", "15", "--batch-size", "32", "--quiet", "--save", saved,
                    "--output-dir", os.path.join(tmp, name + "_run")],
                   check=True)
    ref = np.load(os.path.join(ROOT, "models", name, "reference.npz"))
    out = os.path.join(tmp, name + "_out.npz")
    subprocess.run([onnxdp, "run", saved, "--data", os.path.join(ROOT, "models", name, "reference.npz"), "--out", out],
                   check=True)
    mine = np.load(out)
    sess = ort.InferenceSession(saved, providers=["CPUExecutionProvider"])
    feeds = {i.name: ref[i.name] for i in sess.get_inputs()}
    theirs = sess.run(None, feeds)
    untrained = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    ok = True
    for o, t, u in zip(sess.get_outputs(), theirs, untrained):
        err = np.max(np.abs(mine[o.name] - t))
        moved = np.max(np.abs(t - u))
        print(f"{name}: output {o.name}: max absolute difference onnxdp run vs ONNX Runtime {err:.2e}; "
              f"trained vs untrained outputs differ by up to {moved:.3f}")
        ok &= bool(np.allclose(mine[o.name], t, rtol=1e-4, atol=1e-5)) and moved > 1e-3
    return ok


def main():
    onnxdp = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        ok = all([check(onnxdp, "mlp", tmp), check(onnxdp, "tiny_lm", tmp), check(onnxdp, "rope_lm", tmp)])
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
