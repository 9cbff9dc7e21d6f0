"""What the device check's scripts share: running one of our programs, GPT-2's token bytes."""
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


def gpt2_byte_characters():
    """GPT-2's printable character for each byte, as its vocabulary's keys are written: char -> byte.
    Printable Latin-1 bytes stand for themselves; the others, in order, for U+0100 onwards."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def gpt2_token_bytes(encoder):
    """Each token's bytes from encoder.json's mapping (token text -> id): id -> bytes."""
    chars = gpt2_byte_characters()
    return {i: bytes(chars[c] for c in s) for s, i in encoder.items()}
