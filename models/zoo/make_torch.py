#!/usr/bin/env python3
"""The PyTorch-module models of onnxdp's zoo (format: models/zoo/README.md), with their data and
PyTorch's own per-step training losses.

    .venvs/torch/bin/python models/zoo/make_torch.py            # every model below
    .venvs/torch/bin/python models/zoo/make_torch.py lstm_legacy

Needs torch, onnxscript (the dynamo exporter), onnx, onnxruntime, numpy. Deterministic: every model
is torch's random init from a fixed seed, every data set numpy's from a fixed seed; re-running
rewrites the same files.

Models (models/zoo/<name>/):
  transformer_encoder_dynamo  nn.TransformerEncoderLayer(d_model 32, nhead 2, dim_feedforward 64,
                              batch_first=True), mean over the sequence, Linear head (4 classes);
                              input x [B, 8, 32]; dynamo exporter
  convnext_legacy / _dynamo   a ConvNeXt block classifier: patchify Conv 3->16 (2x2, stride 2),
                              depthwise 7x7 Conv, LayerNorm over channels (channels-last permute),
                              Linear 16->64, GELU, Linear 64->16, layer-scale gamma, residual; global
                              average pool, Linear head (4 classes); input x [B, 3, 12, 12]; legacy
                              exporter and dynamo exporter
  lstm_legacy / lstm_dynamo   nn.LSTM(8, 16, batch_first=True) over x [B, 6, 8], the last hidden
                              state -> Linear (4 classes); legacy exporter and dynamo exporter
  gru_legacy / gru_dynamo     the same with nn.GRU
  lstm2_bidir_legacy / _dynamo  nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True),
                              the last layer's final states of both directions -> Linear (4 classes)
  resnet_training_legacy      a small ResNet: stem Conv 3->16 3x3 + BatchNorm + ReLU, a BasicBlock
                              16->16 and one 16->32 with stride 2 and a 1x1 Conv + BatchNorm
                              projection, global average pool, Linear (4 classes); input
                              x [B, 3, 8, 8]; legacy exporter in TRAINING mode (docs/EXPORTING.md's
                              recipe for BatchNorm models: the default eval mode writes BatchNorm's
                              inference form); on the CPU its activations run in the channel-blocked
                              layout (graph/passes/block_channels.h)
Dropout probabilities are 0 (nn.TransformerEncoderLayer's dropout=0.0): PyTorch's dropout masks
cannot be matched. ConvNeXt's layer scale starts at 0.5 instead of its 1e-6, so that the block's
weights change the loss enough for a wrong gradient to show.

Exports use the exporters' default settings (what users do today) except input/output names ("x",
"logits") and a dynamic batch axis. The untrained file's outputs are checked against torch's in ONNX
Runtime before anything is written.

References (zoo.json "runs"): the torch module itself, with the same initial weights, trains on
rows [i*B, (i+1)*B) of data.npz at step i (onnxdp: --no-shuffle --batch-size B) with
F.cross_entropy (mean over rows), once with torch.optim.SGD(lr) and once with
torch.optim.AdamW(lr) (betas (0.9, 0.999), eps 1e-8, weight_decay 0.01: onnxdp's defaults). The
losses are each step's batch loss before that step's update.

"trainable": torch's named_parameters (all require grad) as the ONNX file names them: the parameter's
own name when the file has an initializer of that name and value; otherwise the initializer whose
values hold the parameter's (the legacy exporter's Linear weight stored transposed for MatMul, an
LSTM's W / R / B with torch's gates reordered and its two biases concatenated), recorded in
"name_map". A parameter of one repeated value (a zero bias, a LayerNorm weight of ones) without an
initializer of its own name was merged with an equal one or dropped by the dynamo exporter; onnxdp
unties or restores it under the parameter's own name, which the list then holds.
"""
import copy
import json
import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 12
BATCH = 8
ROWS = STEPS * BATCH
CLASSES = 4
SGD_LR = 0.05
ADAMW_LR = 2e-3


# ---- the modules ----------------------------------------------------------------------------------

class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.0,
                                                  batch_first=True)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):                      # x [B, T, 32]
        return self.head(self.encoder(x).mean(dim=1))


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim, layer_scale=0.5):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale * torch.ones(dim))

    def forward(self, x):                      # x [B, C, H, W]
        y = self.dwconv(x).permute(0, 2, 3, 1)  # [B, H, W, C]
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, kernel_size=2, stride=2)
        self.block = ConvNeXtBlock(16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):                      # x [B, 3, 12, 12]
        return self.head(self.block(self.stem(x)).mean(dim=(2, 3)))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.proj is None else self.proj(x)))


class ResNetClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2))
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):                      # x [B, 3, 8, 8]
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


class RNNClassifier(nn.Module):
    def __init__(self, cell, layers=1, bidirectional=False):
        super().__init__()
        self.rnn = cell(8, 16, num_layers=layers, bidirectional=bidirectional, batch_first=True)
        self.directions = 2 if bidirectional else 1
        self.head = nn.Linear(16 * self.directions, CLASSES)

    def forward(self, x):                      # x [B, T, 8]
        _, h = self.rnn(x)
        if isinstance(h, tuple):               # LSTM: (h_n, c_n)
            h = h[0]
        # h_n [layers * directions, B, 16]: the last layer's final state of each direction
        if self.directions == 1:
            return self.head(h[-1])
        return self.head(torch.cat([h[-2], h[-1]], dim=-1))


# ---- export ---------------------------------------------------------------------------------------

def export(model, x, path, dynamo):
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo == "training":  # docs/EXPORTING.md's recipe for BatchNorm models
            torch.onnx.export(model, x, path, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, opset_version=17, input_names=["x"],
                              output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
        elif dynamo:
            prog = torch.onnx.export(model, (x,), dynamo=True, verbose=False, input_names=["x"], output_names=["logits"],
                                     dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
            prog.save(path)
        else:
            torch.onnx.export(model, (x,), path, dynamo=False, input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    model.train()


def check_export(model, path, x, training=False):
    """The untrained file computes what the module computes (ONNX Runtime, all rows; a TRAINING-mode
    file's BatchNorm takes the batch's statistics, as the module in train mode)."""
    probe = copy.deepcopy(model)  # train mode updates the running statistics
    probe.train(training)
    with torch.no_grad():
        want = probe(torch.from_numpy(x)).numpy()
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert err < 1e-5, f"{path}: ONNX Runtime differs from torch by {err:.2e} relative"


def trainable_names(model, path):
    """named_parameters as the file names them (docstring): (trainable list, name_map)."""
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer
             if t.data_type == onnx.TensorProto.FLOAT}
    names, name_map = [], {}
    for pname, p in model.named_parameters():
        v = p.detach().numpy()
        if pname in inits and inits[pname].size == v.size and np.array_equal(inits[pname].reshape(v.shape), v):
            names.append(pname)
            continue
        # An initializer holding every value of p (random values: no two parameters share one). A
        # parameter of one repeated value (a LayerNorm weight of ones) that has no initializer of
        # its own was merged with an equal one by the dynamo exporter: onnxdp unties it under its
        # own name.
        found = [n for n, t in inits.items() if t.size >= v.size and np.isin(v, t).all()]
        if len(np.unique(v)) == 1:
            assert any(t.size == v.size and np.array_equal(t.reshape(-1), v.reshape(-1)) for t in inits.values()) \
                or not np.any(v), f"{path}: parameter {pname} (constant) has no initializer of its value"
            names.append(pname)
        elif len(found) == 1:
            n = found[0]
            if n not in names:
                names.append(n)
            name_map[n] = pname if n not in name_map else name_map[n] + " + " + pname
        else:
            raise AssertionError(f"{path}: no initializer holds parameter {pname}")
    return names, name_map


# ---- PyTorch's training ----------------------------------------------------------------------------

def torch_losses(model, x, y, optimizer):
    model = copy.deepcopy(model)
    model.train()
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=ADAMW_LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for i in range(STEPS):
        xb = torch.from_numpy(x[i * BATCH:(i + 1) * BATCH])
        yb = torch.from_numpy(y[i * BATCH:(i + 1) * BATCH])
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses


def run_args(optimizer):
    lr = SGD_LR if optimizer == "sgd" else ADAMW_LR
    return ["--loss", "cross_entropy", "--label", "label", "--batch-size", str(BATCH), "--steps", str(STEPS),
            "--no-shuffle", "--optimizer", optimizer, "--lr", repr(lr)]


def make(name, build, x_shape, source, dynamo, seed):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(seed)
    model = build()
    rng = np.random.RandomState(seed)
    x = rng.randn(ROWS, *x_shape).astype(np.float32)
    y = rng.randint(0, CLASSES, size=ROWS).astype(np.int64)
    path = os.path.join(d, "model.onnx")
    export(model, torch.from_numpy(x[:BATCH]), path, dynamo)
    check_export(model, path, x, training=dynamo == "training")
    np.savez(os.path.join(d, "data.npz"), x=x, label=y)
    trainable, name_map = trainable_names(model, path)
    manifest = {
        "source": source,
        "framework": f"torch {torch.__version__}" + (f" / onnxscript {onnxscript.__version__}" if dynamo is True else ""),
        "exporter": "torch legacy (dynamo=False), TrainingMode.TRAINING, do_constant_folding=False, opset 17"
                    if dynamo == "training" else "torch dynamo" if dynamo else "torch legacy (dynamo=False)",
        "runs": [{"name": opt, "args": run_args(opt), "losses": torch_losses(model, x, y, opt)} for opt in ("sgd", "adamw")],
        "trainable": trainable,
        "name_map": name_map,
    }
    with open(os.path.join(d, "zoo.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"{name}: {os.path.getsize(path)} bytes, {len(trainable)} trainable, "
          f"sgd {manifest['runs'][0]['losses'][0]:.4f} -> {manifest['runs'][0]['losses'][-1]:.4f}")


ENCODER = ("nn.TransformerEncoderLayer(d_model 32, nhead 2, dim_feedforward 64, dropout 0, batch_first=True), "
           "mean over the sequence, Linear(32, 4); x [B, 8, 32]")
CONVNEXT = ("ConvNeXt block classifier: Conv 3->16 (2x2 stride 2), depthwise 7x7 Conv, LayerNorm (channels last), "
            "Linear 16->64, GELU, Linear 64->16, layer scale (init 0.5), residual, global mean pool, Linear(16, 4); "
            "x [B, 3, 12, 12]")
LSTM = "nn.LSTM(8, 16, batch_first=True), last hidden state -> Linear(16, 4); x [B, 6, 8]"
RESNET = ("ResNet: Conv 3->16 3x3 + BatchNorm + ReLU, BasicBlock 16->16, BasicBlock 16->32 stride 2 with a 1x1 Conv + "
          "BatchNorm projection, global mean pool, Linear(32, 4); x [B, 3, 8, 8]")
GRU = "nn.GRU(8, 16, batch_first=True), last hidden state -> Linear(16, 4); x [B, 6, 8]"
LSTM2 = ("nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True), the last layer's final states of "
         "both directions concatenated -> Linear(32, 4); x [B, 6, 8]")

MODELS = {
    "transformer_encoder_dynamo": lambda n: make(n, EncoderClassifier, (8, 32), ENCODER, True, 1),
    "convnext_legacy": lambda n: make(n, ConvNeXtClassifier, (3, 12, 12), CONVNEXT, False, 2),
    "convnext_dynamo": lambda n: make(n, ConvNeXtClassifier, (3, 12, 12), CONVNEXT, True, 2),
    "lstm_legacy": lambda n: make(n, lambda: RNNClassifier(nn.LSTM), (6, 8), LSTM, False, 3),
    "lstm_dynamo": lambda n: make(n, lambda: RNNClassifier(nn.LSTM), (6, 8), LSTM, True, 3),
    "gru_legacy": lambda n: make(n, lambda: RNNClassifier(nn.GRU), (6, 8), GRU, False, 4),
    "gru_dynamo": lambda n: make(n, lambda: RNNClassifier(nn.GRU), (6, 8), GRU, True, 4),
    "lstm2_bidir_legacy": lambda n: make(n, lambda: RNNClassifier(nn.LSTM, 2, True), (6, 8), LSTM2, False, 5),
    "lstm2_bidir_dynamo": lambda n: make(n, lambda: RNNClassifier(nn.LSTM, 2, True), (6, 8), LSTM2, True, 5),
    "resnet_training_legacy": lambda n: make(n, ResNetClassifier, (3, 8, 8), RESNET, "training", 7),
}

if __name__ == "__main__":
    torch.set_num_threads(1)
    for n in sys.argv[1:] or MODELS:
        MODELS[n](n)
