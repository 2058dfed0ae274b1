"""Elastic workers (--elastic; docs/faults.md, "Elastic workers"): a 4-worker, 2-server
dist_sync job through tools/launch.py --elastic over the secure transport.

- kill -9 of worker 2 near step 30 of 120: the scheduler's dead timeout makes it leave at a
  step it decides with the servers; the job finishes with 3 workers and exits 0, and
  membership.jsonl has the change. `--membership-replay` of that file, without a fault,
  ends with the same final weights and optimizer state, bit for bit.
- SIGTERM to worker 2 alone: it leaves at its next step boundary, exits 0, and the launcher
  says it left; the rest go on, and the replay gives the same weights again.
- worker 2's pushes of step 30 lost on the way to server 1 (TALLY_TEST_DROP_PUSH), then
  kill -9: step 30 is skipped on both servers, and the replay skips it too; also with
  --server-replicas 1, and with 2bit gradient compression.
- SIGTERM to the whole job: it stops at an agreed step with a checkpoint, as without
  --elastic.
- kill -9 of worker 2 at step 30, then a new worker 2 process, started by the test with the
  killed one's environment and TALLY_JOIN=1, joins the running job near step 70: the job
  finishes with 4 live workers, every process exits 0, and the replay (where worker 2's
  process sits out from its leave and joins again itself) ends with the same weights; the
  same under dist_device_sync.
- with --server-replicas 1 and a spare server: kill -9 of server 0 near step 20 (the spare
  takes its place and receives its slices), of worker 2 near step 40, and once it has left,
  of server 1 (the spare alone serves the rest): the job finishes with 3 workers and exits
  0, and the replay (same flags, no server killed: a server's death changes no weight) ends
  with the same weights.

Usage: python3 elastic_test.py TALLY_BINARY [unittest args]
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import fault_job
from fault_job import FaultCase, read, tagged_pids

WORKERS, SERVERS = 4, 2
# Each worker: 960 synthetic examples in batches of 16, 60 steps an epoch, 2 epochs: 120 steps
# while all 4 are live (an epoch re-cut over fewer workers after a change holds more).
EPOCHS = 2
MODEL = ["--kv-store", "dist_sync", "--num-layers", "8", "--image-shape", "3,16,16", "--num-classes", "4",
         "--batch-size", "16", "--num-examples", "960", "--num-epochs", str(EPOCHS), "--disp-batches", "1",
         "--num-val-examples", "32", "--seed", "5", "--optimizer", "nag", "--lr-scheduler", "cosine"]
FINAL = "-%04d" % EPOCHS
VICTIM = 2


def worker0_step(text, rank=0):
    """Steps worker 0 (or `rank`) has done: one Speedometer line a step (--disp-batches 1).
    Epochs re-cut over the live workers after a change may hold more batches than the first's."""
    return len(re.findall(r"^\[worker %d\] Epoch\[(\d+)\] Batch \[\d+-(\d+)\]" % rank, text, re.M))


class ElasticTest(FaultCase):
    def launch(self, name, extra=(), env=None, launch_args=()):
        prefix = os.path.join(self.dir, name, "m")
        path = os.path.join(self.dir, name + ".log")
        command = [fault_job.TALLY, "train"] + MODEL + ["--model-prefix", prefix] + list(extra)
        with open(path, "w") as out:
            proc = subprocess.Popen([sys.executable, fault_job.LAUNCH, "-n", str(WORKERS), "-s", str(SERVERS),
                                     "--elastic", "--grace", "10"] + list(launch_args) + command,
                                    env=self.environ(env),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.addCleanup(self.stop_launcher, proc)
        return proc, path, prefix

    def wait_step(self, proc, path, step, timeout=120, rank=0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            done = worker0_step(read(path), rank)
            if done >= step:
                return done
            if proc.poll() is not None:
                self.fail("the job ended (%s) before step %d:\n%s" % (proc.returncode, step, read(path)[-4000:]))
            time.sleep(0.01)
        self.fail("no step %d within %d s:\n%s" % (step, timeout, read(path)[-4000:]))

    def victim_pid(self, rank=VICTIM):
        deadline = time.time() + 30
        while time.time() < deadline:
            pids = tagged_pids(self.tag, "worker", rank)
            if len(pids) == 1:
                return pids[0]
            time.sleep(0.05)
        self.fail("no single process for worker %d" % rank)

    def wait_blocked(self, pid, timeout=60):
        """Waits until process `pid` stops using CPU (its time unchanged over 0.3 s): a worker
        that has sent its pushes of a step and waits for answers that never come."""
        def cpu():
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        deadline = time.time() + timeout
        last = cpu()
        while time.time() < deadline:
            time.sleep(0.3)
            now = cpu()
            if now == last:
                return
            last = now
        self.fail("worker %d still busy after %d s" % (VICTIM, timeout))

    def longest_stall(self, proc, path, since_step):
        """Seconds of worker 0's longest wait between two of its steps from `since_step`
        until the job ends: after a kill, the dead timeout plus the change's agreement."""
        longest, last_step, last_at = 0.0, since_step, time.time()
        while proc.poll() is None:
            step = worker0_step(read(path))
            now = time.time()
            if step > last_step:
                longest = max(longest, now - last_at)
                last_step, last_at = step, now
            time.sleep(0.005)
        return longest

    def finish(self, proc, path, timeout=240):
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail("launch.py still running after %d s (a hang):\n%s" % (timeout, read(path)[-4000:]))
        out = read(path)
        self.assertEqual(code, 0, out[-6000:])
        return out

    def assertFinished(self, out, rank=0):
        """Worker 0 (or `rank`) trained every epoch to its end (their length in batches may change)."""
        self.assertLogHas(out, r"\[worker %d\] Epoch\[%d\] Train-accuracy" % (rank, EPOCHS - 1))

    def changes(self, prefix):
        with open(os.path.join(os.path.dirname(prefix), "membership.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]

    def replay_matches(self, prefix, changes, launch_args=(), extra=(), victim=VICTIM):
        """--membership-replay of the run's file: the same changes at the same steps, and the
        same final checkpoint bit for bit."""
        file = os.path.join(self.dir, "changes.jsonl")
        with open(file, "w") as f:
            f.writelines(json.dumps(c) + "\n" for c in changes)
        proc, path, replay = self.launch("replay", ["--membership-replay", file] + list(extra), launch_args=launch_args)
        out = self.finish(proc, path)
        self.assertLogHas(out, r"worker %d left the job" % victim)
        again = self.changes(replay)
        def key(c):
            return (c["from_step"], c.get("left"), c.get("joined"), c["live"])
        self.assertEqual([key(c) for c in again], [key(c) for c in changes], "\n".join(
            l for l in out.splitlines() if "membership" in l or "worker %d" % victim in l)[-6000:])
        self.assertSameCheckpoint(prefix + FINAL, replay + FINAL)
        return out

    def test_killed_worker_leaves_and_replay_is_bit_identical(self):
        proc, path, prefix = self.launch("run")
        pid = self.victim_pid()
        at = self.wait_step(proc, path, 30)
        os.kill(pid, signal.SIGKILL)
        print("kill -9 worker %d at worker 0's step %d" % (VICTIM, at))
        stall = self.longest_stall(proc, path, at)
        out = self.finish(proc, path)
        print("worker 0's longest wait between steps after the kill: %.2f s (dead timeout %.1f s)" % (
            stall, fault_job.DEAD_TIMEOUT_S))
        self.assertLogHas(out, r"worker %d on \S+ was killed by signal 9 \(SIGKILL\); it leaves the job" % VICTIM)
        self.assertLogHas(out, r"membership 1: worker %d stopped answering" % VICTIM)
        changes = self.changes(prefix)
        self.assertEqual(len(changes), 1, changes)
        self.assertEqual(changes[0]["left"], [VICTIM])
        self.assertEqual(changes[0]["live"], [0, 1, 3])
        self.assertGreaterEqual(changes[0]["from_step"], at - 2)
        self.assertLess(changes[0]["from_step"], worker0_step(out))
        self.assertFinished(out)
        self.replay_matches(prefix, changes)

    def push_lost_on_one_server(self, launch_args=(), extra=()):
        """Server 1 loses worker 2's pushes from step 30 on (TALLY_TEST_DROP_PUSH); server 0
        applies step 30 with them. Once worker 2 is killed, step 30 counts its push nowhere:
        rolled back on server 0, skipped on server 1; the replay, without the fault, skips the
        same step and ends with the same weights."""
        proc, path, prefix = self.launch("run", extra, env={"TALLY_TEST_DROP_PUSH": "1:%d:30" % VICTIM},
                                         launch_args=launch_args)
        pid = self.victim_pid()
        deadline = time.time() + 120
        while "dropping worker %d's pushes of step 30" % VICTIM not in read(path):
            if time.time() > deadline or proc.poll() is not None:
                self.fail("server 1 dropped nothing:\n" + read(path)[-4000:])
            time.sleep(0.02)
        self.wait_blocked(pid)
        os.kill(pid, signal.SIGKILL)
        out = self.finish(proc, path)
        self.assertLogHas(out, r"step 30 is skipped everywhere")
        changes = self.changes(prefix)
        self.assertEqual(len(changes), 1, changes)
        self.assertEqual((changes[0]["from_step"], changes[0].get("skip_step")), (30, 30), changes)
        self.assertFinished(out)
        self.replay_matches(prefix, changes, launch_args, extra)

    def test_a_push_lost_on_one_server_skips_its_step_everywhere(self):
        self.push_lost_on_one_server()

    def test_the_same_with_server_replicas(self):
        """With --server-replicas 1 each slice's backup follows its primary: only the primary
        reports on it, and the backup rolls back or skips the step as the primary does."""
        self.push_lost_on_one_server(["--server-replicas", "1"])

    def test_the_same_with_2bit_gradient_compression(self):
        """Under 2bit pushes the skipped step is dropped whole on both servers, and each
        worker's residual follows what it sent, in the run as in its replay."""
        self.push_lost_on_one_server(extra=["--gradient-compression", "2bit", "--gc-threshold", "0.5"])

    def test_a_server_replaced_by_a_spare_then_a_worker_killed(self):
        """Server 0 killed under --server-replicas 1 --spare-servers 1: the spare (server 2)
        takes its place; once it holds the slices, worker 2 is killed and leaves; then server
        1 is killed, and the spare alone ends the job. The replay, with the same flags and no
        server killed, ends with the same weights."""
        spares = ["--server-replicas", "1", "--spare-servers", "1"]
        proc, path, prefix = self.launch("run", launch_args=spares)
        pid = self.victim_pid()
        at = self.wait_step(proc, path, 20)
        os.kill(self.pid_of("server", 0), signal.SIGKILL)
        print("kill -9 server 0 at worker 0's step %d" % at)
        deadline = time.time() + 120
        while not re.search(r"\[scheduler\] .*server 2 .* holds the slices of the place it took", read(path)):
            if time.time() > deadline or proc.poll() is not None:
                self.fail("the spare never became ready:\n" + read(path)[-4000:])
            time.sleep(0.05)
        at = self.wait_step(proc, path, max(40, worker0_step(read(path)) + 2))
        os.kill(pid, signal.SIGKILL)
        print("kill -9 worker %d at worker 0's step %d" % (VICTIM, at))
        # Once the leave is in force, server 1 too: the spare alone serves the rest, so the
        # final weights are its own, stepped over the live workers only.
        left = self.wait_step(proc, path, at + 10, timeout=240)
        self.assertLogHas(read(path), r"membership 1: worker %d stopped answering" % VICTIM)
        os.kill(self.pid_of("server", 1), signal.SIGKILL)
        print("kill -9 server 1 at worker 0's step %d" % left)
        out = self.finish(proc, path)
        self.assertLogHas(out, r"\[worker 0\] .*server 0 .* stopped answering; its slices go on .*spare server 2 .* "
                               r"takes its place")
        self.assertLogHas(out, r"\[worker 0\] .*server 1 .* stopped answering; its slices go on")
        self.assertLogHas(out, r"membership 1: worker %d stopped answering" % VICTIM)
        self.assertNotIn("restart", out)
        changes = self.changes(prefix)
        self.assertEqual([(c["left"], c["live"]) for c in changes], [([VICTIM], [0, 1, 3])], changes)
        self.assertGreaterEqual(changes[0]["from_step"], at - 2)
        self.assertFinished(out)
        self.replay_matches(prefix, changes, spares)

    def test_sigterm_worker_leaves_cleanly(self):
        proc, path, prefix = self.launch("run")
        pid = self.victim_pid()
        at = self.wait_step(proc, path, 30)
        os.kill(pid, signal.SIGTERM)
        out = self.finish(proc, path)
        self.assertLogHas(out, r"worker %d on \S+ left the job \(exited 0 after its SIGTERM\)" % VICTIM)
        self.assertLogHas(out, r"\[worker %d\] tally train: worker %d left the job before step \d+" % (VICTIM, VICTIM))
        changes = self.changes(prefix)
        self.assertEqual(len(changes), 1, changes)
        self.assertEqual(changes[0]["left"], [VICTIM])
        self.assertIn("SIGTERM", changes[0]["why"])
        self.assertGreaterEqual(changes[0]["from_step"], at - 2)
        self.assertFinished(out)
        self.replay_matches(prefix, changes)

    def test_a_new_worker_joins_after_a_kill_and_replay_is_bit_identical(self):
        self.join_after_kill()

    def test_the_same_join_under_dist_device_sync(self):
        """dist_device_sync on CPU workers: the same store and steps (docs/faults.md)."""
        self.join_after_kill(["--kv-store", "dist_device_sync"])

    def join_after_kill(self, extra=()):
        """kill -9 of worker 2 at step 30; a new worker 2 process, started with the killed
        one's command line and environment plus TALLY_JOIN=1 once worker 0 is at step 50,
        joins; then the replay of membership.jsonl."""
        proc, path, prefix = self.launch("run", extra)
        pid = self.victim_pid()
        argv, env = self.process_of(pid)
        at = self.wait_step(proc, path, 30)
        os.kill(pid, signal.SIGKILL)
        self.wait_step(proc, path, 50, timeout=240)
        self.assertLogHas(read(path), r"membership 1: worker %d stopped answering" % VICTIM)
        join_path = os.path.join(self.dir, "joiner.log")
        joiner = self.start_joiner(argv, env, join_path)
        out = self.finish(proc, path)
        try:
            code = joiner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("the joiner still runs after the job's end:\n" + read(join_path)[-4000:])
        joined = read(join_path)
        self.assertEqual(code, 0, joined[-6000:])
        self.assertLogHas(joined, r"tally train: worker %d joined the job at step \d+ \(--elastic\)" % VICTIM)
        self.assertLogHas(joined, r"tally train: worker %d's first step \(\d+\) done" % VICTIM)
        self.assertLogHas(out, r"membership 2: worker %d joined" % VICTIM)
        changes = self.changes(prefix)
        self.assertEqual([(c.get("left"), c.get("joined"), c["live"]) for c in changes],
                         [([VICTIM], None, [0, 1, 3]), (None, [VICTIM], [0, 1, 2, 3])], changes)
        self.assertGreaterEqual(changes[0]["from_step"], at - 2)
        self.assertGreater(changes[1]["from_step"], 50)
        self.assertLess(changes[1]["from_step"], worker0_step(out))
        step = int(re.search(r"joined the job at step (\d+)", joined).group(1))
        self.assertEqual(step, changes[1]["from_step"])
        print("worker %d left from step %d, joined again from step %d" % (VICTIM, changes[0]["from_step"], step))
        print(re.search(r"joined the job at step .*", joined).group(0))
        self.assertFinished(out)
        self.assertLogHas(joined, r"Epoch\[%d\] Train-accuracy" % (EPOCHS - 1))
        again = self.replay_matches(prefix, changes, extra=extra)
        self.assertLogHas(again, r"\[worker %d\] tally train: worker %d joined the job at step %d" % (VICTIM, VICTIM, step))

    def saved_by(self, text, prefix, epoch):
        """The ranks whose output says they saved checkpoint `epoch` of prefix."""
        line = r"\[worker (\d+)\] Saved checkpoint to \"%s\"" % re.escape(prefix + "-%04d.params" % epoch)
        return sorted(int(r) for r in re.findall(line, text))

    def test_killed_worker_0_leaves_and_the_lead_passes_to_worker_1(self):
        """kill -9 of worker 0 near step 30: it leaves as any worker does; worker 1, the
        lowest live rank, leads from the change's step: it writes the checkpoints; the job
        finishes with 3 workers and exits 0, and the replay (worker 0 leaving before the
        recorded step) ends with the same weights, bit for bit."""
        proc, path, prefix = self.launch("run")
        pid = self.victim_pid(0)
        at = self.wait_step(proc, path, 30, rank=1)
        os.kill(pid, signal.SIGKILL)
        print("kill -9 worker 0 at worker 1's step %d" % at)
        out = self.finish(proc, path)
        self.assertLogHas(out, r"worker 0 on \S+ was killed by signal 9 \(SIGKILL\); it leaves the job")
        self.assertLogHas(out, r"membership 1: worker 0 stopped answering")
        changes = self.changes(prefix)
        self.assertEqual([(c["left"], c["live"]) for c in changes], [([0], [1, 2, 3])], changes)
        self.assertGreaterEqual(changes[0]["from_step"], at - 2)
        self.assertFinished(out, rank=1)
        for epoch in range(1, EPOCHS + 1):
            self.assertEqual(self.saved_by(out, prefix, epoch), [1], "checkpoint %d" % epoch)
        self.assertLatestLoads(prefix)
        # The cosine schedule's rate changes every step: after worker 0, the others' SET_LR.
        self.assertNotRegex(out, r"\[server \d\] .*refused")
        again = self.replay_matches(prefix, changes, victim=0)
        self.assertEqual(self.saved_by(again, os.path.join(self.dir, "replay", "m"), EPOCHS), [1])

    def test_worker_0_killed_then_a_new_worker_0_joins_and_leads_again(self):
        """kill -9 of worker 0 at step 30; a new worker 0 process (the killed one's command
        line and environment plus TALLY_JOIN=1) joins once worker 1 is at step 50, gets the
        loss scale from worker 1, the lead before its join (LOSS_SCALE goes to every joiner
        under dist_sync: on these CPU workers the scale is 1, fp16 needs GPUs), and leads from
        its join's step: the final checkpoint is its own. The job ends with 4 workers, and the
        replay ends with the same weights."""
        proc, path, prefix = self.launch("run")
        pid = self.victim_pid(0)
        argv, env = self.process_of(pid)
        at = self.wait_step(proc, path, 30, rank=1)
        os.kill(pid, signal.SIGKILL)
        self.wait_step(proc, path, 50, timeout=240, rank=1)
        self.assertLogHas(read(path), r"membership 1: worker 0 stopped answering")
        join_path = os.path.join(self.dir, "joiner.log")
        joiner = self.start_joiner(argv, env, join_path)
        out = self.finish(proc, path)
        try:
            code = joiner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("the joiner still runs after the job's end:\n" + read(join_path)[-4000:])
        joined = read(join_path)
        self.assertEqual(code, 0, joined[-6000:])
        step = int(re.search(r"tally train: worker 0 joined the job at step (\d+) \(--elastic\)", joined).group(1))
        self.assertLogHas(joined, r"worker 1's loss scale for step %d" % step)
        self.assertNotIn("refused", joined)
        changes = self.changes(prefix)
        self.assertEqual([(c.get("left"), c.get("joined"), c["live"]) for c in changes],
                         [([0], None, [1, 2, 3]), (None, [0], [0, 1, 2, 3])], changes)
        self.assertEqual(step, changes[1]["from_step"])
        self.assertFinished(out, rank=1)
        self.assertLogHas(joined, r"Epoch\[%d\] Train-accuracy" % (EPOCHS - 1))
        self.assertRegex(joined, r"Saved checkpoint to \"%s\"" % re.escape(prefix + FINAL + ".params"))
        self.assertEqual(self.saved_by(out, prefix, EPOCHS), [], "the final checkpoint is the new worker 0's")
        again = self.replay_matches(prefix, changes, victim=0)
        self.assertLogHas(again, r"\[worker 0\] tally train: worker 0 joined the job at step %d" % step)

    def test_after_worker_0_died_a_sigterm_to_the_job_stops_it_with_the_new_leads_checkpoint(self):
        """The stop agreement follows the lead: once worker 0 was killed and its leave decided,
        a SIGTERM to the whole job makes worker 1 (the lead now) ask for the stop; every worker
        stops at the agreed step, worker 1 saves the checkpoint there and says so, and it loads."""
        proc, path, prefix = self.launch("run")
        pid = self.victim_pid(0)
        self.wait_step(proc, path, 20, rank=1)
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 120
        while not re.search(r"membership 1: worker 0 stopped answering", read(path)):
            if time.time() > deadline or proc.poll() is not None:
                self.fail("worker 0's leave was not decided:\n" + read(path)[-4000:])
            time.sleep(0.05)
        at = self.wait_step(proc, path, worker0_step(read(path), 1) + 3, rank=1)
        os.kill(proc.pid, signal.SIGTERM)
        out = self.finish(proc, path)
        self.assertLogHas(out, r"the workers stopped at their agreed step with the checkpoint saved")
        self.assertLogHas(out, r"\[worker 1\] tally train: stopped on SIGTERM at the job's agreed step, the checkpoint "
                               r"saved")
        self.assertLogHas(out, r"\[worker 1\] Saved checkpoint to \"%s-\d{4}.params\"" % re.escape(prefix))
        self.assertNotRegex(out, r"\[worker [23]\] Saved checkpoint")
        self.assertNotRegex(out, r"\[worker 1\] Epoch\[%d\] Train-accuracy" % (EPOCHS - 1))
        self.assertLatestLoads(prefix)
        print("worker 0 killed; SIGTERM to the job at worker 1's step %d: worker 1 saved the stop's checkpoint" % at)

    def test_a_join_decided_after_the_jobs_last_step_ends_at_once(self):
        """The late-join race, held open: the live workers wait between their last step and
        telling the scheduler they are done (TALLY_TEST_DONE_GATE); a new worker 2 (the first
        killed at step 30) joins there, its first step after the job's last. Once the gate
        opens, the workers' WORKER_DONE says the run's step count, the scheduler tells the
        joiner the job ended before its first step: it exits 0 saying so, and the job ends at
        once instead of waiting for the joiner's timeout (10 minutes)."""
        gate = os.path.join(self.dir, "done-gate")
        proc, path, prefix = self.launch("run", env={"TALLY_TEST_DONE_GATE": gate})
        pid = self.victim_pid()
        argv, env = self.process_of(pid)
        self.wait_step(proc, path, 30)
        os.kill(pid, signal.SIGKILL)
        waiting = re.compile(r"^\[worker \d\] tally train: TALLY_TEST_DONE_GATE: waiting", re.M)
        deadline = time.time() + 240
        while len(waiting.findall(read(path))) < WORKERS - 1:
            if time.time() > deadline or proc.poll() is not None:
                self.fail("the live workers never reached the gate:\n" + read(path)[-4000:])
            time.sleep(0.05)
        join_path = os.path.join(self.dir, "joiner.log")
        joiner = self.start_joiner(argv, env, join_path)
        deadline = time.time() + 120
        while not re.search(r"membership 2: worker %d joined" % VICTIM, read(path)):
            if time.time() > deadline or joiner.poll() is not None:
                self.fail("the join was not decided:\n" + read(path)[-3000:] + read(join_path)[-3000:])
            time.sleep(0.05)
        with open(gate, "w"):
            pass
        opened = time.time()
        out = self.finish(proc, path, timeout=120)
        try:
            code = joiner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("the joiner still runs after the job's end:\n" + read(join_path)[-4000:])
        ended = time.time() - opened
        joined = read(join_path)
        self.assertEqual(code, 0, joined[-6000:])
        said = re.search(r"tally train: worker %d joined the running job, but .*the job's last step was (\d+), before "
                         r"worker %d's first, step (\d+).*: nothing to train" % (VICTIM, VICTIM), joined)
        self.assertIsNotNone(said, joined[-4000:])
        last, first = int(said.group(1)), int(said.group(2))
        self.assertGreater(first, last)
        self.assertEqual(self.changes(prefix)[-1]["from_step"], first)
        self.assertFinished(out)
        print("a join decided after the last step (%d), from step %d: the job ended %.2f s after the gate opened" % (
            last, first, ended))
        self.assertLess(ended, 60)

    def test_sigterm_to_the_whole_job_still_stops_it_with_a_checkpoint(self):
        """--elastic changes nothing for a SIGTERM to the launcher: worker 0 stops the job at
        an agreed step with the checkpoint saved (a worker that took its own SIGTERM for a
        leave first exits 0, which is as good), and the checkpoint loads."""
        proc, path, prefix = self.launch("run")
        self.wait_step(proc, path, 30)
        os.kill(proc.pid, signal.SIGTERM)
        out = self.finish(proc, path)
        self.assertLogHas(out, r"the workers stopped at their agreed step with the checkpoint saved")
        self.assertLatestLoads(prefix)
        self.assertNotRegex(out, r"\[worker 0\] Epoch\[%d\] Train-accuracy" % (EPOCHS - 1))


if __name__ == "__main__":
    fault_job.main()
