#!/usr/bin/python3
"""The run report in a real browser: Debian's chromium, headless, renders report.html.

  1. a real training run (xtrain-worker, 2 CPU ranks, validation every 10 steps) writes its report;
     chromium's DOM (--dump-dom, after the page's script ran) has every chart, and each series has
     as many points as metrics.jsonl has records for it (the last record of a repeated step);
  2. a run whose metrics repeat steps (a resumed run) and carry per-rank step times, reported by
     `xlaunch report`: the repeats are left out, every rank has its series;
  3. a failed run's report shows the root cause (rank, exit code, message, log tail);
  4. a screenshot of each: a PNG of the window's size, not blank.
Exits 77 (skipped) where chromium is not installed (scripts/install-deps.sh --test installs it).

  report_browser_test.py XLAUNCH XTRAIN_WORKER TEST_WORKER
Set XTRAIN_REPORT_SHOTS=DIR to keep the screenshots.
"""
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
WINDOW = (1400, 2000)


def fail(message):
    print(f"report_browser: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def chromium(tmp, url, *args):
    """Runs headless chromium with a fresh profile; returns its stdout."""
    profile = tempfile.mkdtemp(dir=tmp, prefix="profile-")
    try:
        done = subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if done.returncode != 0:
        fail(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


class Charts(html.parser.HTMLParser):
    """The charts of a rendered report: {id: {"empty": bool, "series": {name: {...}}}}, and the
    root-cause section's text."""

    def __init__(self):
        super().__init__()
        self.charts = {}
        self.chart = None
        self.markers = None
        self.cause_depth = 0
        self.cause_text = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.cause_depth:
            self.cause_depth += 1
        elif a.get("id") == "root-cause":
            self.cause_depth = 1
        if tag == "svg" and "chart" in a.get("class", "").split():
            self.chart = self.charts.setdefault(a["data-chart"], {"empty": a.get("data-empty") == "true", "series": {}})
        elif tag == "polyline" and self.chart is not None:
            points = a["points"].split()
            self.chart["series"][a["data-series"]] = {
                "count": int(a["data-count"]), "records": int(a["data-records"]), "points": len(points),
                "xs": [float(x) for x in a["data-xs"].split()], "ys": [float(y) for y in a["data-ys"].split()],
                "markers": 0}
        elif tag == "g" and a.get("class") == "markers":
            self.markers = self.chart["series"][a["data-series"]]
        elif tag == "circle" and self.markers is not None:
            self.markers["markers"] += 1

    def handle_endtag(self, tag):
        if self.cause_depth:
            self.cause_depth -= 1
        if tag == "g":
            self.markers = None
        elif tag == "svg":
            self.chart = None

    def handle_data(self, data):
        if self.cause_depth:
            self.cause_text.append(data)


def rendered(tmp, report):
    dom = chromium(tmp, "file://" + report, "--dump-dom")
    if "</html>" not in dom:
        fail(f"{report}: chromium returned no page")
    parser = Charts()
    parser.feed(dom)
    return parser


def screenshot(tmp, report, name):
    png = os.path.join(tmp, name + ".png")
    chromium(tmp, "file://" + report, f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={png}")
    with open(png, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{png} is not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    if (width, height) != WINDOW or len(data) < 30000:
        fail(f"{png}: {width}x{height}, {len(data)} bytes: expected a {WINDOW} page with content")
    if os.environ.get("XTRAIN_REPORT_SHOTS"):
        os.makedirs(os.environ["XTRAIN_REPORT_SHOTS"], exist_ok=True)
        shutil.copy(png, os.environ["XTRAIN_REPORT_SHOTS"])
    return f"{width}x{height}, {len(data) // 1024} KiB"


def metrics(run_dir):
    """metrics.jsonl as the report reads it: the last record of each step, train and val apart."""
    train, val = {}, {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            (train if "loss" in record else val)[record["step"]] = record
    return [train[s] for s in sorted(train)], [val[s] for s in sorted(val)]


def expect_series(page, chart, name, records, key, what):
    series = page.charts[chart]["series"].get(name)
    if series is None:
        fail(f"{what}: chart {chart} has no series {name!r}: {list(page.charts[chart]['series'])}")
    expected = len(records)
    if not series["count"] == series["records"] == series["points"] == len(series["xs"]) == expected:
        fail(f"{what}: chart {chart} series {name!r}: {series['count']} points ({series['points']} drawn, "
             f"{series['records']} records), expected {expected}")
    if expected <= 200 and series["markers"] != expected:
        fail(f"{what}: chart {chart} series {name!r} has {series['markers']} markers, expected {expected}")
    if key and [round(y, 4) for y in series["ys"]] != [round(float(f"{r[key]:.6g}"), 4) for r in records]:
        fail(f"{what}: chart {chart} series {name!r}: values differ from metrics.jsonl's {key}")
    return expected


def run(argv, cwd, expect):
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if done.returncode != expect:
        fail(f"{' '.join(argv)} exited {done.returncode}, expected {expect}: {done.stderr[-2000:]}")


def main():
    xlaunch, worker, test_worker = (os.path.abspath(p) for p in sys.argv[1:4])
    if not shutil.which("chromium"):
        print("report_browser: skipped: chromium not found (scripts/install-deps.sh --test installs it)")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="xlaunch-report-browser-")
    try:
        with open(os.path.join(tmp, "data.txt"), "w") as f:
            for i in range(300):
                f.write(f"line {i}: the quick brown fox jumps over the lazy dog, and the model learns it.\n")
        spec = {"name": "train", "nproc_per_node": 2, "device": "cpu", "worker": {"command": [worker]},
                "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "seq_len": 32},
                "data": {"train": "data.txt"},
                "train": {"steps": 40, "batch_size": 8, "micro_batch_size": 4, "lr": 3e-3, "min_lr": 3e-4,
                          "warmup_steps": 5, "eval_every": 10, "log_every": 1},
                "checkpoint": {"every": 0}}
        with open(os.path.join(tmp, "train.json"), "w") as f:
            json.dump(spec, f)
        run([xlaunch, "train.json", "--tee", "none"], tmp, 0)

        # 1. A real run: every chart, every point.
        run_dir = os.path.join(tmp, "runs", "train")
        report = os.path.join(run_dir, "report.html")
        page = rendered(tmp, report)
        train, val = metrics(run_dir)
        expected_charts = {"loss-step", "loss-tokens", "lr", "grad-norm", "tokens-per-s", "rank-step-ms"}
        if set(page.charts) != expected_charts:
            fail(f"charts {sorted(page.charts)}, expected {sorted(expected_charts)}")
        what = "training run"
        points = expect_series(page, "loss-step", "train loss", train, "loss", what)
        points += expect_series(page, "loss-step", "val loss", val, "val_loss", what)
        points += expect_series(page, "loss-tokens", "train loss", train, "loss", what)
        points += expect_series(page, "loss-tokens", "val loss", val, "val_loss", what)
        points += expect_series(page, "lr", "learning rate", train, "lr", what)
        points += expect_series(page, "grad-norm", "gradient norm", train, "grad_norm", what)
        points += expect_series(page, "tokens-per-s", "tokens/s", train, "tokens_per_s", what)
        ranks = max((len(r.get("rank_step_ms", [])) for r in train), default=0)
        if ranks:
            for rank in range(ranks):
                points += expect_series(page, "rank-step-ms", f"rank {rank}", train, None, what)
        elif not page.charts["rank-step-ms"]["empty"]:
            fail("the per-rank chart has points, but metrics.jsonl records no rank_step_ms")
        tokens = page.charts["loss-tokens"]["series"]["train loss"]["xs"]
        if tokens[0] != train[0]["step"] * 8 * 32:
            fail(f"loss by tokens starts at {tokens[0]} tokens, expected step x batch_size x seq_len")
        shot = screenshot(tmp, report, "report-training")
        print(f"report_browser: training run: {len(page.charts)} charts, {points} points as in metrics.jsonl "
              f"({len(train)} steps, {len(val)} validations); screenshot {shot}")

        # 2. Repeated steps and per-rank step times, through `xlaunch report`.
        resumed = os.path.join(tmp, "runs", "resumed")
        with open(os.path.join(tmp, "resumed.json"), "w") as f:
            json.dump({"name": "resumed", "nproc_per_node": 3, "device": "cpu", "run_dir": resumed,
                       "worker": {"command": [test_worker, "--rank", "0", "--metrics", "30"]}}, f)
        run([xlaunch, "resumed.json", "--tee", "none"], tmp, 0)
        with open(os.path.join(resumed, "metrics.jsonl"), "a") as f:  # a resume from step 20's checkpoint
            for step in range(21, 31):
                f.write(json.dumps({"step": step, "loss": 9.0 / step, "rank_step_ms": [20, 21, 22]}) + "\n")
        run([xlaunch, "report", resumed], tmp, 0)
        page = rendered(tmp, os.path.join(resumed, "report.html"))
        train, _ = metrics(resumed)
        what = "resumed run"
        expect_series(page, "loss-step", "train loss", train, "loss", what)
        for rank in range(3):
            expect_series(page, "rank-step-ms", f"rank {rank}", train, None, what)
        if page.charts["rank-step-ms"]["series"]["rank 2"]["ys"][-1] != 22:
            fail("the per-rank chart does not show the last record of a repeated step")
        shot = screenshot(tmp, os.path.join(resumed, "report.html"), "report-resumed")
        print(f"report_browser: resumed run: 30 steps drawn once each from 40 records; 3 ranks; screenshot {shot}")

        # 3. A failed run: the root cause, in the rendered page.
        failed = os.path.join(tmp, "runs", "failed")
        with open(os.path.join(tmp, "failed.json"), "w") as f:
            json.dump({"name": "failed", "nproc_per_node": 2, "device": "cpu", "run_dir": failed,
                       "launcher": {"term_timeout_s": 2},
                       "worker": {"command": [test_worker, "--rank", "1", "--print", "opening shard 7",
                                              "--result-error", "shard 7 is truncated", "--exit", "3",
                                              "--rank", "0", "--hang"]}}, f)
        run([xlaunch, "failed.json", "--tee", "none"], tmp, 3)
        page = rendered(tmp, os.path.join(failed, "report.html"))
        cause = " ".join(" ".join(page.cause_text).split())
        for text in ("Why it failed", "rank 1 failed: exit code 3", "Root cause: rank 1 on node 0", "exited with code 3",
                     "Message: shard 7 is truncated", "opening shard 7"):
            if text not in cause:
                fail(f"failed run: the root cause section lacks {text!r}: {cause!r}")
        shot = screenshot(tmp, os.path.join(failed, "report.html"), "report-failed")
        print(f"report_browser: failed run: the root cause is shown ({cause[:80]}...); screenshot {shot}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("report_browser: passed")


if __name__ == "__main__":
    main()
