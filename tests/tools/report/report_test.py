"""`tally report`: the HTML page (rendered in headless Chromium: the charts are drawn, no
script error, no markup injected from the run's files), `--merge` (one valid Chrome trace
with every node's events on the scheduler's clock), the error messages, and both on the
files of a real profiled dist_sync job.

The run directories of the first cases are written here, line by line as docs/profile.md
documents them, so the expected findings, offsets and charts are known exactly.

Usage: python3 report_test.py TALLY_BINARY [unittest args, such as a test class]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zlib

TALLY = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CHROMIUM = "/usr/bin/chromium"
WORKER_PHASES = ["data", "h2d", "fwd", "bwd", "push", "pull", "wait"]
# Put into the files' text fields: the page must show it as text, never run or render it.
INJECTION = '<img src=x onerror="document.body.dataset.pwned=1"></script><b>bold</b>'

SCHED_T0 = 50_000_000   # scheduler clock (us) when the synthetic run begins
STEP_US = 45_000
STEPS = 120
WORKER1_OFFSET = -7_000_000  # worker-1's trace clock runs 7 s ahead of the scheduler's


class RunDir:
    """Writes a run directory's files: NODE.meta.json, .steps.jsonl, .monitor.jsonl,
    .findings.jsonl and .trace.json."""

    def __init__(self, path):
        self.path = path
        os.makedirs(path, exist_ok=True)

    def file(self, node, suffix):
        return os.path.join(self.path, node + suffix)

    def meta(self, node, role, rank, host, pid, offset=0, rtt=80, config=None):
        meta = {"node": node, "role": role, "rank": rank, "host": host, "pid": pid, "start_us": SCHED_T0 - offset,
                "clock_offset_us": offset, "clock_rtt_us": rtt, "config": config or {}}
        with open(self.file(node, ".meta.json"), "w") as f:
            f.write(json.dumps(meta) + "\n")

    def lines(self, node, suffix, records):
        with open(self.file(node, suffix), "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")

    def trace(self, node, events, other):
        with open(self.file(node, ".trace.json"), "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}, f)


def worker_steps(offset, starved, steps=STEPS):
    """A worker's steps; a starved one waits for data most of each step, the other waits for it."""
    out = []
    for i in range(steps):
        split = {"data": 28_000, "h2d": 500, "fwd": 6_000, "bwd": 9_000, "push": 800, "pull": 700, "wait": 0} \
            if starved else {"data": 900, "h2d": 500, "fwd": 6_000, "bwd": 9_500, "push": 800, "pull": 700, "wait": 26_000}
        r = {"step": i, "epoch": i // 60, "batch": i % 60, "start_us": SCHED_T0 + i * STEP_US - offset,
             "dur_us": STEP_US, "samples": 16, "loss": 2.3 * 0.98 ** i + 0.1, "accuracy": min(0.95, 0.25 + i / 160)}
        r.update({p + "_us": v for p, v in split.items() if v})
        out.append(r)
    return out


def server_steps(load):
    return [{"step": i, "start_us": SCHED_T0 + i * STEP_US + 30_000, "dur_us": 9_000, "sum_us": int(2_000 * load),
             "update_us": int(1_500 * load), "requests": 24, "bytes_in": int(4e6 * load), "bytes_out": int(4e6 * load)}
            for i in range(STEPS)]


def samples(offset, cores=4, gpus=0, n=60, busy=60.0):
    out = []
    for i in range(n):
        cpu = [min(100.0, busy + 30 * ((i + c) % 3 == 0) - 10 * c) for c in range(cores)]
        s = {"t_us": SCHED_T0 + i * 100_000 - offset, "cpu": cpu, "cpu_total": sum(cpu) / cores,
             "iowait": 2.0 + (i % 5), "process_cpu": 150.0, "mem_used": int(6e9 + i * 1e7), "mem_total": int(16e9),
             "net_rx_bps": 3e7 + i * 1e5, "net_tx_bps": 2.5e7, "disk_read_bps": 1e6 * (i % 4), "disk_write_bps": 2e5}
        if gpus:
            s["gpus"] = [{"util": 80.0 + 10 * g - (i % 7), "mem_used": int(9e9), "mem_total": int(16e9)}
                         for g in range(gpus)]
        out.append(s)
    return out


def write_synthetic_run(path):
    """scheduler, 2 servers, 2 workers; worker-1 starved of data, with a clock 7 s ahead."""
    run = RunDir(path)
    config = {"network": "resnet", "num_layers": "8", "batch_size": "16", "kv_store": "dist_sync",
              "image_shape": "3,16,16", "data_train": INJECTION}
    run.meta("scheduler", "scheduler", 0, "host-a", 100, 0, 0, config)
    run.meta("server-0", "server", 0, "host-a", 101, 1_200, 90, config)
    run.meta("server-1", "server", 1, "host-b", 102, -3_400, 95, config)
    run.meta("worker-0", "worker", 0, "host-a", 103, 2_500, 70, config)
    run.meta("worker-1", "worker", 1, "host-b", 104, WORKER1_OFFSET, 110, config)
    offsets = {"scheduler": 0, "server-0": 1_200, "server-1": -3_400, "worker-0": 2_500, "worker-1": WORKER1_OFFSET}
    run.lines("worker-0", ".steps.jsonl", worker_steps(offsets["worker-0"], starved=False))
    run.lines("worker-1", ".steps.jsonl", worker_steps(offsets["worker-1"], starved=True))
    run.lines("server-0", ".steps.jsonl", server_steps(1.0))
    run.lines("server-1", ".steps.jsonl", server_steps(1.8))
    for node, off in offsets.items():
        run.lines(node, ".monitor.jsonl", samples(off, gpus=2 if node == "worker-0" else 0))
    run.lines("worker-1", ".findings.jsonl", [{"rule": "data_starvation", "node": "worker-1", "step": 40,
                                               "message": "waits for data " + INJECTION, "advice": "raise --data-nthreads",
                                               "evidence": "data 62% " + INJECTION}])
    return run


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def require_chromium(test):
    if not os.access(CHROMIUM, os.X_OK):
        test.fail("%s is missing: run tools/install_deps.sh (it installs Debian's chromium)" % CHROMIUM)


def chromium(args, workdir, timeout=120):
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--user-data-dir=" + os.path.join(workdir, "chromium-profile")]
    return run(base + args, timeout)


def png_pixels_bytes(path):
    """The PNG's decompressed (still filtered) pixel rows: a blank page's are nearly all one byte."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return zlib.decompress(idat)


def embedded_data(html):
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert m, "the page has no embedded data"
    return json.loads(m.group(1))


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def render(self, page):
        """The page's DOM after its scripts ran in headless Chromium."""
        require_chromium(self)
        res = chromium(["--dump-dom", "file://" + page], self.dir)
        self.assertEqual(res.returncode, 0, res.stderr[-3000:])
        self.assertIn("<body", res.stdout, res.stderr[-3000:])
        return res.stdout

    def assertDrawn(self, dom, min_charts):
        errors = re.search(r'<div id="errors">(.*?)</div>\s*<section', dom, re.S)
        self.assertIsNotNone(errors, "no #errors element")
        self.assertEqual(errors.group(1).strip(), "", "the page's scripts failed")
        charts = re.search(r'<body[^>]* data-charts="(\d+)"', dom)
        self.assertIsNotNone(charts, "the page's script did not finish (no data-charts on <body>)")
        self.assertGreaterEqual(int(charts.group(1)), min_charts)
        self.assertGreaterEqual(dom.count("<svg"), min_charts)
        self.assertGreater(len(re.findall(r'<path d="M[\d.]+ [\d.]+L', dom)), 10, "no lines or areas drawn")
        self.assertGreater(len(re.findall(r'<rect [^>]*fill="(?:#|rgb)', dom)), 50, "no bars or heat map cells drawn")
        return int(charts.group(1))


class ReportTest(Case):
    """A synthetic run: the page, drawn, with the findings; printed findings."""

    # split + 2 step charts + loss + accuracy + 4 server charts + 5 nodes x 3 system charts
    # + worker-0's 2 GPU charts.
    EXPECTED_CHARTS = 1 + 2 + 2 + 4 + 15 + 2

    def test_report_page_is_drawn_with_the_findings(self):
        path = os.path.join(self.dir, "run")
        write_synthetic_run(path)
        res = run([TALLY, "report", path])
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        page = os.path.join(path, "report.html")
        self.assertIn(page, res.stdout)
        starved = re.findall(r"^tally: (\S+) step \d+: data_starvation: .+ -> .+$", res.stdout, re.M)
        self.assertTrue(starved, "no data_starvation finding printed:\n" + res.stdout)
        self.assertEqual(set(starved), {"worker-1"}, "a finding names the wrong worker:\n" + res.stdout)

        html = read(page)
        for loads in [r"(?i)<(script|link|img|iframe|object|embed)[^>]+(src|href|data)=", r"(?i)url\(\s*['\"]?(?!#)",
                      r"(?i)@import", r"(?i)\b(fetch|XMLHttpRequest|importScripts)\b"]:
            m = re.search(loads, html)
            self.assertIsNone(m, "the page loads something: %r" % (m and html[m.start() - 40:m.end() + 40]))
        self.assertNotIn("<img", html, "markup from the run's files reached the page")
        self.assertNotIn("<b>bold", html)
        data = embedded_data(html)
        self.assertEqual([n["node"] for n in data["nodes"]], ["scheduler", "server-0", "server-1", "worker-0", "worker-1"])
        self.assertTrue(any(f["rule"] == "data_starvation" and f["node"] == "worker-1" for f in data["findings"]))

        dom = self.render(page)
        self.assertDrawn(dom, self.EXPECTED_CHARTS)
        self.assertNotIn("data-pwned", dom, "a script from the run's files ran")
        self.assertNotIn("<img", dom, "markup from the run's files was rendered")
        self.assertIn("&lt;img src=x", dom, "the findings' text is not shown")
        for text in ["worker-1 (host-b): time per step by phase", "CPU busy per core (%)", "GPU utilisation (%)",
                     "Total server time over the run", "Training loss per step, per worker", "samples/s",
                     "dist_sync", "raise --data-nthreads", "data_starvation"]:
            self.assertIn(text, dom)

        shot = os.path.join(self.dir, "page.png")
        res = chromium(["--hide-scrollbars", "--window-size=1200,2400", "--screenshot=" + shot, "file://" + page],
                       self.dir)
        self.assertEqual(res.returncode, 0, res.stderr[-3000:])
        self.assertGreater(os.path.getsize(shot), 40_000, "the screenshot is (nearly) blank")
        pixels = png_pixels_bytes(shot)
        self.assertGreater(len(set(pixels)), 64, "the screenshot is (nearly) one colour")

    def test_out_and_rules_flags(self):
        path = os.path.join(self.dir, "run")
        write_synthetic_run(path)
        out = os.path.join(self.dir, "elsewhere.html")
        res = run([TALLY, "report", path, "--out", out, "--profile-rules", "data_wait_share=0.9"])
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        self.assertTrue(os.path.exists(out))
        self.assertFalse(os.path.exists(os.path.join(path, "report.html")))
        self.assertNotIn(": data_starvation:", res.stdout, "data_wait_share=0.9 still flags a 62% data wait")
        res = run([TALLY, "report", path, "--profile-rules", "no_such_rule=1"])
        self.assertEqual(res.returncode, 2, res.stdout + res.stderr)
        self.assertIn("--profile-rules", res.stderr)

    def test_long_run_is_downsampled(self):
        path = os.path.join(self.dir, "long")
        run_dir = RunDir(path)
        run_dir.meta("worker-0", "worker", 0, "h", 1)
        run_dir.lines("worker-0", ".steps.jsonl", worker_steps(0, starved=False, steps=5000))
        run_dir.lines("worker-0", ".monitor.jsonl", samples(0, cores=16, n=4000))
        res = run([TALLY, "report", path])
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        page = os.path.join(path, "report.html")
        self.assertLess(os.path.getsize(page), 600_000)
        data = embedded_data(read(page))
        w = data["workers"][0]
        self.assertLessEqual(len(w["step"]), 500)
        self.assertEqual(w["per"], 10)
        self.assertAlmostEqual(w["fwd"][0], 6.0)
        self.assertLessEqual(len(data["system"][0]["t"]), 300)
        self.assertEqual(len(data["system"][0]["cores"]), 16)
        self.assertDrawn(self.render(page), 1 + 1 + 2 + 3)


class MergeTest(Case):
    """Per-node traces with known clock offsets become one trace on the scheduler's clock."""

    # node: (offset in NODE.meta.json, offset in the trace's otherData, clock_rtt_us)
    NODES = {"scheduler": (0, 0, 0), "server-0": (1_200, 1_200, 90), "worker-0": (2_500, 2_500, 70),
             "worker-1": (WORKER1_OFFSET, 999, 110)}

    def write(self, path):
        run_dir = RunDir(path)
        events = {}
        for k, (node, (offset, other_offset, rtt)) in enumerate(self.NODES.items()):
            role, _, rank = node.partition("-")
            run_dir.meta(node, role, int(rank or 0), "host-%d" % k, 4000 + k, offset, rtt)
            pid = 4000 + k
            # Every node records "sync" at scheduler time SCHED_T0 + 1 s: once merged, at one ts.
            ev = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": node}},
                  {"ph": "M", "name": "thread_name", "ts": 0, "pid": pid, "tid": 1, "args": {"name": "trainer"}},
                  {"ph": "X", "name": "sync", "cat": "step", "ts": SCHED_T0 + 1_000_000 - offset, "dur": 500,
                   "pid": pid, "tid": 1},
                  {"ph": "X", "name": "fwd", "cat": "step", "ts": SCHED_T0 + 10 * k - offset, "dur": 300,
                   "pid": pid, "tid": 1, "args": {"step": 0}},
                  {"ph": "C", "name": "cpu", "ts": SCHED_T0 + 200_000 - offset, "pid": pid, "tid": 0,
                   "args": {"busy": 50.5}},
                  {"ph": "i", "name": "epoch", "cat": "train", "ts": SCHED_T0 + 300_000 - offset, "pid": pid,
                   "tid": 1, "s": "t"}]
            run_dir.trace(node, ev, {"node": node, "clock_offset_us": str(other_offset), "clock_rtt_us": str(rtt)})
            events[node] = ev
        # A node whose offset was never measured (clock_rtt_us -1): its trace's otherData has one.
        run_dir.meta("server-1", "server", 1, "host-x", 4100, 0, -1)
        run_dir.trace("server-1", [{"ph": "X", "name": "sync", "ts": SCHED_T0 + 1_000_000 + 4_000, "dur": 1,
                                    "pid": 4100, "tid": 3}], {"clock_offset_us": "-4000"})
        return events

    def test_merged_trace_is_one_time_line(self):
        path = os.path.join(self.dir, "run")
        self.write(path)
        res = run([TALLY, "report", "--merge", path])
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        out = os.path.join(path, "trace.json")
        self.assertIn(out, res.stdout)
        with open(out) as f:
            trace = json.load(f)
        events = trace["traceEvents"]
        for e in events:
            for key in ("ph", "ts", "pid", "tid"):
                self.assertIn(key, e, "event without %s: %r" % (key, e))
            self.assertIsInstance(e["ts"], int, "ts is not an integer: %r" % e)
        order = ["scheduler", "server-0", "server-1", "worker-0", "worker-1"]
        names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(sorted(names), [0, 1, 2, 3, 4], "one process_name per node, pids 0..4")
        self.assertEqual(names[4], "worker 1 (host-3, pid 4003)")
        self.assertEqual(names[0], "scheduler (host-0, pid 4000)")
        sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
        self.assertEqual(sort, {p: p for p in range(5)})
        self.assertEqual(len([e for e in events if e["name"] == "process_name"]), 5, "the nodes' own kept")
        threads = [e for e in events if e["name"] == "thread_name"]
        self.assertEqual(len(threads), 4)
        timed = [e for e in events if e["ph"] != "M"]
        self.assertEqual(min(e["ts"] for e in timed), 0, "the earliest event is not at 0")
        # The earliest event is the scheduler's fwd at SCHED_T0: every ts is scheduler time - SCHED_T0.
        syncs = {e["pid"]: e["ts"] for e in timed if e["name"] == "sync"}
        self.assertEqual(syncs, {p: 1_000_000 for p in range(5)}, "the nodes' sync events are not aligned")
        w1 = {e["name"]: e for e in timed if e["pid"] == order.index("worker-1")}
        self.assertEqual(w1["fwd"]["ts"], 30, "worker-1's fwd: %r" % w1["fwd"])
        self.assertEqual(w1["fwd"]["dur"], 300)
        self.assertEqual(w1["fwd"]["args"], {"step": 0})
        self.assertEqual(w1["cpu"]["ts"], 200_000)
        self.assertEqual(w1["cpu"]["args"], {"busy": 50.5})
        self.assertEqual(w1["epoch"]["ts"], 300_000)
        self.assertEqual(w1["epoch"]["s"], "t")
        self.assertEqual(len(timed), 4 * 4 + 1)

    def test_out_flag(self):
        path = os.path.join(self.dir, "run")
        self.write(path)
        out = os.path.join(self.dir, "merged.json")
        res = run([TALLY, "report", "--merge", path, "--out", out])
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        with open(out) as f:
            self.assertGreater(len(json.load(f)["traceEvents"]), 10)


class ErrorTest(Case):
    def report(self, *args):
        res = run([TALLY, "report"] + list(args))
        self.assertNotEqual(res.returncode, 0, res.stdout)
        return res.stderr

    def test_missing_dir(self):
        missing = os.path.join(self.dir, "nope")
        err = self.report(missing)
        self.assertIn(missing, err)
        self.assertIn("--run-dir", err)
        self.assertIn("--run-dir", self.report("--merge", missing))

    def test_dir_without_meta(self):
        err = self.report(self.dir)
        self.assertIn(self.dir, err)
        self.assertIn("--run-dir", err)

    def test_malformed_line_names_the_file_and_line(self):
        path = os.path.join(self.dir, "run")
        write_synthetic_run(path)
        steps = os.path.join(path, "worker-0.steps.jsonl")
        lines = read(steps).splitlines()
        lines[2] = '{"step": 2, "start_us": '
        write(steps, "\n".join(lines) + "\n")
        err = self.report(path)
        self.assertIn(steps + " line 3", err)

    def test_merge_without_traces_says_to_profile(self):
        path = os.path.join(self.dir, "run")
        write_synthetic_run(path)
        err = self.report("--merge", path)
        self.assertIn("--profile", err)
        self.assertIn(path, err)

    def test_malformed_trace_names_the_file_and_line(self):
        path = os.path.join(self.dir, "run")
        write_synthetic_run(path)
        trace = os.path.join(path, "worker-0.trace.json")
        write(trace, '{"traceEvents":[\n{"ph":"X","ts":1,"pid":1,"tid":1,"dur":2},\n{"ph":"X",,}\n]}\n')
        err = self.report("--merge", path)
        self.assertIn(trace + " line 3", err)
        write(trace, '{"traceEvents":[\n{"ts":1,"pid":1,"tid":1}\n]}\n')
        err = self.report("--merge", path)
        self.assertIn(trace, err)
        self.assertIn('no "ph"', err)

    def test_no_run_dir_is_a_usage_error(self):
        res = run([TALLY, "report"])
        self.assertEqual(res.returncode, 2)
        self.assertIn("RUN_DIR", res.stderr)


class JobTest(Case):
    """A real profiled dist_sync job (scheduler, 1 server, 2 workers) through tools/launch.py."""

    def test_report_and_merge_of_a_real_job(self):
        path = os.path.join(self.dir, "run")
        cmd = [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "-n", "2", "-s", "1", "--launcher", "local",
               TALLY, "train", "--kv-store", "dist_sync", "--network", "resnet", "--num-layers", "8",
               "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "8", "--num-examples", "800",
               "--num-epochs", "1", "--disp-batches", "20", "--run-dir", path, "--profile",
               "--monitor-interval-ms", "100"]
        env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
        self.assertEqual(res.returncode, 0, (res.stdout + res.stderr)[-5000:])
        nodes = ["scheduler", "server-0", "worker-0", "worker-1"]
        for node in nodes:
            for suffix in (".meta.json", ".trace.json"):
                self.assertTrue(os.path.exists(os.path.join(path, node + suffix)), node + suffix)

        res = run([TALLY, "report", path])
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        data = embedded_data(read(os.path.join(path, "report.html")))
        self.assertEqual([n["node"] for n in data["nodes"]], nodes)
        steps = {w["node"]: w for w in data["workers"]}
        self.assertEqual(set(steps), {"worker-0", "worker-1"})
        # --num-examples is per worker (synthetic data): 100 steps, each its own point.
        self.assertEqual(len(steps["worker-0"]["step"]), 800 // 8, "one point per step of worker-0")
        self.assertTrue(data["servers"][0]["step"], "the server recorded no step")
        with_samples = len(data["system"])
        # split + 2 step charts + loss + accuracy + 4 server charts + 3 per node with samples
        self.assertDrawn(self.render(os.path.join(path, "report.html")), 1 + 2 + 2 + 4 + 3 * with_samples)

        res = run([TALLY, "report", "--merge", path])
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        with open(os.path.join(path, "trace.json")) as f:
            events = json.load(f)["traceEvents"]
        for e in events:
            for key in ("ph", "ts", "pid", "tid"):
                self.assertIn(key, e, "event without %s: %r" % (key, e))
        pids = {e["pid"] for e in events}
        self.assertEqual(pids, {0, 1, 2, 3})
        names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        self.assertTrue(names[2].startswith("worker 0 ("), names)
        self.assertEqual(min(e["ts"] for e in events if e["ph"] != "M"), 0)
        # dist_sync: the workers cannot be a whole step apart; on one time line their data
        # events of each step begin close together.
        data_ts = {pid: sorted(e["ts"] for e in events if e["pid"] == pid and e["name"] == "data") for pid in (2, 3)}
        self.assertTrue(data_ts[2] and data_ts[3], "no data events in the workers' traces")
        n = min(len(data_ts[2]), len(data_ts[3]))
        gaps = sorted(abs(a - b) for a, b in zip(data_ts[2][:n], data_ts[3][:n]))
        self.assertLess(gaps[len(gaps) // 2], 200_000, "the workers' steps are not aligned: median gap %d us" %
                        gaps[len(gaps) // 2])


if __name__ == "__main__":
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
