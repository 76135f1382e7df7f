#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/) into OUT/<target>/:

    python3 tests/fuzz/make_seeds.py OUT [MAX_BYTES]

fuzz_model       every .onnx of models/, tests/bad_models/, tests/bad_inputs/ and tests/fixtures/
                 of at most MAX_BYTES (default 65536)
fuzz_npz         every .npz of the same folders, of at most MAX_BYTES
fuzz_checkpoint  checkpoints written here in onnxdp's format (trainer_state.json, then
                 model.safetensors and optimizer.safetensors, split as fuzz_checkpoint.cpp reads
                 them): with and without recorded checksums, every dtype, a scalar, an empty tensor
fuzz_metrics     metrics.jsonl lines as `onnxdp train` writes them, and tests/bad_inputs/*.jsonl
fuzz_config      TOML configs of every form cli/config_file.h accepts, and tests/bad_inputs/*.toml
Files are named by the SHA-1 of their bytes, as libFuzzer names corpus files. Standard library only.
"""
import hashlib
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEPARATOR = b"\n#onnxdp-fuzz-next-file#\n"  # fuzz_checkpoint.cpp's kSeparator
FOLDERS = ["models", "tests/bad_models", "tests/bad_inputs", "tests/fixtures"]


def put(out, target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def repo_files(ext, max_bytes):
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            for n in sorted(names):
                p = os.path.join(dirpath, n)
                if n.endswith(ext) and os.path.isfile(p) and os.path.getsize(p) <= max_bytes:
                    with open(p, "rb") as f:
                        yield f.read()


def safetensors(tensors):
    """tensors: name -> (dtype, shape, raw bytes); as train/checkpoint.cpp writes them."""
    header, blob = {}, b""
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (len(h) + 8) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def checkpoint(model, optimizer, checksums, extra=None):
    state = {"step": 3, "epoch": 0, "cursor": 6, "seed": 0, "shuffle": True, "optimizer_steps": 3}
    state.update(extra or {})
    if checksums:
        state["files"] = {n: {"bytes": len(b), "fnv1a64": fnv1a64(b)}
                          for n, b in (("model.safetensors", model), ("optimizer.safetensors", optimizer))}
    return json.dumps(state, indent=2).encode() + b"\n" + SEPARATOR + model + SEPARATOR + optimizer


def checkpoint_seeds():
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    model = safetensors({"W": ("F32", [3, 2], f32(0.5, -1, 2, 0.25, -1.5, 3)), "b": ("F32", [2], f32(0.125, -0.75))})
    opt = safetensors({"W.m": ("F32", [3, 2], f32(*[0.0] * 6)), "W.v": ("F32", [3, 2], f32(*[0.0] * 6)),
                       "b.m": ("F32", [2], f32(0, 0)), "b.v": ("F32", [2], f32(0, 0))})
    every = safetensors({"f64": ("F64", [2], struct.pack("<2d", 1.5, -2)), "f16": ("F16", [1], b"\x00\x3c"),
                         "bf16": ("BF16", [1], b"\x80\x3f"), "i64": ("I64", [2], struct.pack("<2q", 7, -1)),
                         "i32": ("I32", [1], struct.pack("<i", 3)), "i8": ("I8", [2], b"\x01\xff"),
                         "u8": ("U8", [1], b"\x09"), "bool": ("BOOL", [2], b"\x00\x01"),
                         "scalar": ("F32", [], f32(4)), "empty": ("F32", [0, 3], b"")})
    # A header with __metadata__, as safetensors files written by other tools have.
    h = {"__metadata__": {"format": "pt"}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    hb = json.dumps(h).encode()
    with_meta = struct.pack("<Q", len(hb)) + hb + f32(1, 2)
    return [checkpoint(model, opt, True), checkpoint(model, opt, False),
            checkpoint(every, safetensors({}), False), checkpoint(every, with_meta, True),
            checkpoint(model, opt, True, {"loss_scale": 65536.0, "loss_scale_growth_tracker": 2})]


def metrics_seeds():
    lines = [{"step": s, "epoch": 0, "loss": 2.3 / s, "lr": 0.001, "grad_norm": 1.5, "samples_per_s": 812.5,
              "comm_wait_ms": 0.25} for s in range(1, 6)]
    lines[2]["eval_loss"], lines[2]["eval_accuracy"] = 1.1, 0.5
    yield "".join(json.dumps(l) + "\n" for l in lines).encode()
    yield b'{"step": 1, "loss": null}\n\n{"step": 2, "loss": 1e308, "lr": -0.0}\n'
    yield b'{"step": 1, "loss": 2.0, "lr": 0.1}\n{"step": 1, "loss": NaN}\n'


CONFIGS = [
    b"# Hugging Face spelling\nlearning_rate = 3e-4\nbatch-size = 64\nnum_train_epochs = 3\nnesterov = true\n"
    b"freeze = [\"^conv1\", \"bn\"]\n",
    b"[train]\nlr = 0.5\nbatch_size = 16\nepochs = 4\nseed = 7\nmixed_precision = \"bf16\"\n",
    b"steps = 10\nepochs = 2\n",
    b"max_steps = 100\n\n[train]\nfreeze = ['a', \"b\"]  # a comment\nnesterov = false\n",
    b"lr = \"abc\"\nbatch_size = 1e23\n[other]\nx = 1\n",
    b"'quoted key' = 1\n\"lr\" = 0.1\nfreeze = [\n  \"x\",\n  \"y\",\n]\n",
]


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    out = sys.argv[1]
    max_bytes = int(sys.argv[2]) if len(sys.argv) == 3 else 65536
    for data in repo_files(".onnx", max_bytes):
        put(out, "fuzz_model", data)
    for data in repo_files(".npz", max_bytes):
        put(out, "fuzz_npz", data)
    for data in checkpoint_seeds():
        put(out, "fuzz_checkpoint", data)
    for data in list(metrics_seeds()) + list(repo_files(".jsonl", max_bytes)):
        put(out, "fuzz_metrics", data)
    for data in CONFIGS + list(repo_files(".toml", max_bytes)):
        put(out, "fuzz_config", data)
    for t in sorted(os.listdir(out)):
        print(f"{t}: {len(os.listdir(os.path.join(out, t)))} seeds")


if __name__ == "__main__":
    main()
