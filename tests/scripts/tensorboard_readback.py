"""Reads back the TensorBoard event files onnxdp wrote into DIR, with the `tensorboard` package.

Usage: tensorboard_readback.py DIR

Checks every TFRecord's framing (lengths and masked CRC-32Cs, with tensorboard's own crc32c),
then loads DIR with TensorBoard's EventAccumulator and prints what it found, one fact a line:
    files N                              (event files; each one's framing is checked)
    records N                            (all files together)
    file_version 2.0
    scalar TAG STEP VALUE WALL_TIME      (for each tag, sorted; steps in file order)
The C++ test (tests/train/test_tensorboard.cpp) compares these lines with what it wrote. Exits 1
with a message when the package is missing or a check fails: a missing tool is a failure here,
not a skip.
"""
import glob
import os
import struct
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tensorboard_readback.py DIR")
    d = sys.argv[1]
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    except ImportError as e:
        sys.exit(f"tensorboard_readback: the tensorboard package is missing ({e}); scripts/setup installs it")

    files = sorted(glob.glob(os.path.join(d, "events.out.tfevents.*")))
    print(f"files {len(files)}")
    if not files:
        sys.exit(f"tensorboard_readback: no event file in {d}")

    # TFRecord framing: u64 length, u32 masked crc of the length bytes, data, u32 masked crc of data.
    records = 0
    for path in files:  # a resumed run adds a file; TensorBoard reads them all
        blob = open(path, "rb").read()
        pos = 0
        while pos < len(blob):
            if pos + 12 > len(blob):
                sys.exit(f"tensorboard_readback: {path}: truncated record header at byte {pos}")
            header = blob[pos:pos + 8]
            (length,) = struct.unpack("<Q", header)
            (hcrc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
            if hcrc != masked_crc32c(header):
                sys.exit(f"tensorboard_readback: {path}: record at byte {pos}: bad length crc")
            data = blob[pos + 12:pos + 12 + length]
            if len(data) != length or pos + 16 + length > len(blob):
                sys.exit(f"tensorboard_readback: {path}: record at byte {pos}: truncated data")
            (dcrc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
            if dcrc != masked_crc32c(data):
                sys.exit(f"tensorboard_readback: {path}: record at byte {pos}: bad data crc")
            pos += 16 + length
            records += 1
    print(f"records {records}")

    acc = ea.EventAccumulator(d, size_guidance={ea.SCALARS: 0})  # 0: keep every point
    acc.Reload()
    print(f"file_version {acc.file_version}")
    for tag in sorted(acc.Tags()[ea.SCALARS]):
        for s in acc.Scalars(tag):
            print(f"scalar {tag} {s.step} {s.value:.6g} {s.wall_time:.3f}")


if __name__ == "__main__":
    main()
