#!/usr/bin/env python3
"""Make onnxdp's sample models: models/<name>/{model.onnx, model.npz, eval.npz, reference.npz}.

    python3 models/make_models.py            # all models
    python3 models/make_models.py mlp cnn    # some of them

Needs torch, onnx, onnxruntime, numpy, scikit-learn (and onnxscript for mlp_dynamo). Python only
makes the models and the reference values; onnxdp never runs it.

Deterministic: every model and data set has its own fixed seed, the .npz files are written with
fixed zip timestamps, so re-running reproduces every file byte for byte (same torch version).

Per model folder:
  model.onnx     the untrained model (torch's random initialisation, fixed seed). Models 1-3 are
                 exported with the legacy TorchScript exporter in TRAINING mode (BatchNormalization
                 has training_mode=1, Dropout is live), opset 17, dynamic batch axis.
  model.npz      training data: one array per graph input (axis 0 = sample) plus `label` (int64).
  eval.npz       held-out split, same keys.
  reference.npz  PyTorch's reference for `onnxdp run`: the graph inputs (the first 2 batches of 16
                 training samples, 32 samples) and PyTorch's outputs in eval mode (BN uses running
                 statistics, Dropout is identity), keyed by graph input / output names; float32.
"""
import logging
import math
import os
import shutil
import sys
import warnings
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npz_util import save_npz  # noqa: E402

# The dynamo exporter logs "torchvision is not installed" warnings; they do not matter here.
logging.getLogger("torch.onnx").setLevel(logging.ERROR)

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
REF_BATCH = 16   # reference.npz holds 2 batches of this many samples
REF_SAMPLES = 2 * REF_BATCH


# ---------------------------------------------------------------------------------------------
# Files

def model_dir(name):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    return d


# ---------------------------------------------------------------------------------------------
# Data

def digits_split():
    """sklearn's 8x8 digits (ships with sklearn), pixels /16, shuffled with a fixed seed,
    1500 train / 297 held-out. Returns (x_train [1500,64] f32, y_train int64, x_eval, y_eval)."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(x))
    x, y = x[perm], y[perm]
    return x[:1500], y[:1500], x[1500:], y[1500:]


VOCAB, CONTEXT = 32, 16


def synthetic_language(n, seed):
    """Sequences of CONTEXT+1 tokens from a small learnable language, each one of:
      - arithmetic progression mod VOCAB: t_i = (a + i*d) % VOCAB, d in {-1, 1, 2, 3}
      - a random motif of length 2..8 repeated
    with 4% of tokens replaced by uniformly random ones (noise). After a few tokens the next token
    is (almost) determined, so a model can get well below the uniform loss ln(32) = 3.47.
    Returns tokens [n, CONTEXT] int64 and label = next tokens [n, CONTEXT] int64."""
    rng = np.random.default_rng(seed)
    L = CONTEXT + 1
    seqs = np.empty((n, L), dtype=np.int64)
    i = np.arange(L)
    for s in range(n):
        if rng.random() < 0.5:
            a = rng.integers(VOCAB)
            d = rng.choice([-1, 1, 2, 3])
            seqs[s] = (a + i * d) % VOCAB
        else:
            p = rng.integers(2, 9)
            motif = rng.integers(VOCAB, size=p)
            seqs[s] = np.tile(motif, L // p + 1)[:L]
    noise = rng.random((n, L)) < 0.04
    seqs[noise] = rng.integers(VOCAB, size=int(noise.sum()))
    return seqs[:, :-1].copy(), seqs[:, 1:].copy()


# ---------------------------------------------------------------------------------------------
# Models

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):                       # x [N, 64]
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)                      # logits [N, 10]


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.gap = nn.AdaptiveAvgPool2d(1)      # exports as GlobalAveragePool
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):                                   # x [N, 1, 8, 8]
        x = self.pool(F.relu(self.bn1(self.conv1(x))))      # [N, 8, 4, 4]
        x = F.relu(self.bn2(self.conv2(x)))                 # [N, 16, 4, 4]
        x = torch.flatten(self.gap(x), 1)                   # [N, 16]
        return self.fc(self.drop(x))                        # logits [N, 10]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written with plain matmul/softmax (nanoGPT style)."""

    def __init__(self, d_model, n_head, context):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        # 1 on and below the diagonal: position t may attend to positions <= t.
        self.register_buffer("causal", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def forward(self, x):                                   # x [B, T, C]
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)   # [B, H, T, hd]
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))         # [B, H, T, T]
        att = att.masked_fill(self.causal[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                         # [B, H, T, hd]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model, n_head, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, context)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU()
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab=VOCAB, context=CONTEXT, d_model=32, n_head=2, n_layer=2):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Parameter(torch.randn(context, d_model) * 0.02)  # learned positions
        self.blocks = nn.ModuleList([Block(d_model, n_head, context) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):                              # tokens [B, T] int64
        x = self.tok_emb(tokens) + self.pos_emb             # [B, T, C]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))                      # logits [B, T, vocab]


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm, written out as its reference code does (x.pow(2).mean, rsqrt)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class RopeBlock(nn.Module):
    """A LLaMA block: RMSNorm, attention with rotary positions (HF's rotate_half form, cos / sin
    computed in forward from an inv_freq buffer) through F.scaled_dot_product_attention(is_causal),
    RMSNorm, SwiGLU MLP; no biases."""

    def __init__(self, d_model, n_head, ffn):
        super().__init__()
        self.n_head = n_head
        self.attn_norm = RMSNorm(d_model)
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wk = nn.Linear(d_model, d_model, bias=False)
        self.wv = nn.Linear(d_model, d_model, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = RMSNorm(d_model)
        self.w1 = nn.Linear(d_model, ffn, bias=False)
        self.w3 = nn.Linear(d_model, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d_model, bias=False)
        hd = d_model // n_head
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)

    def forward(self, x):                                   # x [B, T, C]
        B, T, C = x.shape
        hd = C // self.n_head
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.n_head, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.n_head, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.n_head, hd).transpose(1, 2)
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class RopeLM(nn.Module):
    def __init__(self, vocab=VOCAB, d_model=32, n_head=2, n_layer=2, ffn=64):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList([RopeBlock(d_model, n_head, ffn) for _ in range(n_layer)])
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, x):                                   # x [B, T] int64
        h = self.tok_emb(x)
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h))                      # logits [B, T, vocab]


# ---------------------------------------------------------------------------------------------
# Export and checks

def export_legacy(model, example, path, input_name, output_name):
    """The export recipe users follow (DESIGN.md): legacy TorchScript exporter, TRAINING mode."""
    # Exporting in training mode runs the model in train mode, which updates BN running
    # statistics, and the exporter writes the updated values. Keep the pristine initial state
    # (running_mean 0, running_var 1) in both the torch model and the file.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (example,), path,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            export_params=True,
            opset_version=OPSET,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
            dynamo=False,
        )
    model.load_state_dict(state)
    restore_initializers(path, state)


def restore_initializers(path, state):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    changed = []
    for i, init in enumerate(m.graph.initializer):
        if init.name in state:
            want = state[init.name].numpy()
            if not np.array_equal(numpy_helper.to_array(init), want):
                m.graph.initializer[i].CopyFrom(numpy_helper.from_array(want, init.name))
                changed.append(init.name)
    if changed:
        onnx.save(m, path)


def export_dynamo(model, example, path, input_name, output_name):
    """torch 2.x's default exporter (torch.export + onnxscript), its default opset."""
    batch = torch.export.Dim("batch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(
            model, (example,), None,
            dynamo=True,
            verbose=False,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_shapes={"x": {0: batch}},
            external_data=False,
        )
    prog.save(path, external_data=False)


def check_initializers(model, path):
    """Every parameter and buffer that appears in the file must equal torch's value, so the
    reference outputs describe exactly the file's model."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    sd = model.state_dict()
    for k, v in sd.items():
        if k in inits:
            assert np.array_equal(inits[k], v.numpy()), f"{path}: initializer {k} differs from torch"
    for init, param in transposed_parameters(m).items():
        assert np.array_equal(inits[init], sd[param].numpy().T), f"{path}: {init} is not {param} transposed"


def transposed_parameters(m):
    """The dynamo exporter's optimizer stores a Linear weight used by MatMul transposed, as a new
    initializer whose value_info metadata says `pkg.onnxscript.optimizer.folded_from` ['<name>'].
    Returns {initializer name: parameter name} for those."""
    out = {}
    inits = {i.name for i in m.graph.initializer}
    for vi in m.graph.value_info:
        for p in vi.metadata_props:
            if vi.name in inits and p.key == "pkg.onnxscript.optimizer.folded_from":
                src = [s.strip(" '") for s in p.value.strip("[]").split(",")]
                if len(src) == 1 and src[0] not in inits:
                    out[vi.name] = src[0]
    return out


def write_reference(model, d, input_name, output_name, x_ref):
    model.eval()
    with torch.no_grad():
        y = model(torch.from_numpy(x_ref)).numpy().astype(np.float32)
    ref = {input_name: x_ref, output_name: y}
    save_npz(os.path.join(d, "reference.npz"), ref)
    return ref


def ort_options():
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    # ORT's graph optimizations (seen with onnxruntime 1.32, level BASIC and up) give wrong and
    # run-to-run varying outputs for BatchNormalization with training_mode=1 after a Conv (off by
    # 0.4 at bn1 on the cnn model); with them disabled ORT matches torch to ~1e-6. Run ORT unoptimised.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def ort_compare(path, ref, input_name, output_name):
    import onnxruntime as ort
    so = ort_options()
    try:
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        out = sess.run([output_name], {input_name: ref[input_name]})[0]
    except Exception as e:  # report, do not fail
        return f"ORT failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    want = ref[output_name]
    diff = np.abs(out.astype(np.float64) - want)
    rel = diff.max() / max(np.abs(want).max(), 1e-30)
    return f"ORT vs torch eval: max|diff| {diff.max():.3g}, max|diff|/max|ref| {rel:.3g}, shape {list(out.shape)}"


def ort_compare_batch_stats(path, model, ref, input_name, output_name):
    """For graphs exported in training mode: ORT runs BatchNormalization with training_mode=1
    (batch statistics); switch the graph's Dropout off (training_mode input False) and compare
    with torch in train mode with Dropout off, on the same 32-sample batch."""
    import copy
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    m = onnx.load(path)
    producers = {o: n for n in m.graph.node for o in n.output}
    for n in m.graph.node:
        if n.op_type == "Dropout" and len(n.input) > 2:
            c = producers[n.input[2]]
            assert c.op_type == "Constant"
            c.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(False), c.attribute[0].t.name))
    so = ort_options()
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        out = sess.run([output_name], {input_name: ref[input_name]})[0]
    except Exception as e:
        return f"ORT (Dropout off) failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    tm = copy.deepcopy(model).train()
    for mod in tm.modules():
        if isinstance(mod, nn.Dropout):
            mod.eval()
    with torch.no_grad():
        want = tm(torch.from_numpy(ref[input_name])).numpy()
    diff = np.abs(out.astype(np.float64) - want)
    return (f"ORT (graph Dropout switched off, BN training_mode=1) vs torch train-mode BN: "
            f"max|diff| {diff.max():.3g}, max|diff|/max|ref| {diff.max() / np.abs(want).max():.3g}")


def summary(path):
    import onnx
    m = onnx.load(path)
    opsets = {o.domain or "ai.onnx": o.version for o in m.opset_import}

    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    def dtype(vi):
        return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name

    ins = [f"{i.name} {dtype(i)} {dims(i)}" for i in m.graph.input]
    outs = [f"{o.name} {dtype(o)} {dims(o)}" for o in m.graph.output]
    hist = Counter(n.op_type for n in m.graph.node)
    nparam = sum(int(np.prod(i.dims)) for i in m.graph.initializer)
    lines = [
        f"  file      {os.path.relpath(path, HERE)}  ({os.path.getsize(path)} bytes, opset {opsets}, ir {m.ir_version})",
        f"  inputs    {'; '.join(ins)}",
        f"  outputs   {'; '.join(outs)}",
        f"  init      {len(m.graph.initializer)} initializers, {nparam} values",
        f"  ops       {len(m.graph.node)} nodes: " + ", ".join(f"{k} {v}" for k, v in sorted(hist.items())),
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The models

def make_mlp(name="mlp"):
    d = model_dir(name)
    xt, yt, xe, ye = digits_split()
    save_npz(os.path.join(d, "model.npz"), {"x": xt, "label": yt})
    save_npz(os.path.join(d, "eval.npz"), {"x": xe, "label": ye})
    torch.manual_seed(1)
    model = MLP()
    path = os.path.join(d, "model.onnx")
    export_legacy(model, torch.from_numpy(xt[:REF_BATCH]), path, "x", "logits")
    check_initializers(model, path)
    ref = write_reference(model, d, "x", "logits", xt[:REF_SAMPLES])
    return path, ref, "x", "logits", []


def make_cnn(name="cnn"):
    d = model_dir(name)
    xt, yt, xe, ye = digits_split()
    xt, xe = xt.reshape(-1, 1, 8, 8), xe.reshape(-1, 1, 8, 8)
    save_npz(os.path.join(d, "model.npz"), {"x": xt, "label": yt})
    save_npz(os.path.join(d, "eval.npz"), {"x": xe, "label": ye})
    torch.manual_seed(2)
    model = CNN()
    path = os.path.join(d, "model.onnx")
    export_legacy(model, torch.from_numpy(xt[:REF_BATCH]), path, "x", "logits")
    check_initializers(model, path)
    ref = write_reference(model, d, "x", "logits", xt[:REF_SAMPLES])
    notes = [ort_compare_batch_stats(path, model, ref, "x", "logits")]
    return path, ref, "x", "logits", notes


def make_tiny_lm(name="tiny_lm"):
    d = model_dir(name)
    tt, lt = synthetic_language(4096, seed=3)
    te, le = synthetic_language(512, seed=4)
    save_npz(os.path.join(d, "model.npz"), {"tokens": tt, "label": lt})
    save_npz(os.path.join(d, "eval.npz"), {"tokens": te, "label": le})
    torch.manual_seed(5)
    model = TinyLM()
    path = os.path.join(d, "model.onnx")
    export_legacy(model, torch.from_numpy(tt[:REF_BATCH]), path, "tokens", "logits")
    check_initializers(model, path)
    ref = write_reference(model, d, "tokens", "logits", tt[:REF_SAMPLES])
    return path, ref, "tokens", "logits", []


def make_mlp_dynamo(name="mlp_dynamo"):
    d = model_dir(name)
    for f in ("model.npz", "eval.npz"):      # same data as mlp (made if missing)
        if not os.path.exists(os.path.join(HERE, "mlp", f)):
            make_mlp()
        shutil.copyfile(os.path.join(HERE, "mlp", f), os.path.join(d, f))
    xt = np.load(os.path.join(d, "model.npz"))["x"]
    torch.manual_seed(1)                      # same seed as mlp: same weights, same reference
    model = MLP()
    path = os.path.join(d, "model.onnx")
    export_dynamo(model, torch.from_numpy(xt[:REF_BATCH]), path, "x", "logits")
    check_initializers(model, path)
    ref = write_reference(model, d, "x", "logits", xt[:REF_SAMPLES])
    return path, ref, "x", "logits", []


def make_rope_lm(name="rope_lm"):
    d = model_dir(name)
    for f in ("model.npz", "eval.npz"):      # tiny_lm's data (made if missing)
        if not os.path.exists(os.path.join(HERE, "tiny_lm", f)):
            make_tiny_lm()
        shutil.copyfile(os.path.join(HERE, "tiny_lm", f), os.path.join(d, f))
    tt = np.load(os.path.join(d, "model.npz"))["tokens"]
    torch.manual_seed(6)
    model = RopeLM()
    path = os.path.join(d, "model.onnx")
    export_dynamo(model, torch.from_numpy(tt[:REF_BATCH]), path, "tokens", "logits")
    check_initializers(model, path)
    ref = write_reference(model, d, "tokens", "logits", tt[:REF_SAMPLES])
    return path, ref, "tokens", "logits", []


MAKERS = {"mlp": make_mlp, "cnn": make_cnn, "tiny_lm": make_tiny_lm, "mlp_dynamo": make_mlp_dynamo,
          "rope_lm": make_rope_lm}


def main(names):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in names:
        path, ref, iname, oname, notes = MAKERS[name]()
        print(f"{name}:")
        print(summary(path))
        print("  " + ort_compare(path, ref, iname, oname))
        for line in notes:
            print("  " + line)
    total = 0
    for root, _, files in os.walk(HERE):
        for f in files:
            if f.endswith((".onnx", ".npz")):
                total += os.path.getsize(os.path.join(root, f))
    print(f"total size of .onnx/.npz under models/: {total} bytes")


if __name__ == "__main__":
    args = sys.argv[1:] or list(MAKERS)
    bad = [a for a in args if a not in MAKERS]
    if bad:
        sys.exit(f"unknown model(s) {bad}; choose from {list(MAKERS)}")
    main(args)
