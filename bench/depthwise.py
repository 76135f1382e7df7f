#!/usr/bin/env python3
"""Depthwise convolutions, onnxdp's kernels against PyTorch eager's, one thread.

Each model is one depthwise Conv (ConvNeXt's 7x7, MobileNet's 3x3 at strides 2 and 1
(MobileNetV2's 32 channels on 112x112 among them), a 5x5) followed by a
mean over the image and a Linear to 10 classes; AdamW, batch 8. The "mbv2_*" models are two
MobileNetV2 inverted residual blocks instead (1x1 expansion to 6x the channels, BatchNorm, ReLU6,
the depthwise window, BatchNorm, ReLU6, 1x1 projection, BatchNorm, the residual Add): there onnxdp
keeps the activations in its channel-blocked layout around the depthwise windows
(graph/passes/block_channels.h), where the single-Conv models read theirs from the data (plain).
"convnext_*" is torchvision's ConvNeXt stem and two of its blocks (the depthwise 7x7 with bias,
channels last for LayerNorm and the MLP, back, a layer scale [C, 1, 1], the residual Add): its
stream stays blocked through the Transposes, the layer scale and the reductions.
Writes model.onnx and data.npz per
shape to --work, times PyTorch eager's whole step (minimum of 10, after 3 warm-up steps) and its
convolution ops (torch.profiler), and prints the onnxdp command that profiles the same model:
its `--profile` table gives Conv and ConvGradFilter per shape. Informational, never a test.

  .venvs/torch/bin/python bench/depthwise.py --work /tmp/dw
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn

SHAPES = [  # name, channels, window, image side, stride
    ("dw7_56", 96, 7, 56, 1),
    ("dw7_14", 384, 7, 14, 1),
    ("dw3_28s2", 64, 3, 28, 2),
    ("dw3_28", 64, 3, 28, 1),
    ("dw3_56", 96, 3, 56, 1),
    ("dw3_112", 32, 3, 112, 1),
    ("dw5_28", 64, 5, 28, 1),
]
BLOCKS = [  # name, channels, window, image side: two inverted residual blocks of 6x expansion
    ("mbv2_3x3_28", 32, 3, 28),
    ("mbv2_5x5_14", 64, 5, 14),
]
NEXT = [  # name, channels, window, image side: two ConvNeXt blocks (torchvision's CNBlock)
    ("convnext_7x7_28", 96, 7, 28),
]
BATCH = 8
SHAPES_BY_NAME = [(s[0], s) for s in SHAPES]


class Depthwise(nn.Module):
    def __init__(self, channels, window, stride):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, window, stride=stride, padding=window // 2, groups=channels)
        self.fc = nn.Linear(channels, 10)

    def forward(self, x):
        return self.fc(self.dw(x).mean(dim=(2, 3)))


class InvertedResidual(nn.Module):
    def __init__(self, channels, window):
        super().__init__()
        wide = 6 * channels
        self.body = nn.Sequential(
            nn.Conv2d(channels, wide, 1, bias=False), nn.BatchNorm2d(wide), nn.ReLU6(),
            nn.Conv2d(wide, wide, window, padding=window // 2, groups=wide, bias=False), nn.BatchNorm2d(wide),
            nn.ReLU6(), nn.Conv2d(wide, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        return x + self.body(x)


class Blocks(nn.Module):
    def __init__(self, channels, window):
        super().__init__()
        self.blocks = nn.Sequential(InvertedResidual(channels, window), InvertedResidual(channels, window))
        self.fc = nn.Linear(channels, 10)

    def forward(self, x):
        return self.fc(self.blocks(x).mean(dim=(2, 3)))


class CNBlock(nn.Module):
    """torchvision's ConvNeXt block: depthwise 7x7 (bias), channels last for LayerNorm and the
    MLP, back to channels first, a layer scale of shape [C, 1, 1], the residual Add."""

    def __init__(self, channels, window):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, window, padding=window // 2, groups=channels)
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(channels, 4 * channels), nn.GELU(), nn.Linear(4 * channels, channels))
        self.scale = nn.Parameter(torch.full((channels, 1, 1), 0.1))

    def forward(self, x):
        y = self.mlp(self.norm(self.dw(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        return x + self.scale * y


class Next(nn.Module):
    """torchvision's ConvNeXt stem (4x4 stride-4 Conv from 3 channels, LayerNorm over the
    channels through channels-last) and two blocks; a mean over the image and a Linear."""

    def __init__(self, channels, window):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 4, stride=4)
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.blocks = nn.Sequential(CNBlock(channels, window), CNBlock(channels, window))
        self.fc = nn.Linear(channels, 10)

    def forward(self, x):
        x = self.norm(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.fc(self.blocks(x).mean(dim=(2, 3)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="folder for the models and data")
    ap.add_argument("--only", nargs="*", help="these models alone (names as listed in SHAPES and BLOCKS)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    models = [(name, c, k, side, lambda c=c, k=k, s=stride: Depthwise(c, k, s)) for name, c, k, side, stride in SHAPES]
    models += [(name, c, k, side, lambda c=c, k=k: Blocks(c, k)) for name, c, k, side in BLOCKS]
    models += [(name, c, k, side, lambda c=c, k=k: Next(c, k)) for name, c, k, side in NEXT]
    for name, c, k, side, make in models:
        if args.only and name not in args.only:
            continue
        d = os.path.join(args.work, name)
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(0)
        m = make()
        # ConvNeXt's stem: 3 channels at 4x the side.
        c_in, side_in = (3, 4 * side) if name in dict((n[0], n) for n in NEXT) else (c, side)
        x = torch.randn(BATCH, c_in, side_in, side_in)
        # The blocks as docs/EXPORTING.md's recipe for BatchNorm models (their BatchNorms kept).
        training = {} if name in dict(SHAPES_BY_NAME) else {
            "training": torch.onnx.TrainingMode.TRAINING, "do_constant_folding": False, "opset_version": 17}
        torch.onnx.export(m, (x,), os.path.join(d, "model.onnx"), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, dynamo=False, **training)
        m.train()
        rng = np.random.default_rng(0)
        np.savez(os.path.join(d, "data.npz"), x=rng.standard_normal((8 * BATCH, c_in, side_in, side_in)).astype(np.float32),
                 label=rng.integers(0, 10, 8 * BATCH).astype(np.int64))
        opt = torch.optim.AdamW(m.parameters(), 1e-3)
        y = torch.randint(0, 10, (BATCH,))

        def step():
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()

        for _ in range(3):
            step()
        times = []
        for _ in range(10):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        with torch.profiler.profile() as prof:
            step()
        convs = {e.key: round(e.self_cpu_time_total / 1e3, 2) for e in prof.key_averages()
                 if "conv" in e.key.lower() and e.self_cpu_time_total > 50}
        print(f"{name}: PyTorch eager step {1e3 * min(times):.2f} ms; its convolution ops (ms): {convs}")
        print(f"  OMP_NUM_THREADS=1 build/onnxdp train {d}/model.onnx --data {d}/data.npz --steps 10 "
              f"--batch-size {BATCH} --optimizer adamw --lr 0.001 --no-shuffle --devices cpu "
              f"--output-dir /tmp/onnxdp-{name} --report-to none --profile")


if __name__ == "__main__":
    main()
