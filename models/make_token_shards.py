#!/usr/bin/env python3
"""Makes a small token-shard corpus in llm.c's format, to test and demo `onnxdp train --data 'train_*.bin'`.

The text is the license files that the installed numpy package ships (its dist-info folder:
numpy's own license and those of the code it bundles), a few tens of KB of English. Tokens are
characters in a vocabulary of 32, which fits the sample LMs (models/tiny_lm, models/rope_lm:
vocab 32, context 16):
  0..25 'a'..'z' (upper case folded), 26 ' ' (any run of white space but newlines), 27 newline,
  28 '.', 29 ',', 30 a digit, 31 anything else.

Each shard is llm.c's .bin: a header of 256 int32 (magic 20240520, version 1, the token count,
then zeros), then the tokens as uint16, little-endian. The last `--val-tokens` tokens go to
val_000.bin, the rest to train_000.bin, train_001.bin, ... of `--shard-tokens` tokens each.

    python3 models/make_token_shards.py --out /tmp/corpus
    onnxdp train models/tiny_lm/model.onnx --data '/tmp/corpus/train_*.bin' --eval-data /tmp/corpus/val_000.bin

Only the Python standard library is used (numpy is the text's source, not imported).
"""
import argparse
import array
import importlib.metadata
import os
import re
import struct
import sys

MAGIC, VERSION = 20240520, 1


def package_text(package):
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"make_token_shards: the Python package '{package}' is not installed (its license files are the text)")
    names = sorted(str(f) for f in dist.files or [] if re.search(r"(LICEN[CS]E|COPYING)", str(f).upper()))
    texts = []
    for name in names:
        path = dist.locate_file(name)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        except OSError:
            continue
    if not texts:
        sys.exit(f"make_token_shards: the package '{package}' ships no license text to read")
    return "\n".join(texts)


def tokenize(text):
    out = []
    for ch in re.sub(r"[ \t\r\f\v]+", " ", text.lower()):
        if "a" <= ch <= "z":
            out.append(ord(ch) - ord("a"))
        elif ch == " ":
            out.append(26)
        elif ch == "\n":
            out.append(27)
        elif ch == ".":
            out.append(28)
        elif ch == ",":
            out.append(29)
        elif ch.isdigit():
            out.append(30)
        else:
            out.append(31)
    return out


def write_shard(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        words = array.array("H", tokens)
        if sys.byteorder == "big":
            words.byteswap()  # the format is little-endian
        f.write(words.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for train_NNN.bin and val_000.bin")
    ap.add_argument("--package", default="numpy", help="the installed Python package whose license text is the corpus")
    ap.add_argument("--shard-tokens", type=int, default=8192, help="tokens per training shard")
    ap.add_argument("--val-tokens", type=int, default=2048, help="tokens held out in val_000.bin")
    ap.add_argument("--repeat", type=int, default=1, help="the text this many times over (a large corpus for memory tests)")
    a = ap.parse_args()
    tokens = tokenize(package_text(a.package)) * max(1, a.repeat)
    if len(tokens) < a.val_tokens + 2 * 17:
        sys.exit(f"make_token_shards: the text gives {len(tokens)} tokens, too few for {a.val_tokens} held out")
    os.makedirs(a.out, exist_ok=True)
    train, val = tokens[: -a.val_tokens], tokens[-a.val_tokens :]
    shards = [train[i : i + a.shard_tokens] for i in range(0, len(train), a.shard_tokens)]
    if len(shards) > 1 and len(shards[-1]) < 17:  # too short for one window of the sample LMs: joined to the one before
        shards[-2] += shards.pop()
    for k, shard in enumerate(shards):
        write_shard(os.path.join(a.out, f"train_{k:03d}.bin"), shard)
    write_shard(os.path.join(a.out, "val_000.bin"), val)
    print(f"make_token_shards: {len(tokens)} tokens of {a.package}'s license text: {len(shards)} training shards "
          f"({len(train)} tokens), val_000.bin ({len(val)} tokens) in {a.out}")


if __name__ == "__main__":
    main()
