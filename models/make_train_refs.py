#!/usr/bin/env python3
"""PyTorch's per-step training losses for onnxdp's sample models: models/<name>/train_reference.npz.

    python3 models/make_train_refs.py            # mlp, tiny_lm, mlp_dynamo, cnn, rope_lm
    python3 models/make_train_refs.py mlp

For each model the torch module of make_models.py is built and given the exact initial weights
stored in model.onnx (by initializer name), then trained for STEPS steps on the first STEPS*BATCH
samples of model.npz in file order (onnxdp: --no-shuffle --batch-size BATCH), in train mode, with
F.cross_entropy over every position (logits [..., C] reshaped to [-1, C]), once with
torch.optim.SGD(lr=SGD_LR) and once with torch.optim.AdamW(lr=ADAMW_LR) (default weight decay 0.01).
The file holds sgd_losses and adamw_losses (loss of each step's batch before that step's update),
bf16_sgd_losses for mlp, tiny_lm and cnn (SGD with the forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16): onnxdp's --mixed-precision bf16),
fp16_adamw_losses and fp16_adamw_scales for the same models (AdamW with the forward and loss under
torch.autocast("cpu", dtype=torch.float16) and torch.amp.GradScaler("cpu", init_scale=FP16_INIT_SCALE,
growth_interval=FP16_GROWTH_INTERVAL): onnxdp's --mixed-precision fp16 --loss-scale-init 16777216
--loss-scale-growth-interval 4; the scale after each step's update, so skipped steps and growth show),
for models with BatchNorm the running statistics after the last step (sgd_final.<buffer name>,
adamw_final.<buffer name>, e.g. sgd_final.bn1.running_var: PyTorch updates running_var with the
unbiased batch variance, as onnxdp's trainer does), and the settings used. Python makes reference
values only; onnxdp never runs it.

Dropout (cnn): torch's own masks cannot be matched, so the torch model applies onnxdp's masks, which
are a pure function of (seed, step, element position): the Philox4x32-10 layout documented in
exec/philox.h is re-implemented below in numpy, with seed 0 (onnxdp's default --seed), step = the
1-based optimizer step, and the stream id = FNV-1a of the Dropout node's name in model.onnx.
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

MODULES = {"mlp": (mm.MLP, "x"), "mlp_dynamo": (mm.MLP, "x"), "tiny_lm": (mm.TinyLM, "tokens"),
           "cnn": (mm.CNN, "x"), "rope_lm": (mm.RopeLM, "tokens")}
SEED = 0
SEEDS = {"rope_lm": 6}  # make_models.py's seed, for parameters the export merged (load_module)
BF16_MODELS = ("mlp", "tiny_lm", "cnn")  # and the fp16 references
FP16_INIT_SCALE = 2.0 ** 24  # large enough that the first steps overflow float16 and are skipped
FP16_GROWTH_INTERVAL = 4     # small enough that the scale also grows within STEPS

U32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c, k0, k1):
    """c: four uint64 arrays holding 32-bit counter words; k0, k1: the key words (ints)."""
    c0, c1, c2, c3 = (np.asarray(w, dtype=np.uint64) for w in c)
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        if r > 0:
            k0 = (k0 + np.uint64(0x9E3779B9)) & U32
            k1 = (k1 + np.uint64(0xBB67AE85)) & U32
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & U32
        hi1, lo1 = p1 >> np.uint64(32), p1 & U32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def fnv1a(s):
    h = 2166136261
    for b in s.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def dropout_keep(shape, ratio, seed, step, node_name):
    """onnxdp's Dropout mask for a tensor of `shape` holding the whole global batch."""
    pos = np.arange(int(np.prod(shape)), dtype=np.uint64)
    group = pos >> np.uint64(2)
    ctr = (group & U32, group >> np.uint64(32), np.full_like(pos, step & 0xFFFFFFFF), np.full_like(pos, fnv1a(node_name)))
    words = philox4x32_10(ctr, seed & 0xFFFFFFFF, seed >> 32)
    word = np.choose((pos & np.uint64(3)).astype(np.int64), words)
    unit = (word >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    return (unit >= np.float32(ratio)).reshape(shape)


class OnnxdpDropout(torch.nn.Module):
    """Dropout with onnxdp's mask for the current step (set .step before each forward)."""

    def __init__(self, ratio, node_name):
        super().__init__()
        self.ratio, self.node_name, self.step = ratio, node_name, 1

    def forward(self, x):
        keep = torch.from_numpy(dropout_keep(tuple(x.shape), self.ratio, SEED, self.step, self.node_name))
        return x * keep / (1.0 - self.ratio)


def load_module(name):
    cls, input_name = MODULES[name]
    if name in SEEDS:
        torch.manual_seed(SEEDS[name])
    model = cls()
    onnx_model = onnx.load(os.path.join(HERE, name, "model.onnx"))
    inits = {i.name: torch.from_numpy(onnx.numpy_helper.to_array(i).copy()) for i in onnx_model.graph.initializer}
    for init, param in mm.transposed_parameters(onnx_model).items():  # dynamo's folded Linear weights
        inits[param] = inits[init].T.contiguous()
    state = model.state_dict()
    for key in state:
        if key.endswith("num_batches_tracked"):  # torch's counter; not in ONNX, unused with momentum set
            continue
        if key not in inits and name in SEEDS:
            # The dynamo exporter merges initializers of equal value (every RMSNorm weight starts at
            # ones): the module, made with make_models.py's seed, has the value, which the file holds
            # under another parameter's name.
            assert any(v.shape == state[key].shape and torch.equal(v, state[key]) for v in inits.values()), key
            continue
        if key not in inits:
            raise SystemExit(f"{name}: initializer {key} not found in model.onnx")
        state[key] = inits[key]
    model.load_state_dict(state)
    drops = [n for n in onnx_model.graph.node if n.op_type == "Dropout"]
    if name == "cnn":
        assert len(drops) == 1
        model.drop = OnnxdpDropout(model.drop.p, drops[0].name)
    elif drops:
        raise SystemExit(f"{name}: has Dropout nodes this script does not map")
    return model, input_name


def losses(name, make_opt, bf16=False, fp16=False):
    torch.manual_seed(0)
    model, input_name = load_module(name)
    model.train()
    data = np.load(os.path.join(HERE, name, "model.npz"))
    x_all = torch.from_numpy(data[input_name])
    y_all = torch.from_numpy(data["label"])
    opt = make_opt(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=FP16_INIT_SCALE, growth_interval=FP16_GROWTH_INTERVAL,
                                  enabled=fp16)
    out, scales = [], []
    for step in range(STEPS):
        x = x_all[step * BATCH:(step + 1) * BATCH]
        y = y_all[step * BATCH:(step + 1) * BATCH]
        for m in model.modules():
            if isinstance(m, OnnxdpDropout):
                m.step = step + 1
        with torch.autocast("cpu", dtype=torch.float16 if fp16 else torch.bfloat16, enabled=bf16 or fp16):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        out.append(loss.item())
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale() if fp16 else 1.0)
    buffers = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()
               if k.endswith("running_mean") or k.endswith("running_var")}
    if fp16:
        return np.array(out, dtype=np.float64), np.array(scales, dtype=np.float64)
    return np.array(out, dtype=np.float64), buffers


def main(names):
    for name in names:
        sgd, sgd_buffers = losses(name, lambda p: torch.optim.SGD(p, lr=SGD_LR))
        adamw, adamw_buffers = losses(name, lambda p: torch.optim.AdamW(p, lr=ADAMW_LR))
        path = os.path.join(HERE, name, "train_reference.npz")
        finals = {f"sgd_final.{k}": v for k, v in sgd_buffers.items()}
        if name in BF16_MODELS:
            finals["bf16_sgd_losses"] = losses(name, lambda p: torch.optim.SGD(p, lr=SGD_LR), bf16=True)[0]
            finals["fp16_adamw_losses"], finals["fp16_adamw_scales"] = losses(
                name, lambda p: torch.optim.AdamW(p, lr=ADAMW_LR), fp16=True)
            finals["fp16_init_scale"] = np.float64(FP16_INIT_SCALE)
            finals["fp16_growth_interval"] = np.int64(FP16_GROWTH_INTERVAL)
        finals.update({f"adamw_final.{k}": v for k, v in adamw_buffers.items()})
        np.savez(path, sgd_losses=sgd, adamw_losses=adamw, steps=np.int64(STEPS), batch_size=np.int64(BATCH),
                 sgd_lr=np.float64(SGD_LR), adamw_lr=np.float64(ADAMW_LR), **finals)
        print(f"{name}: sgd {sgd[0]:.4f} -> {sgd[-1]:.4f}, adamw {adamw[0]:.4f} -> {adamw[-1]:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["mlp", "tiny_lm", "mlp_dynamo", "cnn", "rope_lm"])
