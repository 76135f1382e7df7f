"""What bench/compare.py and bench/replicas.py share: preparing a model and its data in a work
folder, running one child process and reading its wall time and peak RSS, describing the machine,
and writing result files."""
import datetime
import json
import shutil
import os
import platform
import re
import socket
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def prepare(name, workdir, batch, batches_of_data=4):
    """Export `name` to workdir/name/model.onnx and write random data of batch * batches_of_data
    samples (a whole number of batches, so every step sees a full batch). Returns
    (onnx_path, npz_path, trainable parameter count)."""
    import warnings
    import torch
    import bench_models as bm
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    onnx_path, npz_path = os.path.join(d, "model.onnx"), os.path.join(d, "data.npz")
    data = bm.make_data(name, batch * batches_of_data)
    np.savez(npz_path, **data)
    model = bm.build(name)
    example = torch.from_numpy(data[bm.MODELS[name]["input"]][:min(batch, 16)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bm.export(name, model, example, onnx_path)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    with open(os.path.join(d, "trainable.json"), "w") as f:
        json.dump(trainable_initializers(model, onnx_path), f)
    return onnx_path, npz_path, params


def trainable_initializers(model, onnx_path):
    """The file's initializers that hold a trainable parameter of the torch module: those named
    like one, and the dynamo exporter's transposed copies (make_models.transposed_parameters).
    ORT Training is told to train these and to freeze the rest (BatchNorm's running statistics,
    constants)."""
    import onnx
    import make_models as mm
    m = onnx.load(onnx_path)
    params = {name for name, p in model.named_parameters() if p.requires_grad}
    transposed = mm.transposed_parameters(m)
    return [i.name for i in m.graph.initializer
            if i.name in params or transposed.get(i.name) in params]


def thread_env(threads, wait_policy="default"):
    """The children's environment: T threads for OpenMP, onnxdp and the BLAS libraries, and
    OpenMP's wait policy, which only PyTorch's libgomp reads (onnxdp runs its own thread teams).
    'default' leaves OMP_WAIT_POLICY as the caller's environment has it."""
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    if wait_policy != "default":
        env["OMP_WAIT_POLICY"] = wait_policy.upper()
    return env


def add_wait_policy_option(ap):
    ap.add_argument("--omp-wait-policy", choices=["passive", "active", "default"], default="default",
                    help="OMP_WAIT_POLICY for both children, read by PyTorch only ('default': as inherited)")


# A forked child's peak RSS (ru_maxrss) includes the parent's resident pages at fork time, kept
# through exec: forked straight from this process, which has torch loaded, every child would report
# some 500 MB it never used. So each child is started by this small launcher (python -S, no torch),
# which forks it, waits for it with os.wait4 and writes its wall time and own peak RSS.
_LAUNCHER = r"""
import json, os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as f:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "wall_s": wall, "maxrss_kb": ru.ru_maxrss}, f)
"""


def run_child(cmd, env, log_prefix):
    """Run cmd to completion. Returns (returncode, wall seconds, peak RSS in MB, stderr tail).
    The peak RSS is the child's own (os.wait4 on its pid, in the launcher above)."""
    rfile = log_prefix + ".rusage.json"
    with open(log_prefix + ".out", "w") as out, open(log_prefix + ".err", "w") as err:
        launcher_rc = subprocess.call([sys.executable, "-S", "-c", _LAUNCHER, rfile, *cmd], env=env, stdout=out, stderr=err)
    with open(log_prefix + ".err") as f:
        tail = f.read()[-2000:]
    if launcher_rc != 0 or not os.path.exists(rfile):
        return launcher_rc or 1, 0.0, 0.0, tail
    with open(rfile) as f:
        r = json.load(f)
    return r["rc"], r["wall_s"], r["maxrss_kb"] / 1024.0, tail


def onnxdp_cmd(onnxdp, onnx_path, npz_path, batch, steps, lr, devices, metrics):
    # Each trial starts in an empty run folder (onnxdp never writes over an earlier run's checkpoints).
    shutil.rmtree(os.path.splitext(metrics)[0] + "-run", ignore_errors=True)
    return [onnxdp, "train", onnx_path, "--data", npz_path, "--steps", str(steps),
            "--batch-size", str(batch), "--optimizer", "adamw", "--lr", repr(lr), "--no-shuffle",
            "--devices", devices, "--metrics", metrics, "--quiet",
            # the run's folder (checkpoint, trained model) beside the metrics, not under ./runs
            "--output-dir", os.path.splitext(metrics)[0] + "-run", "--report-to", "none"]


def read_metrics(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def onnxdp_version(onnxdp):
    try:
        r = subprocess.run([onnxdp, "--version"], capture_output=True, text=True, timeout=60)
        return r.stdout.strip().splitlines()[0] if r.stdout.strip() else f"(--version exit {r.returncode})"
    except OSError as e:
        return f"(not runnable: {e})"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_tag():
    return re.sub(r"[^A-Za-z0-9]+", "-", socket.gethostname().split(".")[0])[:24].strip("-") or "host"


def machine_info(onnxdp, threads):
    import onnx
    import torch
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "threads": threads,
        "onnxdp": onnxdp_version(onnxdp),
        "onnxdp_binary": os.path.abspath(onnxdp),
        "onnxdp_binary_mtime": binary_mtime(onnxdp),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def ort_versions(ort_python):
    """The versions in the ORT Training virtualenv (its python, not this one)."""
    code = ("import json, platform, numpy, onnx, onnxruntime; print(json.dumps({'onnxruntime': onnxruntime.__version__, "
            "'onnx': onnx.__version__, 'numpy': numpy.__version__, 'python': platform.python_version()}))")
    try:
        r = subprocess.run([ort_python, "-c", code], capture_output=True, text=True, timeout=120)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as e:
        return {"error": f"{ort_python}: {e}"}


def binary_mtime(path):
    """When the binary was last written (UTC): a build that replaces it during a run would mix
    two onnxdp versions in one table; compare.py checks this at the end."""
    t = os.path.getmtime(path)
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def result_paths(kind, out_dir):
    """bench/results/<date>-<kind>-<host>.{md,json}; -2, -3, ... when that name is taken."""
    os.makedirs(out_dir, exist_ok=True)
    stem = f"{datetime.date.today().isoformat()}-{kind}-{host_tag()}"
    base, k = os.path.join(out_dir, stem), 2
    while os.path.exists(base + ".md") or os.path.exists(base + ".json"):
        base, k = os.path.join(out_dir, f"{stem}-{k}"), k + 1
    return base + ".md", base + ".json"


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(header, rows):
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in cells[1:]])


def default_onnxdp():
    return os.path.join(ROOT, "build", "onnxdp")


def check_binary(path):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.exit(f"onnxdp binary {path} not found or not executable (build it, or pass --onnxdp PATH)")
