#!/usr/bin/env python3
"""onnxdp vs its peers: steady training step time and peak memory, same model, data, batch,
optimizer (AdamW lr 1e-3, weight decay 0.01) and thread count, on the CPU, one replica.

    nice python3 bench/compare.py [--onnxdp build/onnxdp] [--models mlp gpt_small] [--threads 2]
                                  [--peers eager compile ort] [--repeats 2] [--steps N] [--batch B]
                                  [--no-save] [--device cuda] [--mixed-precision bf16|fp16]

Peers (--peers): eager = PyTorch eager (bench/torch_worker.py), compile = torch.compile of the same
module (torch_worker.py --compile), ort = ONNX Runtime Training on the same exported file
(bench/ort_worker.py, run with the python of .venvs/ort-training, made by bench/setup-peers).
Default on the CPU in float32: all three (ort when its venv exists); otherwise eager.

--mixed-precision bf16 / fp16: onnxdp --mixed-precision bf16 / fp16 against the forward and loss
under torch.autocast(dtype=torch.bfloat16 / torch.float16), both with float32 master weights;
fp16 with dynamic loss scaling on both sides (torch.amp.GradScaler's defaults, onnxdp's the same).

Every model is rebuilt with make_models.py's torch modules (plus gpt_small), exported to a
temporary folder the way make_models.py exports, given random data (a whole number of batches),
and trained by every side, each run a child process of its own. The torch module loads its
initial weights from the exported file and ORT trains that file, so all start from identical
weights and see the same batches in the same order; their losses are printed side by side.

Timing: each side trains N and then 4N steps in separate runs; the steady step is
(min time(4N) - min time(N)) / 3N, so what a run does once (the first step's planning, torch's
first-call work) cancels. Every side's time is the wall time of its training loop, set-up left out:
onnxdp's from its metrics (`time_s` of the last step: seconds since its loop started, after
loading the model and data and building the plans), the others' measured around their loop (the
`import torch` time of a process is too noisy to subtract; torch.compile's clock starts after its
compiling step 1). Until 2026-12-05 onnxdp's time was its process's wall time, whose start-up
(loading the CUDA libraries) varies by a second between runs here: as much as 9 steps of gpt_small. Runs alternate onnxdp, eager, compile, ORT, ... Peak
memory is each child's own peak RSS (os.wait4) in the 4N runs, median over repeats.

ratio = peer ms/step / onnxdp ms/step: above 1 means onnxdp is faster. Results are informational:
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
    rows = h.read_metrics(metrics)
    losses = [r["loss"] for r in rows]
    if not rows or "time_s" not in rows[-1]:
        return {"error": "onnxdp's metrics hold no time_s (an onnxdp older than this benchmark?)", "cmd": " ".join(cmd)}
    # The training loop's own clock, as the peers' loop_s: the process's start-up (loading the
    # CUDA libraries, reading the model) is left out, where its noise would swamp a short run.
    return {"time_s": rows[-1]["time_s"], "process_wall_s": wall, "rss_mb": rss, "losses": losses}


def torch_trial(a, m, steps, tag, compiled=False):
    kind = "compile" if compiled else "torch"
    out = os.path.join(m["dir"], f"{kind}-{tag}.json")
    cmd = [sys.executable, os.path.join(HERE, "torch_worker.py"), "--model", m["name"], "--onnx", m["onnx"],
           "--data", m["npz"], "--batch", str(m["batch"]), "--steps", str(steps), "--threads", str(a.threads),
           "--lr", repr(a.lr), "--device", a.device, "--mixed-precision", a.mixed_precision, "--out", out]
    if compiled:
        cmd.append("--compile")
    rc, wall, rss, err = h.run_child(cmd, h.thread_env(a.threads, a.omp_wait_policy), os.path.join(m["dir"], f"{kind}-{tag}"))
    if rc != 0:
        return {"error": f"torch worker{' --compile' if compiled else ''} exit {rc}: {err.strip()[-600:]}"}
    with open(out) as f:
        r = json.load(f)
    t = {"time_s": r["loop_s"], "rss_mb": rss, "losses": r["losses"]}
    if r.get("first_step_s") is not None:
        t["first_step_s"] = r["first_step_s"]  # torch.compile's step 1 (it compiles), outside time_s
    return t


def ort_trial(a, m, steps, tag):
    """bench/ort_worker.py with the ORT virtualenv's python (bench/setup-peers)."""
    out = os.path.join(m["dir"], f"ort-{tag}.json")
    cmd = [a.ort_python, os.path.join(HERE, "ort_worker.py"), "--onnx", m["onnx"], "--input", m["input"],
           "--data", m["npz"], "--trainable", os.path.join(m["dir"], "trainable.json"), "--batch", str(m["batch"]),
           "--steps", str(steps), "--threads", str(a.threads), "--lr", repr(a.lr),
           "--work", os.path.join(m["dir"], f"ort-{tag}-artifacts"), "--out", out]
    rc, wall, rss, err = h.run_child(cmd, h.thread_env(a.threads, a.omp_wait_policy), os.path.join(m["dir"], f"ort-{tag}"))
    r = {}
    if os.path.exists(out):
        with open(out) as f:
            r = json.load(f)
    notes = {k: r[k] for k in ("failed_as_exported", "workarounds") if k in r}
    if rc != 0 or "error" in r:
        return {"error": f"ORT worker exit {rc}: " + (r.get("error") or err.strip()[-600:]), **notes}
    return {"time_s": r["loop_s"], "rss_mb": rss, "losses": r["losses"], **notes}


# The sides of a run: onnxdp and the peers, in the order the runs alternate. "torch" (PyTorch eager)
# keeps its name in the JSON from before the peers came.
PEERS = {"eager": "torch", "compile": "torch_compile", "ort": "ort"}
LABEL = {"onnxdp": "onnxdp", "torch": "eager", "torch_compile": "compile", "ort": "ORT"}


def trial(a, m, side, steps, tag):
    if side == "onnxdp":
        return onnxdp_trial(a, m, steps, tag)
    if side == "ort":
        return ort_trial(a, m, steps, tag)
    return torch_trial(a, m, steps, tag, compiled=side == "torch_compile")


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
    m = {"name": name, "dir": os.path.dirname(onnx_path), "onnx": onnx_path, "npz": npz_path, "batch": batch,
         "input": spec["input"]}
    sides = ["onnxdp"] + a.sides
    res = {"model": name, "params": params, "batch": batch, "N": n, "runs": {s: {} for s in sides}}
    runs = {s: {n: [], 4 * n: []} for s in sides}
    failed = {}  # side -> its first error: a side that failed is not run again for this model
    for r in range(a.repeats):
        for steps in (n, 4 * n):
            for side in sides:
                if side in failed:
                    continue
                t = trial(a, m, side, steps, f"{steps}-{r}")
                runs[side][steps].append(t)
                if "error" in t:
                    failed[side] = t["error"]
                    print(f"[{name}] {LABEL[side]} FAILED: {t['error']}", flush=True)
            if r == 0 and steps == n:
                first = {s: runs[s][n][0] for s in sides if runs[s][n] and "error" not in runs[s][n][0]
                         and runs[s][n][0]["losses"]}
                if "onnxdp" in first:
                    l0 = first["onnxdp"]["losses"][0]
                    rel = {s: abs(l0 - t["losses"][0]) / max(abs(t["losses"][0]), 1e-12) for s, t in first.items()
                           if s != "onnxdp"}
                    res["first_loss_rel_diff"] = rel.get("torch")
                    res["first_loss_rel_diff_by_peer"] = rel
                    worst = max(rel.values(), default=0.0)
                    note = "agree" if worst < 1e-3 else ("roughly agree" if worst < 2e-2 else "DISAGREE")
                    print(f"[{name}] step-1 loss " + ", ".join(f"{LABEL[s]} {t['losses'][0]:.5f}" for s, t in first.items())
                          + f" (largest rel diff to onnxdp {worst:.1e}: {note}); step-{n} loss "
                          + ", ".join(f"{LABEL[s]} {t['losses'][-1]:.5f}" for s, t in first.items()), flush=True)
    for side in sides:
        ms, diffs = steady_ms(runs[side][n], runs[side][4 * n], n)
        ok = [t for t in runs[side][4 * n] if "error" not in t]
        first = next((t for t in runs[side][n] if "error" not in t), None)
        every = runs[side][n] + runs[side][4 * n]
        res[side] = {
            "ms_per_step": ms,
            "ms_per_step_each_repeat": diffs,
            "peak_rss_mb": statistics.median([t["rss_mb"] for t in ok]) if ok else None,
            "loss_step1": first["losses"][0] if first and first["losses"] else None,
            "loss_stepN": first["losses"][-1] if first and first["losses"] else None,
            "time_s": {str(k): [t.get("time_s") for t in v] for k, v in runs[side].items()},
            "error": failed.get(side),
        }
        if side == "torch_compile":
            res[side]["first_step_s"] = [t.get("first_step_s") for t in every]
        if side == "ort":  # what generate_artifacts could not do with the file as exported, and the fix
            res[side].update({k: t[k] for t in every for k in ("failed_as_exported", "workarounds") if k in t})
    o = res["onnxdp"]["ms_per_step"]
    res["ratios"] = {}
    for side in a.sides:
        t = res[side]["ms_per_step"]
        res["ratios"][side] = t / o if o and t and o > 0 and t > 0 else None
    res["ratio"] = res["ratios"].get("torch")
    return res


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def table(results, sides):
    """(header, rows): ms/step of every side, onnxdp's ratio to each peer, peak MB and the losses at
    step 1 and N of every side (joined with ' / ' in the order of the header's names)."""
    peers = sides[1:]
    names = " / ".join(LABEL[s] for s in sides)
    header = (["model", "params", "batch"] + [f"{LABEL[s]} ms/step" for s in sides]
              + [f"ratio vs {LABEL[s]}" for s in peers]
              + [f"peak MB ({names})", f"loss step 1 ({names})", f"loss step N ({names})"])
    rows = []
    for r in results:
        sd = [r.get(s) or {} for s in sides]
        rows.append([r["model"], f"{r['params']:,}", r["batch"]]
                    + [fmt(x.get("ms_per_step"), ".2f") for x in sd]
                    + [fmt(r["ratios"].get(s), ".2f") for s in peers]
                    + [" / ".join(fmt(x.get("peak_rss_mb"), ".0f") for x in sd),
                       " / ".join(fmt(x.get("loss_step1"), ".4f") for x in sd),
                       " / ".join(fmt(x.get("loss_stepN"), ".4f") for x in sd) + f" (N={r['N']})"])
    return header, rows


def geomean(xs):
    xs = [x for x in xs if x]
    return (math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None), len(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnxdp", default=h.default_onnxdp(), help="the onnxdp binary (default: build/onnxdp)")
    ap.add_argument("--models", nargs="+", help=f"some of {list(bm.MODELS)} (default: all)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both (torch.set_num_threads, OMP_NUM_THREADS)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: both on the first GPU (onnxdp --devices cuda:0, PyTorch eager on cuda:0)")
    ap.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], default="no",
                    help="bf16 / fp16: onnxdp --mixed-precision against torch.autocast (fp16 with GradScaler)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating repeats per model (the minimum time of each length is used)")
    ap.add_argument("--steps", type=int, help="N for every model (default: per model, bench_models.py)")
    ap.add_argument("--batch", type=int, help="batch for every model (default: per model)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--no-save", action="store_true", help="print only; write nothing to --out-dir")
    ap.add_argument("--keep-work", action="store_true", help="keep the temporary folder (exports, data, logs)")
    ap.add_argument("--peers", nargs="+", choices=list(PEERS),
                    help="what onnxdp is measured against: eager (PyTorch eager), compile (torch.compile, "
                         "default mode), ort (ONNX Runtime Training, from bench/setup-peers' virtualenv). "
                         "Default on the CPU in float32: all three, ort only when its virtualenv exists; "
                         "otherwise eager")
    ap.add_argument("--ort-python", default=os.path.join(h.ROOT, ".venvs", "ort-training", "bin", "python"),
                    help="python of the ORT Training virtualenv (made by bench/setup-peers)")
    h.add_wait_policy_option(ap)
    a = ap.parse_args()
    h.check_binary(a.onnxdp)
    have_ort = os.access(a.ort_python, os.X_OK)
    if a.peers is None:
        a.peers = ["eager"]
        if a.device == "cpu" and a.mixed_precision == "no":
            a.peers += ["compile"] + (["ort"] if have_ort else [])
            if not have_ort:
                print(f"note: no ORT Training ({a.ort_python} missing; bench/setup-peers makes it): "
                      "measuring against PyTorch eager and torch.compile", file=sys.stderr)
    if "ort" in a.peers and not have_ort:
        sys.exit(f"--peers ort: {a.ort_python} not found or not executable (run bench/setup-peers, "
                 "or pass --ort-python PATH)")
    if "ort" in a.peers and (a.device != "cpu" or a.mixed_precision != "no"):
        sys.exit("--peers ort: the ORT Training side runs on the CPU in float32 only (onnxruntime-training-cpu)")
    a.sides = list(dict.fromkeys(PEERS[p] for p in a.peers))
    names = bm.available(a.models)
    info = h.machine_info(a.onnxdp, a.threads)
    if "ort" in a.sides:
        info["ort_training"] = h.ort_versions(a.ort_python)
    versions = (f"{info['onnxdp']}; torch {info['torch']}; onnx {info['onnx']}; numpy {info['numpy']}; "
                f"python {info['python']}")
    if "ort_training" in info:
        o = info["ort_training"]
        versions += (f"; ORT Training: onnxruntime-training-cpu {o.get('onnxruntime')} with onnx {o.get('onnx')}, "
                     f"numpy {o.get('numpy')}, python {o.get('python')}")
    print(f"{info['date']}  {info['cpu']} ({info['logical_cpus']} logical CPUs, load {info['load_avg_at_start']})  "
          f"threads {a.threads}, OMP_WAIT_POLICY {a.omp_wait_policy}, peers {' '.join(a.peers)}\n{versions}", flush=True)
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
    info["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if h.binary_mtime(a.onnxdp) != info["onnxdp_binary_mtime"]:
        info["onnxdp_binary_changed_during_run"] = h.binary_mtime(a.onnxdp)
        print(f"WARNING: {a.onnxdp} was rewritten during the run (built {info['onnxdp_binary_mtime']}, now "
              f"{info['onnxdp_binary_changed_during_run']}): the table mixes two onnxdp builds; copy the binary "
              "elsewhere and run again", file=sys.stderr)
    sides = ["onnxdp"] + a.sides
    header, rows = table(results, sides)
    geo = {side: geomean([r["ratios"].get(side) for r in results]) for side in a.sides}
    geo_lines = [f"{LABEL[side]} ÷ onnxdp: {fmt(g, '.3f')} over {k} models" for side, (g, k) in geo.items()]
    print()
    print(h.text_table(header, rows))
    print("\ngeometric mean of ratios (peer ms/step ÷ onnxdp ms/step, > 1: onnxdp faster): " + "; ".join(geo_lines))
    errors = [(r["model"], side, r[side]["error"]) for r in results for side in sides if r[side]["error"]]
    for model, side, err in errors:
        print(f"{model}: {LABEL[side]} failed: {err}")
    fixes = [(r["model"], r["ort"]) for r in results if "ort" in r and r["ort"].get("workarounds")]
    for model, o in fixes:
        print(f"{model}: ORT generate_artifacts failed on the file as exported ({o['failed_as_exported']}); "
              f"trained with the workaround {', '.join(o['workarounds'])}")
    if a.no_save:
        return
    md_path, json_path = h.result_paths(a.device + ("" if a.mixed_precision == "no" else "-" + a.mixed_precision)
                                        + ("-peers" if a.sides != ["torch"] else ""), a.out_dir)
    settings = (f"threads {a.threads}, OMP_WAIT_POLICY {a.omp_wait_policy}, repeats {a.repeats}, AdamW lr {a.lr}, "
                + ("one GPU (--devices cuda:0; PyTorch eager on cuda:0)" if a.device == "cuda"
                   else "one replica (--devices cpu)")
                + ({"no": "",
                    "bf16": "; bfloat16 mixed precision (onnxdp --mixed-precision bf16, torch.autocast bfloat16)",
                    "fp16": "; float16 mixed precision with dynamic loss scaling (onnxdp --mixed-precision fp16, "
                            "torch.autocast float16 + GradScaler)"}[a.mixed_precision]))
    title = ", ".join({"torch": "PyTorch eager", "torch_compile": "torch.compile", "ort": "ONNX Runtime Training"}[s]
                      for s in a.sides)
    md = [f"# onnxdp vs {title}, {a.device.upper()} — {info['date']}", "",
          f"- machine: {info['cpu']}, {info['logical_cpus']} logical CPUs, host {info['host']}, "
          f"load average at start {info['load_avg_at_start']}, at end {info['load_avg_at_end']}",
          f"- versions: {versions}; onnxdp binary {info['onnxdp_binary']} built {info['onnxdp_binary_mtime']}"
          + (f" (REWRITTEN during the run, {info['onnxdp_binary_changed_during_run']}: two builds mixed)"
             if "onnxdp_binary_changed_during_run" in info else ""),
          f"- settings: {settings}; steady step = (min t(4N) - min t(N)) / 3N over repeats, t the wall time of "
          "each side's training loop (onnxdp: its metrics' time_s)",
          "- ratio = peer ms/step ÷ onnxdp ms/step (> 1: onnxdp faster). Informational, never a test.", "",
          h.markdown_table(header, rows), "",
          "Geometric mean of ratios: " + "; ".join(geo_lines) + "."]
    md += [f"- {model}: {LABEL[side]} failed: `{err}`" for model, side, err in errors]
    md += [f"- {model}: ORT's generate_artifacts failed on the file as exported (`{o['failed_as_exported']}`); "
           f"trained with the workaround {', '.join(o['workarounds'])} (bench/ort_worker.py)" for model, o in fixes]
    with open(md_path, "w") as f:
        f.write("\n".join(md) + "\n")
    with open(json_path, "w") as f:
        json.dump({"machine": info, "settings": vars(a) | {"models": names},
                   "geomean_ratio": geo["torch"][0] if "torch" in geo else None,
                   "geomean_ratio_by_peer": {side: g for side, (g, _) in geo.items()},
                   "results": results}, f, indent=1)
    print(f"wrote {os.path.relpath(md_path)} and {os.path.relpath(json_path)}")


if __name__ == "__main__":
    main()
