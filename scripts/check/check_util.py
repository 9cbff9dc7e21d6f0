"""What the device check's comparison scripts share: running one of our programs."""
import os
import subprocess


class StepFailed(Exception):
    """A step of a check could not be done: the message names it and says why."""


def programs_env():
    """Our programs' environment: XTRAIN_LD_LIBRARY_PATH (the bundle's libraries and the CUDA
    found on the machine, set by scripts/device-check.sh) as their LD_LIBRARY_PATH, for them alone:
    PyTorch in this process keeps its own libraries."""
    env = dict(os.environ)
    if env.get("XTRAIN_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = env["XTRAIN_LD_LIBRARY_PATH"]
    return env


def run(cmd, timeout, what):
    """Runs cmd within timeout seconds; its stdout. Raises StepFailed naming `what` on a timeout,
    a program that cannot start, or an exit status other than 0 (with its last lines)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout), env=programs_env())
    except subprocess.TimeoutExpired:
        raise StepFailed(f"{what}: timed out after {timeout:.0f} s")
    except OSError as e:
        raise StepFailed(f"{what}: cannot start {cmd[0]}: {e.strerror}")
    if p.returncode != 0:
        tail = " | ".join([x for x in (p.stderr or p.stdout).strip().splitlines() if x.strip()][-3:])
        raise StepFailed(f"{what}: exit {p.returncode}: {tail}")
    return p.stdout
