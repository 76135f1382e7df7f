#!/usr/bin/env python3
"""onnxdp vs PyTorch: steady training step time and peak memory, same model, data, batch,
optimizer (AdamW lr 1e-3, weight decay 0.01) and thread count, on the CPU, one replica.

    nice python3 bench/compare.py [--onnxdp build/onnxdp] [--models mlp gpt_small] [--threads 2]
                                  [--repeats 2] [--steps N] [--batch B] [--no-save]
                                  [--device cuda] [--mixed-precision bf16|fp16]

--mixed-precision bf16 / fp16: onnxdp --mixed-precision bf16 / fp16 against the forward and loss
under torch.autocast(dtype=torch.bfloat16 / torch.float16), both with float32 master weights;
fp16 with dynamic loss scaling on both sides (torch.amp.GradScaler's defaults, onnxdp's the same).

Every model is rebuilt with make_models.py's torch modules (plus gpt_small), exported to a
temporary folder the way make_models.py exports, given random data (a whole number of batches),
and trained by both: `onnxdp train` as a child process, and bench/torch_worker.py as another.
The torch module loads its initial weights from the exported file, so both start from identical
weights and see the same batches in the same order; their losses are printed side by side.

Timing: each side trains N and then 4N steps in separate runs; the steady step is
(time(4N) - time(N)) / 3N, so start-up (process, import, graph building, the first step's
planning) cancels. onnxdp's time is its process's wall time; torch's is the wall time of its
training loop (the `import torch` time of a process is too noisy to subtract). Runs alternate
onnxdp, torch, onnxdp, torch, ... and the median over --repeats is reported. Peak memory is each
child's own peak RSS (os.wait4) in the 4N runs, median over repeats.

ratio = torch ms/step / onnxdp ms/step: above 1 means onnxdp is faster. Results are informational:
shared machines vary, so compare ratios of one run, never absolute times across runs.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness as h  # noqa: E402
import bench_models as bm  # noqa: E402


def onnxdp_trial(a, m, steps, tag):
    metrics = os.path.join(m["dir"], f"onnxdp-{tag}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = h.onnxdp_cmd(a.onnxdp, m["onnx"], m["npz"], m["batch"], steps, a.lr,
                       "cuda:0" if a.device == "cuda" else "cpu", metrics)
    if a.mixed_precision != "no":
        cmd += ["--mixed-precision", a.mixed_precision]
    rc, wall, rss, err = h.run_child(cmd, h.thread_env(a.threads, a.omp_wait_policy), os.path.join(m["dir"], f"onnxdp-{tag}"))
    if rc != 0:
        return {"error": f"onnxdp exit {rc}: {err.strip()[-600:]}", "cmd": " ".join(cmd)}
    losses = [r["loss"] for r in h.read_metrics(metrics)]
    return {"time_s": wall, "rss_mb": rss, "losses": losses}


def torch_trial(a, m, steps, tag):
    out = os.path.join(m["dir"], f"torch-{tag}.json")
    cmd = [sys.executable, os.path.join(HERE, "torch_worker.py"), "--model", m["name"], "--onnx", m["onnx"],
           "--data", m["npz"], "--batch", str(m["batch"]), "--steps", str(steps), "--threads", str(a.threads),
           "--lr", repr(a.lr), "--device", a.device, "--mixed-precision", a.mixed_precision, "--out", out]
    rc, wall, rss, err = h.run_child(cmd, h.thread_env(a.threads, a.omp_wait_policy), os.path.join(m["dir"], f"torch-{tag}"))
    if rc != 0:
        return {"error": f"torch worker exit {rc}: {err.strip()[-600:]}"}
    with open(out) as f:
        r = json.load(f)
    return {"time_s": r["loop_s"], "rss_mb": rss, "losses": r["losses"]}


def steady_ms(short, long, n):
    """(min t(4N) - min t(N)) / 3N in ms, and the per-repeat differences for the record. The
    minimum over repeats is the run least disturbed by other work on the machine; noise on a
    shared machine only ever adds time. None when no run of either length succeeded."""
    s = [t["time_s"] for t in short if "error" not in t]
    l = [t["time_s"] for t in long if "error" not in t]
    diffs = [(b["time_s"] - a["time_s"]) / (3 * n) * 1e3 for a, b in zip(short, long)
             if "error" not in a and "error" not in b]
    return ((min(l) - min(s)) / (3 * n) * 1e3 if s and l else None), diffs


def bench_model(a, name, workdir):
    spec = bm.MODELS[name]
    batch = a.batch or spec["batch"]
    n = a.steps or spec["steps"]
    print(f"[{name}] export and data (batch {batch}, N {n})", flush=True)
    onnx_path, npz_path, params = h.prepare(name, workdir, batch)
    m = {"name": name, "dir": os.path.dirname(onnx_path), "onnx": onnx_path, "npz": npz_path, "batch": batch}
    res = {"model": name, "params": params, "batch": batch, "N": n, "runs": {"onnxdp": {}, "torch": {}}}
    od = {n: [], 4 * n: []}
    tc = {n: [], 4 * n: []}
    onnxdp_failed = None
    for r in range(a.repeats):
        for steps in (n, 4 * n):
            if not onnxdp_failed:
                t = onnxdp_trial(a, m, steps, f"{steps}-{r}")
                od[steps].append(t)
                if "error" in t:
                    onnxdp_failed = t["error"]
                    print(f"[{name}] onnxdp FAILED: {t['error']}", flush=True)
            tc[steps].append(torch_trial(a, m, steps, f"{steps}-{r}"))
            if "error" in tc[steps][-1]:
                print(f"[{name}] torch FAILED: {tc[steps][-1]['error']}", flush=True)
            if r == 0 and steps == n:
                o, t = od[n][0] if od[n] else {"error": onnxdp_failed}, tc[n][0]
                if "error" not in o and "error" not in t and o["losses"] and t["losses"]:
                    l0, t0 = o["losses"][0], t["losses"][0]
                    rel = abs(l0 - t0) / max(abs(t0), 1e-12)
                    res["first_loss_rel_diff"] = rel
                    note = "agree" if rel < 1e-3 else ("roughly agree" if rel < 2e-2 else "DISAGREE")
                    print(f"[{name}] step-1 loss onnxdp {l0:.5f} torch {t0:.5f} (rel diff {rel:.1e}: {note}); "
                          f"step-{n} loss onnxdp {o['losses'][-1]:.5f} torch {t['losses'][-1]:.5f}", flush=True)
    for side, runs in (("onnxdp", od), ("torch", tc)):
        ms, diffs = steady_ms(runs[n], runs[4 * n], n)
        ok = [t for t in runs[4 * n] if "error" not in t]
        first = next((t for t in runs[n] if "error" not in t), None)
        res[side] = {
            "ms_per_step": ms,
            "ms_per_step_each_repeat": diffs,
            "peak_rss_mb": statistics.median([t["rss_mb"] for t in ok]) if ok else None,
            "loss_step1": first["losses"][0] if first and first["losses"] else None,
            "loss_stepN": first["losses"][-1] if first and first["losses"] else None,
            "time_s": {str(k): [t.get("time_s") for t in v] for k, v in runs.items()},
            "error": next((t["error"] for t in runs[n] + runs[4 * n] if "error" in t), None),
        }
    o, t = res["onnxdp"]["ms_per_step"], res["torch"]["ms_per_step"]
    res["ratio"] = t / o if o and t and o > 0 and t > 0 else None
    return res


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def table_rows(results):
    rows = []
    for r in results:
        o, t = r["onnxdp"], r["torch"]
        rows.append([r["model"], f"{r['params']:,}", r["batch"], fmt(o["ms_per_step"], ".2f"), fmt(t["ms_per_step"], ".2f"),
                     fmt(r["ratio"], ".2f"), fmt(o["peak_rss_mb"], ".0f"), fmt(t["peak_rss_mb"], ".0f"),
                     f"{fmt(o['loss_step1'], '.4f')} / {fmt(t['loss_step1'], '.4f')}",
                     f"{fmt(o['loss_stepN'], '.4f')} / {fmt(t['loss_stepN'], '.4f')} (N={r['N']})"])
    return rows


HEADER = ["model", "params", "batch", "onnxdp ms/step", "torch ms/step", "ratio", "onnxdp peak MB", "torch peak MB",
          "loss step 1 (onnxdp / torch)", "loss step N (onnxdp / torch)"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnxdp", default=h.default_onnxdp(), help="the onnxdp binary (default: build/onnxdp)")
    ap.add_argument("--models", nargs="+", help=f"some of {list(bm.MODELS)} (default: all)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both (torch.set_num_threads, OMP_NUM_THREADS)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: both on the first GPU (onnxdp --devices cuda:0, PyTorch eager on cuda:0)")
    ap.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], default="no",
                    help="bf16 / fp16: onnxdp --mixed-precision against torch.autocast (fp16 with GradScaler)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating repeats per model (median reported)")
    ap.add_argument("--steps", type=int, help="N for every model (default: per model, bench_models.py)")
    ap.add_argument("--batch", type=int, help="batch for every model (default: per model)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--no-save", action="store_true", help="print only; write nothing to --out-dir")
    ap.add_argument("--keep-work", action="store_true", help="keep the temporary folder (exports, data, logs)")
    h.add_wait_policy_option(ap)
    a = ap.parse_args()
    h.check_binary(a.onnxdp)
    names = bm.available(a.models)
    info = h.machine_info(a.onnxdp, a.threads)
    print(f"{info['date']}  {info['cpu']} ({info['logical_cpus']} logical CPUs, load {info['load_avg_at_start']})  "
          f"threads {a.threads}, OMP_WAIT_POLICY {a.omp_wait_policy}\n{info['onnxdp']}  torch {info['torch']}  onnx {info['onnx']}", flush=True)
    workdir = tempfile.mkdtemp(prefix="onnxdp-bench-")
    results = []
    try:
        for name in names:
            try:
                results.append(bench_model(a, name, workdir))
            except Exception as e:  # a model that cannot even be exported: report and go on
                print(f"[{name}] FAILED before training: {type(e).__name__}: {e}", flush=True)
    finally:
        if a.keep_work:
            print(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    ratios = [r["ratio"] for r in results if r["ratio"]]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    rows = table_rows(results)
    print()
    print(h.text_table(HEADER, rows))
    print(f"\ngeometric mean of ratios (torch/onnxdp, >1: onnxdp faster): {fmt(geo, '.3f')} over {len(ratios)} models")
    errors = [(r["model"], side, r[side]["error"]) for r in results for side in ("onnxdp", "torch") if r[side]["error"]]
    for model, side, err in errors:
        print(f"{model}: {side} failed: {err}")
    if a.no_save:
        return
    md_path, json_path = h.result_paths(a.device + ("" if a.mixed_precision == "no" else "-" + a.mixed_precision),
                                        a.out_dir)
    settings = (f"threads {a.threads}, OMP_WAIT_POLICY {a.omp_wait_policy}, repeats {a.repeats}, AdamW lr {a.lr}, "
                + ("one GPU (--devices cuda:0; PyTorch eager on cuda:0)" if a.device == "cuda"
                   else "one replica (--devices cpu)")
                + ({"no": "",
                    "bf16": "; bfloat16 mixed precision (onnxdp --mixed-precision bf16, torch.autocast bfloat16)",
                    "fp16": "; float16 mixed precision with dynamic loss scaling (onnxdp --mixed-precision fp16, "
                            "torch.autocast float16 + GradScaler)"}[a.mixed_precision]))
    md = [f"# onnxdp vs PyTorch, {a.device.upper()} — {info['date']}", "",
          f"- machine: {info['cpu']}, {info['logical_cpus']} logical CPUs, host {info['host']}, "
          f"load average at start {info['load_avg_at_start']}",
          f"- versions: {info['onnxdp']}; torch {info['torch']}; onnx {info['onnx']}; numpy {info['numpy']}; "
          f"python {info['python']}",
          f"- settings: {settings}; steady step = (min t(4N) - min t(N)) / 3N over repeats",
          "- ratio = torch ms/step ÷ onnxdp ms/step (> 1: onnxdp faster). Informational, never a test.", "",
          h.markdown_table(HEADER, rows), "",
          f"Geometric mean of ratios: {fmt(geo, '.3f')} over {len(ratios)} models."]
    md += [f"- {model}: {side} failed: `{err}`" for model, side, err in errors]
    with open(md_path, "w") as f:
        f.write("\n".join(md) + "\n")
    with open(json_path, "w") as f:
        json.dump({"machine": info, "settings": vars(a) | {"models": names}, "geomean_ratio": geo,
                   "results": results}, f, indent=1)
    print(f"wrote {os.path.relpath(md_path)} and {os.path.relpath(json_path)}")


if __name__ == "__main__":
    main()
