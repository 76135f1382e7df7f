#!/usr/bin/env python3
"""One PyTorch training run for bench/compare.py, in its own process so that its peak RSS can be
read on its own (os.wait4 in the parent).

    torch_worker.py --model NAME --onnx MODEL.onnx --data D.npz --batch B --steps N --threads T \
                    --lr 1e-3 [--compile] --out result.json

Builds the module as bench_models does, loads the initial weights from MODEL.onnx (so it starts
where onnxdp starts), trains N AdamW steps on D.npz in file order (wrapping around, like
`onnxdp train --no-shuffle`), and writes {"loop_s", "losses"} to --out. loop_s is the wall time of
the N steps alone (module import and set-up excluded); with --compile, of steps 2..N (step 1
compiles: see below).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the first GPU)")
    ap.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], default="no",
                    help="bf16 / fp16: forward and loss under torch.autocast(dtype=torch.bfloat16 / float16); "
                         "fp16 with torch.amp.GradScaler's defaults")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile(model) (default mode, inductor); it compiles in the first step, "
                         "which the steady-step method cancels")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import numpy as np
    import torch
    import torch.nn.functional as F
    import bench_models as bm

    torch.set_num_threads(a.threads)
    # fp32 throughout, as onnxdp without --tf32: PyTorch's default lets cuDNN convolutions use TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = bm.build(a.model)
    bm.load_weights(model, a.onnx)
    model.to(a.device)
    model.train()
    # The module is compiled, the optimizer step stays eager (as torch.compile's users write it).
    step_model = torch.compile(model) if a.compile else model
    data = np.load(a.data)
    x_all = torch.from_numpy(data[bm.MODELS[a.model]["input"]]).to(a.device)
    y_all = torch.from_numpy(data["label"]).to(a.device)
    n = x_all.shape[0]
    # AdamW with torch's defaults (weight decay 0.01), as onnxdp's adamw.
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    scaler = torch.amp.GradScaler(a.device, enabled=a.mixed_precision == "fp16")  # init 2**16, growth interval 2000
    low = torch.float16 if a.mixed_precision == "fp16" else torch.bfloat16
    losses = []
    cursor = 0
    t0 = time.perf_counter()
    first_step_s = None
    for step in range(a.steps):
        if a.compile and step == 1:
            # Step 1 compiled the forward and the backward. Compiling takes seconds, from 30 s cold
            # to a few with inductor's cache warm, and varies by more than the 3N steps of a tiny
            # model take: so the clock starts after it, and t(N), t(4N) hold N-1 and 4N-1 steps,
            # whose difference is still the 3N steps the steady-step method divides by.
            first_step_s = time.perf_counter() - t0
            t0 = time.perf_counter()
        if cursor >= n:
            cursor = 0
        x = x_all[cursor:cursor + a.batch]
        y = y_all[cursor:cursor + a.batch]
        cursor += a.batch
        with torch.autocast(device_type=a.device, dtype=low, enabled=a.mixed_precision != "no"):
            logits = step_model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())  # a device sync every step, as onnxdp's metrics read the loss
    loop_s = time.perf_counter() - t0
    with open(a.out, "w") as f:
        json.dump({"loop_s": loop_s, "first_step_s": first_step_s, "losses": losses, "torch": torch.__version__,
                   "threads": torch.get_num_threads(), "device": a.device, "compiled": a.compile}, f)


if __name__ == "__main__":
    main()
