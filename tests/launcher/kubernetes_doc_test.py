#!/usr/bin/python3
"""docs/kubernetes.md's manifests: each parses as YAML, the three kinds are there, every environment
variable they set or reference as $(NAME) is one xlaunch reads, every flag of their xlaunch
command is one `xlaunch --help` lists, and the exit codes a podFailurePolicy ends a Job on are the
ones a restart would only repeat (common/exit_codes.hpp: bad input, training diverged).

  kubernetes_doc_test.py REPO_ROOT XLAUNCH

Exits 77 (skipped) without python3-yaml (scripts/install-deps.sh --test)."""
import pathlib
import re
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("kubernetes_doc_test: skipped: no python3-yaml (scripts/install-deps.sh --test)", file=sys.stderr)
    sys.exit(77)

root = pathlib.Path(sys.argv[1])
xlaunch = sys.argv[2]
doc = (root / "docs/kubernetes.md").read_text()
manifests = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", doc, re.S)]
kinds = sorted(m["kind"] for m in manifests)
assert kinds == ["JobSet", "PyTorchJob", "TrainJob"], kinds

# What xlaunch reads: torchrun's PET_<FLAG> for the flags in launcher/cli/cli.cpp's kTorchrunFlags, and
# the variables the launcher's and common sources name as string literals.
cli = (root / "launcher/cli/cli.cpp").read_text()
torchrun_flags = set(re.findall(r'"(--[a-z-]+)"', re.search(r"kTorchrunFlags = \{(.*?)\};", cli, re.S).group(1)))
sources = "".join(p.read_text() for d in ("launcher", "common") for p in (root / d).rglob("*.[ch]pp"))


def xlaunch_reads(name):
    if name.startswith("PET_"):
        return "--" + name[4:].lower().replace("_", "-") in torchrun_flags
    return f'"{name}"' in sources


assert xlaunch_reads("PET_NNODES") and xlaunch_reads("JOB_COMPLETION_INDEX")
assert not xlaunch_reads("PET_LOCAL_ADDR") and not xlaunch_reads("XTRAIN_NO_SUCH_VARIABLE")


def walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, (dict, list)):
        for value in node.values() if isinstance(node, dict) else node:
            yield from strings(value)


# The codes no restart can help: a spec refused (kInvalidSpec) and training that diverged (kDiverged).
exit_codes = (root / "common/exit_codes.hpp").read_text()
final_codes = sorted(int(re.search(rf"k{name} = ([0-9]+);", exit_codes).group(1))
                     for name in ("InvalidSpec", "Diverged"))
assert final_codes == [2, 3], final_codes

help_text = subprocess.run([xlaunch, "--help"], capture_output=True, text=True, check=True).stdout
for manifest in manifests:
    kind = manifest["kind"]
    named = {item["name"] for d in walk(manifest) for item in d.get("env", []) if isinstance(d.get("env"), list)}
    named |= {m for s in strings(manifest) for m in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", s)}
    unread = sorted(n for n in named if not xlaunch_reads(n))
    assert not unread, f"{kind}: xlaunch does not read {unread}"
    commands = [d["command"] for d in walk(manifest) if isinstance(d.get("command"), list)]
    assert commands and all(c[0] == "xlaunch" for c in commands), f"{kind}: {commands}"
    for command in commands:
        for flag in (arg for arg in command if arg.startswith("--")):
            assert re.search(rf"(^|\s){re.escape(flag)}\b", help_text, re.M), f"{kind}: xlaunch --help has no {flag}"
    for policy in (d["podFailurePolicy"] for d in walk(manifest) if "podFailurePolicy" in d):
        codes = sorted(v for rule in policy["rules"] for v in rule["onExitCodes"]["values"])
        assert codes == final_codes, f"{kind}: podFailurePolicy ends the Job on {codes}, not {final_codes}"
    print(f"kubernetes_doc_test: {kind}: parses; variables {sorted(named)} are read by xlaunch")
print("kubernetes_doc_test: passed")
