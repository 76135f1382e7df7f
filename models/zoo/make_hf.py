"""Make the Hugging Face part of onnxdp's model zoo: GPT-2, BERT and ViT from tiny configs, each
exported by both PyTorch exporters, with data and PyTorch's own per-step training losses.

    .venvs/torch/bin/python models/zoo/make_hf.py            # all six models
    .venvs/torch/bin/python models/zoo/make_hf.py hf_bert_dynamo hf_vit_legacy

(any python with torch, transformers, onnx, onnxscript and onnxruntime). Writes, for each model,
models/zoo/<name>/{model.onnx, data.npz, zoo.json} (the format is in models/zoo/README.md).

- The models are built from a Config object (no hub download) with transformers' own random
  initialisation after torch.manual_seed(0), the default attention implementation (sdpa: not set
  here), and every dropout probability set to 0 (PyTorch's dropout RNG cannot be matched).
- `<model>_legacy`: torch.onnx.export(..., dynamo=False); `<model>_dynamo`: dynamo=True. Both with
  their default settings except input / output names and a dynamic batch axis.
- The reference losses: PyTorch trains the same module from the same initial weights on the same
  batches (rows [i*B, (i+1)*B), no shuffling) in float32, with torch.optim.SGD or torch.optim.AdamW
  (betas (0.9, 0.999), eps 1e-8, weight_decay 0.01: onnxdp's defaults), loss = cross entropy
  averaged over every row (GPT-2: every position). Each loss is the batch's loss before that step's
  update. The module gets exactly the inputs the exported graph has (GPT-2's legacy file takes an
  all-ones attention_mask, its dynamo file none).
- `trainable` / `name_map`: every named_parameters() entry with requires_grad, as the ONNX
  initializer(s) holding it. Found by name, else by value (equal, transposed, or reshaped: the
  exporters store some weights folded under new names, and GPT-2's tied lm_head as a transposed
  copy of the embedding); a parameter the file does not hold by its own name (the legacy exporter's
  value deduplication turns it into an Identity of an equal initializer; the dynamo exporter drops
  zero biases and merges equal initializers) keeps its own name: onnxdp unties / restores it.
  A parameter held by two initializers (GPT-2's lm_head, tied to the token embedding, is stored
  again transposed for the logits MatMul) is listed once, under the copy that equals it; the
  other goes in `tied` (initializer -> "<the trained copy> transposed"): onnxdp must train it as
  that tensor's transpose, not as a parameter of its own.

Deterministic: the same versions give the same files byte for byte (npz with fixed timestamps).
"""
import json
import os
import sys
import collections
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F
import transformers
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from npz_util import save_npz  # noqa: E402  (models/npz_util.py)

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# The models: each spec gives a fresh seeded module, the graph inputs per exporter (forward's
# arguments, passed positionally to the exporters), the data and the training runs.

def gpt2_config():
    return transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                                  bos_token_id=0, eos_token_id=0)


def gpt2_model():
    torch.manual_seed(SEED)
    return transformers.GPT2LMHeadModel(gpt2_config())


class GPT2Legacy(transformers.GPT2LMHeadModel):
    """GPT2LMHeadModel with forward(input_ids, attention_mask) only, for the legacy exporter: it
    appends every defaulted argument of forward's signature to the traced inputs, and
    transformers 5.x's `logits_to_keep: int = 0` then becomes a graph input whose tensor 0 makes the
    graph return the logits of position 0 only ([B, V]). Same parameters, same names."""

    def forward(self, input_ids, attention_mask):
        return super().forward(input_ids=input_ids, attention_mask=attention_mask)


def gpt2_legacy_model():
    torch.manual_seed(SEED)
    return GPT2Legacy(gpt2_config())


def gpt2_data(rows):
    # Sequences of 17 tokens: repeated motifs of length 2..6 (learnable), input = the first 16,
    # label = the next token at every position.
    rng = np.random.default_rng(SEED)
    seq = np.empty((rows, 17), np.int64)
    for r in range(rows):
        motif = rng.integers(1, 64, rng.integers(2, 7))
        seq[r] = np.resize(motif, 17)
    return {"input_ids": seq[:, :16]}, seq[:, 1:]


def bert_model():
    torch.manual_seed(SEED)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=16, type_vocab_size=2,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  num_labels=3, pad_token_id=0)
    return transformers.BertForSequenceClassification(cfg)


def bert_data(rows):
    # [CLS]=1 a.. [SEP]=2 b.. [SEP]=2 then padding 0 (mask 0); lengths 5..16; token types 0 for the
    # first segment, 1 for the second, 0 on padding.
    rng = np.random.default_rng(SEED + 1)
    ids = np.zeros((rows, 16), np.int64)
    mask = np.zeros((rows, 16), np.int64)
    types = np.zeros((rows, 16), np.int64)
    for r in range(rows):
        n = int(rng.integers(5, 17))
        a = int(rng.integers(1, n - 3))
        ids[r, :n] = rng.integers(3, 64, n)
        ids[r, 0] = 1
        ids[r, a + 1] = 2
        ids[r, n - 1] = 2
        mask[r, :n] = 1
        types[r, a + 2:n] = 1
    label = rng.integers(0, 3, rows).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, label


def vit_model():
    torch.manual_seed(SEED)
    cfg = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                                 num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=4)
    return transformers.ViTForImageClassification(cfg)


def vit_data(rows):
    rng = np.random.default_rng(SEED + 2)
    x = rng.standard_normal((rows, 3, 16, 16)).astype(np.float32)
    return {"pixel_values": x}, rng.integers(0, 4, rows).astype(np.int64)


SPECS = {
    "gpt2": dict(make=gpt2_model, data=gpt2_data, batch=8, steps=10, sgd_lr=0.1, adamw_lr=3e-3,
                 source="transformers GPT2LMHeadModel, tiny config: n_layer 2, n_embd 32, n_head 2, vocab 64, "
                        "n_positions 16, dropouts 0, use_cache False, lm_head tied to wte (the default); "
                        "random init (torch.manual_seed(0)); label = next tokens",
                 # legacy: transformers 5.x's mask code fails on aten::diff without an attention_mask
                 args={"legacy": ["input_ids", "attention_mask"], "dynamo": ["input_ids"]},
                 export_make={"legacy": gpt2_legacy_model}),
    "bert": dict(make=bert_model, data=bert_data, batch=8, steps=10, sgd_lr=0.1, adamw_lr=3e-3,
                 source="transformers BertForSequenceClassification, tiny config: 2 layers, hidden 32, 2 heads, "
                        "intermediate 64, vocab 64, 16 positions, 3 labels, dropouts 0; random init "
                        "(torch.manual_seed(0)); padded sequences of 5..16 tokens (pad id 0, attention_mask 0)",
                 args={"legacy": ["input_ids", "attention_mask", "token_type_ids"],
                       "dynamo": ["input_ids", "attention_mask", "token_type_ids"]}),
    "vit": dict(make=vit_model, data=vit_data, batch=4, steps=10, sgd_lr=0.02, adamw_lr=3e-3,
                source="transformers ViTForImageClassification, tiny config: image 16x16, patch 4, 3 channels, "
                       "hidden 32, 2 layers, 2 heads, intermediate 64, 4 labels, dropouts 0; random init "
                       "(torch.manual_seed(0)); pixel_values standard normal",
                args={"legacy": ["pixel_values"], "dynamo": ["pixel_values"]}),
}


def call(model, arg_names, batch):
    """The module's logits for a batch of graph inputs (name -> array)."""
    return model(**{a: torch.from_numpy(batch[a]) for a in arg_names}).logits


def full_inputs(spec, exporter, rows):
    inputs, label = spec["data"](rows)
    if "attention_mask" in spec["args"][exporter] and "attention_mask" not in inputs:
        inputs["attention_mask"] = np.ones_like(inputs["input_ids"])
    return {n: inputs[n] for n in spec["args"][exporter]}, label


# ---------------------------------------------------------------------------------------------
# Export

def export(model, spec, exporter, inputs, path):
    names = spec["args"][exporter]
    args = tuple(torch.from_numpy(inputs[a][:2]) for a in names)
    model.eval()
    if exporter == "legacy":
        axes = {n: {0: "batch"} for n in names + ["logits"]}
        torch.onnx.export(model, args, path, dynamo=False, input_names=names, output_names=["logits"],
                          dynamic_axes=axes)
    else:
        batch = torch.export.Dim("batch")
        shapes = tuple({0: batch} for a in names)
        torch.onnx.export(model, args, path, dynamo=True, input_names=names, output_names=["logits"],
                          dynamic_shapes=shapes)
    model.train()


# ---------------------------------------------------------------------------------------------
# PyTorch's own training

def reference_losses(spec, exporter, inputs, label, optimizer, lr):
    model = spec["make"]()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr)
    else:
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    B, losses = spec["batch"], []
    for step in range(spec["steps"]):
        rows = slice(step * B, (step + 1) * B)
        logits = call(model, spec["args"][exporter], {n: v[rows] for n, v in inputs.items()})
        y = torch.from_numpy(label[rows])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses


# ---------------------------------------------------------------------------------------------
# Which initializers hold which parameters

def find_parameters(model, onnx_model):
    """(trainable ONNX names, {onnx name: parameter name} where they differ, {tied copy: what it
    copies}, notes)."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    identity_of = {n.output[0]: n.input[0] for n in onnx_model.graph.node
                   if n.op_type == "Identity" and n.input[0] in inits}
    params = [(n, p.detach().numpy()) for n, p in model.named_parameters() if p.requires_grad]
    trainable, name_map, tied, notes = [], {}, {}, []

    def same(a, v):
        if a.dtype != v.dtype or a.size != v.size:
            return None
        if np.array_equal(a.reshape(-1), v.reshape(-1)):
            return "equal" if a.shape == v.shape else f"reshaped {list(v.shape)} -> {list(a.shape)}"
        if v.ndim == 2 and a.shape == v.T.shape and np.array_equal(a, v.T):
            return "transposed"
        return None

    for name, v in params:
        held = []  # (initializer, how it holds the parameter)
        if name in inits and same(inits[name], v) == "equal":
            held.append((name, "equal"))
        if np.unique(v).size > 1:  # a random tensor: find its copies by value
            held += [(iname, same(a, v)) for iname, a in inits.items() if iname != name and same(a, v)]
        if not held:
            if name in identity_of:
                notes.append(f"{name} = Identity({identity_of[name]}) (the legacy exporter merged equal initializers)")
            else:
                notes.append(f"{name} is not in the file (dropped or merged by the exporter)")
            held.append((name, "equal"))
        # A parameter held twice is a tie (GPT-2's lm_head reads the embedding transposed): the
        # copy that equals it trains, the other must become that tensor's transpose.
        held.sort(key=lambda h: (h[1] != "equal", h[0] != name))
        primary, how = held[0]
        trainable.append(primary)
        if primary != name:
            name_map[primary] = name
            notes.append(f"{primary} holds {name} ({how})")
        for iname, how in held[1:]:
            tied[iname] = f"{primary} {how}"
            notes.append(f"{iname} holds {name} ({how}): a tied copy of {primary}")
    return sorted(trainable), dict(sorted(name_map.items())), dict(sorted(tied.items())), notes


def op_histogram(onnx_model):
    c = collections.Counter(n.op_type for n in onnx_model.graph.node)
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


# ---------------------------------------------------------------------------------------------

def make(name):
    base, exporter = name[len("hf_"):].rsplit("_", 1)
    spec = SPECS[base]
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    rows = spec["batch"] * spec["steps"]
    inputs, label = full_inputs(spec, exporter, rows)

    path = os.path.join(out, "model.onnx")
    export(spec.get("export_make", {}).get(exporter, spec["make"])(), spec, exporter, inputs, path)
    m = onnx.load(path)
    save_npz(os.path.join(out, "data.npz"), {**inputs, "label": label})

    # The exported graph computes what the module does (ONNX Runtime, first batch).
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: inputs[i.name][:spec["batch"]] for i in sess.get_inputs()}
    got = sess.run(["logits"], feed)[0]
    model = spec["make"]()
    model.eval()
    with torch.no_grad():
        want = call(model, spec["args"][exporter], {n: v[:spec["batch"]] for n, v in inputs.items()}).numpy()
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))

    common = ["--loss", "cross_entropy", "--label", "label", "--batch-size", str(spec["batch"]),
              "--steps", str(spec["steps"]), "--no-shuffle"]
    runs = []
    for opt, lr in (("sgd", spec["sgd_lr"]), ("adamw", spec["adamw_lr"])):
        runs.append({"name": opt, "args": common + ["--optimizer", opt, "--lr", repr(lr)],
                     "losses": reference_losses(spec, exporter, inputs, label, opt, lr)})
    trainable, name_map, tied, notes = find_parameters(spec["make"](), m)
    info = {
        "source": spec["source"],
        "framework": f"torch {torch.__version__.split('+')[0]} / transformers {transformers.__version__}",
        "exporter": "torch legacy (dynamo=False)" if exporter == "legacy" else "torch dynamo",
        "runs": runs,
        "trainable": trainable,
        "name_map": name_map,
    }
    if tied:  # not in the common format: initializers that hold a parameter another one holds
        info["tied"] = tied
    with open(os.path.join(out, "zoo.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(f"== {name}: {os.path.getsize(path)} bytes, opset {m.opset_import[0].version}, "
          f"inputs {[i.name for i in m.graph.input]}, ORT vs torch {err:.1e}")
    print("   ops", op_histogram(m))
    for n in notes:
        print("  ", n)
    for r in runs:
        print(f"   {r['name']}: {r['losses'][0]:.6f} -> {r['losses'][-1]:.6f}")


ALL = [f"hf_{m}_{e}" for m in SPECS for e in ("legacy", "dynamo")]

if __name__ == "__main__":
    for name in sys.argv[1:] or ALL:
        if name not in ALL:
            sys.exit(f"unknown model {name}; one of {ALL}")
        make(name)
