#!/usr/bin/env python3
"""The zero biases torch's dynamo exporter dropped (tests/fixtures/trainability/dynamo_vit.onnx: a
patch-embedding Conv's, nn.MultiheadAttention's out_proj's, the classifier's) are restored by onnxdp:
before training `onnxdp run` equals PyTorch's logits; `train --save` writes them, trained, under
their own names, and ONNX Runtime's outputs on the saved model equal `onnxdp run`'s.

    restored_params_ort.py ONNXDP_BINARY
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "trainability")
RESTORED = ["patch.bias", "attn.out_proj.bias", "head.bias"]


def main():
    onnxdp = sys.argv[1]
    model = os.path.join(FIX, "dynamo_vit.onnx")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ref = np.load(os.path.join(FIX, "dynamo_vit_x.npz"))
        out = os.path.join(tmp, "before.npz")
        subprocess.run([onnxdp, "run", model, "--data", os.path.join(FIX, "dynamo_vit_x.npz"), "--out", out], check=True)
        err = np.max(np.abs(np.load(out)["logits"] - ref["logits"]))
        print(f"untrained: onnxdp run vs PyTorch max abs difference {err:.2e}")
        ok &= err < 1e-5

        rng = np.random.default_rng(0)
        data = os.path.join(tmp, "data.npz")
        np.savez(data, x=rng.standard_normal((32, 3, 8, 8)).astype(np.float32), label=rng.integers(0, 5, 32))
        saved = os.path.join(tmp, "trained.onnx")
        subprocess.run([onnxdp, "train", model, "--data", data, "--steps", "4", "--batch-size", "8", "--lr", "0.1",
                        "--optimizer", "sgd", "--quiet", "--save", saved, "--output-dir", os.path.join(tmp, "run")],
                       check=True)
        inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(saved).graph.initializer}
        for name in RESTORED:
            moved = float(np.max(np.abs(inits[name]))) if name in inits else -1.0
            print(f"saved model: {name} {'missing' if moved < 0 else f'trained to max |value| {moved:.3f}'}")
            ok &= moved > 1e-4
        out = os.path.join(tmp, "after.npz")
        subprocess.run([onnxdp, "run", saved, "--data", data, "--out", out], check=True)
        sess = ort.InferenceSession(saved, providers=["CPUExecutionProvider"])
        theirs = sess.run(None, {"x": np.load(data)["x"]})[0]
        err = np.max(np.abs(np.load(out)["logits"] - theirs))
        print(f"trained: onnxdp run vs ONNX Runtime max abs difference {err:.2e}")
        ok &= bool(np.allclose(np.load(out)["logits"], theirs, rtol=1e-4, atol=1e-5))
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
