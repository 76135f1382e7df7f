"""PyTorch references for onnxdp's recurrent ops: tiny nn.LSTM / nn.GRU / nn.RNN classifiers,
exported with both PyTorch exporters, with PyTorch's own outputs and SGD losses, in
tests/fixtures/rnn/ (tests/train/test_rnn_torch.cpp checks onnxdp against them).

    /work/main/.venvs/torch/bin/python tests/scripts/torch_rnn_reference.py

Per model NAME (lstm: bidirectional, batch_first; gru: two layers, batch_first; rnn: relu,
bidirectional, batch_first) and exporter EXP (legacy: torch.onnx.export(dynamo=False), dynamo:
dynamo=True, both with a dynamic batch dim):
    NAME_EXP.onnx      the model, input x [N, T, I], output logits [N, C]
    NAME.npz           x [N, T, I] float32 and label [N] int64 (the training data, in file order)
    NAME_ref.npz       logits: the model's outputs on all of x before training (onnxdp run);
                       sgd_losses: F.cross_entropy of each batch of BATCH rows in file order before
                       that step's torch.optim.SGD(lr=LR) update (onnxdp train --no-shuffle
                       --batch-size BATCH --steps STEPS --optimizer sgd --lr LR); lr, batch_size, steps.
The head reads Y (its mean over time) and Y_h (and LSTM's Y_c), so every output of the ONNX op
carries gradient. Python makes reference values only; onnxdp never runs it.
"""
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "rnn"))
N, T, I, H, C = 12, 5, 3, 4, 3
BATCH, STEPS, LR = 4, 6, 0.5


class Classifier(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        if kind == "lstm":
            self.rnn = nn.LSTM(I, H, batch_first=True, bidirectional=True)
            feat = 2 * H + 2 * H + 2 * H
        elif kind == "gru":
            self.rnn = nn.GRU(I, H, num_layers=2, batch_first=True)
            feat = H + 2 * H
        else:
            self.rnn = nn.RNN(I, H, nonlinearity="relu", batch_first=True, bidirectional=True)
            feat = 2 * H + 2 * H
        self.head = nn.Linear(feat, C)

    def forward(self, x):
        if self.kind == "lstm":
            y, (h, c) = self.rnn(x)
            states = [h, c]
        else:
            y, h = self.rnn(x)
            states = [h]
        # h, c: [layers * directions, N, H] -> [N, layers * directions * H]
        feats = [y.mean(dim=1)] + [s.transpose(0, 1).reshape(x.shape[0], -1) for s in states]
        return self.head(torch.cat(feats, dim=1))


def main():
    os.makedirs(OUT, exist_ok=True)
    for seed, kind in enumerate(["lstm", "gru", "rnn"]):
        torch.manual_seed(100 + seed)
        model = Classifier(kind)
        x = torch.randn(N, T, I)
        label = torch.randint(0, C, (N,))
        np.savez(os.path.join(OUT, f"{kind}.npz"), x=x.numpy(), label=label.numpy().astype(np.int64))
        model.eval()
        for exp in ["legacy", "dynamo"]:
            path = os.path.join(OUT, f"{kind}_{exp}.onnx")
            if exp == "legacy":
                torch.onnx.export(model, (x[:BATCH],), path, dynamo=False, input_names=["x"], output_names=["logits"],
                                  dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
            else:
                batch = torch.export.Dim("batch")
                prog = torch.onnx.export(model, (x[:BATCH],), dynamo=True, input_names=["x"], output_names=["logits"],
                                         dynamic_shapes={"x": {0: batch}})
                prog.save(path)
            print("wrote", path)
        with torch.no_grad():
            logits = model(x).numpy()
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        losses = []
        for step in range(STEPS):
            rows = slice((step * BATCH) % N, (step * BATCH) % N + BATCH)
            opt.zero_grad()
            loss = F.cross_entropy(model(x[rows]), label[rows])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.savez(os.path.join(OUT, f"{kind}_ref.npz"), logits=logits, sgd_losses=np.array(losses, np.float64),
                 lr=np.array([LR]), batch_size=np.array([BATCH]), steps=np.array([STEPS]))
        print(kind, "losses", losses)


if __name__ == "__main__":
    main()
