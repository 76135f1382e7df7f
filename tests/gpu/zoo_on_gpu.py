#!/usr/bin/env python3
"""Trains every run of the model zoo (models/zoo/*/zoo.json) on a device, as tests/train/test_zoo.cpp
does on the CPU, and compares every step's loss with the framework's reference losses in zoo.json.

    tests/gpu/zoo_on_gpu.py --onnxdp build-gpu/onnxdp [--devices cuda:0] [--tol 1e-5] [--md FILE]

Prints one line per run (steps, worst relative difference, the ops the trainer says run on the CPU
with copies) and a summary; exit status 1 when any run fails or differs by more than --tol.
Only the standard library: it runs on a bare GPU host.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
ZOO = ROOT / "models" / "zoo"


def losses_of(metrics: pathlib.Path):
    return [json.loads(line)["loss"] for line in metrics.read_text().splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnxdp", required=True)
    ap.add_argument("--devices", default="cuda:0")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--md", help="also write the table as markdown here")
    a = ap.parse_args()

    rows, bad = [], 0
    with tempfile.TemporaryDirectory(prefix="onnxdp_zoo_gpu_") as tmp:
        for d in sorted(p for p in ZOO.iterdir() if p.is_dir() and (p / "zoo.json").exists()):
            manifest = json.loads((d / "zoo.json").read_text())
            for run in manifest["runs"]:
                out = pathlib.Path(tmp) / f"{d.name}_{run['name']}"
                cmd = [a.onnxdp, "train", str(d / "model.onnx"), "--data", str(d / "data.npz"), *run["args"],
                       "--devices", a.devices, "--output-dir", str(out), "--report-to", "jsonl"]
                t0 = time.time()
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                secs = time.time() - t0
                text = p.stdout + p.stderr
                m = re.search(r"ops without a kernel there run on the CPU with copies \(slow\): ([^\n]*)", text)
                host_ops = m.group(1).strip() if m else ("none" if "every op runs there" in text else "?")
                if p.returncode != 0:
                    bad += 1
                    tail = " | ".join(text.strip().splitlines()[-3:])
                    rows.append((d.name, run["name"], "FAILED", "-", host_ops, f"{secs:.1f}s rc {p.returncode}: {tail}"))
                    continue
                got, want = losses_of(out / "metrics.jsonl"), run["losses"]
                worst = max((abs(g - w) / max(abs(w), 1e-30) for g, w in zip(got, want)), default=float("nan"))
                ok = len(got) == len(want) and worst <= a.tol
                bad += not ok
                rows.append((d.name, run["name"], "ok" if ok else "DIFFERS", f"{len(got)}/{len(want)} steps, worst {worst:.2e}",
                             host_ops, f"{secs:.1f}s"))

    header = ("model", "run", "result", "losses vs framework", "ops on the CPU with copies", "time")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    summary = f"zoo on {a.devices}: {len(rows) - bad} of {len(rows)} runs within {a.tol:g} of the framework's losses"
    print("\n".join(lines))
    print(summary)
    if a.md:
        pathlib.Path(a.md).write_text("\n".join(lines) + "\n\n" + summary + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
