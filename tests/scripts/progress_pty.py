"""The user's view of a run: a progress bar on a terminal, clean lines in a log file.

Usage: progress_pty.py ONNXDP_BINARY MODEL_DIR      (MODEL_DIR: models/mlp, holding model.onnx)

Runs `onnxdp train MODEL_DIR/model.onnx --steps 30 --batch-size 32` twice, in a scratch folder:
  1. under a pseudo-terminal (pty.fork): stdout is a tty, so onnxdp draws its bar. Expected: the
     bar redrawn in place, "\r[" + 20 of '#'/'.' + "] step N/30" with "eta M:SS", the erase to end
     of line "\x1b[K", the last step drawn ("step 30/30"), and a final '\n'.
  2. with stdout to a file: expected no '\r' and no '\x1b' at all, and at least two plain lines
     "step N/30  loss X" (the first and the last step at least), "step 30/30" among them.
Both runs must exit 0. Prints what it checked and "ok"; exits 1 naming the failed check, with
the captured output.
"""
import os
import pty
import re
import select
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 300
BAR = re.compile(r"\r\[[#.]{20}\] step\s+\d+/30\b.*?eta \d+:\d\d")
LINE = re.compile(r"^step\s+(\d+)/30\s+loss\s", re.M)


def fail(what, output):
    sys.stderr.write(f"progress_pty: {what}\n--- output ({len(output)} chars) ---\n{output!r}\n")
    sys.exit(1)


def run_in_pty(argv, cwd):
    """Runs argv with stdin/stdout/stderr on a new pseudo-terminal; returns (exit code, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is its controlling terminal
        try:
            os.chdir(cwd)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    chunks, deadline = [], time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 1.0)
        if not r:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        fail(f"timed out after {TIMEOUT_S} s under the pty", b"".join(chunks).decode(errors="replace"))
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: progress_pty.py ONNXDP_BINARY MODEL_DIR")
    binary, model_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    argv = [binary, "train", os.path.join(model_dir, "model.onnx"), "--steps", "30", "--batch-size", "32"]

    with tempfile.TemporaryDirectory(prefix="onnxdp_pty_") as tmp:
        rc, tty_out = run_in_pty(argv, tmp)
        if rc != 0:
            fail(f"under a pty: exit code {rc}", tty_out)
        # The pty turns "\n" into "\r\n" (onlcr), so a bare '\r' is not evidence: look for the bar.
        bars = BAR.findall(tty_out)
        print(f"pty: {len(bars)} bar draws")
        if not bars:
            fail("under a pty: no progress bar '\\r[####....] step N/30 ... eta M:SS'", tty_out)
        if "\x1b[K" not in tty_out:
            fail("under a pty: the bar does not erase to end of line (\\x1b[K)", tty_out)
        if not re.search(r"\r\[#{20}\] step\s+30/30\b", tty_out):
            fail("under a pty: the last step (full bar, step 30/30) is not drawn", tty_out)
        if not tty_out.endswith("\n"):
            fail("under a pty: the output does not end with a newline", tty_out)

        log_path = os.path.join(tmp, "train.log")
        with open(log_path, "wb") as log:
            r = subprocess.run(argv, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               timeout=TIMEOUT_S)
        file_out = open(log_path, encoding="utf-8", errors="replace").read()
        if r.returncode != 0:
            fail(f"to a file: exit code {r.returncode}", file_out)
        if "\r" in file_out or "\x1b" in file_out:
            fail("to a file: '\\r' or an escape code in the log", file_out)
        steps = [int(s) for s in LINE.findall(file_out)]
        print(f"file: step lines {steps}")
        if len(steps) < 2 or 30 not in steps:
            fail("to a file: expected at least two 'step N/30  loss ...' lines, the last step among them", file_out)
    print("ok")


if __name__ == "__main__":
    main()
