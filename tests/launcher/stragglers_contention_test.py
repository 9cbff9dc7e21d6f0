#!/usr/bin/env python3
"""Straggler warnings from real contention, not the worker's fault hooks.

Two CPU ranks of a small model, rank R pinned to core R through worker.command; a busy loop pinned
to core 1 for a stretch of the run makes rank 1 share its core:

  contention  one node: rank 1 is reported within 100 steps of the busy loop's start, and marked
              recovered after it ends; rank 0 never
  idle        2,000 steps, nothing else on the cores: no warning
  two_nodes   the same with two xlaunch on loopback, one rank each: node 0 judges every rank of the
              job and reports rank 1, which runs on node 1; node 1 reports none

The machine may be shared, and a rank sharing its core with a compiler is a straggler too: any
other entry (another rank, another time, in the idle run) fails the test unless other processes used
at least EXPLAINED of that rank's core while it lasted (a sampler reads /proc every 0.1 s), or the
rank's training thread needed SLOWER_ITSELF times the other's CPU per step for the same work (its core
ran slower: on a shared VM the host can do that with no process here to show for it), and then it is
printed as a note. Exits 77 (skipped), saying why, where the affinity cannot be set or cores 0
and 1 are not both usable, and where a check of the contended rank fails while other processes used
more than BUSY_SHARE of a core over the run (it then says nothing about the detector). --runs N
repeats the contention case and prints each run's warning and recovery steps relative to the busy
loop's start and end.
"""
import argparse
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
PR_SET_PDEATHSIG = 1
MAX_LATENCY = 100  # steps from the busy loop's start to the warning, and from its end to the recovery
WINDOW = 32        # launcher/agent/stragglers.hpp kWindow: how far before the start the onset may be dated


class Skip(Exception):
    pass


class Failed(Exception):
    """A check failed. `rank` and `steps`, where given: a core that ran slower over those steps of rank 0
    (other processes or the host on rank `rank`'s core) would explain the failure."""

    def __init__(self, message, rank=None, steps=None):
        super().__init__(message)
        self.rank, self.steps = rank, steps


def check_affinity():
    allowed = os.sched_getaffinity(0)
    if not {0, 1} <= allowed:
        raise Skip(f"cores 0 and 1 are not both usable here (allowed: {sorted(allowed)})")
    pid = os.fork()
    if pid == 0:
        try:
            os.sched_setaffinity(0, {1})
            os._exit(0 if os.sched_getaffinity(0) == {1} else 1)
        except OSError:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise Skip("sched_setaffinity cannot pin a process to core 1 here")


def cpu_busy_s():
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    """CPU seconds of this script and every child it has waited for (xlaunch and its ranks)."""
    import resource
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def die_with_this_script(sig):
    """In a child: `sig` when this script dies (a ctest timeout's SIGKILL included)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


class Contention:
    """A busy loop pinned to a core while it lives (a forked child: it starts at once, and dies with
    this script)."""

    def __init__(self, core):
        self.pid = os.fork()
        if self.pid == 0:
            try:
                die_with_this_script(signal.SIGKILL)
                os.sched_setaffinity(0, {core})
                while True:
                    pass
            finally:
                os._exit(1)

    def stop(self):
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def last_step(heartbeat):
    """The last step a rank finished, from its progress record (common/heartbeat_record.hpp)."""
    try:
        with open(heartbeat, "rb") as f:
            record = f.read(128)
    except FileNotFoundError:
        return 0
    if len(record) < 88 or struct.unpack_from("<I", record, 0)[0] != 0x42485458:
        return 0
    return struct.unpack_from("<q", record, 80)[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def core_busy_s():
    """Each core's busy CPU seconds so far, from /proc/stat's cpuN lines."""
    busy = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                ticks = [int(x) for x in fields[:8]]
                busy[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    return busy


def process_cpu_s(pid):
    """A process's CPU seconds so far (user + system, all its threads), and its main thread's (the
    training thread: nanoseconds on a CPU, /proc/PID/task/PID/schedstat), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            training_ns = int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, training_ns / 1e9


class Sampler:
    """Every 0.1 s while a job runs: the time, rank 0's last step, the busy time of cores 0 and 1, the
    CPU time of the ranks (rank R on core R) and of the busy loop (core 1), and that of each rank's
    training thread. What else ran on a rank's core while it was reported explains the report, and so
    does a training thread that needed more CPU than the other for the same work."""

    def __init__(self):
        self.samples, self.pids, self.cpu, self.training, self.next = [], {}, {}, {}, 0.0

    def take(self, job):
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + 0.1
        for rank in (0, 1):
            if not self.pids.get(rank):
                self.pids[rank] = job.rank_pid(rank)
        pids = dict(self.pids, loop=job.loop_pid)
        for who, pid in pids.items():
            used = process_cpu_s(pid) if pid else None
            if used is not None:
                self.cpu[who], self.training[who] = used
        self.samples.append((now, job.step(), core_busy_s(), dict(self.cpu), dict(self.training)))

    def training_ms_per_step(self, rank, first_step, last_step):
        """Rank `rank`'s training thread's CPU milliseconds per step while rank 0 went from
        `first_step` to `last_step`: the same work on every rank, so a rank whose core runs slower
        needs more of it (its waits block and count none; the communication threads, whose CPU time
        depends on which rank is ahead, are left out); None where too few samples fall there."""
        span = [x for x in self.samples if first_step <= x[1] <= last_step and rank in x[4]]
        if len(span) < 2 or span[-1][1] == span[0][1]:
            return None
        return 1000 * (span[-1][4][rank] - span[0][4][rank]) / (span[-1][1] - span[0][1])

    def others_on_core(self, core, first_step, last_step):
        """The share of `core` that other processes used while rank 0 went from `first_step` to
        `last_step` (this script and xlaunch count as others: they are small)."""
        span = [x for x in self.samples if first_step <= x[1] <= last_step]
        if len(span) < 2:
            return 0.0
        (t0, _, busy0, cpu0, _), (t1, _, busy1, cpu1, _) = span[0], span[-1]
        ours = sum(cpu1.get(w, 0) - cpu0.get(w, 0) for w in ([core, "loop"] if core == 1 else [core]))
        return max(0.0, busy1.get(core, 0) - busy0.get(core, 0) - ours) / (t1 - t0)


class Job:
    def __init__(self, tmp, xlaunch, worker, name, steps, nnodes=1):
        self.tmp, self.xlaunch, self.name, self.nnodes = tmp, xlaunch, name, nnodes
        data = os.path.join(tmp, "data.txt")
        if not os.path.exists(data):
            with open(data, "wb") as f:
                f.write(os.urandom(30000).hex().encode())
        # Each rank on the core of its rank; taskset keeps the pin across the worker's exec. The
        # wrapper is named xtrain-worker: xlaunch reads our worker's progress records (and so judges
        # stragglers) only for a worker.command of that name.
        pin = os.path.join(tmp, "pinned", "xtrain-worker")
        if not os.path.exists(pin):
            os.makedirs(os.path.dirname(pin))
            with open(pin, "w") as f:
                f.write(f'#!/bin/sh\nexec taskset -c "$RANK" {worker} "$@"\n')
            os.chmod(pin, 0o755)
        # 64 sequences a step make a step about 16 ms of compute, several of the kernel's time slices:
        # the busy loop then slows every step alike (1.9x, measured). With 16 (4 ms, about one slice)
        # it took the core in whole slices, each step doubled or untouched, and for stretches of 50-100
        # steps fewer than half were doubled: 1.2-1.3x on average there, under the detector's 1.4x by
        # mean as by median, and the warning came late (docs/PERF.md, "A busy loop on a rank's core").
        spec = {
            "name": name, "device": "cpu", "backend": "gloo", "nproc_per_node": 2 // nnodes,
            "worker": {"command": [pin]},
            "launcher": {"tee": "none", "term_timeout_s": 3},
            "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "seq_len": 64, "vocab_size": 256},
            "data": {"train": data},
            "train": {"steps": steps, "batch_size": 64, "micro_batch_size": 32, "warmup_steps": 0, "log_every": 100},
            "checkpoint": {"every": 0, "keep": 1},
        }
        if nnodes > 1:
            spec["nodes"] = {"nnodes": nnodes, "rdzv_endpoint": f"127.0.0.1:{free_port()}", "rdzv_timeout_s": 30}
        self.spec = os.path.join(tmp, f"{name}.json")
        with open(self.spec, "w") as f:
            json.dump(spec, f)
        self.procs = []
        self.loop_pid = None
        self.sampler = Sampler()

    def run_dir(self, node):
        return os.path.join(self.tmp, f"{self.name}-node{node}")

    def start(self):
        env = dict(os.environ, XTRAIN_JOB_TOKEN=f"stragglers-{os.getpid()}")
        for node in range(self.nnodes):
            argv = [self.xlaunch, self.spec, "--run-dir", self.run_dir(node), "--set", f"nodes.node_rank={node}"]
            with open(os.path.join(self.tmp, f"{self.name}-node{node}.out"), "wb") as out:
                self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                   preexec_fn=lambda: die_with_this_script(signal.SIGTERM)))

    def step(self, rank=0):
        return last_step(os.path.join(self.run_dir(0), "ranks", f"rank-{rank}.heartbeat"))

    def rank_pid(self, rank):
        """The pid of rank `rank`'s worker (the wrapper execs it), from its node's state.json; None yet."""
        try:
            with open(os.path.join(self.run_dir(rank if self.nnodes > 1 else 0), "state.json")) as f:
                ranks = json.load(f)["ranks"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None
        return next((r.get("pid") for r in ranks if r.get("rank") == rank), None)

    def wait_for_step(self, step, rank=0, deadline_s=120):
        deadline = time.monotonic() + deadline_s
        while (now := self.step(rank)) < step:
            if any(p.poll() is not None for p in self.procs):
                raise Failed(f"{self.name}: xlaunch ended before step {step}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise Failed(f"{self.name}: step {now} after {deadline_s} s, waiting for step {step}")
            self.sampler.take(self)
            time.sleep(0.01)
        return now

    def finish(self, deadline_s=100):
        deadline = time.monotonic() + deadline_s
        while any(p.poll() is None for p in self.procs):
            if time.monotonic() > deadline:
                raise Failed(f"{self.name}: xlaunch still running after {deadline_s} s")
            self.sampler.take(self)
            time.sleep(0.01)
        for p in self.procs:
            rc = p.returncode
            if rc != 0:
                raise Failed(f"{self.name}: xlaunch exited {rc}:\n{self.output()}")

    def stop(self):
        """Whatever still runs (a check failed first): SIGTERM, which xlaunch passes on to its ranks."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def output(self, node=0):
        with open(os.path.join(self.tmp, f"{self.name}-node{node}.out"), errors="replace") as f:
            return f.read()

    def stragglers(self, node=0):
        with open(os.path.join(self.run_dir(node), "summary.json")) as f:
            return json.load(f)["stragglers"]


class Busy:
    """Other processes' CPU time while a case runs (the machine is shared)."""

    def __init__(self):
        self.t0, self.busy0, self.own0 = time.monotonic(), cpu_busy_s(), own_cpu_s()

    def others_share(self):
        """Other processes' CPU time over the case, as a share of one core (ours, the busy loop's
        included, is that of this script and the children it waited for)."""
        wall = time.monotonic() - self.t0
        others = (cpu_busy_s() - self.busy0) - (own_cpu_s() - self.own0)
        return max(0.0, others) / wall, wall


BUSY_SHARE = 0.25  # of a core: others used more while a case ran, and the machine was not idle
EXPLAINED = 0.1    # of a rank's core: others used more while it was reported, and that made it slow (this
                   # script and xlaunch use a few percent)
SLOWER_ITSELF = 1.25  # the reported rank's training thread's CPU per step over the other's: its core ran the
                      # same work this much slower, which no process here shows (on a VM: another guest
                      # on the core's sibling thread, or the host's clock), and the rank was slow indeed


def slowed_core(job, rank, others_steps, cpu_steps):
    """Whether rank `rank`'s core ran slower than the other's: other processes used EXPLAINED of it
    over `others_steps` (of rank 0), or its training thread needed SLOWER_ITSELF times the other's CPU
    per step over `cpu_steps`. Returns (why, or None when neither; what was measured)."""
    others = job.sampler.others_on_core(rank, *others_steps)
    mine = job.sampler.training_ms_per_step(rank, *cpu_steps)
    theirs = job.sampler.training_ms_per_step(1 - rank, *cpu_steps)
    on_core = f"other processes used {others:.0%} of core {rank} meanwhile"
    if not (mine and theirs):
        return (on_core if others > EXPLAINED else None), f"{on_core}, and its CPU per step was not sampled"
    cpu = f"training thread needed {mine:.1f} ms of CPU per step, the other rank's {theirs:.1f}"
    measured = f"{on_core}, and its {cpu}"
    if others > EXPLAINED:
        return on_core, measured
    if mine >= SLOWER_ITSELF * theirs:
        return f"rank {rank}'s {cpu} for the same work: its core ran slower, with no other process on it", measured
    return None, measured


def judge(job, busy, check, extra):
    """Runs `check`, then `extra` (entries that should not be there). An entry is explained, and
    noted, when other processes used EXPLAINED of the rank's core over its window and episode (a
    compiler sharing a rank's core makes a real straggler), or when its training thread needed
    SLOWER_ITSELF times the other's CPU per step from its first step to its warning (the steps it was
    judged slow on). A failed check that such a slower core explains, and a failed check or an
    unexplained entry on a machine that others kept busy, is a skip, with the reason."""
    share, wall = busy.others_share()
    where = f"other processes used {share:.0%} of a core over the {wall:.0f} s run"
    try:
        result = check()
        unexpected = extra()
    except Failed as e:
        if share > BUSY_SHARE:
            raise Skip(f"{where}, so the check says nothing about the detector: {e}")
        why = slowed_core(job, e.rank, e.steps, e.steps)[0] if e.rank is not None else None
        if why:
            raise Skip(f"{e}: at steps {e.steps[0]}-{e.steps[1]} {why}, so the check says nothing about the detector")
        raise
    last = job.sampler.samples[-1][1] if job.sampler.samples else 0
    for entry in unexpected:
        episode = (entry["first_step"] - WINDOW, entry.get("recovered_step", last))
        why, measured = slowed_core(job, entry["rank"], episode, (entry["first_step"], entry["warned_step"]))
        if why:
            print(f"note: {entry}: {why}")
            continue
        failure = f"{entry}: {measured} ({where})"
        # The sampler sees a rank's core only every 0.1 s, and not at all in a run's last steps:
        # on a machine that others kept busy an unexplained entry is not the detector's fault.
        if share > BUSY_SHARE:
            raise Skip(f"{where}, so an unexpected entry says nothing about the detector: {failure}")
        raise Failed(failure)
    return result


def contended(entry, rank, start):
    return entry["rank"] == rank and start <= entry["warned_step"] <= start + MAX_LATENCY


def check_episode(job, rank, start, end):
    """Node 0 has one entry for `rank`, warned within MAX_LATENCY steps of `start`, recovered after `end`,
    and one line for each."""
    stragglers = job.stragglers()
    mine = [s for s in stragglers if contended(s, rank, start)]
    other = 1 - rank
    if len(mine) != 1:
        raise Failed(f"expected one entry for rank {rank} warned within {MAX_LATENCY} steps of step "
                     f"{start} (contention at steps {start}-{end}): {stragglers}", other, (start, start + MAX_LATENCY))
    entry = mine[0]
    if not start - WINDOW <= entry["first_step"] <= entry["warned_step"]:
        raise Failed(f"rank {rank} slow since step {entry['first_step']}, contention from {start}")
    recovered = entry.get("recovered_step", 0)
    if not end < recovered <= end + MAX_LATENCY:
        raise Failed(f"rank {rank} recovered at {recovered or 'no step'}, contention until {end}",
                     *((other, (recovered - WINDOW, recovered)) if recovered and recovered <= end
                       else (rank, (end, end + MAX_LATENCY))))
    output = job.output()
    for line in (f"rank {rank} is a straggler: ", f"than the other ranks since step {entry['first_step']} (",
                 f"rank {rank} recovered at step {entry['recovered_step']}: "):
        if line not in output:
            raise Failed(f"no line with '{line}' in xlaunch's output:\n{output}")
    if output.count("is a straggler: ") != len(stragglers):
        raise Failed(f"not one warning line per entry of {stragglers}:\n{output}")
    return entry


def contention_run(tmp, xlaunch, worker, name, nnodes=1, steps=1000, begin=200, end=600):
    """A run with the busy loop on core 1 from step `begin` to step `end` (of rank 0, on node 0)."""
    job = Job(tmp, xlaunch, worker, name, steps, nnodes)
    busy = Busy()
    job.start()
    try:
        job.wait_for_step(begin)
        loop = Contention(1)
        job.loop_pid = loop.pid
        start = job.step()
        try:
            job.wait_for_step(end)
            stop = job.step()
        finally:
            loop.stop()
        job.finish()
    finally:
        job.stop()

    def check():
        for node in range(1, nnodes):
            if job.stragglers(node) or "is a straggler" in job.output(node):
                raise Failed(f"node {node} judged ranks: {job.stragglers(node)}:\n{job.output(node)}")
        return check_episode(job, 1, start, stop)

    def extra():
        return [s for s in job.stragglers() if not contended(s, 1, start)]

    e = judge(job, busy, check, extra)
    print(f"{name}: rank {e['rank']}: busy loop at steps {start}-{stop}; warned at +{e['warned_step'] - start} (since "
          f"{e['first_step'] - start:+d}), {e['slower_by']:.0%} slower, recovered at +{e['recovered_step'] - stop}")
    return e


def case_contention(tmp, xlaunch, worker, runs):
    """Every run, each one's outcome printed; then the first failure (or skip), if any."""
    first = None
    for i in range(runs):
        try:
            contention_run(tmp, xlaunch, worker, f"contention{i}")
        except (Skip, Failed) as e:
            print(f"contention{i}: {'skipped' if isinstance(e, Skip) else 'FAILED'}: {e}")
            first = first or e
    if first:
        raise first


def case_idle(tmp, xlaunch, worker, _runs):
    job = Job(tmp, xlaunch, worker, "idle", 2000)
    busy = Busy()
    job.start()
    try:
        job.finish()
    finally:
        job.stop()

    def extra():
        if job.output().count("is a straggler: ") != len(job.stragglers()):
            raise Failed(f"idle run: not one warning line per entry of {job.stragglers()}:\n{job.output()}")
        return job.stragglers()

    judge(job, busy, lambda: None, extra)
    print(f"idle: 2000 steps, {len(job.stragglers())} stragglers")


def case_two_nodes(tmp, xlaunch, worker, _runs):
    contention_run(tmp, xlaunch, worker, "two_nodes", nnodes=2)


CASES = {"contention": case_contention, "idle": case_idle, "two_nodes": case_two_nodes}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("xlaunch")
    parser.add_argument("xtrain_worker")
    parser.add_argument("cases", nargs="*", default=[], metavar="CASE", help=f"of {', '.join(CASES)} (default: all)")
    parser.add_argument("--runs", type=int, default=1, help="runs of the contention case")
    parser.add_argument("--keep", metavar="DIR", help="run the jobs in DIR (created) and leave it")
    args = parser.parse_args(argv)
    for name in args.cases:
        if name not in CASES:
            parser.error(f"unknown case {name!r}: expected one of {', '.join(CASES)}")
    xlaunch, worker = os.path.realpath(args.xlaunch), os.path.realpath(args.xtrain_worker)
    cases, runs, keep = args.cases or list(CASES), args.runs, args.keep
    if keep:
        os.makedirs(keep, exist_ok=True)
    tmp = keep or tempfile.mkdtemp(prefix="stragglers-")
    try:
        check_affinity()
        for name in cases:
            CASES[name](tmp, xlaunch, worker, runs)
    except Skip as e:
        print(f"stragglers_contention_test: skipped: {e}")
        return SKIP
    except Failed as e:
        print(f"stragglers_contention_test: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
