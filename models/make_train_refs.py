#!/usr/bin/env python3
"""PyTorch's per-step training losses for onnxdp's sample models: models/<name>/train_reference.npz.

    python3 models/make_train_refs.py            # mlp, tiny_lm, mlp_dynamo
    python3 models/make_train_refs.py mlp

For each model the torch module of make_models.py is built and given the exact initial weights
stored in model.onnx (by initializer name), then trained for STEPS steps on the first STEPS*BATCH
samples of model.npz in file order (onnxdp: --no-shuffle --batch-size BATCH), in train mode, with
F.cross_entropy over every position (logits [..., C] reshaped to [-1, C]), once with
torch.optim.SGD(lr=SGD_LR) and once with torch.optim.AdamW(lr=ADAMW_LR) (default weight decay 0.01).
The file holds sgd_losses and adamw_losses (loss of each step's batch before that step's update)
and the settings used. Python makes reference values only; onnxdp never runs it.
"""
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models as mm  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 20
BATCH = 32
SGD_LR = 0.05
ADAMW_LR = 1e-3

MODULES = {"mlp": (mm.MLP, "x"), "mlp_dynamo": (mm.MLP, "x"), "tiny_lm": (mm.TinyLM, "tokens")}


def load_module(name):
    cls, input_name = MODULES[name]
    model = cls()
    onnx_model = onnx.load(os.path.join(HERE, name, "model.onnx"))
    inits = {i.name: torch.from_numpy(onnx.numpy_helper.to_array(i).copy()) for i in onnx_model.graph.initializer}
    state = model.state_dict()
    for key in state:
        if key not in inits:
            raise SystemExit(f"{name}: initializer {key} not found in model.onnx")
        state[key] = inits[key]
    model.load_state_dict(state)
    return model, input_name


def losses(name, make_opt):
    torch.manual_seed(0)
    model, input_name = load_module(name)
    model.train()
    data = np.load(os.path.join(HERE, name, "model.npz"))
    x_all = torch.from_numpy(data[input_name])
    y_all = torch.from_numpy(data["label"])
    opt = make_opt(model.parameters())
    out = []
    for step in range(STEPS):
        x = x_all[step * BATCH:(step + 1) * BATCH]
        y = y_all[step * BATCH:(step + 1) * BATCH]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        out.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return np.array(out, dtype=np.float64)


def main(names):
    for name in names:
        sgd = losses(name, lambda p: torch.optim.SGD(p, lr=SGD_LR))
        adamw = losses(name, lambda p: torch.optim.AdamW(p, lr=ADAMW_LR))
        path = os.path.join(HERE, name, "train_reference.npz")
        np.savez(path, sgd_losses=sgd, adamw_losses=adamw, steps=np.int64(STEPS), batch_size=np.int64(BATCH),
                 sgd_lr=np.float64(SGD_LR), adamw_lr=np.float64(ADAMW_LR))
        print(f"{name}: sgd {sgd[0]:.4f} -> {sgd[-1]:.4f}, adamw {adamw[0]:.4f} -> {adamw[-1]:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["mlp", "tiny_lm", "mlp_dynamo"])
