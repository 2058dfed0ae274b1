"""SIGTERM and exact resume through `tally train`: a run stopped by SIGTERM inside an epoch
leaves a loadable checkpoint, and `--resume auto` ends with exactly (bit for bit) the weights
and optimizer state of a run that was never stopped. Single process, and a dist_sync job
(scheduler, 1 server, 2 workers) in which only one worker gets the SIGTERM.

Usage: python3 resume_test.py TALLY_BINARY [unittest args, such as a test class]
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import free_port, read_tensors  # noqa: E402 (tests/testutil.py)


TALLY = None
SAVED_STOP = 75  # what launch.py asks a worker to exit with after a saved stop (TALLY_STOPPED_STATUS)
MODEL = ["--num-layers", "8", "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "16",
         "--num-examples", "2400", "--num-epochs", "2", "--disp-batches", "10", "--num-val-examples", "32",
         "--seed", "5", "--lr-scheduler", "cosine", "--optimizer", "nag"]


def wait_for(path, text, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            if text in f.read():
                return
        if proc.poll() is not None:
            raise AssertionError("%s exited (%s) before printing %r" % (path, proc.returncode, text))
        time.sleep(0.05)
    raise AssertionError("%s: no %r within %d s" % (path, text, timeout))


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def assertSameCheckpoint(self, a, b):
        for ext in (".params", ".states"):
            ta, ma = read_tensors(a + ext)
            tb, mb = read_tensors(b + ext)
            self.assertEqual(sorted(ta), sorted(tb), ext)
            differ = [k for k in ta if ta[k] != tb[k]]
            self.assertEqual(differ, [], "%s: tensors differ from the uninterrupted run's" % ext)
            for key in ("epoch", "batch", "step"):
                self.assertEqual(ma[key], mb[key], key)


class SingleProcessTest(Case):
    def run_train(self, prefix, extra=(), log="train.log"):
        path = os.path.join(self.dir, log)
        with open(path, "w") as out:
            proc = subprocess.Popen([TALLY, "train"] + MODEL + ["--model-prefix", prefix] + list(extra),
                                    stdout=out, stderr=subprocess.STDOUT)
        return proc, path

    def test_sigterm_inside_an_epoch_then_resume_equals_an_uninterrupted_run(self):
        ref, path = self.run_train(os.path.join(self.dir, "ref", "m"), log="ref.log")
        self.assertEqual(ref.wait(timeout=120), 0, open(path).read())

        prefix = os.path.join(self.dir, "run", "m")
        proc, path = self.run_train(prefix)
        wait_for(path, "Epoch[0] Batch [20-30]", proc)
        proc.send_signal(signal.SIGTERM)
        # A stop whose checkpoint was saved lost nothing: a success, for schedulers too.
        self.assertEqual(proc.wait(timeout=30), 0, open(path).read())
        log = open(path).read()
        self.assertIn("stopping, the job was asked to (SIGTERM)", log)
        self.assertIn("tally train: stopped on SIGTERM at the job's agreed step, the checkpoint saved under %s: "
                      "the same command with --resume auto continues from it" % prefix, log)
        self.assertIn('Saved checkpoint to "%s-0000.params"' % prefix, log)
        _, meta = read_tensors(prefix + "-0000.params")
        self.assertEqual(meta["epoch"], "0")
        self.assertGreater(int(meta["batch"]), 0, "the checkpoint is inside epoch 0")

        proc, path = self.run_train(prefix, ["--resume", "auto"], log="resume.log")
        self.assertEqual(proc.wait(timeout=120), 0, open(path).read())
        log = open(path).read()
        self.assertIn("resuming from %s-0000.params: epoch 0, batch %s" % (prefix, meta["batch"]), log)
        self.assertSameCheckpoint(prefix + "-0002", os.path.join(self.dir, "ref", "m-0002"))

    def test_load_epoch_continues_from_an_epoch_end(self):
        ref, path = self.run_train(os.path.join(self.dir, "ref", "m"), log="ref.log")
        self.assertEqual(ref.wait(timeout=120), 0, open(path).read())
        # The run that stopped after epoch 0 is the reference's own first checkpoint.
        prefix = os.path.join(self.dir, "run", "m")
        os.makedirs(os.path.dirname(prefix))
        for ext in (".params", ".states"):
            shutil.copy(os.path.join(self.dir, "ref", "m-0001" + ext), prefix + "-0001" + ext)
        proc, path = self.run_train(prefix, ["--load-epoch", "1"], log="resume.log")
        self.assertEqual(proc.wait(timeout=120), 0, open(path).read())
        self.assertNotIn("Epoch[0]", open(path).read(), "epoch 0 was trained again")
        self.assertSameCheckpoint(prefix + "-0002", os.path.join(self.dir, "ref", "m-0002"))


class ProgressBarTest(Case):
    """On a terminal, a live bar with ETA on stderr; in a file or a pipe, none."""

    def test_bar_on_a_terminal_only(self):
        import pty
        master, slave = pty.openpty()
        args = [TALLY, "train"] + MODEL + ["--num-epochs", "1"]
        out_path = os.path.join(self.dir, "stdout.log")
        with open(out_path, "w") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=slave)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        os.close(master)
        self.assertEqual(proc.wait(timeout=60), 0, seen.decode(errors="replace"))
        text = seen.decode(errors="replace")
        self.assertRegex(text, r"Epoch\[0\] \[=*>? *\] \d+/150 .* samples/s  ETA \d+:\d\d:\d\d")
        self.assertIn("\r\x1b[K", text, "the bar is not cleared before log lines")
        log = open(out_path).read()
        self.assertNotIn("ETA", log, "the bar leaked into stdout")
        self.assertRegex(log, r"Epoch\[0\] Batch \[0-10\]\tSpeed: [\d.]+ samples/sec")
        piped = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(piped.returncode, 0, piped.stderr)
        self.assertNotIn("ETA", piped.stderr + piped.stdout, "a bar was drawn into a pipe")


class DistSyncTest(Case):
    """Every role is `tally train` with MXNet's DMLC_* environment, as tools/launch.py starts it."""

    def start_job(self, prefix, extra, name):
        port = free_port()
        procs = {}
        secret = os.urandom(32).hex()  # the job's (docs/security.md)
        for role, rank in [("scheduler", 0), ("server", 0), ("worker", 0), ("worker", 1)]:
            env = dict(os.environ, DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                       DMLC_NUM_WORKER="2", DMLC_NUM_SERVER="1", DMLC_NODE_HOST="127.0.0.1", TALLY_RANK=str(rank),
                       OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", TALLY_JOB_SECRET=secret,
                       TALLY_STOPPED_STATUS=str(SAVED_STOP))
            path = os.path.join(self.dir, "%s-%s%d.log" % (name, role, rank))
            with open(path, "w") as out:
                proc = subprocess.Popen([TALLY, "train", "--kv-store", "dist_sync"] + MODEL +
                                        ["--model-prefix", prefix] + list(extra),
                                        env=env, stdout=out, stderr=subprocess.STDOUT)
            procs[(role, rank)] = (proc, path)
        return procs

    def wait_job(self, procs, timeout=180):
        deadline = time.time() + timeout
        codes = {}
        try:
            for key, (proc, _) in procs.items():
                codes[key] = proc.wait(timeout=max(1, deadline - time.time()))
        finally:
            for proc, _ in procs.values():
                if proc.poll() is None:
                    proc.kill()
        return codes

    def logs(self, procs):
        return "\n".join("--- %s %d\n%s" % (k[0], k[1], open(p).read()[-3000:]) for k, (_, p) in procs.items())

    def test_sigterm_to_one_worker_stops_the_job_at_one_step_and_resume_is_exact(self):
        ref_prefix = os.path.join(self.dir, "ref", "m")
        procs = self.start_job(ref_prefix, [], "ref")
        codes = self.wait_job(procs)
        self.assertTrue(all(c == 0 for c in codes.values()), self.logs(procs))

        prefix = os.path.join(self.dir, "run", "m")
        procs = self.start_job(prefix, [], "run")
        worker1, path1 = procs[("worker", 1)]
        wait_for(path1, "Epoch[0] Batch [20-30]", worker1)
        worker1.send_signal(signal.SIGTERM)
        start = time.time()
        codes = self.wait_job(procs, timeout=60)
        self.assertLess(time.time() - start, 30, "the job took too long to stop")
        # TALLY_STOPPED_STATUS (launch.py sets it) replaces the 0 of a saved stop.
        self.assertEqual(codes[("worker", 0)], SAVED_STOP, self.logs(procs))
        self.assertEqual(codes[("worker", 1)], SAVED_STOP, self.logs(procs))
        self.assertEqual(codes[("scheduler", 0)], 0, self.logs(procs))
        self.assertEqual(codes[("server", 0)], 0, self.logs(procs))
        # Both workers stopped after the same batch.
        stops = []
        for rank in (0, 1):
            lines = [l for l in open(procs[("worker", rank)][1]) if "stopping, the job was asked to" in l]
            self.assertEqual(len(lines), 1, self.logs(procs))
            stops.append(lines[0].split(":")[0])
        self.assertEqual(stops[0], stops[1], "the workers stopped at different batches")
        _, meta = read_tensors(prefix + "-0000.params")
        self.assertGreater(int(meta["batch"]), 0)

        procs = self.start_job(prefix, ["--resume", "auto"], "resume")
        codes = self.wait_job(procs)
        self.assertTrue(all(c == 0 for c in codes.values()), self.logs(procs))
        self.assertSameCheckpoint(prefix + "-0002", ref_prefix + "-0002")


if __name__ == "__main__":
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
