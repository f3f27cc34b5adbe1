#!/usr/bin/env python3
"""bench_startup.py - how soon a gridtrain rank can take a signal, and how
long a CPU run takes to reach its first step.

usage: bench_startup.py GRIDTRAIN DATASET [--runs N] [--scan MS,MS,...] [--workdir DIR]

Each run starts `gridtrain train tests/decks/tiny.in` on one rank (MPICH's
singleton start, no launcher in between, so the time counts from the rank's
own exec) with the dataset given, and:

  startup: polls /proc/PID/status until the rank's SIGUSR1 handler is in
           place (SigCgt), and reads its output until the line of step 0:
           the time from exec to each (median, min, max over --runs);
  scan:    sends SIGUSR1 at each given delay after exec and waits for the
           end: a run that stops with exit status 3 and a complete
           checkpoint (or exits cleanly) kept the signal; one killed by it
           lost it.

Prints a '#' header and fixed-width columns; the last line says VALID when
every scanned signal from 10 ms on was kept, else INVALID.
"""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DECK = os.path.join(HERE, "..", "tests", "decks", "tiny.in")


def start(gt, data, ckdir, steps, out):
    """fork + exec (the child execs at once, so t0 is its exec to within
    about 0.1 ms); the rank's output goes to the file out."""
    cmd = [gt, "train", DECK, f"data.train={data}", "data.val=", "run.eval_every=0",
           f"checkpoint.dir={ckdir}", "checkpoint.resume=never", f"run.steps={steps}",
           "run.log_every=1", "grid.dp=1", "grid.pp=1", "grid.tp=1"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pid = os.fork()
    if pid == 0:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.execve(gt, cmd, env)
    t0 = time.monotonic()
    os.close(fd)
    return pid, t0


def wait_status(pid):
    st = os.waitpid(pid, 0)[1]
    return -os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st)


def handler_in_place(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16) & (1 << (signal.SIGUSR1 - 1)) != 0
    except OSError:
        pass
    return False


def one_startup(gt, data, work):
    ck = tempfile.mkdtemp(dir=work)
    out = os.path.join(ck, "out")
    pid, t0 = start(gt, data, ck, 2, out)
    t_handler = t_step = None
    while t_step is None:
        now = time.monotonic()
        if t_handler is None and handler_in_place(pid):
            t_handler = now - t0
        if t_handler is not None:
            with open(out, "rb") as f:
                if b"\nstep 0/" in b"\n" + f.read():
                    t_step = time.monotonic() - t0
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return t_handler, t_step, "ended early"
    return t_handler, t_step, wait_status(pid)


def one_signal(gt, data, work, delay_ms):
    ck = tempfile.mkdtemp(dir=work)
    out = os.path.join(ck, "out")
    pid, t0 = start(gt, data, ck, 100000, out)
    target = t0 + delay_ms / 1000.0
    while time.monotonic() < target:
        pass
    os.kill(pid, signal.SIGUSR1)
    rc = wait_status(pid)
    if rc == -signal.SIGUSR1:
        return "lost (killed by SIGUSR1)"
    if rc == 3 and os.path.exists(os.path.join(ck, "latest")):
        return "checkpoint, exit 3"
    if rc == 0:
        return "clean exit 0"
    with open(out, errors="replace") as f:
        lines = f.read().strip().splitlines()
    return f"exit {rc}: {lines[-1][:60] if lines else ''}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gridtrain")
    ap.add_argument("dataset")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--scan", default="0,2,5,10,15,20,30,40,50,60,80,100")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="gt-startup.")
    hs, ss = [], []
    for _ in range(a.runs):
        h, s, rc = one_startup(a.gridtrain, a.dataset, work)
        if rc != 0 or h is None or s is None:
            print(f"# a start-up run failed (status {rc})", file=sys.stderr)
            return 1
        hs.append(h * 1e3)
        ss.append(s * 1e3)
    print(f"# gridtrain start-up, {a.runs} runs of {a.gridtrain} (one rank, singleton)")
    print(f"# {'event':34s} {'median_ms':>10s} {'min_ms':>8s} {'max_ms':>8s}")
    for name, v in (("exec to signal handlers", hs), ("exec to the first step's log line", ss)):
        print(f"  {name:34s} {statistics.median(v):10.1f} {min(v):8.1f} {max(v):8.1f}")
    print(f"# {'SIGUSR1 at (ms after exec)':28s} outcome")
    ok = True
    for d in (float(x) for x in a.scan.split(",")):
        r = one_signal(a.gridtrain, a.dataset, work, d)
        kept = not r.startswith("lost") and not r.startswith("exit")
        ok = ok and (kept or d < 10)
        print(f"  {d:28.1f} {r}")
    print("VALID" if ok else "INVALID: a signal from 10 ms after exec on was lost")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
