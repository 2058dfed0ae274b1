"""--elastic's data re-cut through real `tally train` processes (docs/faults.md, "A worker
leaves", "Data."): a dist_sync job of 3 workers and 1 server on synthetic images, each
worker logging the positions it reads (TALLY_TEST_READ_LOG).

- SIGTERM to worker 2 inside an epoch: it leaves, the rest of the epoch is cut over workers
  0 and 1, the epoch gets longer, and every epoch reads each of its examples exactly once
  across the three workers; MXNet's epoch and Speedometer lines follow the longer epoch.
- The same over a RecordIO pack, decoded by the loader from each worker's forecast batches.
- The same, then SIGTERM to worker 0 (the whole job stops at an agreed step with a
  checkpoint) after the leave; `--resume auto` with all three workers again continues the
  epoch, and each epoch, over both runs, reads each example exactly once; without --elastic
  that checkpoint is refused, naming it.
- Without a change, a SIGTERM to worker 0 inside an epoch and --resume auto end with the
  uninterrupted run's weights, bit for bit.
- Worker 2 leaves, then a new worker 2 process joins the running job (TALLY_JOIN=1): it reads
  pads until its change applies, then its part, and every epoch reads each example once.
- The job stopped after a leave and resumed (--resume auto) inside the epoch; in the resumed
  run (whose servers count its steps from its start) worker 2 leaves: each epoch, over both
  runs, reads each example once. Then a new worker 2 joins with the same command line: it
  follows the job's cut from where the resumed run started (PREFIX-run.json).

Usage: python3 elastic_data_test.py TALLY_BINARY [unittest args]
"""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
import fault_job  # noqa: E402 (tests/fault/fault_job.py)
from fault_job import FaultCase, read, tagged_pids  # noqa: E402

WORKERS = 3
BATCH, PER_WORKER, EPOCHS = 8, 320, 3  # 40 steps an epoch with 3 workers
EXAMPLES = WORKERS * PER_WORKER
STEPS = PER_WORKER // BATCH
MODEL = ["--kv-store", "dist_sync", "--num-layers", "8", "--image-shape", "3,8,8", "--num-classes", "4",
         "--batch-size", str(BATCH), "--num-examples", str(PER_WORKER), "--num-epochs", str(EPOCHS),
         "--disp-batches", "1", "--num-val-examples", "16", "--seed", "3"]
BOUND_S = 240  # every wait: generous, for a machine 10x slower


def reads_of(directory):
    """{rank: [(step, epoch, index, reads, pad, positions)]} from the workers' read logs."""
    out = {}
    for name in os.listdir(directory):
        m = re.match(r"reads-(\d+)\.txt$", name)
        if not m:
            continue
        rows = []
        for line in read(os.path.join(directory, name)).splitlines():
            f = [int(x) for x in line.split()]
            rows.append((f[0], f[1], f[2], f[3], f[4], f[5:]))
        out[int(m.group(1))] = rows
    return out


def visits(reads, steps=None):
    """{epoch: Counter(position)} of what was read (pads left out), from steps in `steps`."""
    seen = collections.defaultdict(collections.Counter)
    for rows in reads.values():
        for step, epoch, _, reading, pad, positions in rows:
            if reading and (steps is None or step in steps):
                seen[epoch].update(positions[:len(positions) - pad])
    return seen


class ElasticDataTest(FaultCase):
    def launch(self, name, extra=(), reads_dir=None):
        path = os.path.join(self.dir, name + ".log")
        env = {"TALLY_TEST_READ_LOG": reads_dir} if reads_dir else {}
        with open(path, "w") as out:
            proc = subprocess.Popen([sys.executable, fault_job.LAUNCH, "-n", str(WORKERS), "-s", "1", "--elastic",
                                     "--grace", "10", fault_job.TALLY, "train"] + MODEL + list(extra),
                                    env=self.environ(env), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.addCleanup(self.stop_launcher, proc)
        return proc, path

    def wait_for(self, what, done, proc, path):
        deadline = time.time() + BOUND_S
        while not done():
            if proc.poll() is not None:
                self.fail("the job ended (%s) before %s:\n%s" % (proc.returncode, what, read(path)[-4000:]))
            if time.time() > deadline:
                self.fail("no %s within %d s:\n%s" % (what, BOUND_S, read(path)[-4000:]))
            time.sleep(0.01)

    def pid_of_worker(self, rank):
        deadline = time.time() + BOUND_S
        while time.time() < deadline:
            pids = tagged_pids(self.tag, "worker", rank)
            if len(pids) == 1:
                return pids[0]
            time.sleep(0.05)
        self.fail("no single process for worker %d" % rank)

    def last_step(self, reads_dir, rank):
        rows = reads_of(reads_dir).get(rank, [])
        return rows[-1][0] if rows else -1

    def finish(self, proc, path, codes=(0,)):
        try:
            code = proc.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            self.fail("launch.py still running after %d s:\n%s" % (BOUND_S, read(path)[-4000:]))
        out = read(path)
        self.assertIn(code, codes, out[-6000:])
        return out

    def leave_worker_2(self, proc, path, reads_dir):
        """SIGTERM to worker 2 once it has read 5 batches."""
        pid = self.pid_of_worker(2)
        self.wait_for("worker 2's 5th batch", lambda: self.last_step(reads_dir, 2) >= 4, proc, path)
        os.kill(pid, signal.SIGTERM)

    def assertEachOnce(self, seen, epochs):
        for epoch in epochs:
            counts = seen.get(epoch, collections.Counter())
            twice = sorted(p for p, c in counts.items() if c > 1)
            missed = sorted(set(range(EXAMPLES)) - set(counts))
            self.assertEqual((twice[:10], missed[:10]), ([], []), "epoch %d: read twice, never read" % epoch)

    def test_a_leave_inside_an_epoch_reads_each_example_once(self):
        reads_dir = os.path.join(self.dir, "reads")
        os.makedirs(reads_dir)
        proc, path = self.launch("run", reads_dir=reads_dir)
        self.leave_worker_2(proc, path, reads_dir)
        out = self.finish(proc, path)
        reads = reads_of(reads_dir)
        left_after = reads[2][-1]
        print("worker 2 read its last batch at step %d (epoch %d, batch %d)" % left_after[:3])
        self.assertEachOnce(visits(reads), range(EPOCHS))
        # The epoch of the leave got longer than 20 steps; worker 0's lines say so.
        epoch = left_after[1]
        steps = [r for r in reads[0] if r[1] == epoch]
        if left_after[2] + 1 < STEPS:
            self.assertGreater(len(steps), STEPS)
            self.assertRegex(out, r"\[worker 0\] Epoch\[%d\] Batch \[%d-%d\]" % (epoch, len(steps) - 1, len(steps)))
        for e in range(EPOCHS):
            self.assertRegex(out, r"\[worker 0\] Epoch\[%d\] Train-accuracy=[0-9.]+\n" % e)
        # The next epoch is cut over the two live workers from its start.
        later = [r for r in reads[0] if r[1] == epoch + 1]
        if later:
            self.assertEqual(len(later), EXAMPLES // (2 * BATCH))

    def test_a_leave_over_a_recordio_pack_reads_each_record_once(self):
        """The same over a RecordIO pack of 120 images (40 a worker, 5 steps an epoch): the
        loader decodes each worker's forecast batches and follows the re-cut."""
        images = os.path.join(self.dir, "images")
        pack = os.path.join(self.dir, "pack")
        for command in ([fault_job.TALLY, "make-data", "synthetic-jpeg", "--out", images, "--classes", "4",
                         "--per-class", "30"],
                        [fault_job.TALLY, "im2rec", "--list", "--recursive", pack, images],
                        [fault_job.TALLY, "im2rec", pack, images]):
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=BOUND_S)
            self.assertEqual(done.returncode, 0, done.stdout[-3000:])
        reads_dir = os.path.join(self.dir, "reads")
        os.makedirs(reads_dir)
        proc, path = self.launch("run", ["--data-train", pack + ".rec", "--image-shape", "3,16,16",
                                         "--num-epochs", "8"], reads_dir=reads_dir)
        pid = self.pid_of_worker(2)
        self.wait_for("worker 2's 7th batch", lambda: self.last_step(reads_dir, 2) >= 6, proc, path)
        os.kill(pid, signal.SIGTERM)
        self.finish(proc, path)
        reads = reads_of(reads_dir)
        print("worker 2 read its last batch at step %d (epoch %d, batch %d)" % reads[2][-1][:3])
        seen = visits(reads)
        for epoch in range(8):
            counts = seen.get(epoch, collections.Counter())
            self.assertEqual((len(counts), max(counts.values(), default=0)), (120, 1), "epoch %d" % epoch)

    def test_a_checkpoint_after_a_leave_resumes_the_epoch_reading_each_example_once(self):
        first_dir, second_dir = os.path.join(self.dir, "reads1"), os.path.join(self.dir, "reads2")
        os.makedirs(first_dir)
        os.makedirs(second_dir)
        prefix = os.path.join(self.dir, "ckpt", "m")
        from_step = self.stop_after_a_leave(prefix, first_dir)
        # Without --elastic the position inside the epoch means nothing: refused, naming the file.
        alone = [a if a != "dist_sync" else "device" for a in MODEL]
        refused = subprocess.run([fault_job.TALLY, "train"] + alone + ["--model-prefix", prefix, "--resume", "auto"],
                                 env=self.environ(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=BOUND_S, text=True)
        self.assertNotEqual(refused.returncode, 0, refused.stdout[-3000:])
        self.assertRegex(refused.stdout, r"m-0000\.params was taken inside an epoch of an --elastic run: resume it "
                                         r"with --elastic")
        resumed, second = self.launch("resume", ["--model-prefix", prefix, "--resume", "auto"], reads_dir=second_dir)
        again = self.finish(resumed, second)
        m = re.search(r"resuming from \S+: epoch (\d+), batch (\d+), step (\d+)", again)
        self.assertIsNotNone(m, again[-4000:])
        epoch, batch, step = (int(g) for g in m.groups())
        print("left from step %d; stopped and resumed at epoch %d, batch %d, step %d" % (from_step, epoch, batch, step))
        self.assertGreater(step, from_step)
        self.assertEqual(epoch, 0, "the stop came after the epoch of the leave")
        first = reads_of(first_dir)
        self.assertLess(max(r[0] for rows in first.values() for r in rows), step, "the first run read past its stop")
        seen = visits(first)
        for e, counts in visits(reads_of(second_dir)).items():
            seen[e].update(counts)
        self.assertEachOnce(seen, range(EPOCHS))
        # The resumed run read with all three workers from its first step.
        self.assertEqual(reads_of(second_dir)[2][0][0], step)

    def stop_after_a_leave(self, prefix, reads_dir):
        """Worker 2 leaves inside epoch 0, then SIGTERM to worker 0 stops the whole job 3 steps
        later with its checkpoint; returns the leave's from_step."""
        proc, path = self.launch("run", ["--model-prefix", prefix], reads_dir=reads_dir)
        self.leave_worker_2(proc, path, reads_dir)
        membership = os.path.join(os.path.dirname(prefix), "membership.jsonl")
        self.wait_for("membership.jsonl", lambda: os.path.exists(membership) and read(membership).strip(), proc, path)
        from_step = json.loads(read(membership).splitlines()[0])["from_step"]
        self.wait_for("3 steps after the leave", lambda: self.last_step(reads_dir, 0) >= from_step + 3, proc, path)
        os.kill(self.pid_of_worker(0), signal.SIGTERM)
        out = self.finish(proc, path, codes=(0, 75))
        self.assertRegex(out, r"\[worker 0\] tally train: stopped on SIGTERM at the job's agreed step, the checkpoint saved")
        return from_step

    def leave_in_a_resumed_run(self, first_dir, second_dir):
        """The job stopped after a leave (stop_after_a_leave), resumed with --resume auto, and
        worker 2 of the resumed run leaves after its 3rd batch (SIGTERM). Returns the resumed
        launcher and its log, worker 2's command line and environment, the resume's step and
        the leaver's last step."""
        os.makedirs(first_dir)
        os.makedirs(second_dir)
        prefix = os.path.join(self.dir, "ckpt", "m")
        self.stop_after_a_leave(prefix, first_dir)
        proc, path = self.launch("resume", ["--model-prefix", prefix, "--resume", "auto"], reads_dir=second_dir)
        pid = self.pid_of_worker(2)
        argv, env = self.process_of(pid)
        resume = r"resuming from \S+: epoch \d+, batch \d+, step (\d+)"
        self.wait_for("the resume", lambda: re.search(resume, read(path)), proc, path)
        resumed_at = int(re.search(resume, read(path)).group(1))
        self.wait_for("worker 2's 3rd batch of the resumed run",
                      lambda: self.last_step(second_dir, 2) >= resumed_at + 2, proc, path)
        os.kill(pid, signal.SIGTERM)
        self.wait_for("worker 2's leave", lambda: "worker 2 on localhost left the job" in read(path), proc, path)
        return proc, path, argv, env, resumed_at, self.last_step(second_dir, 2)

    def assertEachOnceOverBoth(self, first_dir, second_dir):
        seen = visits(reads_of(first_dir))
        for e, counts in visits(reads_of(second_dir)).items():
            seen[e].update(counts)
        self.assertEachOnce(seen, range(EPOCHS))

    def test_a_leave_in_a_run_resumed_after_a_leave_reads_each_example_once(self):
        """The resumed run's servers count its steps from its start: its workers' data cut
        takes the leave at the job's step (the checkpoint's step after it)."""
        first_dir, second_dir = os.path.join(self.dir, "reads1"), os.path.join(self.dir, "reads2")
        proc, path, _, _, resumed_at, left_at = self.leave_in_a_resumed_run(first_dir, second_dir)
        out = self.finish(proc, path)
        m = re.search(r"membership 1: worker 2 left before step (\d+).*from step (\d+)", out)
        self.assertIsNotNone(m, out[-4000:])
        print("resumed at step %d; worker 2 left after step %d (the resumed run's servers: from step %s)" %
              (resumed_at, left_at, m.group(2)))
        self.assertEqual(int(m.group(1)), int(m.group(2)) + resumed_at)
        self.assertEachOnceOverBoth(first_dir, second_dir)

    def test_a_joiner_into_a_resumed_run_follows_the_cut_from_where_the_run_started(self):
        """Then a new worker 2 joins with the same command line (--resume auto, --model-prefix):
        it follows the job's cut from where the resumed run started (PREFIX-run.json)."""
        first_dir, second_dir = os.path.join(self.dir, "reads1"), os.path.join(self.dir, "reads2")
        proc, path, argv, env, resumed_at, left_at = self.leave_in_a_resumed_run(first_dir, second_dir)
        join_log = os.path.join(self.dir, "joiner.log")
        joiner = self.start_joiner(argv, env, join_log)
        out = self.finish(proc, path)
        self.assertEqual(joiner.wait(timeout=BOUND_S), 0, read(join_log)[-4000:])
        m = re.search(r"membership 2: worker 2 joined.*from step (\d+)", out)
        self.assertIsNotNone(m, out[-4000:])
        joined = re.search(r"worker 2 follows the job's data cut from \S+m-run\.json: the job's run started at epoch "
                           r"\d+, batch \d+, step (\d+); this worker's first step is the job's step (\d+)",
                           read(join_log))
        self.assertIsNotNone(joined, read(join_log)[-4000:])
        # The resumed run's servers count its steps from its start: the job's step is the
        # checkpoint's step after it.
        first = int(m.group(1)) + resumed_at
        print("resumed at step %d; worker 2 left after step %d and joined from the job's step %d" %
              (resumed_at, left_at, first))
        self.assertEqual((int(joined.group(1)), int(joined.group(2))), (resumed_at, first))
        reads = reads_of(second_dir)
        self.assertTrue(any(r[3] for r in reads[2] if r[0] > left_at), "the joiner never read its part")
        self.assertEachOnceOverBoth(first_dir, second_dir)

    def test_a_resume_without_a_change_ends_with_the_uninterrupted_runs_weights(self):
        """--elastic without a change: SIGTERM to worker 0 inside epoch 0, --resume auto, and
        the final checkpoint equals an uninterrupted run's, bit for bit (the cut, the lr and
        the synthetic examples go on as they were)."""
        ref = os.path.join(self.dir, "ref", "m")
        proc, path = self.launch("ref", ["--model-prefix", ref])
        self.finish(proc, path)
        reads_dir = os.path.join(self.dir, "reads")
        os.makedirs(reads_dir)
        prefix = os.path.join(self.dir, "run", "m")
        proc, path = self.launch("run", ["--model-prefix", prefix], reads_dir=reads_dir)
        self.wait_for("worker 0's 10th batch", lambda: self.last_step(reads_dir, 0) >= 9, proc, path)
        os.kill(self.pid_of_worker(0), signal.SIGTERM)
        self.finish(proc, path, codes=(0, 75))
        resumed, second = self.launch("resume", ["--model-prefix", prefix, "--resume", "auto"])
        again = self.finish(resumed, second)
        m = re.search(r"resuming from \S+: epoch (\d+), batch (\d+), step (\d+)", again)
        self.assertIsNotNone(m, again[-4000:])
        print("resumed at epoch %s, batch %s, step %s" % m.groups())
        final = "-%04d" % EPOCHS
        self.assertSameCheckpoint(ref + final, prefix + final)

    def test_a_joiner_reads_pads_until_its_change_applies_and_each_example_once(self):
        """Worker 2 leaves (SIGTERM), then a new worker 2 process joins (its environment plus
        TALLY_JOIN=1): it reads pads at its first two steps, its part from its join's step + 2,
        and every epoch reads each example once across the three processes of ranks 0..2."""
        reads_dir = os.path.join(self.dir, "reads")
        os.makedirs(reads_dir)
        proc, path = self.launch("run", ["--num-epochs", "6"], reads_dir=reads_dir)
        pid = self.pid_of_worker(2)
        argv, env = self.process_of(pid)
        self.wait_for("worker 2's 5th batch", lambda: self.last_step(reads_dir, 2) >= 4, proc, path)
        os.kill(pid, signal.SIGTERM)
        self.wait_for("worker 2's leave", lambda: "worker 2 on localhost left the job" in read(path), proc, path)
        left_at = self.last_step(reads_dir, 2)
        join_log = os.path.join(self.dir, "joiner.log")
        joiner = self.start_joiner(argv, env, join_log)
        out = self.finish(proc, path)
        self.assertEqual(joiner.wait(timeout=BOUND_S), 0, read(join_log)[-4000:])
        m = re.search(r"membership 2: worker 2 joined.*from step (\d+)", out)
        self.assertIsNotNone(m, out[-4000:])
        from_step = int(m.group(1))
        reads = reads_of(reads_dir)
        joined = [r for r in reads[2] if r[0] > left_at]
        print("worker 2 left after step %d and joined from step %d" % (left_at, from_step))
        # Its change applies at from_step + 2, or at from_step + 1 where a cut ends there.
        first_read = next(r[0] for r in joined if r[3])
        self.assertIn(first_read, (from_step + 1, from_step + 2))
        self.assertEqual([(r[0], r[3], r[4]) for r in joined if r[0] < first_read],
                         [(s, 0, BATCH) for s in range(from_step, first_read)])
        self.assertEachOnce(visits(reads), range(6))


if __name__ == "__main__":
    fault_job.main()
