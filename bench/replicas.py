#!/usr/bin/env python3
"""onnxdp alone: the same model and global batch on 1, 2 and 4 CPU replicas (threads of one process).

    nice python3 bench/replicas.py [--onnxdp build/onnxdp] [--models mlp tiny_lm] [--devices cpu cpu:2 cpu:4]
                                   [--threads 2] [--steps S] [--no-save]

For each model and --devices value, one `onnxdp train --no-shuffle` run of S steps on random data
(the models and data of bench/compare.py). From its --metrics file: the median samples_per_s and
the median comm_wait_ms (time a replica spent waiting on collectives) over the later half of the
steps (the first steps plan and warm up), and the loss of the last step. N replicas train exactly
as one device, so that loss should be the same on every row of a model.

Informational only. On a machine with fewer cores than replicas x threads the replicas
oversubscribe the cores, and more replicas are slower, not faster: the output says so.
"""
import argparse
import json
import os
import statistics
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness as h  # noqa: E402
import bench_models as bm  # noqa: E402


def replicas_of(devices):
    return int(devices.split(":")[1]) if ":" in devices else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnxdp", default=h.default_onnxdp(), help="the onnxdp binary (default: build/onnxdp)")
    ap.add_argument("--models", nargs="+", help=f"some of {list(bm.MODELS)} (default: all)")
    ap.add_argument("--devices", nargs="+", default=["cpu", "cpu:2", "cpu:4"])
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS / OPENBLAS_NUM_THREADS (per replica)")
    ap.add_argument("--steps", type=int, help="steps per run (default: 2N of bench_models.py, at least 6)")
    ap.add_argument("--batch", type=int, help="global batch for every model (default: per model)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--no-save", action="store_true")
    h.add_wait_policy_option(ap)
    a = ap.parse_args()
    h.check_binary(a.onnxdp)
    names = bm.available(a.models)
    info = h.machine_info(a.onnxdp, a.threads)
    cores = os.cpu_count() or 1
    most = max(replicas_of(d) for d in a.devices) * a.threads
    note = (f"note: {cores} logical CPUs here and up to {most} compute threads ({a.threads} per replica): "
            f"runs with more replicas x threads than CPUs oversubscribe them, so their samples/s says "
            f"little about scaling." if most > cores else "")
    print(f"{info['date']}  {info['cpu']} ({cores} logical CPUs, load {info['load_avg_at_start']})  "
          f"threads/replica {a.threads}, OMP_WAIT_POLICY {a.omp_wait_policy}\n{info['onnxdp']}", flush=True)
    if note:
        print(note, flush=True)
    workdir = tempfile.mkdtemp(prefix="onnxdp-replicas-")
    rows, results = [], []
    try:
        for name in names:
            spec = bm.MODELS[name]
            batch = a.batch or spec["batch"]
            steps = a.steps or max(6, 2 * spec["steps"])
            print(f"[{name}] export and data (global batch {batch}, {steps} steps)", flush=True)
            onnx_path, npz_path, params = h.prepare(name, workdir, batch)
            base = None
            for dev in a.devices:
                metrics = os.path.join(workdir, name, f"m-{dev.replace(':', '_')}.jsonl")
                cmd = h.onnxdp_cmd(a.onnxdp, onnx_path, npz_path, batch, steps, a.lr, dev, metrics)
                # onnxdp splits OMP_NUM_THREADS over its replicas: the process gets threads x replicas.
                env = h.thread_env(a.threads * replicas_of(dev), a.omp_wait_policy)
                rc, wall, rss, err = h.run_child(cmd, env, metrics[:-6])
                r = {"model": name, "params": params, "batch": batch, "devices": dev, "steps": steps,
                     "wall_s": wall, "peak_rss_mb": rss}
                if rc != 0:
                    r["error"] = f"exit {rc}: {err.strip()[-600:]}"
                    print(f"[{name}] {dev} FAILED: {r['error']}", flush=True)
                    rows.append([name, batch, dev, "—", "—", "—", "—", "—", "failed"])
                    results.append(r)
                    continue
                m = h.read_metrics(metrics)
                late = m[len(m) // 2:]
                r["samples_per_s"] = statistics.median(x["samples_per_s"] for x in late)
                r["comm_wait_ms"] = statistics.median(x["comm_wait_ms"] for x in late)
                r["ms_per_step"] = 1e3 * batch / r["samples_per_s"]
                r["last_loss"] = m[-1]["loss"]
                if base is None:
                    base = r["samples_per_s"]
                rows.append([name, batch, dev, f"{r['samples_per_s']:.1f}", f"{r['ms_per_step']:.2f}",
                             f"{r['samples_per_s'] / base:.2f}", f"{r['comm_wait_ms']:.2f}", f"{rss:.0f}",
                             f"{r['last_loss']:.5f}"])
                results.append(r)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    header = ["model", "global batch", "devices", "samples/s", "ms/step", "vs first row", "comm wait ms/step",
              "peak MB", "last loss"]
    print()
    print(h.text_table(header, rows))
    if note:
        print(note)
    if a.no_save:
        return
    md_path, json_path = h.result_paths("replicas", a.out_dir)
    md = [f"# onnxdp CPU replicas — {info['date']}", "",
          f"- machine: {info['cpu']}, {cores} logical CPUs, host {info['host']}, load average at start "
          f"{info['load_avg_at_start']}",
          f"- versions: {info['onnxdp']}; onnx {info['onnx']}",
          f"- settings: {a.threads} threads per replica, OMP_WAIT_POLICY {a.omp_wait_policy}, AdamW lr {a.lr}, --no-shuffle, random data; samples/s and "
          "comm wait are medians over the later half of each run's steps (from --metrics).",
          "- Informational, never a test." + (" " + note if note else ""), "",
          h.markdown_table(header, rows)]
    with open(md_path, "w") as f:
        f.write("\n".join(md) + "\n")
    with open(json_path, "w") as f:
        json.dump({"machine": info, "settings": vars(a) | {"models": names}, "note": note, "results": results}, f, indent=1)
    print(f"wrote {os.path.relpath(md_path)} and {os.path.relpath(json_path)}")


if __name__ == "__main__":
    main()
