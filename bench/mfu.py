#!/usr/bin/env python3
"""Tokens/s and MFU of a bench/compare.py record on a GPU (issue 25 item 4), from its JSON.

    mfu.py RECORD.json [--peak-tflops F] [--md FILE]

MFU = model FLOPs per second / the GPU's peak dense bf16 FLOPs. Model FLOPs per trained token, as
PaLM's appendix B and nanoGPT's estimate_mfu count them: 6 N (N parameters: forward 2 N, backward
4 N) + 12 L d T (attention's QK^T and AV, L layers, width d, context T), for the transformer
shapes of bench/bench_models.py. The peak comes from the GPU's name (nvidia-smi) unless given.
"""
import argparse
import ast
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))

# Dense bf16 tensor-core peaks (TFLOP/s) from the vendors' data sheets (SXM parts).
PEAKS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def gpu_peak():
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return None, "no GPU"
    for key, peak in PEAKS.items():
        if key in name:
            return peak, name
    return None, name


def transformer_shapes():
    """bench_models.py's GPT_SMALL / GPT2_SMALL dims, read from its source (no torch needed)."""
    shapes = {}
    tree = ast.parse(open(os.path.join(HERE, "bench_models.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", "")
            if name.startswith("GPT") and getattr(node.value.func, "id", "") == "dict":
                shapes[name.lower()] = {k.arg: ast.literal_eval(k.value) for k in node.value.keywords}
    return shapes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("record")
    ap.add_argument("--peak-tflops", type=float)
    ap.add_argument("--md", default="")
    a = ap.parse_args()
    shapes = transformer_shapes()
    rec = json.load(open(a.record))
    peak, gpu = (a.peak_tflops, "given") if a.peak_tflops else gpu_peak()
    lines = [f"GPU: {gpu}; peak bf16 {peak or '?'} TFLOP/s", "",
             "| model | side | batch x context | ms/step | tokens/s | model TFLOP/s | MFU | ratio (peer ms ÷ onnxdp ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rec["results"]:
        shape = shapes.get(r["model"])  # gpt2_small, gpt_small: the transformer's dims
        if not shape:
            continue
        T, L, d = shape["context"], shape["n_layer"], shape["d_model"]
        flops_per_token = 6 * r["params"] + 12 * L * d * T
        tokens = r["batch"] * T
        for side in r["runs"]:
            ms = r[side].get("ms_per_step")
            if not ms or ms <= 0:  # failed, or the steady-step estimate is noise (too few steps)
                why = "failed" if not ms else f"unmeasured ({ms:.1f})"
                lines.append(f"| {r['model']} | {side} | {r['batch']} x {T} | {why} | | | | |")
                continue
            tps = tokens / (ms / 1000)
            tflops = flops_per_token * tps / 1e12
            mfu = f"{100 * tflops / peak:.1f} %" if peak else "?"
            q = r.get("ratios", {}).get(side)
            ratio = "" if side == "onnxdp" or q is None else f"{q:.2f}"
            lines.append(f"| {r['model']} | {side} | {r['batch']} x {T} | {ms:.1f} | {tps:,.0f} | {tflops:.1f} | {mfu} | {ratio} |")
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "a") as f:
            f.write("\n## Tokens/s and MFU (bench/mfu.py)\n\n" + text + "\n")


if __name__ == "__main__":
    main()
