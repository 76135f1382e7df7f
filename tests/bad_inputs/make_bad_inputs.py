#!/usr/bin/env python3
"""Writes the bad-input corpus of the readers other than the model loader (tests/bad_models/ has
the models): .npz data, metrics logs, checkpoints, TOML configs. tests/train/test_bad_inputs.cpp
reads each and checks the error names the culprit; scripts/fuzz seeds its targets with them. Run
once; the outputs are committed:

    python3 tests/bad_inputs/make_bad_inputs.py      # writes beside this script

Each file is the smallest form of one finding (of the fuzz targets, or of issue 22's hostile
inputs); its comment below says what it is. Standard library only.
"""
import io
import json
import os
import struct
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def npy_header(descr, shape):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(d).to_bytes(2, "little") + d.encode()


def zip_one(name, data, method):
    """A zip archive of one member, its date fixed so that the bytes are the same every run."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = method
        z.writestr(info, data)
    return out.getvalue()


def safetensors(header, data=b""):
    """A safetensors file: 8-byte little-endian header length, the JSON header, the data."""
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def checkpoint(name, state, model, optimizer=None):
    """A checkpoint folder as onnxdp writes one, of a model with one tensor W."""
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    files = {"trainer_state.json": json.dumps(state, indent=2).encode() + b"\n", "model.safetensors": model,
             "optimizer.safetensors": optimizer if optimizer is not None else safetensors({})}
    for f, data in files.items():
        with open(os.path.join(d, f), "wb") as out:
            out.write(data)


STATE = {"step": 2, "epoch": 0, "cursor": 4, "seed": 0, "shuffle": True, "optimizer_steps": 2}
W = struct.pack("<2f", 0.5, -1.0)


def main():
    # A bzip2 member of 300 MiB of float32 zeros in a file of a few hundred bytes: a zip bomb
    # (deflate stops near 1032x; bzip2 goes past 500000x). Before onnxdp checked what an archive
    # inflates to against its size, reading it took 300 MiB, and a larger one any amount.
    n = 300 << 18  # float32 elements: 300 MiB
    data = npy_header("<f4", "(%d,)" % n) + bytes(n * 4)
    write("npz_bzip2_bomb.npz", zip_one("x.npy", data, zipfile.ZIP_BZIP2))

    # A number past a double's range in a metrics log (found by fuzz_metrics): the JSON reader's
    # out_of_range escaped `onnxdp plot` as an exception that was not onnxdp's error.
    write("metrics_number_overflow.jsonl", b'{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 2e308}\n')

    # A safetensors tensor whose shape claims 2^61 float32 (8 EiB) over data_offsets spanning 8
    # bytes: the reader allocated the shape before comparing it with the offsets.
    checkpoint("checkpoint_shape_past_offsets", STATE,
               safetensors({"W": {"dtype": "F32", "shape": [1 << 61], "data_offsets": [0, 8]}}, W))
    # A dimension written as a float (1e30): nlohmann's conversion to int64 is undefined behaviour.
    checkpoint("checkpoint_float_dimension", STATE,
               safetensors({"W": {"dtype": "F32", "shape": [1e30], "data_offsets": [0, 8]}}, W))
    # Recorded file sizes of the wrong JSON type: nlohmann's type_error escaped as an exception that
    # was not onnxdp's error.
    checkpoint("checkpoint_files_bytes_string", dict(STATE, files={
        "model.safetensors": {"bytes": "8", "fnv1a64": "0"}, "optimizer.safetensors": {"bytes": 8, "fnv1a64": "0"}}),
        safetensors({"W": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, W))
    checkpoint("checkpoint_files_not_object", dict(STATE, files=5),
               safetensors({"W": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, W))

    # fp16's loss scale past float's range (and a string): converting it was undefined behaviour,
    # and a string escaped as nlohmann's type_error.
    checkpoint("checkpoint_loss_scale_past_float", dict(STATE, loss_scale=1e300, loss_scale_growth_tracker=0),
               safetensors({"W": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, W))

    print("wrote", sorted(f for f in os.listdir(HERE) if not f.endswith(".py")))


if __name__ == "__main__":
    main()
