#!/usr/bin/env python3
"""The multi-GPU checks of a lent GPU machine (tests/gpu/multi-gpu.sh runs this), for 1 to 8 GPUs.

    multi_gpu.py ONNXDP [--devices cuda] [--launch auto] [--one cuda:0] [--md FILE] [--budget-s 400] [--no-scaling]

`--devices` is the world under test (default `cuda`: every GPU, one replica each, one worker
process per GPU as `--launch auto` starts them; `--launch threads`: one process drives them all);
`--one` the single device the data-parallel runs are compared with. Without a GPU, `--devices cuda-emulated:2
--one cuda-emulated` runs every check on the emulated device (what this machine can say: the host
side, not the kernels or NCCL). With one GPU the world is one replica: the equality checks then
compare a world of one with itself, and the table says so.

Checks, each PASS / FAIL / SKIP with its figures, the table printed last:
  - topology (nvidia-smi topo -m) and the NCCL smoke test (mlp, 5 steps on the world);
  - data parallel equals one device (momentum SGD; losses rtol 1e-5, parameters rtol 1e-5 atol 1e-6)
    for mlp, tiny_lm and cnn: an uneven last batch, many buckets (--bucket-mb 0.01), without CUDA
    graphs, --grad-accum 2; --mixed-precision fp16 within 1e-2 with equal loss scales and skips;
  - --zero-stage 1 equals the unsharded world (rtol 1e-5), --grad-dtype bf16 within 1e-3;
  - scaling: the GPT-2-small-shaped model (bench/bench_models.py gpt2_small, exported with torch)
    at a fixed per-GPU batch on one device and on the world: ms/step and efficiency;
  - overlap: 25 MB buckets against one bucket (--bucket-mb 100000) on the world: ms/step;
  - worker processes (--launch processes) equal one process's threads (--launch threads);
  - a killed worker: SIGKILL to worker 1 ends the job within 60 s with an error naming it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
rows = []  # (check, status, figures)


def record(check, ok, figures=""):
    status = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    rows.append((check, status, figures))
    print(f"{status:4}  {check}  {figures}", flush=True)


# Momentum SGD as tests/scripts/mpi_train.py: Adam's normalised step turns gradients that are
# rounding noise (a Conv bias before BatchNorm) into lr-sized steps of either sign.
def train(onnxdp, model, devices, tmp, tag, extra=(), steps=12, batch="97", optimizer="momentum", lr="0.05"):
    """Per-step metrics (list of dicts) and the trained parameters of one run; None on failure."""
    out = os.path.join(tmp, tag)
    path = model if model.endswith(".onnx") else os.path.join(ROOT, "models", model, "model.onnx")
    args = [onnxdp, "train", path, "--devices", devices, "--steps", str(steps), "--batch-size", batch,
            "--optimizer", optimizer, "--lr", lr, "--seed", "5", "--quiet", "--output-dir", out, *extra]
    t0 = time.time()
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"  {' '.join(args)}\n  exit {r.returncode}: {r.stderr.strip()[-600:]}", flush=True)
        return None
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    params = {}
    try:
        import onnx
        from onnx import numpy_helper
        params = {i.name: numpy_helper.to_array(i) for i in onnx.load(os.path.join(out, "model.onnx")).graph.initializer}
    except ImportError:
        pass
    shutil.rmtree(os.path.join(out, "tensorboard"), ignore_errors=True)
    return {"metrics": metrics, "params": params, "seconds": time.time() - t0}


def same(a, b, rtol=1e-5, atol=1e-6, keys=("loss",)):
    if a is None or b is None or len(a["metrics"]) != len(b["metrics"]):
        return False, "a run failed"
    worst = 0.0
    for k in keys:
        x = np.array([m[k] for m in a["metrics"]], dtype=np.float64)
        y = np.array([m[k] for m in b["metrics"]], dtype=np.float64)
        if k == "loss":
            worst = float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-30)))
        if not np.allclose(x, y, rtol=rtol, atol=0):
            return False, f"{k} differs (worst loss rel {worst:.2e})"
    for name, p in a["params"].items():
        if name in b["params"] and not np.allclose(p, b["params"][name], rtol=rtol, atol=atol):
            return False, f"parameter {name} differs"
    return True, f"worst loss rel {worst:.1e}"


def killed_worker(onnxdp, devices, tmp):
    """SIGKILL to worker 1 of a long --launch processes run: (ended in time and named it, figures)."""
    args = [onnxdp, "train", os.path.join(ROOT, "models", "tiny_lm", "model.onnx"), "--steps", "1000000",
            "--batch-size", "8", "--devices", devices, "--launch", "processes", "--quiet", "--comm-timeout", "30",
            "--output-dir", os.path.join(tmp, "killed")]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    for _ in range(600):  # workers up and past their first steps (a GPU's set-up takes seconds)
        time.sleep(0.05)
        for entry in os.listdir("/proc"):
            try:
                stat = open(f"/proc/{entry}/stat").read()
                if entry.isdigit() and int(stat[stat.rindex(")") + 2:].split()[1]) == p.pid and \
                        b"ONNXDP_WORKER_RANK=1" in open(f"/proc/{entry}/environ", "rb").read().split(b"\0"):
                    victim = int(entry)
            except (OSError, ValueError, IndexError):
                pass
        if victim and os.path.exists(os.path.join(tmp, "killed", "metrics.jsonl")):
            break
    if not victim:
        p.kill()
        p.communicate()
        return False, "no worker 1 found"
    os.kill(victim, 9)
    start = time.time()
    try:
        _, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    took = time.time() - start
    ok = p.returncode != 0 and took < 60 and "worker 1 of" in err
    return ok, f"exit {p.returncode} after {took:.1f} s: {err.strip().splitlines()[-1][:150] if err.strip() else ''}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("onnxdp")
    ap.add_argument("--devices", default="cuda")
    ap.add_argument("--one", default="cuda:0")
    ap.add_argument("--launch", default="auto", help="--launch of the world's runs (auto, threads, processes)")
    ap.add_argument("--md", default="")
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--no-scaling", action="store_true")
    a = ap.parse_args()
    t0 = time.time()
    left = lambda: a.budget_s - (time.time() - t0)  # noqa: E731

    gpus = 0
    if shutil.which("nvidia-smi"):
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
        print(topo.stdout, flush=True)
        q = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
        gpus = len([line for line in q.stdout.splitlines() if line.strip()])
    emulated = a.devices.startswith("cuda-emulated")
    world = int(a.devices.split(":")[1]) if ":" in a.devices and emulated else max(gpus, 1)
    record("topology", None if not gpus else True, f"{gpus} GPU(s); world {world}" + (" (emulated)" if emulated else ""))
    note = " (world of one: compares one device with itself)" if world == 1 else ""

    launch = ["--launch", a.launch]
    plain_train = train

    def train_on(onnxdp, model, devices, tmp, tag, extra=(), **kw):  # the world's runs with --launch
        return plain_train(onnxdp, model, devices, tmp, tag, [*extra, *(launch if devices == a.devices else [])], **kw)

    with tempfile.TemporaryDirectory() as tmp:
        smoke = train_on(a.onnxdp, "mlp", a.devices, tmp, "smoke", steps=5)
        record("NCCL smoke test (mlp, 5 steps on the world)", smoke is not None,
               f"loss {smoke['metrics'][-1]['loss']:.4f}" if smoke else "")

        variants = [("uneven last batch", [], "97"), ("many buckets", ["--bucket-mb", "0.01"], "97"),
                    ("without CUDA graphs", ["--no-cuda-graph"], "97"), ("grad-accum 2", ["--grad-accum", "2"], "48")]
        for model in ["mlp", "tiny_lm", "cnn"]:
            for what, extra, batch in variants:
                if left() < 60:
                    record(f"DP = one device: {model}, {what}", None, "out of time")
                    continue
                b = "30" if model == "tiny_lm" else batch
                # The world's run against one device's with the same options and global batch
                # (buckets and graphs change nothing on one device; with --grad-accum both see each
                # micro-batch's BatchNorm statistics).
                x = train_on(a.onnxdp, model, a.one, tmp, f"{model}-{what}-one", extra, batch=b)
                y = train_on(a.onnxdp, model, a.devices, tmp, f"{model}-{what}-dp", extra, batch=b)
                ok, fig = same(y, x)
                record(f"DP = one device: {model}, {what}{note}", ok, fig)
        if left() > 60:
            # A scale that grows every 4 steps until float16 overflows: the skipped steps and scales
            # must match one device's (the world all-reduces the overflow to every replica).
            fp16 = ["--mixed-precision", "fp16", "--loss-scale-init", "65536", "--loss-scale-growth-interval", "4"]
            x = train_on(a.onnxdp, "mlp", a.one, tmp, "fp16-one", fp16)
            y = train_on(a.onnxdp, "mlp", a.devices, tmp, "fp16-dp", fp16)
            ok, fig = same(y, x, rtol=1e-2, atol=1e-3, keys=("loss", "loss_scale", "skipped"))
            record(f"DP = one device: mlp fp16, loss scales and skipped steps{note}", ok, fig)

        if left() > 60:
            clip = ["--max-grad-norm", "0.5"]
            plain = train_on(a.onnxdp, "mlp", a.devices, tmp, "zero0", clip, optimizer="adamw", lr="0.003")
            zero = train_on(a.onnxdp, "mlp", a.devices, tmp, "zero1", clip + ["--zero-stage", "1"], optimizer="adamw",
                         lr="0.003")
            ok, fig = same(zero, plain)
            record("--zero-stage 1 = unsharded (mlp, AdamW, clipping)" + note, ok, fig)
            fp32 = train_on(a.onnxdp, "mlp", a.devices, tmp, "fp32-grads")
            bf16 = train_on(a.onnxdp, "mlp", a.devices, tmp, "bf16-grads", ["--grad-dtype", "bf16"])
            ok, fig = same(bf16, fp32, rtol=1e-3, atol=1e-4)
            record("--grad-dtype bf16 within 1e-3 of fp32 gradients" + note, ok, fig)

        scaling_model = None
        if not a.no_scaling and left() > 150:
            try:
                sys.path.insert(0, os.path.join(ROOT, "bench"))
                import bench_models as bm  # needs torch
                import torch
                model = bm.build("gpt2_small")
                spec = bm.MODELS["gpt2_small"]
                data = bm.make_data("gpt2_small", 8 * world, seed=0)
                scaling_model = os.path.join(tmp, "gpt2_small.onnx")
                bm.export("gpt2_small", model, torch.from_numpy(data[spec["input"]][:1]), scaling_model)
                np.savez(os.path.join(tmp, "gpt2_small.npz"), **data)
            except Exception as e:  # noqa: BLE001 (any failure here is a SKIP with its reason)
                record("scaling: GPT-2-small-shaped model", None, f"export failed: {e}"[:200])
                scaling_model = None
        if scaling_model:
            per_gpu = 2
            common = ["--data", scaling_model[:-5] + ".npz", "--mixed-precision", "bf16"]
            one = train_on(a.onnxdp, scaling_model, a.one, tmp, "gpt2-one", common, steps=6, batch=str(per_gpu))
            many = train_on(a.onnxdp, scaling_model, a.devices, tmp, "gpt2-world", common, steps=6,
                         batch=str(per_gpu * world))
            if one and many:
                s1 = one["metrics"][-1]["samples_per_s"]
                sn = many["metrics"][-1]["samples_per_s"]
                eff = sn / (s1 * world)
                record(f"scaling: GPT-2-small-shaped model, bf16, {per_gpu} sequences per GPU", True,
                       f"{s1:.2f} samples/s on one, {sn:.2f} on {world}: efficiency {100 * eff:.0f} %")
                if left() > 90 and world > 1:
                    single = train_on(a.onnxdp, scaling_model, a.devices, tmp, "gpt2-one-bucket",
                                   common + ["--bucket-mb", "100000"], steps=6, batch=str(per_gpu * world))
                    if single:
                        record("overlap: 25 MB buckets vs one bucket", True,
                               f"{sn:.2f} vs {single['metrics'][-1]['samples_per_s']:.2f} samples/s; "
                               f"comm_wait_ms {many['metrics'][-1]['comm_wait_ms']:.1f} vs "
                               f"{single['metrics'][-1]['comm_wait_ms']:.1f}")
            else:
                record("scaling: GPT-2-small-shaped model", False, "a run failed")

        if world > 1 and left() > 60:
            procs = plain_train(a.onnxdp, "mlp", a.devices, tmp, "launch-processes", ["--launch", "processes"])
            threads = plain_train(a.onnxdp, "mlp", a.devices, tmp, "launch-threads", ["--launch", "threads"])
            ok, fig = same(procs, threads)
            record("worker processes = one process's threads (mlp)", ok, fig)
        else:
            record("worker processes = one process's threads (mlp)", None, "world of one" if world == 1 else "out of time")
        if world > 1 and left() > 60:
            ok, fig = killed_worker(a.onnxdp, a.devices, tmp)
            record("a killed worker ends the job, named, within 60 s", ok, fig)
        else:
            record("a killed worker ends the job, named, within 60 s", None, "world of one" if world == 1 else "out of time")

    lines = ["| check | result | figures |", "|---|---|---|"] + [f"| {c} | {s} | {f} |" for c, s, f in rows]
    table = "\n".join(lines)
    if a.md:
        with open(a.md, "w") as f:
            f.write(f"# Multi-GPU checks, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
                    f"`tests/gpu/multi_gpu.py --devices {a.devices} --one {a.one}`\n\n{table}\n")
    print("\n" + table)
    return 1 if any(s == "FAIL" for _, s, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
