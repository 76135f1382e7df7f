#!/usr/bin/env python3
"""A big graph's load time and memory: the GPT-2-small-shaped model (bench_models.GPT2_SMALL,
163 M parameters, legacy export) through `onnxdp inspect --train` (import, autodiff, plan) and
a short training run, against the memory the run reports.

    PYTHON=.venvs/torch/bin/python; $PYTHON bench/load.py [--onnxdp build/onnxdp] [--workdir DIR]
                                                          [--repeats 3] [--steps 2] [--out FILE.md]

Figures: `inspect --train` wall time and peak RSS (median of --repeats); the training run's wall
time, ms/step of its last steps, peak RSS, and the per-replica memory its summary reports
(activations, parameters + gradients + optimizer state), with peak RSS / reported. The export is
cached in --workdir (default: a temporary folder). Needs torch (the export), onnx and numpy.
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness as h  # noqa: E402

MODEL = "gpt2_small"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnxdp", default=os.path.join(h.ROOT, "build", "onnxdp"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the table here too (Markdown)")
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="onnxdp-load-")
    d = os.path.join(work, MODEL)
    onnx_path, npz_path = os.path.join(d, "model.onnx"), os.path.join(d, "data.npz")
    if not (os.path.exists(onnx_path) and os.path.exists(npz_path)):
        print(f"exporting {MODEL} to {d} ...", flush=True)
        h.prepare(MODEL, work, batch=1, batches_of_data=a.steps)
    size_mb = os.path.getsize(onnx_path) / 2**20
    env = h.thread_env(2)

    inspect = []
    for r in range(a.repeats):
        rc, wall, rss, err = h.run_child([a.onnxdp, "inspect", "--train", "--batch-size", "1", onnx_path], env,
                                         os.path.join(d, f"inspect-{r}"))
        if rc != 0:
            raise SystemExit(f"onnxdp inspect --train failed ({rc}): {err}")
        inspect.append((wall, rss))

    metrics = os.path.join(d, "train.jsonl")
    cmd = h.onnxdp_cmd(a.onnxdp, onnx_path, npz_path, 1, a.steps, 1e-3, "cpu", metrics)
    cmd.remove("--quiet")
    rc, wall, rss, err = h.run_child(cmd, env, os.path.join(d, "train"))
    if rc != 0:
        raise SystemExit(f"onnxdp train failed ({rc}): {err}")
    with open(os.path.join(d, "train.out")) as f:
        out = f.read()
    held = re.search(r"holds ([0-9.]+) MiB per replica \(activations[^0-9]*([0-9.]+), parameters \+ gradients \+ "
                     r"optimizer state ([0-9.]+)\)", out)
    reported = float(held.group(1)) if held else float("nan")
    rows = h.read_metrics(metrics)
    step_ms = [1000.0 / r["samples_per_s"] for r in rows if r.get("samples_per_s")][1:]  # batch 1; the first step plans

    lines = [
        f"# Load time and memory: {MODEL} ({size_mb:.0f} MB .onnx), {datetime.date.today()}",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
        f"2 threads. Command: `bench/load.py --repeats {a.repeats} --steps {a.steps}`.",
        "",
        "| what | figure |",
        "|---|---|",
        f"| `inspect --train` (import, autodiff, plan), median of {a.repeats} | "
        f"{statistics.median(w for w, _ in inspect):.2f} s, peak RSS {statistics.median(r for _, r in inspect):.0f} MB |",
        f"| `train --steps {a.steps} --batch-size 1` | {wall:.1f} s wall, peak RSS {rss:.0f} MB |",
        f"| memory the run reports per replica | {reported:.0f} MiB"
        + (f" (activations {held.group(2)}, parameters + gradients + optimizer state {held.group(3)})" if held else "")
        + " |",
        f"| peak RSS / reported | {rss / reported:.2f} |",
        f"| ms/step after the first | {statistics.median(step_ms):.0f} |" if step_ms else "| ms/step | (no timing) |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
