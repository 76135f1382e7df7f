"""PyTorch references for onnxdp's recurrent ops: tiny nn.LSTM / nn.GRU / nn.RNN classifiers,
exported with both PyTorch exporters, with PyTorch's own outputs and SGD losses, in
tests/fixtures/rnn/ (tests/train/test_rnn_torch.cpp checks onnxdp against them).

    /work/main/.venvs/torch/bin/python tests/scripts/torch_rnn_reference.py

Per model NAME (lstm: bidirectional, batch_first; gru: two layers, batch_first; rnn: relu,
bidirectional, batch_first; lstm_packed: lstm on pack_padded_sequence(x, lengths), which the
legacy exporter writes as ONNX LSTM with sequence_lens and the dynamo exporter cannot export) and
exporter EXP (legacy: torch.onnx.export(dynamo=False), dynamo: dynamo=True, both with a dynamic
batch dim):
    NAME_EXP.onnx      the model, input x [N, T, I], output logits [N, C]
    NAME.npz           x [N, T, I] float32 and label [N] int64 (the training data, in file order);
                       lstm_packed also lengths [N] int64, descending within each batch of BATCH
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
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "rnn"))
N, T, I, H, C = 12, 5, 3, 4, 3
BATCH, STEPS, LR = 4, 6, 0.5


class Classifier(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.enforce_sorted = True  # the export's packing; the references need not sort
        if kind in ("lstm", "lstm_packed"):
            self.rnn = nn.LSTM(I, H, batch_first=True, bidirectional=True)
            feat = 2 * H + 2 * H + 2 * H
        elif kind == "gru":
            self.rnn = nn.GRU(I, H, num_layers=2, batch_first=True)
            feat = H + 2 * H
        else:
            self.rnn = nn.RNN(I, H, nonlinearity="relu", batch_first=True, bidirectional=True)
            feat = 2 * H + 2 * H
        self.head = nn.Linear(feat, C)

    def forward(self, x, lengths=None):
        if self.kind == "lstm_packed":
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=self.enforce_sorted)
            y, (h, c) = self.rnn(packed)
            y = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])[0]
            states = [h, c]
        elif self.kind == "lstm":
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
    for seed, kind in enumerate(["lstm", "gru", "rnn", "lstm_packed"]):
        torch.manual_seed(100 + seed)
        model = Classifier(kind)
        x = torch.randn(N, T, I)
        label = torch.randint(0, C, (N,))
        data = dict(x=x.numpy(), label=label.numpy().astype(np.int64))
        args = (x,)
        if kind == "lstm_packed":
            lengths = torch.tensor([5, 4, 3, 2, 5, 5, 1, 1, 4, 3, 3, 2])
            data["lengths"] = lengths.numpy().astype(np.int64)
            args = (x, lengths)
        np.savez(os.path.join(OUT, f"{kind}.npz"), **data)
        model.eval()
        for exp in ["legacy", "dynamo"] if kind != "lstm_packed" else ["legacy"]:
            path = os.path.join(OUT, f"{kind}_{exp}.onnx")
            if exp == "legacy":
                names = ["x", "lengths"][:len(args)]
                torch.onnx.export(model, tuple(a[:BATCH] for a in args), path, dynamo=False, input_names=names,
                                  output_names=["logits"],
                                  dynamic_axes={**{n: {0: "batch"} for n in names}, "logits": {0: "batch"}})
            else:
                batch = torch.export.Dim("batch")
                prog = torch.onnx.export(model, (x[:BATCH],), dynamo=True, input_names=["x"], output_names=["logits"],
                                         dynamic_shapes={"x": {0: batch}})
                prog.save(path)
            print("wrote", path)
        model.enforce_sorted = False
        with torch.no_grad():
            logits = model(*args).numpy()
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        losses = []
        for step in range(STEPS):
            rows = slice((step * BATCH) % N, (step * BATCH) % N + BATCH)
            opt.zero_grad()
            loss = F.cross_entropy(model(*(a[rows] for a in args)), label[rows])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.savez(os.path.join(OUT, f"{kind}_ref.npz"), logits=logits, sgd_losses=np.array(losses, np.float64),
                 lr=np.array([LR]), batch_size=np.array([BATCH]), steps=np.array([STEPS]))
        print(kind, "losses", losses)


if __name__ == "__main__":
    main()
