#!/usr/bin/env python3
"""onnxdp's own worker processes (--launch processes, parallel/workers.h): one process per device
from one command trains as one device does (per-step losses and final parameters, rtol 1e-5) on
CPU replicas and on the emulated CUDA device (with BatchNorm, and with --grad-accum); the job
prints and writes once; a worker killed with SIGKILL ends the job within bounded time with an
error naming it, and the newest checkpoint resumes; --launch threads keeps one process.

    workers_train.py ONNXDP_BINARY
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train(onnxdp, model, tmp, tag, extra=(), batch=None, quiet=True):
    metrics, saved = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".onnx")
    batch = batch or ("30" if model == "tiny_lm" else "97")
    args = [onnxdp, "train", os.path.join(ROOT, "models", model, "model.onnx"), "--steps", "20", "--batch-size", batch,
            "--optimizer", "momentum", "--lr", "0.05", "--seed", "5", "--metrics", metrics, "--save", saved,
            "--output-dir", os.path.join(tmp, tag), *(["--quiet"] if quiet else []), *extra]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit(f"{tag}: exit {p.returncode}")
    losses = [json.loads(line)["loss"] for line in open(metrics)]
    params = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(saved).graph.initializer}
    return losses, params, p.stdout


def same(a, b, what, rtol=1e-5):
    la, pa, _ = a
    lb, pb, _ = b
    ok = len(la) == len(lb) == 20 and np.allclose(la, lb, rtol=rtol, atol=0)
    for k in pa:
        ok &= bool(np.allclose(pa[k], pb[k], rtol=rtol, atol=1e-7))
    print(f"{what}: {'equal' if ok else 'DIFFERENT'} (first losses {la[:2]} vs {lb[:2]})")
    return ok


def children(pid):
    """The processes whose parent is pid, with their ONNXDP_WORKER_RANK."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != pid:
                continue
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
            rank = [e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"ONNXDP_WORKER_RANK=")]
            found[int(entry)] = rank[0] if rank else None
        except (OSError, ValueError, IndexError):
            pass
    return found


def killed_worker(onnxdp, devices, out_dir):
    """SIGKILL to worker 1 of a long run: ends within 60 s naming it, and the newest checkpoint resumes."""
    args = [onnxdp, "train", os.path.join(ROOT, "models", "tiny_lm", "model.onnx"), "--batch-size", "8",
            "--devices", devices, "--launch", "processes", "--checkpoint-every", "20", "--quiet",
            "--output-dir", out_dir]
    p = subprocess.Popen(args + ["--steps", "100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    for _ in range(400):
        time.sleep(0.05)
        victim = next((pid for pid, rank in children(p.pid).items() if rank == "1"), None)
        if victim and os.path.isdir(os.path.join(out_dir, "checkpoint-20")):
            break
    start = time.time()
    if victim:
        os.kill(victim, signal.SIGKILL)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    took = time.time() - start
    ok = victim is not None and p.returncode != 0 and took < 60 and "worker 1 of 2" in err and "signal 9" in err
    print(f"{devices}: killed worker: exit {p.returncode} after {took:.1f} s ({'bounded, named' if ok else 'UNEXPECTED'}); "
          f"stderr: {err.strip()[-300:]}")
    steps = [int(d.split("-")[1]) for d in os.listdir(out_dir) if d.startswith("checkpoint-") and d[11:].isdigit()]
    newest = max(steps, default=0)
    r = subprocess.run(args + ["--steps", str(newest + 5), "--resume"], capture_output=True, text=True, timeout=300)
    resumed = newest >= 20 and r.returncode == 0 and os.path.isdir(os.path.join(out_dir, f"checkpoint-{newest + 5}"))
    print(f"{devices}: resume from checkpoint-{newest} after the kill: exit {r.returncode} {r.stderr.strip()[-200:]}")
    return ok and resumed


def main():
    onnxdp = sys.argv[1]
    passed = failed = 0

    def check(ok):
        nonlocal passed, failed
        passed, failed = passed + bool(ok), failed + (not ok)

    cuda = "CUDA: built" in subprocess.run([onnxdp, "--version"], capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        for model in ["mlp", "cnn", "tiny_lm"]:
            one = train(onnxdp, model, tmp, model + "_one")
            procs = train(onnxdp, model, tmp, model + "_procs", ["--devices", "cpu:2", "--launch", "processes"])
            check(same(one, procs, f"{model}: --devices cpu:2 --launch processes vs one device"))
        one = train(onnxdp, "mlp", tmp, "accum_one", batch="96")
        acc = train(onnxdp, "mlp", tmp, "accum_procs", ["--devices", "cpu:3", "--launch", "processes", "--grad-accum", "2"],
                    batch="48")
        check(same(one, acc, "mlp: --devices cpu:3 --launch processes --grad-accum 2 (48 rows) vs one device (96 rows)"))

        if cuda:
            for model in ["mlp", "cnn"]:
                one = train(onnxdp, model, tmp, model + "_emu_one", ["--devices", "cuda-emulated"])
                procs = train(onnxdp, model, tmp, model + "_emu_procs", ["--devices", "cuda-emulated:2", "--launch", "processes"])
                check(same(one, procs, f"{model}: --devices cuda-emulated:2 --launch processes vs one emulated device"))
        else:
            print("cuda-emulated: SKIPPED, this build has no CUDA backend")

        # One job's output: the launcher's line, then worker 0's report, once.
        _, _, out = train(onnxdp, "mlp", tmp, "printed", ["--devices", "cpu:2", "--launch", "processes"], quiet=False)
        ok = out.count("worker processes, one per device") == 1 and out.count("trained model:") == 1
        print(f"printed once: {'yes' if ok else 'NO'}")
        check(ok)
        _, _, out = train(onnxdp, "mlp", tmp, "threads", ["--devices", "cpu:2", "--launch", "threads"], quiet=False)
        ok = "worker processes" not in out and out.count("trained model:") == 1
        print(f"--launch threads: one process: {'yes' if ok else 'NO'}")
        check(ok)

        # Worker 1 is killed during training: the job ends with an error naming it, in bounded time,
        # and the newest checkpoint resumes to the end; on CPU replicas and the emulated device.
        for devices in ["cpu:2"] + (["cuda-emulated:2"] if cuda else []):
            check(killed_worker(onnxdp, devices, os.path.join(tmp, "killed-" + devices.replace(":", "-"))))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
