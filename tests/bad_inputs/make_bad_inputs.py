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
import os
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

    print("wrote", sorted(f for f in os.listdir(HERE) if not f.endswith(".py")))


if __name__ == "__main__":
    main()
