#!/usr/bin/env python3
"""Kills and full disks during `onnxdp train --checkpoint-every 1`, each then resumed to the end.

    crash_campaign.py ONNXDP_BINARY ENOSPC_LIBRARY [--full] [--seed N]

The reference is one uninterrupted run (models/mlp, fixed seed, crossing an epoch). Every trial ends
with `--resume` runs to completion, and then must hold:
  - the resume said it continued from the newest checkpoint folder present (the newest complete
    one: a folder only gets its name once complete), or, where a checkpoint was damaged on purpose,
    from the one before it, naming the damaged one;
  - metrics.jsonl has steps 1..N once each, in order, and every step's loss, lr, grad_norm and epoch
    are the reference's exactly (a step re-run after a resume is not listed twice);
  - the saved model.onnx and every checkpoint's model.safetensors and optimizer.safetensors are the
    reference's byte for byte; no temporary checkpoint folder is left;
  - no run hangs (each has a time limit).

Trials:
  kill      SIGKILL at a random moment of the run (uniform over the reference's wall time), or
            just after a temporary checkpoint folder appears (inside a checkpoint write); the
            resumed run is itself killed again at random half of the time before the final resume.
  fallback  after a kill, the newest checkpoint gets a flipped byte: --resume must skip it, saying
            why, and re-run its step without a second metrics line for it; that resumed run may be
            killed again (also while it writes a checkpoint over the damaged one).
  disk      the LD_PRELOAD library (tests/fault/enospc.c) fills the checkpoint folder's disk at
            byte k of checkpoint 3's write, k over its pages (4096 bytes apart): onnxdp must stop
            with an error naming the file and the full disk, checkpoints 1 and 2 unchanged, no
            checkpoint-3; then --resume without it finishes as the reference.
  fsync     fsync reports EIO / ENOSPC for the checkpoint folder: an error, no checkpoint written.
  fill      a disk fills after a random count of bytes: the one holding everything, or the output
            folder alone (checkpoints elsewhere) within the metrics lines or the model's export: an
            error naming the file, then --resume finishes as the reference.

Default: a sample (5 kills, 8 pages spread over the write, 1 fallback, 1 fsync fault, 3 fills),
for CTest. --full: at least 100 kills in kill trials (the kills of resumed runs count), every page
(4096 bytes apart, and the last byte), 10 fallbacks, 2 fsync faults and 12 fills.
"""
import argparse
import errno
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "mlp", "model.onnx")
STEPS = 30  # 1500 samples in batches of 128: 12 steps an epoch, so the run crosses two epochs
TRAIN = ["--steps", str(STEPS), "--batch-size", "128", "--seed", "7", "--checkpoint-every", "1", "--report-to", "jsonl",
         "--log-every", "1"]
LIMIT_S = 120  # a run that takes longer than this hangs (the reference takes about a second)
DISK_STEP = 3  # the checkpoint whose write the full disk hits: checkpoints 1 and 2 must survive
COMPARED = ("step", "loss", "lr", "grad_norm", "epoch")


class Failed(Exception):
    pass


def train(onnxdp, out, resume=False, ckpt=None, env=None):
    cmd = [onnxdp, "train", MODEL] + TRAIN + ["--output-dir", out]
    if ckpt:
        cmd += ["--checkpoint-dir", ckpt]
    if resume:
        cmd.append("--resume")
    return cmd, dict(os.environ, **(env or {}))


def finish(cmd, env):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        raise Failed(f"hung: {' '.join(cmd)} ran over {LIMIT_S} s")
    return p


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def checkpoints(ckpt_dir):
    """{step: folder} of the complete checkpoint folders (named checkpoint-STEP)."""
    found = {}
    for name in os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []:
        if name.startswith("checkpoint-") and name[11:].isdigit():
            found[int(name[11:])] = os.path.join(ckpt_dir, name)
    return found


def temporaries(ckpt_dir):
    """Every temporary the run left in its folder: checkpoint folders being written, and the
    trained model.onnx.tmp being exported."""
    return [n for n in os.listdir(ckpt_dir) if n.endswith(".tmp")] if os.path.isdir(ckpt_dir) else []


def temporary_step(name):
    """The step of a checkpoint being written ('.checkpoint-12.tmp' -> 12); None for any other
    temporary (model.onnx.tmp)."""
    if name.startswith(".checkpoint-") and name.endswith(".tmp"):
        return int(name[len(".checkpoint-"):-len(".tmp")])
    return None


def tensor_files(folder):
    """The tensor files' digests (None for a missing one)."""
    files = {n: os.path.join(folder, n) for n in ("model.safetensors", "optimizer.safetensors")}
    return {n: digest(f) if os.path.exists(f) else None for n, f in files.items()}


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


class Reference:
    def __init__(self, onnxdp, work):
        out = os.path.join(work, "reference")
        cmd, env = train(onnxdp, out)
        t0 = time.monotonic()
        p = finish(cmd, env)
        self.seconds = time.monotonic() - t0
        if p.returncode != 0:
            raise Failed(f"the reference run failed: {p.stderr}")
        self.metrics = [{k: m[k] for k in COMPARED} for m in metrics(os.path.join(out, "metrics.jsonl"))]
        if [m["step"] for m in self.metrics] != list(range(1, STEPS + 1)):
            raise Failed("the reference's metrics do not list steps 1..N once each")
        self.model = digest(os.path.join(out, "model.onnx"))
        # Bytes written into the output folder besides the checkpoints: metrics.jsonl, then model.onnx.
        self.metrics_bytes = os.path.getsize(os.path.join(out, "metrics.jsonl"))
        self.output_bytes = self.metrics_bytes + os.path.getsize(os.path.join(out, "model.onnx"))
        found = checkpoints(out)
        if sorted(found) != list(range(1, STEPS + 1)):
            raise Failed(f"the reference wrote checkpoints {sorted(found)}")
        self.checkpoints = {s: tensor_files(f) for s, f in found.items()}
        # Bytes each checkpoint writes: its files' sizes (nothing else is written into the folder).
        self.sizes = {s: sum(os.path.getsize(os.path.join(f, n)) for n in os.listdir(f)) for s, f in found.items()}


def check_end(ref, out, ckpt_dir, p, resumed_from, skipped=None):
    """The final --resume run p finished as the reference would have."""
    if p.returncode != 0:
        raise Failed(f"the final --resume failed (exit {p.returncode}): {p.stderr.strip()}")
    said = f"resumed from {os.path.join(ckpt_dir, f'checkpoint-{resumed_from}')} (step {resumed_from})" if resumed_from \
        else "starting from step 1"
    if said not in p.stdout:
        raise Failed(f"--resume did not continue from the newest complete checkpoint ({said!r}): {p.stdout.strip()}")
    if skipped is None and "do not:" in p.stderr:
        raise Failed(f"--resume skipped a checkpoint that was complete: {p.stderr.strip()}")
    if skipped is not None and not (f"checkpoint-{skipped}" in p.stderr and "do not:" in p.stderr):
        raise Failed(f"--resume did not name the damaged checkpoint-{skipped}: {p.stderr.strip()}")
    got = [{k: m.get(k) for k in COMPARED} for m in metrics(os.path.join(out, "metrics.jsonl"))]
    steps = [m["step"] for m in got]
    if steps != list(range(1, STEPS + 1)):
        raise Failed(f"metrics.jsonl lists steps {steps}, not 1..{STEPS} once each")
    for mine, theirs in zip(got, ref.metrics):
        if mine != theirs:
            raise Failed(f"step {mine['step']}: metrics {mine} differ from the uninterrupted run's {theirs}")
    if digest(os.path.join(out, "model.onnx")) != ref.model:
        raise Failed("the saved model.onnx differs from the uninterrupted run's")
    found = checkpoints(ckpt_dir)
    if sorted(found) != list(range(1, STEPS + 1)):
        raise Failed(f"checkpoints at the end: {sorted(found)}")
    for s, folder in found.items():
        if tensor_files(folder) != ref.checkpoints[s]:
            raise Failed(f"checkpoint-{s}'s tensors differ from the uninterrupted run's")
    if temporaries(ckpt_dir):
        raise Failed(f"temporaries left: {temporaries(ckpt_dir)}")


def check_intact(ref, ckpt_dir, what, damaged=()):
    """Every complete checkpoint present (but those damaged on purpose) is the reference's, byte
    for byte."""
    for s, folder in checkpoints(ckpt_dir).items():
        if s not in damaged and tensor_files(folder) != ref.checkpoints[s]:
            raise Failed(f"{what}: checkpoint-{s} is not the uninterrupted run's")


def expected_resume(ref, ckpt_dir):
    """(the newest checkpoint --resume must continue from, the newer one it must skip or None):
    of the folders holding trainer_state.json (what onnxdp lists), the newest that is the
    reference's; a newer one can only be one damaged on purpose."""
    listed = {s: f for s, f in checkpoints(ckpt_dir).items() if os.path.exists(os.path.join(f, "trainer_state.json"))}
    good = [s for s, f in listed.items() if tensor_files(f) == ref.checkpoints[s]]
    newest = max(good) if good else 0
    newer = [s for s in listed if s > newest]
    return newest, max(newer) if newer else None


def run_and_kill(cmd, env, rng, ref, ckpt_dir):
    """Starts cmd and SIGKILLs it at a random moment; returns where (None when it finished first)."""
    def tmp_folders():  # (name, inode): a folder removed and made again is a new one
        found = set()
        for n in (t for t in temporaries(ckpt_dir) if temporary_step(t) is not None):
            try:
                found.add((n, os.stat(os.path.join(ckpt_dir, n)).st_ino))
            except FileNotFoundError:
                pass
        return found
    stale = tmp_folders()  # left by an earlier kill: not a write in progress
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    if rng.random() < 0.5:  # anywhere in the run
        time.sleep(rng.uniform(0, ref.seconds))
        where = "at a random moment"
    else:  # inside a checkpoint write: as soon as a temporary folder shows, or a moment after
        target = rng.randint(1, STEPS)
        pause = rng.choice([0, 0, rng.uniform(0, 0.002)])
        where = f"before checkpoint-{target}'s write was seen"
        while p.poll() is None and time.monotonic() - t0 < LIMIT_S:
            tmp = [n for n, ino in tmp_folders() - stale if temporary_step(n) >= target]
            if tmp:
                time.sleep(pause)
                where = f"while writing {tmp[0]}" + (f" (+{pause * 1e3:.1f} ms)" if pause else "")
                break
    if p.poll() is not None:
        if p.returncode != 0:
            raise Failed(f"the run failed by itself (exit {p.returncode})")
        return None
    p.send_signal(signal.SIGKILL)
    try:
        p.wait(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        raise Failed("a killed run did not end")
    return where


def flip_a_byte(path):
    with open(path, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        b = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))


def kill_trial(onnxdp, ref, work, rng, kills_left, made, damage=False):
    """Up to kills_left kills (each appended to made), then a final resume; a line of what happened.
    A run that ends before its kill ends the trial with the checks of its end. With damage, the
    newest checkpoint gets a flipped byte after the first kill (the resumed run, which rewrites
    that step's checkpoint over it, may be killed too)."""
    out = os.path.join(work, "run")
    shutil.rmtree(out, ignore_errors=True)
    cmd, env = train(onnxdp, out)
    wheres, damaged, tries = [], set(), 0
    while len(wheres) < kills_left:
        where = run_and_kill(cmd, env, rng, ref, out)
        if where is None and damage and not wheres and tries < 5:  # nothing to damage yet: start again
            tries += 1
            shutil.rmtree(out, ignore_errors=True)
            continue
        if where is None:
            break
        made.append(where)
        wheres.append(where)
        check_intact(ref, out, f"after the kill {where}", damaged)
        found = checkpoints(out)
        if damage and not damaged and len(found) >= 2:
            damaged.add(max(found))
            flip_a_byte(os.path.join(found[max(found)], "model.safetensors"))
            wheres[-1] += f", then checkpoint-{max(found)} damaged"
        cmd, env = train(onnxdp, out, resume=True)
        if not damage and rng.random() < 0.5:
            break
    newest, skipped = expected_resume(ref, out)
    cmd, env = train(onnxdp, out, resume=True)  # also after a run that ended before its kill
    check_end(ref, out, out, finish(cmd, env), newest, skipped)
    what = "; ".join(wheres) or "finished before the kill"
    return f"{len(wheres)} kill(s) ({what}), resumed from checkpoint-{newest}" + (
        f" past damaged checkpoint-{skipped}" if skipped else "")


def fault_trial(onnxdp, lib, ref, work, fault_env, fault_dir_of, expect):
    """A run under the LD_PRELOAD fault library; it must fail with an error matching expect, leave
    the complete checkpoints untouched, then --resume without it finishes as the reference."""
    out = os.path.join(work, "run")
    ckpt = os.path.join(work, "ckpt")
    for d in (out, ckpt):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(out)
    os.makedirs(ckpt)
    env = {"LD_PRELOAD": lib, "ONNXDP_FAULT_DIR": os.path.realpath(fault_dir_of(out, ckpt))}
    env.update(fault_env)
    cmd, env = train(onnxdp, out, ckpt=ckpt, env=env)
    p = finish(cmd, env)
    before = checkpoints(ckpt)
    if p.returncode == 0:
        raise Failed(f"onnxdp exited 0 on a full disk ({fault_env})")
    if p.returncode < 0:
        raise Failed(f"onnxdp died of signal {-p.returncode} on a full disk ({fault_env})")
    err = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    if not expect(err):
        raise Failed(f"unclear error for a full disk ({fault_env}): {p.stderr.strip()!r}")
    check_intact(ref, ckpt, f"after the full disk ({fault_env})")
    if temporaries(ckpt):
        raise Failed(f"a failed checkpoint write left {temporaries(ckpt)} ({fault_env})")
    newest = max(before) if before else 0
    cmd, env = train(onnxdp, out, resume=True, ckpt=ckpt)
    check_end(ref, out, ckpt, finish(cmd, env), newest)
    return newest, err


def names_full_disk(path_part):
    return lambda err: path_part in err and ("No space left on device" in err or "disk full" in err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("onnxdp")
    ap.add_argument("enospc")
    ap.add_argument("--full", action="store_true", help="the whole campaign: 100 kills, every page")
    ap.add_argument("--seed", type=int, default=20261204)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    onnxdp, lib = os.path.abspath(args.onnxdp), os.path.abspath(args.enospc)
    t_start = time.monotonic()
    counts = {}
    failures = []

    def trial(kind, fn):
        counts.setdefault(kind, [0, 0])
        counts[kind][0] += 1
        try:
            line = fn()
            counts[kind][1] += 1
            print(f"ok   {kind}: {line}", flush=True)
        except Failed as e:
            failures.append(f"{kind}: {e}")
            print(f"FAIL {kind}: {e}", flush=True)

    with tempfile.TemporaryDirectory() as work:
        ref = Reference(onnxdp, work)
        print(f"reference: {STEPS} steps in {ref.seconds:.2f} s, checkpoint-{DISK_STEP} {ref.sizes[DISK_STEP]} bytes",
              flush=True)

        # Kills: 100 in all with --full (the kills of resumed runs count).
        kills_wanted = 100 if args.full else 5
        made = []  # one entry per SIGKILL sent, failed trials included
        while len(made) < kills_wanted:
            trial("kill", lambda: kill_trial(onnxdp, ref, work, rng, min(3, kills_wanted - len(made)), made))
        kill_trial_kills = len(made)
        for _ in range(10 if args.full else 1):
            trial("fallback", lambda: kill_trial(onnxdp, ref, work, rng, 2, made, damage=True))

        # A full disk at every page (or a sample) of checkpoint DISK_STEP's write.
        before = sum(ref.sizes[s] for s in range(1, DISK_STEP))
        size = ref.sizes[DISK_STEP]
        pages = list(range(0, size, 4096)) + [size - 1]
        if not args.full:
            pages = sorted({pages[round(i * (len(pages) - 1) / 7)] for i in range(8)})
        for k in pages:
            def one(k=k):
                newest, err = fault_trial(onnxdp, lib, ref, work, {"ONNXDP_FAULT_BYTES": str(before + k)},
                                          lambda out, ckpt: ckpt, names_full_disk(f"checkpoint-{DISK_STEP}.tmp"))
                if newest != DISK_STEP - 1:
                    raise Failed(f"the full disk at byte {k} of checkpoint-{DISK_STEP} left checkpoint-{newest}")
                return f"disk full at byte {k} of {size} of checkpoint-{DISK_STEP}: {err}"
            trial("disk", one)
        for code in (errno.EIO, errno.ENOSPC)[: 2 if args.full else 1]:
            def one(code=code):
                newest, err = fault_trial(onnxdp, lib, ref, work, {"ONNXDP_FAULT_FSYNC": str(code)},
                                          lambda out, ckpt: ckpt,
                                          lambda e: "checkpoint-1.tmp" in e and os.strerror(code) in e)
                return f"fsync {errno.errorcode[code]}: {err}"
            trial("fsync", one)
        # A disk that fills after a random count of bytes, in turn: the one holding everything
        # (metrics.jsonl, model.onnx and the checkpoints), the output folder alone (checkpoints in
        # --checkpoint-dir elsewhere) within the metrics lines, and within the model's export.
        kinds = [("everything", lambda out, ckpt: work, 0, sum(ref.sizes.values())),
                 ("metrics lines", lambda out, ckpt: out, 0, ref.metrics_bytes),
                 ("model export", lambda out, ckpt: out, ref.metrics_bytes, ref.output_bytes)]
        for i in range(12 if args.full else 3):
            name, fault_dir_of, lo, hi = kinds[i % 3]
            budget = rng.randrange(lo, hi)
            def one(budget=budget, name=name, fault_dir_of=fault_dir_of):
                newest, err = fault_trial(onnxdp, lib, ref, work, {"ONNXDP_FAULT_BYTES": str(budget)}, fault_dir_of,
                                          names_full_disk(work))
                return f"{name}: disk full after {budget} bytes: resumed from checkpoint-{newest}: {err}"
            trial("fill", one)

    took = time.monotonic() - t_start
    print(f"\n{'full campaign' if args.full else 'sample'} (seed {args.seed}), {took:.0f} s, "
          f"{len(made)} SIGKILLs ({kill_trial_kills} in kill trials):")
    for kind, (n, ok) in counts.items():
        print(f"  {kind:<9} {ok} of {n} trials passed")
    print(f"{sum(ok for _, ok in counts.values())} passed, {len(failures)} failed")
    for f in failures:
        print(f"  {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
