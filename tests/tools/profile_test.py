"""The profiler end to end through `tally train`: an induced data bottleneck (one decode
thread, large JPEGs under heavy augmentation, a tiny network) fires the data-starvation
rule with its advice, a healthy run fires no rule, the Speedometer gains the time split
with --profile, every node writes its files, each process's trace is valid Chrome trace
JSON, and a worker whose clock is 5 s off gets an offset that puts it back on the
scheduler's time line.

Usage: python3 profile_test.py TALLY_BINARY [unittest args, such as a test class]
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import free_port  # noqa: E402 (tests/testutil.py)


TALLY = None
FINDING = re.compile(r"^tally: (\S+)(?: step (\d+))?: (\w+): (.*)$", re.M)
NET = ["--network", "resnet", "--num-layers", "8", "--num-classes", "4", "--seed", "3"]


def run(args, env=None, timeout=240):
    e = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="2")
    e.update(env or {})
    p = subprocess.run([TALLY] + args, env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_json(path):
    with open(path) as f:
        return json.load(f)


def check_trace(test, path):
    """Valid JSON in the Chrome trace event format: every event has ph, ts, pid, tid."""
    trace = load_json(path)
    events = trace["traceEvents"]
    test.assertGreater(len(events), 0, path)
    for e in events:
        for field in ("ph", "ts", "pid", "tid"):
            test.assertIn(field, e, "%s: %r" % (path, e))
        if e["ph"] == "X":
            test.assertIn("dur", e)
            test.assertGreaterEqual(e["dur"], 0)
    return trace


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()


class DataBottleneckTest(Case):
    def test_one_decode_thread_with_heavy_augmentation_fires_data_starvation(self):
        # PNG records cannot be decoded at a reduced scale, as JPEGs can: each costs the
        # decode thread milliseconds, while ResNet-8 on 16x16 crops takes about one.
        images = os.path.join(self.dir, "images")
        code, out, err = run(["make-data", "synthetic-jpeg", "--out", images, "--classes", "4", "--per-class", "12"])
        self.assertEqual(code, 0, err)
        rec = os.path.join(self.dir, "train")
        code, out, err = run(["im2rec", rec, images, "--list", "--recursive"])
        if code == 0:
            code, out, err = run(["im2rec", rec, images, "--encoding", ".png"])
        self.assertEqual(code, 0, out + err)
        run_dir = os.path.join(self.dir, "run")
        code, out, err = run(["train"] + NET + [
            "--data-train", rec + ".rec", "--image-shape", "3,16,16", "--batch-size", "8", "--num-epochs", "16",
            "--data-nthreads", "1", "--num-threads", "1", "--random-resized-crop", "1", "--min-random-area", "0.08",
            "--max-random-aspect-ratio", "1.33", "--min-random-aspect-ratio", "0.75", "--brightness", "0.4",
            "--contrast", "0.4", "--saturation", "0.4", "--pca-noise", "0.1", "--disp-batches", "5",
            "--run-dir", run_dir, "--profile-rules", "window=10,warmup_steps=2", "--progress=false"],
            env={"OMP_NUM_THREADS": "1"})
        self.assertEqual(code, 0, out + err)
        findings = FINDING.findall(err)
        rules = {f[2] for f in findings}
        self.assertIn("data_starvation", rules, err)
        line = [l for l in err.splitlines() if "data_starvation" in l][0]
        self.assertIn("--data-nthreads", line)
        self.assertIn("worker-0", line)
        written = read_jsonl(os.path.join(run_dir, "worker-0.findings.jsonl"))
        self.assertIn("data_starvation", {f["rule"] for f in written})
        # The evidence is in the step records: data wait is most of the step.
        steps = read_jsonl(os.path.join(run_dir, "worker-0.steps.jsonl"))
        data = sum(s.get("data_us", 0) for s in steps[5:])
        total = sum(s["dur_us"] for s in steps[5:])
        self.assertGreater(data / total, 0.25)


class HealthyRunTest(Case):
    def test_a_healthy_run_fires_no_rule_and_records_every_step(self):
        run_dir = os.path.join(self.dir, "run")
        code, out, err = run(["train"] + NET + [
            "--image-shape", "3,16,16", "--batch-size", "16", "--num-examples", "2560", "--num-epochs", "1",
            "--lr", "0.05", "--disp-batches", "20", "--run-dir", run_dir, "--profile", "--num-val-examples", "16",
            # The run may take less than the default interval (500 ms): sample more often.
            "--progress=false", "--monitor-interval-ms", "50"])
        self.assertEqual(code, 0, out + err)
        self.assertEqual(FINDING.findall(err), [], err)
        self.assertEqual(read_jsonl(os.path.join(run_dir, "worker-0.findings.jsonl")), [])
        steps = read_jsonl(os.path.join(run_dir, "worker-0.steps.jsonl"))
        self.assertEqual([s["step"] for s in steps], list(range(160)))
        for s in steps:
            for phase in ("fwd_us", "bwd_us"):
                self.assertGreater(s.get(phase, 0), 0, s)
            parts = sum(v for k, v in s.items() if k.endswith("_us") and k not in ("start_us", "dur_us"))
            self.assertLessEqual(parts, s["dur_us"] * 1.01 + 50, s)
            self.assertEqual(s["samples"], 16)
            self.assertGreater(s["grad_norm"], 0)
        # The loss went down: the healthy run is healthy.
        first = sum(s["loss"] for s in steps[:20]) / 20
        last = sum(s["loss"] for s in steps[-20:]) / 20
        self.assertLess(last, first)
        # --profile: the Speedometer lines end with the split, and percentages add up.
        lines = [l for l in out.splitlines() if "Speed:" in l]
        self.assertEqual(len(lines), 8, out)
        for l in lines:
            m = re.search(r"\tdata (\d+)% fwd (\d+)% bwd (\d+)% comm (\d+)%$", l)
            self.assertIsNotNone(m, l)
            self.assertLessEqual(sum(int(x) for x in m.groups()), 104, l)
            self.assertGreaterEqual(sum(int(x) for x in m.groups()), 80, l)
        samples = read_jsonl(os.path.join(run_dir, "worker-0.monitor.jsonl"))
        self.assertGreater(len(samples), 0)
        meta = load_json(os.path.join(run_dir, "worker-0.meta.json"))
        self.assertEqual(meta["role"], "worker")
        self.assertEqual(meta["clock_offset_us"], 0)
        trace = check_trace(self, os.path.join(run_dir, "worker-0.trace.json"))
        names = {e["name"] for e in trace["traceEvents"]}
        for name in ("step", "data", "fwd", "bwd", "push", "wait", "process_name", "thread_name", "cpu %"):
            self.assertIn(name, names)

    def test_without_the_profile_flag_the_speedometer_line_is_mxnets(self):
        code, out, err = run(["train"] + NET + [
            "--image-shape", "3,16,16", "--batch-size", "16", "--num-examples", "320", "--num-epochs", "1",
            "--disp-batches", "10", "--num-val-examples", "16", "--progress=false"])
        self.assertEqual(code, 0, out + err)
        lines = [l for l in out.splitlines() if "Speed:" in l]
        self.assertTrue(lines)
        for l in lines:
            self.assertRegex(l, r"^Epoch\[0\] Batch \[\d+-\d+\]\tSpeed: [\d.]+ samples/sec\taccuracy=[\d.]+\t"
                                r"cross-entropy=[\d.]+$")

    def test_bad_profiler_flags_are_refused_naming_the_flag(self):
        code, out, err = run(["train", "--monitor-interval-ms", "5"])
        self.assertEqual(code, 2, err)
        self.assertIn("--monitor-interval-ms", err)
        code, out, err = run(["train", "--profile-rules", "no_such_rule=3"])
        self.assertEqual(code, 2, err)
        self.assertIn("--profile-rules", err)
        self.assertIn("no_such_rule", err)


class DistJobTest(Case):
    """A dist_sync job whose roles are started by hand, so that worker 1 alone gets a clock
    that runs 5 s ahead (TALLY_TEST_CLOCK_SKEW_US)."""

    SKEW_US = 5000000

    def test_every_node_profiles_and_the_skewed_clock_is_measured(self):
        run_dir = os.path.join(self.dir, "run")
        port = free_port()
        procs = []
        secret = os.urandom(32).hex()  # the job's (docs/security.md)
        for role, rank in [("scheduler", 0), ("server", 0), ("worker", 0), ("worker", 1)]:
            env = dict(os.environ, DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                       DMLC_NUM_WORKER="2", DMLC_NUM_SERVER="1", DMLC_NODE_HOST="127.0.0.1", TALLY_RANK=str(rank),
                       OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", TALLY_JOB_SECRET=secret)
            if role == "worker" and rank == 1:
                env["TALLY_TEST_CLOCK_SKEW_US"] = str(self.SKEW_US)
            with open(os.path.join(self.dir, "%s%d.log" % (role, rank)), "w") as log:
                procs.append(subprocess.Popen(
                    [TALLY, "train", "--kv-store", "dist_sync"] + NET +
                    ["--image-shape", "3,16,16", "--batch-size", "8", "--num-examples", "960", "--num-epochs", "1",
                     "--disp-batches", "20", "--num-val-examples", "8", "--run-dir", run_dir, "--profile",
                     "--progress=false"], env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.time() + 180
        try:
            for p in procs:
                self.assertEqual(p.wait(timeout=max(1, deadline - time.time())), 0, self.logs())
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        nodes = sorted(os.path.basename(p)[:-len(".meta.json")] for p in glob.glob(run_dir + "/*.meta.json"))
        self.assertEqual(nodes, ["scheduler", "server-0", "worker-0", "worker-1"])
        metas = {n: load_json(os.path.join(run_dir, n + ".meta.json")) for n in nodes}
        traces = {}
        for n in nodes:
            traces[n] = check_trace(self, os.path.join(run_dir, n + ".trace.json"))
            self.assertGreaterEqual(metas[n]["clock_rtt_us"], 0, n)
        # Loopback: the unskewed nodes share the scheduler's clock within the round trip.
        for n in ("server-0", "worker-0"):
            self.assertLessEqual(abs(metas[n]["clock_offset_us"]), max(2000, metas[n]["clock_rtt_us"]), metas[n])
        w1 = metas["worker-1"]
        self.assertLessEqual(abs(w1["clock_offset_us"] + self.SKEW_US), max(2000, w1["clock_rtt_us"]), w1)
        # Sync training: step t ends on both workers at about the same moment once the
        # offsets are applied (each waits for the other's push), and 5 s apart before.
        ends = {}
        for n in ("worker-0", "worker-1"):
            ends[n] = {s["step"]: s["start_us"] + s["dur_us"] + metas[n]["clock_offset_us"]
                       for s in read_jsonl(os.path.join(run_dir, n + ".steps.jsonl"))}
        self.assertEqual(set(ends["worker-0"]), set(range(120)))
        gaps = sorted(abs(ends["worker-0"][t] - ends["worker-1"][t]) for t in range(5, 120))
        self.assertLess(gaps[len(gaps) // 2], 50000, gaps)
        # The server saw every key of every step from both workers: the same bytes every
        # step, in at most one request per key and worker (small keys' requests travel
        # together, kvstore/dist_channel.h).
        pushes = sum(1 for e in traces["worker-0"]["traceEvents"] if e["name"] == "push")
        self.assertEqual(pushes % 120, 0)
        server = read_jsonl(os.path.join(run_dir, "server-0.steps.jsonl"))
        self.assertEqual([s["step"] for s in server], list(range(120)))
        for s in server:
            self.assertGreater(s["requests"], 0, s)
            self.assertLessEqual(s["requests"], 2 * pushes // 120, s)
            self.assertGreater(s["sum_us"] + s.get("update_us", 0), 0)
            self.assertEqual(s["bytes_in"], server[0]["bytes_in"], s)
            self.assertGreater(s["bytes_in"], 0)
        self.assertTrue(read_jsonl(os.path.join(run_dir, "scheduler.monitor.jsonl")))

    def logs(self):
        out = []
        for p in glob.glob(self.dir + "/*.log"):
            with open(p) as f:
                out.append(f.read()[-2000:])
        return "\n".join(out)


if __name__ == "__main__":
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
