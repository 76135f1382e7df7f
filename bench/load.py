#!/usr/bin/env python3
"""A big graph's load time and memory: the GPT-2-small-shaped model (bench_models.GPT2_SMALL,
163 M parameters, legacy export) through `onnxdp inspect --train` (import, autodiff, plan) and
a short training run, against the memory the run reports.

    PYTHON=.venvs/torch/bin/python; $PYTHON bench/load.py [--onnxdp build/onnxdp] [--baseline OLD_ONNXDP]
                                     [--workdir DIR] [--logs DIR] [--repeats 3] [--steps 2] [--out FILE.md]

Figures: `inspect --train` wall time and peak RSS (median of --repeats); the training run's wall
time, ms/step of its last steps, peak RSS, and the per-replica memory its summary reports
(activations, parameters + gradients + optimizer state), with peak RSS / reported, and the host
memory the summary names besides. With --baseline, the same for an older binary first (before /
after). The export is cached in --workdir (default: a temporary folder), which is only read once
it holds the export; the runs' logs go to --logs. Needs torch (the export), onnx and numpy.
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


def measure(onnxdp, onnx_path, npz_path, logs, env, repeats, steps):
    """One binary's figures: inspect --train (median of repeats) and a short training run."""
    os.makedirs(logs, exist_ok=True)
    inspect = []
    for r in range(repeats):
        rc, wall, rss, err = h.run_child([onnxdp, "inspect", "--train", "--batch-size", "1", onnx_path], env,
                                         os.path.join(logs, f"inspect-{r}"))
        if rc != 0:
            raise SystemExit(f"{onnxdp} inspect --train failed ({rc}): {err}")
        inspect.append((wall, rss))

    metrics = os.path.join(logs, "train.jsonl")
    cmd = h.onnxdp_cmd(onnxdp, onnx_path, npz_path, 1, steps, 1e-3, "cpu", metrics)
    cmd.remove("--quiet")
    rc, wall, rss, err = h.run_child(cmd, env, os.path.join(logs, "train"))
    if rc != 0:
        raise SystemExit(f"{onnxdp} train failed ({rc}): {err}")
    with open(os.path.join(logs, "train.out")) as f:
        out = f.read()
    held = re.search(r"holds ([0-9.]+) MiB per replica \(activations[^0-9]*([0-9.]+), parameters \+ gradients \+ "
                     r"optimizer state ([0-9.]+)\)", out)
    besides = re.search(r"host memory besides: (.*)", out)  # onnxdp after issue 24's item 3
    rows = h.read_metrics(metrics)
    step_ms = [1000.0 / r["samples_per_s"] for r in rows if r.get("samples_per_s")][1:]  # batch 1; the first step plans
    return {
        "inspect_s": statistics.median(w for w, _ in inspect),
        "inspect_rss": statistics.median(r for _, r in inspect),
        "train_s": wall, "train_rss": rss,
        "reported": float(held.group(1)) if held else float("nan"),
        "held": held.groups() if held else None,
        "besides": besides.group(1).strip() if besides else "(not reported)",
        "step_ms": statistics.median(step_ms) if step_ms else float("nan"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnxdp", default=os.path.join(h.ROOT, "build", "onnxdp"))
    ap.add_argument("--baseline", default=None, help="another onnxdp binary measured the same way first (before/after)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--logs", default=None, help="the runs' logs and outputs (default: a temporary folder)")
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
    logs = a.logs or tempfile.mkdtemp(prefix="onnxdp-load-logs-")

    runs = []  # (label, figures)
    if a.baseline:
        runs.append(("before", measure(a.baseline, onnx_path, npz_path, os.path.join(logs, "before"), env, a.repeats,
                                       a.steps)))
    runs.append(("after" if a.baseline else "onnxdp",
                 measure(a.onnxdp, onnx_path, npz_path, os.path.join(logs, "after"), env, a.repeats, a.steps)))

    def row(what, fmt):
        return f"| {what} | " + " | ".join(fmt(f) for _, f in runs) + " |"

    lines = [
        f"# Load time and memory: {MODEL} ({size_mb:.0f} MB .onnx), {datetime.datetime.utcnow().date()}",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
        f"2 threads. Command: `bench/load.py --repeats {a.repeats} --steps {a.steps}"
        + (" --baseline OLD_ONNXDP" if a.baseline else "") + "`.",
        "",
        "| what | " + " | ".join(label for label, _ in runs) + " |",
        "|---|" + "---|" * len(runs),
        row(f"`inspect --train` (import, autodiff, plan), median of {a.repeats}",
            lambda f: f"{f['inspect_s']:.2f} s, peak RSS {f['inspect_rss']:.0f} MB"),
        row(f"`train --steps {a.steps} --batch-size 1`", lambda f: f"{f['train_s']:.1f} s wall, peak RSS {f['train_rss']:.0f} MB"),
        row("memory the run reports per replica",
            lambda f: f"{f['reported']:.0f} MiB" + (f" (activations {f['held'][1]}, parameters + gradients + "
                                                     f"optimizer state {f['held'][2]})" if f["held"] else "")),
        row("peak RSS / reported", lambda f: f"{f['train_rss'] / f['reported']:.2f}"),
        row("host memory besides (the run's summary)", lambda f: f["besides"]),
        row("ms/step after the first", lambda f: f"{f['step_ms']:.0f}"),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
