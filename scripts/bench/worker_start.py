#!/usr/bin/env python3
"""Start time of xtrain-worker on the CPU, with the CUDA backend as a plugin next to the same
worker with the CUDA libraries loaded at start, as the worker did when it linked them.

Rows (each measured --runs times, interleaved, so a busy machine slows every row alike):
  plugin, device cpu       the plugin is never looked at
  plugin, device auto      on a machine without NVIDIA GPUs the plugin is not even tried
  plugin, device cuda      loads NCCL, the plugin and the CUDA libraries (on a machine without a
                           GPU it then exits 2: the time to that error is the cost of loading)
  CUDA linked (preload)    the same worker with libcudart, libcublasLt and libnccl in LD_PRELOAD:
                           the dynamic loader's work of a worker that links them
  CUDA linked (--baseline) a worker built before the plugin (optional: --baseline PATH)
  OPENBLAS_CORETYPE given  only where the worker chooses OpenBLAS's kernels itself (its log says
                           "running with OPENBLAS_CORETYPE=X", worker/cpu/openblas_core.hpp): device
                           cpu with X already set, so the worker does not execute itself again;
                           against "plugin, device cpu", the cost of that second exec
Columns: `--help` (process start and exit: loading and relocating the libraries) and a one-step
job (the demo's model: 4 layers, 128 channels, T 64, batch 4, one step and its checkpoint): median
and minimum wall milliseconds, and the median CPU milliseconds (user + system, from wait4), which
a machine busy with other work inflates less than the wall time.

Usage: scripts/bench/worker_start.sh [--runs N] [--baseline PATH]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CUDA_LIBS = "libcudart.so.13 libcublasLt.so.13 libnccl.so.2"


def timed_ms(argv, env):
    """Runs argv to its end: (wall ms, CPU ms of user + system time, exit status)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = (time.perf_counter() - start) * 1e3
    return wall, (usage.ru_utime + usage.ru_stime) * 1e3, child.returncode


def write_job(tmp, device):
    corpus = os.path.join(tmp, "corpus.txt")
    if not os.path.exists(corpus):
        with open(corpus, "w") as f:
            for i in range(3000):
                f.write(f"line {i}: the model learns a simple pattern of words while the loss falls\n")
    path = os.path.join(tmp, f"{device}.json")
    job = {"device": device, "run_dir": os.path.join(tmp, "run-" + device),
           "model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "seq_len": 64, "vocab_size": 256},
           "data": {"train": corpus},
           "train": {"steps": 1, "batch_size": 4, "micro_batch_size": 4},
           "checkpoint": {"resume": "never"}}
    with open(path, "w") as f:
        json.dump(job, f)
    return path


def device_line(worker, job, env):
    """The worker's exit code and what it said about its device (its log line, or its error)."""
    out = subprocess.run([worker, "--job", job], env=env, capture_output=True, text=True)
    said = ""
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("error: ") or " info: device " in line or " warning: device " in line:
            said = ": " + line.split(": ", 1)[1]
            break
    return f"exit {out.returncode}{said[:120]}"


def chosen_openblas_core(worker, job, env):
    """The OPENBLAS_CORETYPE the worker chose for itself, or None."""
    out = subprocess.run([worker, "--job", job], env=env, capture_output=True, text=True)
    marker = "running with OPENBLAS_CORETYPE="
    for line in (out.stdout + out.stderr).splitlines():
        if marker in line:
            return line.split(marker, 1)[1].split()[0]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", required=True, help="xtrain-worker built with the plugin")
    ap.add_argument("--baseline", help="an xtrain-worker that links the CUDA libraries")
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()

    base_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "OPENBLAS_CORETYPE")}
    preload_env = dict(base_env, LD_PRELOAD=CUDA_LIBS)
    with tempfile.TemporaryDirectory(prefix="xtrain-start-") as tmp:
        jobs = {d: write_job(tmp, d) for d in ("cpu", "auto", "cuda")}
        rows = [("plugin, device cpu", a.worker, jobs["cpu"], base_env),
                ("plugin, device auto", a.worker, jobs["auto"], base_env),
                ("plugin, device cuda", a.worker, jobs["cuda"], base_env),
                ("CUDA linked (LD_PRELOAD)", a.worker, jobs["cpu"], preload_env)]
        if a.baseline:
            rows.append(("CUDA linked (--baseline)", a.baseline, jobs["cpu"], base_env))
        core = chosen_openblas_core(a.worker, jobs["cpu"], base_env)
        if core:
            rows.append((f"plugin, device cpu, OPENBLAS_CORETYPE={core} given", a.worker, jobs["cpu"],
                         dict(base_env, OPENBLAS_CORETYPE=core)))
        notes = {name: device_line(worker, job, env) for name, worker, job, env in rows}
        help_runs = {name: [] for name, *_ in rows}
        job_runs = {name: [] for name, *_ in rows}
        for _ in range(a.runs):
            for name, worker, job, env in rows:
                wall, cpu, code = timed_ms([worker, "--help"], env)
                if code != 0:
                    sys.exit(f"{name}: --help exited {code}")
                help_runs[name].append((wall, cpu))
                job_runs[name].append(timed_ms([worker, "--job", job], env)[:2])

    def cells(runs):
        wall, cpu = [r[0] for r in runs], [r[1] for r in runs]
        return f"{statistics.median(wall):.0f} / {min(wall):.0f} | {statistics.median(cpu):.0f}"

    print(f"# xtrain-worker start on the CPU: {a.runs} runs each, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print("| worker | `--help` wall ms, median / min | CPU ms | 1-step job wall ms, median / min | CPU ms "
          "| what the worker said |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, *_ in rows:
        print(f"| {name} | {cells(help_runs[name])} | {cells(job_runs[name])} | {notes[name]} |")


if __name__ == "__main__":
    main()
