#!/usr/bin/env python3
"""The model `onnxdp train --save` writes for a legacy export whose tied embedding onnxdp trains as
one tensor (tests/fixtures/ties: the folded transpose became a Transpose node, the deduplicated
parameters their own initializers) loads in ONNX Runtime, with outputs equal to `onnxdp run`'s.

    saved_tied_model_ort.py ONNXDP_BINARY
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "ties")


def main():
    onnxdp = sys.argv[1]
    model, data = os.path.join(FIXTURE, "model.onnx"), os.path.join(FIXTURE, "data.npz")
    with tempfile.TemporaryDirectory() as tmp:
        saved, out = os.path.join(tmp, "trained.onnx"), os.path.join(tmp, "out.npz")
        subprocess.run([onnxdp, "train", model, "--data", data, "--label", "label", "--steps", "6", "--batch-size",
                        "4", "--lr", "0.2", "--quiet", "--save", saved, "--output-dir", os.path.join(tmp, "run")],
                       check=True)
        subprocess.run([onnxdp, "run", saved, "--data", data, "--out", out], check=True)
        mine = np.load(out)["logits"]
        feeds = {"input_ids": np.load(data)["input_ids"]}
        theirs = ort.InferenceSession(saved, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        untrained = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    err, moved = np.max(np.abs(mine - theirs)), np.max(np.abs(theirs - untrained))
    print(f"ties: logits: max absolute difference onnxdp run vs ONNX Runtime {err:.2e}; "
          f"trained vs untrained outputs differ by up to {moved:.3f}")
    ok = bool(np.allclose(mine, theirs, rtol=1e-4, atol=1e-5)) and moved > 1e-3
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
