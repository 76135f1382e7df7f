"""The models the bench scripts train, and their random data.

The architectures come from models/make_models.py (imported, not copied): each entry names the
torch module builder, its seed, how it is exported, the graph's input name, and how to make
random data of the right shape. `gpt_small` is make_models.TinyLM at a larger size.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "models"))

import make_models as mm  # noqa: E402  (imports torch)


def _features(shape, classes):
    """Random float inputs [n, *shape] ~ N(0, 1) and random class labels [n]."""
    def make(n, rng):
        x = rng.standard_normal((n, *shape)).astype(np.float32)
        y = rng.integers(classes, size=n).astype(np.int64)
        return x, y
    return make


def _tokens(vocab, context):
    """Random token sequences; label = the next token (a shifted copy), as a language model sees."""
    def make(n, rng):
        seq = rng.integers(vocab, size=(n, context + 1)).astype(np.int64)
        return seq[:, :-1].copy(), seq[:, 1:].copy()
    return make


# GPT-small: d_model 256, 4 layers, 8 heads, context 128, vocab 512 (untied head, pre-LN, GELU).
GPT_SMALL = dict(vocab=512, context=128, d_model=256, n_head=8, n_layer=4)

# GPT-2-small's shape (the scale benchmark, bench/load.py): vocab 50257, context 1024, d_model 768,
# 12 layers, 12 heads; the head is untied (163 M parameters). Only when named: it is slow on a CPU.
GPT2_SMALL = dict(vocab=50257, context=1024, d_model=768, n_head=12, n_layer=12)

def _resnet():
    """A small CIFAR-style ResNet (3x32x32 -> 10): no sample model in models/ has residual blocks,
    so it is defined here. Stem conv 3->16, then BasicBlocks 16->16, 16->32 (stride 2, 1x1
    projection), 32->64 (stride 2, 1x1 projection), global average pool, Linear: the 3x3, 1x1 and
    strided convolutions of a ResNet at 32x32, 16x16 and 8x8. 78 K parameters, ~25 MFLOP forward
    per image."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.proj = None
            if stride != 1 or cin != cout:
                self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return F.relu(y + (x if self.proj is None else self.proj(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
            self.bn = nn.BatchNorm2d(16)
            self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
            self.fc = nn.Linear(64, 10)

        def forward(self, x):                              # x [N, 3, 32, 32]
            x = self.blocks(F.relu(self.bn(self.stem(x))))  # [N, 64, 8, 8]
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    import torch
    return ResNet()


# name: builder, seed, exporter, input name, data maker, default batch, default N (steps).
# Default N is larger for the tiny models so that the 3N steps the timing rests on last long
# enough to stand out of process start-up noise.
MODELS = {
    "mlp": dict(build=lambda: mm.MLP(), seed=1, export="legacy", input="x",
                data=_features((64,), 10), batch=256, steps=100),
    "cnn": dict(build=lambda: mm.CNN(), seed=2, export="legacy", input="x",
                data=_features((1, 8, 8), 10), batch=256, steps=20),
    "tiny_lm": dict(build=lambda: mm.TinyLM(), seed=5, export="legacy", input="tokens",
                    data=_tokens(mm.VOCAB, mm.CONTEXT), batch=64, steps=20),
    "mlp_dynamo": dict(build=lambda: mm.MLP(), seed=1, export="dynamo", input="x",
                       data=_features((64,), 10), batch=256, steps=100),
    "rope_lm": dict(build=lambda: mm.RopeLM(), seed=6, export="dynamo", input="tokens",
                    data=_tokens(mm.VOCAB, mm.CONTEXT), batch=64, steps=20),
    "gpt_small": dict(build=lambda: mm.TinyLM(**GPT_SMALL), seed=7, export="legacy", input="tokens",
                      data=_tokens(GPT_SMALL["vocab"], GPT_SMALL["context"]), batch=8, steps=3),
    # Only when named (bench/compare.py --models resnet): the convolutions of issue 25.
    "resnet": dict(build=_resnet, seed=9, export="legacy", input="x",
                   data=_features((3, 32, 32), 10), batch=32, steps=5),
    "gpt2_small": dict(build=lambda: mm.TinyLM(**GPT2_SMALL), seed=8, export="legacy", input="tokens",
                       data=_tokens(GPT2_SMALL["vocab"], GPT2_SMALL["context"]), batch=1, steps=2),
}


def available(names=None):
    """The architectures in models/ that this file knows, plus gpt_small; or the names asked for."""
    if names:
        bad = [n for n in names if n not in MODELS]
        if bad:
            raise SystemExit(f"unknown model(s) {bad}; known: {list(MODELS)}")
        return list(names)
    found = [d for d in sorted(os.listdir(os.path.join(ROOT, "models")))
             if os.path.isfile(os.path.join(ROOT, "models", d, "model.onnx"))]
    unknown = [d for d in found if d not in MODELS]
    if unknown:
        print(f"note: models/{unknown} have no entry in bench/bench_models.py; skipped", file=sys.stderr)
    return [d for d in found if d in MODELS] + ["gpt_small"]


def build(name):
    """The torch module with its fixed-seed initial weights."""
    import torch
    spec = MODELS[name]
    torch.manual_seed(spec["seed"])
    return spec["build"]()


def export(name, model, example, path):
    """Export like make_models.py does (legacy: TRAINING mode, opset 17, dynamic batch)."""
    spec = MODELS[name]
    if spec["export"] == "dynamo":
        mm.export_dynamo(model, example, path, spec["input"], "logits")
    else:
        mm.export_legacy(model, example, path, spec["input"], "logits")
    mm.check_initializers(model, path)


def make_data(name, samples, seed=0):
    """{input name: x, "label": y} with `samples` random samples."""
    spec = MODELS[name]
    x, y = spec["data"](samples, np.random.default_rng(seed))
    return {spec["input"]: x, "label": y}


def load_weights(model, onnx_path):
    """Give the torch module the exact initial values stored in the .onnx (by initializer name)."""
    import onnx
    import torch
    from onnx import numpy_helper
    m = onnx.load(onnx_path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for init, param in mm.transposed_parameters(m).items():  # the dynamo exporter's transposed weights
        inits[param] = inits[init].T
    state = model.state_dict()
    for key in state:
        if key.endswith("num_batches_tracked"):
            continue
        if key not in inits:
            # The dynamo exporter merges equal initializers: the module (built with the same seed)
            # has the value, which the file holds under another name.
            value = state[key].numpy()
            if any(v.shape == value.shape and np.array_equal(v, value) for v in inits.values()):
                continue
            raise SystemExit(f"{onnx_path}: no initializer named {key}")
        state[key] = torch.from_numpy(inits[key].copy())
    model.load_state_dict(state)
