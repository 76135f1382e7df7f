#!/usr/bin/env python3
"""Every model of the zoo (models/zoo/*/zoo.json): the model `onnxdp train --save` writes after the
first run of its zoo.json loads in ONNX Runtime, ONNX Runtime's outputs on the model's data equal
`onnxdp run`'s within 1e-5 relative (to the output's largest magnitude; a model with training-mode
BatchNormalization run as written, on all rows at once, as ONNX Runtime runs it), and they differ from the
untrained model's (the saved file holds the trained weights). Models in models/zoo/PENDING are
skipped with a message; nothing else is.

    zoo_ort.py ONNXDP_BINARY
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = os.path.join(ROOT, "models", "zoo")


def pending():
    p = {}
    path = os.path.join(ZOO, "PENDING")
    if os.path.exists(path):
        for line in open(path):
            parts = line.split(None, 1)
            if parts and not parts[0].startswith("#"):
                p[parts[0].rstrip(":,")] = parts[1].strip() if len(parts) > 1 else ""
    return p


def check(onnxdp, d, tmp):
    name = os.path.basename(d)
    model, data = os.path.join(d, "model.onnx"), os.path.join(d, "data.npz")
    run = json.load(open(os.path.join(d, "zoo.json")))["runs"][0]
    saved = os.path.join(tmp, name + "_trained.onnx")
    r = subprocess.run([onnxdp, "train", model, "--data", data, *run["args"], "--quiet", "--save", saved,
                        "--output-dir", os.path.join(tmp, name + "_run"), "--report-to", "none"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: onnxdp train failed:\n{r.stdout}{r.stderr}")
        return False
    out = os.path.join(tmp, name + "_out.npz")
    arrays = np.load(data)
    # A file with training-mode BatchNormalization (the TRAINING-mode export): ONNX Runtime runs it
    # as written, with the statistics of the batch it is given (all rows at once), so onnxdp runs it
    # the same way (--train-mode, one batch of all rows) rather than in inference mode.
    as_written = []
    if any(n.op_type == "BatchNormalization" and any(a.name == "training_mode" and a.i for a in n.attribute)
           for n in onnx.load(saved).graph.node):
        as_written = ["--train-mode", "--batch-size", str(len(arrays["label"]))]
    r = subprocess.run([onnxdp, "run", saved, "--data", data, "--out", out, *as_written], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: onnxdp run failed:\n{r.stdout}{r.stderr}")
        return False
    mine = np.load(out)
    try:
        sess = ort.InferenceSession(saved, providers=["CPUExecutionProvider"])
    except Exception as e:  # the saved file does not load: that is the failure this test looks for
        print(f"{name}: ONNX Runtime cannot load the saved model: {e}")
        return False
    feeds = {i.name: arrays[i.name] for i in sess.get_inputs()}
    theirs = sess.run(None, feeds)
    untrained = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    ok = True
    for o, t, u in zip(sess.get_outputs(), theirs, untrained):
        scale = max(float(np.max(np.abs(t))), 1e-30)
        err = float(np.max(np.abs(mine[o.name].astype(np.float64) - t))) / scale
        moved = float(np.max(np.abs(t.astype(np.float64) - u))) / scale
        good = err <= 1e-5 and moved > 1e-4
        print(f"{name}: output {o.name}: onnxdp run vs ONNX Runtime differ by {err:.1e} relative; trained vs untrained "
              f"by {moved:.1e}{'' if good else '  FAILED'}")
        ok &= good
    return ok


def main():
    onnxdp = sys.argv[1]
    skip = pending()
    dirs = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(ZOO, "*", "zoo.json")))
    ok = bool(dirs)
    with tempfile.TemporaryDirectory() as tmp:
        for d in dirs:
            name = os.path.basename(d)
            if name in skip:
                print(f"{name}: SKIPPED (models/zoo/PENDING): {skip[name]}")
                continue
            ok &= check(onnxdp, d, tmp)
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
