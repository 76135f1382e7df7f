#!/usr/bin/env python3
"""onnxdp train under mpirun: per-step losses and final parameters of `mpirun -np 2` and
`mpirun -np 2 ... --devices cpu:2` (a world of 4) equal one device's on the same global batch
(rtol 1e-5), also with --grad-accum and on the emulated CUDA device (its NCCL set-up across
processes); --zero-stage 1 equals the unsharded run (rtol 1e-6) on CPU replicas and the emulated
device; --mixed-precision fp16 over 2 ranks of 2 equals a world of 4 in one process (losses,
parameters, loss scales, skipped steps); `onnxdp run` under mpirun writes one device's outputs; ranks that disagree on the model stop with a clear error; a killed rank ends the job
within bounded time, never a hang.

    mpi_train.py ONNXDP_BINARY MPIEXEC
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = ["--allow-run-as-root", "--oversubscribe"]
ENV = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def train(cmd, model, tmp, tag, extra=(), batch=None, optimizer="momentum", lr="0.05"):
    metrics, saved = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".onnx")
    # 20 steps; batches of 97 put a partial batch of 45 rows at step 16 of mlp/cnn (1500 samples).
    batch = batch or ("30" if model == "tiny_lm" else "97")
    args = cmd + ["train", os.path.join(ROOT, "models", model, "model.onnx"), "--steps", "20", "--batch-size", batch,
                  "--optimizer", optimizer, "--lr", lr, "--seed", "5", "--quiet", "--metrics", metrics,
                  "--save", saved, "--output-dir", os.path.join(tmp, tag), *extra]
    subprocess.run(args, check=True, env=ENV, timeout=600)
    losses = [json.loads(line)["loss"] for line in open(metrics)]
    params = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(saved).graph.initializer}
    return losses, params


def same(a, b, what, rtol=1e-5):
    la, pa = a
    lb, pb = b
    ok = len(la) == len(lb) and np.allclose(la, lb, rtol=rtol, atol=0)
    for k in pa:
        ok &= bool(np.allclose(pa[k], pb[k], rtol=rtol, atol=1e-7))
    print(f"{what}: {'equal' if ok else 'DIFFERENT'} (first losses {la[:2]} vs {lb[:2]})")
    return ok


def main():
    onnxdp, mpiexec = sys.argv[1], sys.argv[2]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in ["mlp", "cnn", "tiny_lm", "mlp_dynamo"]:
            one = train([onnxdp], model, tmp, model + "_one")
            two = train([mpiexec, *FLAGS, "-np", "2", onnxdp], model, tmp, model + "_np2")
            four = train([mpiexec, *FLAGS, "-np", "2", onnxdp], model, tmp, model + "_np2x2", ["--devices", "cpu:2"])
            for ok in (same(one, two, f"{model}: mpirun -np 2 vs one device"),
                       same(one, four, f"{model}: mpirun -np 2 --devices cpu:2 vs one device")):
                passed, failed = passed + ok, failed + (not ok)

        # Gradient accumulation across ranks: 2 micro-batches of 48 per step on 2 ranks of 2
        # replicas equal one device's steps of 96 (the last step of the epoch has 60 rows: 48 + 12).
        one = train([onnxdp], "mlp", tmp, "accum_one", batch="96")
        acc = train([mpiexec, *FLAGS, "-np", "2", onnxdp], "mlp", tmp, "accum_np2x2", ["--devices", "cpu:2",
                    "--grad-accum", "2"], batch="48")
        ok = same(one, acc, "mlp: mpirun -np 2 --devices cpu:2 --grad-accum 2 (48 rows) vs one device (96 rows)")
        passed, failed = passed + ok, failed + (not ok)

        # --mixed-precision fp16 across ranks: a world of 4 over 2 ranks trains as a world of 4 in
        # one process, with the same steps skipped and the same loss scales (the all-reduce carries
        # an overflow to every rank, so every rank's scaler decides alike).
        fp16 = ["--mixed-precision", "fp16", "--loss-scale-init", "16777216", "--loss-scale-growth-interval", "4"]
        inproc = train([onnxdp], "mlp", tmp, "fp16_cpu4", ["--devices", "cpu:4", *fp16])
        ranks = train([mpiexec, *FLAGS, "-np", "2", onnxdp], "mlp", tmp, "fp16_np2x2", ["--devices", "cpu:2", *fp16])

        def scales(tag):
            return [(json.loads(line)["loss_scale"], json.loads(line)["skipped"])
                    for line in open(os.path.join(tmp, tag + ".jsonl"))]

        a, b = scales("fp16_cpu4"), scales("fp16_np2x2")
        ok = same(inproc, ranks, "mlp: mpirun -np 2 --devices cpu:2 --mixed-precision fp16 vs --devices cpu:4")
        skipped = sum(s for _, s in a)
        ok = ok and a == b and skipped >= 4
        print(f"mlp fp16: loss scales and skipped steps {'equal' if a == b else 'DIFFERENT'}, {skipped} skipped")
        passed, failed = passed + ok, failed + (not ok)

        # --zero-stage 1 across ranks: the optimizer state sharded over the replicas of 2 ranks (a
        # world of 2, and of 4 with two replicas each) trains as the unsharded run (rtol 1e-6), with
        # AdamW and clipping (the gradient norm summed over the parts).
        for model, devices in (("cnn", "cpu"), ("mlp", "cpu:2")):
            args = ["--devices", devices, "--max-grad-norm", "0.5"]
            mpi = [mpiexec, *FLAGS, "-np", "2", onnxdp]
            plain = train(mpi, model, tmp, f"zero0_{model}", args, optimizer="adamw", lr="0.003")
            zero = train(mpi, model, tmp, f"zero1_{model}", args + ["--zero-stage", "1"], optimizer="adamw", lr="0.003")
            ok = same(plain, zero, f"{model}: mpirun -np 2 --devices {devices} --zero-stage 1 vs unsharded", rtol=1e-6)
            passed, failed = passed + ok, failed + (not ok)

        # --grad-dtype bf16 across ranks: bfloat16 sums travel through MPI as float and are rounded
        # once, as the in-process world of the same size rounds them.
        args = ["--grad-dtype", "bf16"]
        inproc = train([onnxdp], "mlp", tmp, "bf16_cpu2", args + ["--devices", "cpu:2"])
        ranks = train([mpiexec, *FLAGS, "-np", "2", onnxdp], "mlp", tmp, "bf16_np2", args)
        ok = same(inproc, ranks, "mlp: mpirun -np 2 --grad-dtype bf16 vs --devices cpu:2", rtol=1e-6)
        passed, failed = passed + ok, failed + (not ok)

        # The CUDA backend's NCCL set-up across processes, on the emulated device: the first replica
        # of each rank makes its rank's communicators and hands them to its replicas (each checks it
        # got its own), then the device all-reduces train as one device does.
        if "CUDA" in subprocess.run([onnxdp, "--version"], capture_output=True, text=True).stdout:
            emu = train([mpiexec, *FLAGS, "-np", "2", onnxdp], "mlp", tmp, "mlp_np2x2_emulated",
                        ["--devices", "cuda-emulated:2"])
            ok = same(train([onnxdp], "mlp", tmp, "mlp_one_again"), emu,
                      "mlp: mpirun -np 2 --devices cuda-emulated:2 vs one device")
            passed, failed = passed + ok, failed + (not ok)
            # ZeRO-1 on the device across processes: the reduce-scatter, the norm and the gather
            # through the communicators the ranks set up.
            zero = train([mpiexec, *FLAGS, "-np", "2", onnxdp], "mlp", tmp, "mlp_np2x2_emulated_zero",
                         ["--devices", "cuda-emulated:2", "--zero-stage", "1"])
            ok = same(emu, zero, "mlp: mpirun -np 2 --devices cuda-emulated:2 --zero-stage 1 vs unsharded", rtol=1e-6)
            passed, failed = passed + ok, failed + (not ok)
        else:
            print("mlp: mpirun -np 2 --devices cuda-emulated:2: SKIPPED, this build has no CUDA backend")

        # onnxdp run under mpirun: rank 0 writes the outputs of one device, in sample order (cnn in
        # training mode: BatchNormalization over the whole batch, Dropout by sample position).
        outs = {}
        for tag, pre in (("one", [onnxdp]), ("np2", [mpiexec, *FLAGS, "-np", "2", onnxdp])):
            outs[tag] = os.path.join(tmp, f"run_{tag}.npz")
            subprocess.run([*pre, "run", os.path.join(ROOT, "models", "cnn", "model.onnx"), "--data",
                            os.path.join(ROOT, "models", "cnn", "eval.npz"), "--out", outs[tag], "--batch-size", "50",
                            "--train-mode", "--devices", "cpu:2"], check=True, env=ENV, timeout=300,
                           capture_output=True)
        a, b = np.load(outs["one"]), np.load(outs["np2"])
        ok = set(a.files) == set(b.files) and all(np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a.files)
        print(f"cnn: mpirun -np 2 onnxdp run --devices cpu:2 vs cpu:2 in one process: {'equal' if ok else 'DIFFERENT'}")
        passed, failed = passed + ok, failed + (not ok)

        # Two ranks with different models: a clear error before step 1, no hang.
        args = lambda m: [onnxdp, "train", os.path.join(ROOT, "models", m, "model.onnx"), "--steps", "3", "--quiet",
                          "--comm-timeout", "30", "--output-dir", os.path.join(tmp, "mismatch_" + m)]
        p = subprocess.run([mpiexec, *FLAGS, "-np", "1", *args("mlp"), ":", "-np", "1", *args("mlp_dynamo")],
                           capture_output=True, text=True, env=ENV, timeout=120)
        ok = p.returncode != 0 and "trains differently" in p.stderr
        print(f"mismatched ranks: exit {p.returncode}, {'clear error' if ok else 'UNEXPECTED'}: {p.stderr.strip()[:300]}")
        passed, failed = passed + ok, failed + (not ok)

        # Two ranks with the same model but another hyper-parameter each: an error naming the
        # option before step 1 (the ranks would otherwise train different models without complaint).
        for option, a, b in (("--lr", "0.01", "0.02"), ("--seed", "1", "2"), ("--optimizer", "adamw", "sgd"),
                             ("--steps", "3", "4")):
            args = lambda v, tag: [onnxdp, "train", os.path.join(ROOT, "models", "mlp", "model.onnx"), "--quiet",
                                   "--comm-timeout", "30", *([] if option == "--steps" else ["--steps", "3"]),
                                   option, v, "--output-dir", os.path.join(tmp, f"opt_mismatch_{option[2:]}_{tag}")]
            p = subprocess.run([mpiexec, *FLAGS, "-np", "1", *args(a, "a"), ":", "-np", "1", *args(b, "b")],
                               capture_output=True, text=True, env=ENV, timeout=120)
            ok = p.returncode != 0 and "trains differently" in p.stderr and f"option {option}" in p.stderr
            print(f"ranks with {option} {a} / {b}: exit {p.returncode}, {'clear error' if ok else 'UNEXPECTED'}: "
                  f"{p.stderr.strip()[:300]}")
            passed, failed = passed + ok, failed + (not ok)

        # Rank 1 is killed during training: the job ends with an error within bounded time.
        script = (f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 3; kill -9 $$) & fi; '
                  f'exec {onnxdp} train {os.path.join(ROOT, "models", "tiny_lm", "model.onnx")} --steps 100000 '
                  f'--batch-size 8 --quiet --comm-timeout 20 --output-dir {os.path.join(tmp, "killed")}')
        start = time.time()
        p = subprocess.run([mpiexec, *FLAGS, "-np", "2", "sh", "-c", script], capture_output=True, text=True, env=ENV,
                           timeout=300)
        took = time.time() - start
        ok = p.returncode != 0 and took < 60
        print(f"killed rank: exit {p.returncode} after {took:.1f} s ({'bounded' if ok else 'UNEXPECTED'}); "
              f"stderr: {p.stderr.strip()[-300:]}")
        passed, failed = passed + ok, failed + (not ok)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
