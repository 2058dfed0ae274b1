"""A NaN in one worker's gradient skips that step on every node (docs/wire.md, "Non-finite
gradients"), through `tally train` and the test setting TALLY_TEST_NAN=<rank>:<step>[:all].

The reference is honest and needs no knowledge of the weights: a run where the NaN is one
element of one key's gradient (so only that key's sum is not finite, and every other key of
the step must be rolled back) has to end bit for bit where a run whose whole gradient is NaN
(so no key can take the step at all) ends, and both have to differ from a run without a
NaN. dist_sync (scheduler, 2 servers, 2 workers) and the single-process `local` kvstore.

Usage: python3 nan_test.py TALLY_BINARY [unittest args, such as a test class]
"""
import math
import os
import re
import secrets
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import free_port, read_tensors  # noqa: E402 (tests/testutil.py)

TALLY = None
NAN_STEP = 4
# 20 steps of batch 8 per worker.
MODEL = ["--num-layers", "8", "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "8",
         "--num-examples", "160", "--num-epochs", "1", "--disp-batches", "5", "--num-val-examples", "16",
         "--seed", "3", "--optimizer", "nag", "--lr", "0.05"]


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def checkpoint(self, prefix):
        return {ext: read_tensors(prefix + "-0001" + ext)[0] for ext in (".params", ".states")}

    def assertAllFinite(self, ckpt):
        for ext, tensors in ckpt.items():
            for name, raw in tensors.items():
                values = struct.unpack("<%df" % (len(raw) // 4), raw)
                self.assertTrue(all(math.isfinite(v) for v in values), "%s %s holds a non-finite value" % (ext, name))

    def assertSkippedStepsAlike(self, one, everything, clean):
        """one, everything, clean: the checkpoints of the three runs."""
        for ext in (".params", ".states"):
            differ = [k for k in one[ext] if one[ext][k] != everything[ext][k]]
            self.assertEqual(differ, [], "%s: one NaN element and an all-NaN gradient end differently" % ext)
        self.assertNotEqual(one[".params"], clean[".params"], "skipping the step changed nothing")
        self.assertAllFinite(one)


class DistSyncTest(Case):
    """Every role is `tally train` with MXNet's DMLC_* environment, as tools/launch.py starts it."""

    ROLES = [("scheduler", 0), ("server", 0), ("server", 1), ("worker", 0), ("worker", 1)]

    def run_job(self, name, nan):
        port = free_port()
        secret = secrets.token_hex(32)
        prefix = os.path.join(self.dir, name, "m")
        procs = {}
        for role, rank in self.ROLES:
            env = dict(os.environ, DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                       DMLC_NUM_WORKER="2", DMLC_NUM_SERVER="2", DMLC_NODE_HOST="127.0.0.1", TALLY_RANK=str(rank),
                       TALLY_JOB_SECRET=secret, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
            env.pop("TALLY_TEST_NAN", None)
            if nan:
                env["TALLY_TEST_NAN"] = nan
            path = os.path.join(self.dir, "%s-%s%d.log" % (name, role, rank))
            with open(path, "w") as out:
                procs[(role, rank)] = (subprocess.Popen(
                    [TALLY, "train", "--kv-store", "dist_sync", "--model-prefix", prefix] + MODEL,
                    env=env, stdout=out, stderr=subprocess.STDOUT), path)
        deadline = time.time() + 200
        try:
            codes = {k: p.wait(timeout=max(1, deadline - time.time())) for k, (p, _) in procs.items()}
        finally:
            for p, _ in procs.values():
                if p.poll() is None:
                    p.kill()
        logs = {}
        for k, (_, path) in procs.items():
            with open(path) as f:
                logs[k] = f.read()
        everything = "\n".join("--- %s %d\n%s" % (k[0], k[1], text[-3000:]) for k, text in logs.items())
        self.assertTrue(all(c == 0 for c in codes.values()), "%s: exit codes %s\n%s" % (name, codes, everything))
        return prefix, logs

    def test_a_nan_step_is_skipped_on_every_node(self):
        one_prefix, one_logs = self.run_job("one", "1:%d" % NAN_STEP)
        all_prefix, all_logs = self.run_job("all", "0:%d:all" % NAN_STEP)
        clean_prefix, clean_logs = self.run_job("clean", None)

        for logs, culprit in ((one_logs, 1), (all_logs, 0)):
            for (role, rank), text in logs.items():
                if role == "worker":
                    lines = re.findall(r"step (\d+) skipped, no weight changed: .*from worker (\d+)", text)
                    self.assertEqual(lines, [(str(NAN_STEP), str(culprit))], "worker %d:\n%s" % (rank, text[-3000:]))
                    # Step 4 is the 5th batch: in the first Speedometer window.
                    self.assertRegex(text, r"Batch \[0-5\]\tSpeed: .*\tskipped-steps=1\n")
                elif role == "server":
                    lines = re.findall(r"server: step (\d+) skipped: (.*)", text)
                    self.assertEqual([s for s, _ in lines], [str(NAN_STEP)], "server %d:\n%s" % (rank, text[-3000:]))
        # With one NaN element only one server finds it; the other learns it from a rollback.
        reasons = sorted(re.search(r"server: step \d+ skipped: (.*)", one_logs[("server", r)]).group(1)
                         for r in (0, 1))
        self.assertTrue(any("NaN/Inf from worker 1" in r for r in reasons), reasons)
        self.assertTrue(any("rolled back at worker" in r for r in reasons), reasons)
        for (role, rank), text in clean_logs.items():
            self.assertNotIn("skipped", text, "%s %d skipped a step without a NaN" % (role, rank))

        self.assertSkippedStepsAlike(self.checkpoint(one_prefix), self.checkpoint(all_prefix),
                                     self.checkpoint(clean_prefix))


class LocalTest(Case):
    """The single-process kvstore: the whole update of the step is skipped."""

    def run_train(self, name, nan):
        prefix = os.path.join(self.dir, name, "m")
        env = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="passive")
        env.pop("TALLY_TEST_NAN", None)
        if nan:
            env["TALLY_TEST_NAN"] = nan
        done = subprocess.run([TALLY, "train", "--kv-store", "local", "--model-prefix", prefix] + MODEL,
                              env=env, capture_output=True, text=True, timeout=200)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return prefix, done.stdout

    def test_a_nan_step_changes_no_weight(self):
        one_prefix, one_log = self.run_train("one", "0:%d" % NAN_STEP)
        all_prefix, all_log = self.run_train("all", "0:%d:all" % NAN_STEP)
        clean_prefix, clean_log = self.run_train("clean", None)
        for log in (one_log, all_log):
            self.assertEqual(re.findall(r"step (\d+) skipped, no weight changed", log), [str(NAN_STEP)], log)
        self.assertNotIn("skipped", clean_log)
        self.assertSkippedStepsAlike(self.checkpoint(one_prefix), self.checkpoint(all_prefix),
                                     self.checkpoint(clean_prefix))


class SettingTest(unittest.TestCase):
    def test_a_malformed_setting_is_refused_naming_it(self):
        env = dict(os.environ, TALLY_TEST_NAN="banana")
        done = subprocess.run([TALLY, "train", "--kv-store", "local"] + MODEL, env=env, capture_output=True,
                              text=True, timeout=60)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("TALLY_TEST_NAN='banana'", done.stderr)


if __name__ == "__main__":
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
