"""`tally train --tensorboard DIR` read back by TensorBoard itself: the `tensorboard` package's
EventAccumulator loads every process's run folder and finds every scalar curve, at the steps
the Speedometer and the epochs end at, with values a run like this one must have. A
dist_sync job through tools/launch.py (2 workers, 1 server; worker 1's gradient is made NaN
at step 13, so the skipped-steps curve has something to show), and a single process, whose
curves stop and training goes on when its event file can grow no more.

Without the `tensorboard` package (tools/install_deps.sh installs it from PyPI) the test
prints a "SKIPPED tensorboard:" line saying so and exits 0.

Usage: python3 tensorboard_test.py TALLY_BINARY [unittest args, such as a test class]
"""
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import unittest

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as e:
    print("SKIPPED tensorboard: the tensorboard package is not importable from %s (%s); "
          "tools/install_deps.sh installs it" % (sys.executable, e))
    sys.exit(0)

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "..", "tools", "launch.py")
TALLY = None
BATCHES, DISP, EPOCHS = 30, 10, 2  # per worker and epoch; Speedometer window; epochs
TRAIN = ["train", "--num-layers", "8", "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "8",
         "--num-examples", str(8 * BATCHES), "--num-epochs", str(EPOCHS), "--disp-batches", str(DISP),
         "--num-val-examples", "16", "--seed", "3", "--lr", "0.1", "--lr-scheduler", "cosine", "--progress=false"]
WORKER_TAGS = ["train/loss", "train/accuracy", "train/learning_rate", "train/samples_per_sec",
               "train/skipped_steps", "train/loss_scale", "time/data_wait_share", "time/comm_share",
               "time/step_ms"]
EPOCH_TAGS = ["epoch/train_loss", "epoch/train_accuracy", "epoch/val_loss", "epoch/val_accuracy"]
SERVER_TAGS = ["server/step_ms", "server/sum_ms", "server/update_ms", "server/requests", "server/received_mb",
               "server/sent_mb"]
WINDOW_STEPS = [e * BATCHES + b for e in range(EPOCHS) for b in range(DISP, BATCHES + 1, DISP)]
EPOCH_STEPS = [(e + 1) * BATCHES for e in range(EPOCHS)]


def env():
    return dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def load(run_dir):
    """{tag: [(step, value)]} of every scalar in run_dir's event files."""
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.board = os.path.join(self.tmp.name, "board")

    def tearDown(self):
        self.tmp.cleanup()

    def run_command(self, argv, extra_env=None):
        e = env()
        e.update(extra_env or {})
        p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=240)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr)[-4000:])
        return p.stdout + p.stderr

    def check_worker(self, run_dir, skipped_at=None):
        """Every worker curve at the Speedometer's steps, every epoch curve at the epochs' ends,
        and values in their ranges. skipped_at: the window step whose skipped-steps is 1."""
        curves = load(run_dir)
        self.assertEqual(sorted(curves), sorted(WORKER_TAGS + EPOCH_TAGS), run_dir)
        for tag in WORKER_TAGS:
            self.assertEqual([s for s, _ in curves[tag]], WINDOW_STEPS, tag)
        for tag in EPOCH_TAGS:
            self.assertEqual([s for s, _ in curves[tag]], EPOCH_STEPS, tag)
        values = {tag: [v for _, v in points] for tag, points in curves.items()}
        for tag, vs in values.items():
            self.assertTrue(all(math.isfinite(v) for v in vs), (tag, vs))
        for tag in ("train/accuracy", "epoch/train_accuracy", "epoch/val_accuracy", "time/data_wait_share",
                    "time/comm_share"):
            self.assertTrue(all(0 <= v <= 1 for v in values[tag]), (tag, values[tag]))
        for tag in ("train/loss", "epoch/train_loss", "epoch/val_loss", "train/samples_per_sec", "time/step_ms"):
            self.assertTrue(all(v > 0 for v in values[tag]), (tag, values[tag]))
        # A run that learns: 4 classes start near ln 4 and the last epoch is better than the first.
        self.assertLess(values["train/loss"][0], 2 * math.log(4), values["train/loss"])
        self.assertLess(values["epoch/train_loss"][-1], values["epoch/train_loss"][0], values["epoch/train_loss"])
        # The cosine schedule falls from 0.1 every window, to 0 at the last update; fp32 keeps
        # a loss scale of 1.
        lr = values["train/learning_rate"]
        self.assertTrue(0 <= lr[-1] < lr[0] <= 0.1 + 1e-6 and lr == sorted(lr, reverse=True), lr)
        self.assertEqual(len(set(lr)), len(lr), lr)
        self.assertEqual(set(values["train/loss_scale"]), {1.0})
        skipped = dict(curves["train/skipped_steps"])
        want = {s: (1.0 if s == skipped_at else 0.0) for s in WINDOW_STEPS}
        self.assertEqual(skipped, want)


class DistJobTest(Case):
    def test_every_worker_and_server_writes_its_curves(self):
        out = self.run_command(
            [sys.executable, LAUNCH, "-n", "2", "-s", "1", "--launcher", "local", TALLY] + TRAIN +
            ["--kv-store", "dist_sync", "--tensorboard", self.board], {"TALLY_TEST_NAN": "1:13"})
        self.assertEqual(sorted(os.listdir(self.board)), ["server-0", "worker-0", "worker-1"], out[-3000:])
        for name in ("worker-0", "worker-1", "server-0"):
            files = os.listdir(os.path.join(self.board, name))
            self.assertEqual(len(files), 1, files)
            self.assertTrue(files[0].startswith("events.out.tfevents."), files)
        # Step 13 is skipped on every worker: the window of steps 11..20 counts it.
        for name in ("worker-0", "worker-1"):
            self.check_worker(os.path.join(self.board, name), skipped_at=20)
        curves = load(os.path.join(self.board, "server-0"))
        self.assertEqual(sorted(curves), sorted(SERVER_TAGS))
        for tag in SERVER_TAGS:
            self.assertEqual([s for s, _ in curves[tag]], list(range(EPOCHS * BATCHES)), tag)
        values = {tag: [v for _, v in points] for tag, points in curves.items()}
        # Each step brings both workers' pushes and takes their pulls: the same bytes each step.
        for tag in ("server/requests", "server/received_mb", "server/sent_mb"):
            self.assertTrue(all(v > 0 for v in values[tag]), (tag, values[tag]))
        self.assertEqual(len(set(values["server/received_mb"])), 1, values["server/received_mb"])
        for tag in ("server/step_ms", "server/sum_ms", "server/update_ms"):
            self.assertTrue(all(0 <= v < 60000 for v in values[tag]), (tag, values[tag]))
        self.assertGreater(sum(values["server/update_ms"]), 0)


class SingleProcessTest(Case):
    def test_one_process_writes_worker_0(self):
        self.run_command([TALLY] + TRAIN + ["--kv-store", "local", "--tensorboard", self.board])
        self.assertEqual(os.listdir(self.board), ["worker-0"])
        self.check_worker(os.path.join(self.board, "worker-0"))

    def test_a_write_that_fails_stops_the_curves_not_the_training(self):
        # Files of this process may not grow past 1000 bytes (RLIMIT_FSIZE, SIGXFSZ ignored so
        # that a write fails with EFBIG instead): the event file takes a few windows.
        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        p = subprocess.run([TALLY] + TRAIN + ["--kv-store", "local", "--tensorboard", self.board], env=env(),
                           capture_output=True, text=True, timeout=240, preexec_fn=limit)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr)[-4000:])
        self.assertIn("Epoch[%d] Time cost=" % (EPOCHS - 1), p.stdout)
        self.assertEqual(p.stderr.count("--tensorboard: "), 1, p.stderr)
        self.assertIn("no more curves are written, training goes on", p.stderr)
        # The whole records before the failure are TensorBoard's to read.
        steps = [s for s, _ in load(os.path.join(self.board, "worker-0")).get("train/loss", [])]
        self.assertTrue(steps, p.stderr)
        self.assertEqual(steps, WINDOW_STEPS[:len(steps)])
        self.assertLess(len(steps), len(WINDOW_STEPS))

    def test_a_folder_that_cannot_be_made_is_named(self):
        blocker = os.path.join(self.tmp.name, "file")
        with open(blocker, "w") as f:
            f.write("not a folder")
        p = subprocess.run([TALLY] + TRAIN + ["--kv-store", "local", "--tensorboard", blocker], env=env(),
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--tensorboard: cannot create the folder %s/worker-0" % blocker, p.stderr)


if __name__ == "__main__":
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
