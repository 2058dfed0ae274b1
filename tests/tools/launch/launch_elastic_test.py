"""tools/launch.py --elastic with --max-workers and --min-workers, on jobs of fake_role.py:
a worker that leaves is replaced by a joiner (TALLY_JOIN=1, its rank, its host, the job's
secret), named when the scheduler says it joined; a rank's joiners are bounded; fewer live
workers than --min-workers stop the job for --max-restarts. Each job is checked to leave no
process behind (launch_case.LaunchCase).

The processes wait on each other through files (fake_role.py's FAKE_STATE_DIR), not on time,
so that a slow machine changes nothing but the duration. ElasticTallyTest does the same with
real `tally train` jobs (build/bin/tally; skipped without it). ctest runs the classes as
launch_test.ElasticLauncherTest and launch_test.ElasticTallyTest (launch_test.py imports them).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from launch_case import FAKE, JOB_BOUND_S, ROLE_LINE, ROOT, LaunchCase, tagged_pids

sys.path.insert(0, os.path.join(ROOT, "tests", "fault"))
from fault_job import MODEL  # noqa: E402 (a small model, 75 steps an epoch, one line a step)

TALLY = os.path.join(ROOT, "build", "bin", "tally")

RESUMABLE = ["--model-prefix", "run/m", "--resume", "auto"]


class ElasticLauncherTest(LaunchCase):

    def setUp(self):
        super().setUp()
        state = tempfile.TemporaryDirectory()
        self.addCleanup(state.cleanup)
        self.state = state.name

    def launch_elastic(self, args, plan, env=None, command=()):
        return self.launch(args, plan, env=dict(FAKE_STATE_DIR=self.state, **(env or {})),
                           command=[sys.executable, FAKE] + list(command))

    def wait_for_file(self, name, launcher):
        deadline = time.monotonic() + JOB_BOUND_S
        while not os.path.exists(os.path.join(self.state, name)):
            self.assertIsNone(launcher.poll(), f"the launcher ended before {name}")
            self.assertLess(time.monotonic(), deadline, f"no {name} in {JOB_BOUND_S} s")
            time.sleep(0.05)

    def starts(self, out, name):
        return [m.groups() for m in map(ROLE_LINE.match, out.splitlines()) if m and m.group(1) == name]

    def test_a_worker_that_leaves_is_replaced_by_a_joiner_of_its_rank(self):
        logs = os.path.join(self.state, "logs")
        rc, out, err, _ = self.launch_elastic(
            ["-s", "1", "--elastic", "--max-workers", "3", "--log-dir", logs, "--env", "FAKE_STATE_DIR",
             "--env", "FAKE_PRINT_VARS:TALLY_JOIN", "--env", "FAKE_SECRET_REPORT:1"],
            "worker1=leave,joinworker1=waitfile:joined-1,scheduler=announce:1:1,*=waitfile:joined-1")
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"launch.py: worker 1 on localhost left the job \(exited 0 after its SIGTERM\); a new "
                              r"worker 1 on localhost joins in 1 s \(TALLY_JOIN=1\)")
        self.assertIn("launch.py: started worker 1 on localhost to join the job (TALLY_JOIN=1, join 1 of at "
                      "most 3 for its rank)", err)
        self.assertIn("launch.py: worker 1 on localhost joined the job: from step 7 (membership 1)", err)
        self.assertIn("launch.py: the job finished: the scheduler, 1 server and 3 workers exited 0", err)
        self.assertIn("(worker 1 on localhost lost on the way)", err)
        # The joiner is the leaver again: rank, host, scheduler, counts and task ids; with
        # TALLY_JOIN=1, which the job's own processes do not have.
        first, joiner = self.starts(out, "worker 1")
        self.assertEqual(first, joiner)
        self.assertEqual(out.count("[worker 1] var TALLY_JOIN=1"), 1, out)
        self.assertEqual(out.count("var TALLY_JOIN=None"), 5, out)
        # ... and it has the job's secret, in the same private file.
        secrets = [line for line in out.splitlines() if "] secret file=" in line]
        self.assertEqual(len(secrets), 6, out)
        self.assertEqual(len({line.split("] ", 1)[1] for line in secrets}), 1, secrets)
        self.assertEqual(sorted(os.listdir(logs)), ["scheduler.log", "server-0.log", "worker-0.log",
                                                    "worker-1.join1.log", "worker-1.log", "worker-2.log"])
        with open(os.path.join(logs, "worker-1.join1.log")) as f:
            self.assertIn("var TALLY_JOIN=1", f.read())
        self.assertNothingLeft()

    def test_a_ranks_joiners_are_bounded_and_the_job_goes_on_without_it(self):
        rc, out, err, _ = self.launch_elastic(
            ["-n", "3", "-s", "1", "--elastic", "--max-workers", "3", "--max-joins", "2", "--env",
             "FAKE_STATE_DIR"],
            "worker2=leave,*=waitfile:left-2.3:2")  # 2 s: time for the launcher to see the last leave
        self.assertEqual(rc, 0, err)
        self.assertIn("a new worker 2 on localhost joins in 1 s", err)
        self.assertIn("a new worker 2 on localhost joins in 2 s", err)
        self.assertIn("join 2 of at most 2 for its rank", err)
        self.assertIn("no new worker 2 (--max-joins 2 used for its rank); the others go on", err)
        self.assertEqual(len(self.starts(out, "worker 2")), 3, out)
        self.assertIn("the job finished: the scheduler, 1 server and 2 workers exited 0", err)
        self.assertNothingLeft()

    def test_a_killed_worker_is_replaced_too(self):
        rc, out, err, _ = self.launch_elastic(
            ["-s", "1", "--elastic", "--max-workers", "2", "--env", "FAKE_STATE_DIR"],
            "worker1=exit9,joinworker1=waitfile:joined-1,scheduler=announce:1:1,*=waitfile:joined-1")
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: worker 1 on localhost exited with status 9; it leaves the job (--elastic) once "
                      "the scheduler has decided the step; a new worker 1 on localhost joins in 1 s", err)
        self.assertIn("worker 1 on localhost joined the job", err)
        self.assertNothingLeft()

    def test_worker_0_that_leaves_is_replaced_like_any_rank(self):
        # Worker 0 gets no special case: its leave is the scheduler's to decide (the lead
        # passes to the lowest live rank, docs/faults.md), and its joiner is rank 0 again.
        rc, out, err, _ = self.launch_elastic(
            ["-s", "1", "--elastic", "--max-workers", "2", "--env", "FAKE_STATE_DIR", "--env",
             "FAKE_PRINT_VARS:TALLY_JOIN"],
            "worker0=leave,joinworker0=waitfile:joined-0,scheduler=announce:0:1,*=waitfile:joined-0")
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: worker 0 on localhost left the job (exited 0 after its SIGTERM); a new worker 0 "
                      "on localhost joins in 1 s (TALLY_JOIN=1)", err)
        self.assertIn("launch.py: started worker 0 on localhost to join the job (TALLY_JOIN=1, join 1 of at "
                      "most 3 for its rank)", err)
        self.assertIn("launch.py: worker 0 on localhost joined the job: from step 7 (membership 1)", err)
        self.assertIn("launch.py: the job finished: the scheduler, 1 server and 2 workers exited 0", err)
        self.assertIn("(worker 0 on localhost lost on the way)", err)
        self.assertNotIn("stopping the job", err)
        first, joiner = self.starts(out, "worker 0")
        self.assertEqual(first, joiner)
        self.assertEqual(out.count("[worker 0] var TALLY_JOIN=1"), 1, out)
        self.assertNothingLeft()

    def test_a_killed_worker_0_is_replaced_too(self):
        rc, out, err, _ = self.launch_elastic(
            ["-s", "1", "--elastic", "--max-workers", "2", "--env", "FAKE_STATE_DIR"],
            "worker0=exit9,joinworker0=waitfile:joined-0,scheduler=announce:0:1,*=waitfile:joined-0")
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: worker 0 on localhost exited with status 9; it leaves the job (--elastic) once "
                      "the scheduler has decided the step; a new worker 0 on localhost joins in 1 s", err)
        self.assertIn("worker 0 on localhost joined the job", err)
        self.assertIn("the job finished: the scheduler, 1 server and 2 workers exited 0", err)
        self.assertNothingLeft()

    def test_without_elastic_worker_0s_death_ends_the_job_and_max_restarts_restarts_it(self):
        rc, out, err, _ = self.launch_elastic(
            ["-n", "2", "-s", "1", "--max-restarts", "1", "--env", "FAKE_STATE_DIR"],
            # Worker 0 dies once every other process of the first attempt is in place.
            "worker0=once:exitafter:9:ready-worker1+ready-server0+ready-scheduler0,*=once:savestop",
            command=RESUMABLE)
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: worker 0 on localhost exited with status 9; stopping the job", err)
        self.assertIn("launch.py: restart 1 of 1 after worker 0 on localhost exited with status 9", err)
        self.assertIn("the job completed on attempt 2 of 2", err)
        self.assertNotIn("join", err)
        self.assertNothingLeft()

    def test_without_max_workers_nobody_takes_the_leavers_place(self):
        rc, out, err, _ = self.launch_elastic(["-n", "2", "-s", "1", "--elastic", "--env", "FAKE_STATE_DIR"],
                                              "worker1=leave,*=waitfile:left-1.1")
        self.assertEqual(rc, 0, err)
        self.assertIn("worker 1 on localhost left the job (exited 0 after its SIGTERM); the others go on", err)
        self.assertNotIn("join", err)
        self.assertEqual(len(self.starts(out, "worker 1")), 1, out)
        self.assertNothingLeft()

    def test_below_min_workers_the_job_stops_with_its_checkpoint_and_restarts_whole(self):
        # Attempt 0: worker 2 leaves, 2 of 3 workers are live, fewer than --min-workers 3: the
        # launcher stops the job as a SIGTERM does (the workers save and exit 75); attempt 1
        # (--max-restarts) runs to its end.
        rc, out, err, _ = self.launch_elastic(
            ["-n", "3", "-s", "1", "--elastic", "--min-workers", "3", "--max-restarts", "1", "--grace", "30",
             "--env", "FAKE_STATE_DIR"],
            "worker2=once:leaveafter:ready-worker0+ready-worker1,worker=once:savestop,*=once:sleep",
            command=RESUMABLE)
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: 2 live workers, fewer than --min-workers 3; stopping the job at an agreed step "
                      "with its checkpoint", err)
        self.assertIn("launch.py: the job stopped below --min-workers at the workers' agreed step, the "
                      "checkpoint saved", err)
        self.assertIn("launch.py: restart 1 of 1 after 2 live workers, fewer than --min-workers 3: starting "
                      "every process again", err)
        self.assertIn("the job completed on attempt 2 of 2", err)
        self.assertNotIn("killing", err)
        self.assertNothingLeft()

    def test_a_sigterm_to_every_process_is_the_jobs_stop_not_leaves_to_make_up_for(self):
        # As Slurm's scancel --signal=TERM JOB does: the workers but 0 leave on their SIGTERM
        # (exit 0), worker 0 saves and exits 75, the scheduler says it got SIGTERM first. No
        # joiner starts, and the count below --min-workers stops nothing more.
        launcher = self.start(["-n", "3", "-s", "1", "--elastic", "--max-workers", "3", "--min-workers", "2",
                               "--max-restarts", "1", "--env", "FAKE_STATE_DIR"] + [],
                              "worker0=savestop,worker=leaveonterm,*=termline:1",
                              env=dict(FAKE_STATE_DIR=self.state), command=[sys.executable, FAKE] + RESUMABLE)
        for who in ("worker0", "worker1", "worker2", "scheduler0", "server0"):
            self.wait_for_file(f"ready-{who}", launcher)
        out = []
        job = [p for p in tagged_pids(self.tag) if p != launcher.pid]
        scheduler = [p for p in job if ElasticTallyTest.has_env(p, b"DMLC_ROLE=scheduler")]
        os.kill(scheduler[0], signal.SIGTERM)
        for line in launcher.stdout:
            out.append(line)
            if "SIGTERM: serving on" in line:
                break
        # The workers that leave first, then, once the launcher has reaped them (so has seen
        # them leave), worker 0 and the server: were worker 0's exit seen first, the launcher
        # would wait for the job's stop without naming the leaves.
        leavers = [p for p in job if ElasticTallyTest.has_env(p, b"DMLC_ROLE=worker")
                   and not ElasticTallyTest.has_env(p, b"TALLY_RANK=0")]
        self.assertEqual(len(leavers), 2, job)
        for pid in leavers:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + JOB_BOUND_S
        while any(os.path.exists(f"/proc/{pid}") for pid in leavers):
            self.assertLess(time.monotonic(), deadline, "the leavers were not reaped")
            time.sleep(0.05)
        for pid in job:
            if pid != scheduler[0] and pid not in leavers:
                os.kill(pid, signal.SIGTERM)
        out.append(launcher.stdout.read())
        err = launcher.stderr.read()
        launcher.wait(JOB_BOUND_S)
        launcher.stdout.close()
        launcher.stderr.close()
        self.assertEqual(launcher.returncode, 0, err)
        self.assertIn("left the job (exited 0 after its SIGTERM); the whole job is stopping on SIGTERM", err)
        self.assertIn("the workers stopped at their agreed step with the checkpoint saved", err)
        self.assertNotIn("started worker", err)
        self.assertNotIn("fewer than --min-workers", err)
        self.assertNotIn("restart", err.replace("(--max-restarts)", ""))
        self.assertNothingLeft()

    def test_below_min_workers_without_restarts_exits_75(self):
        rc, out, err, _ = self.launch_elastic(
            ["-n", "2", "-s", "1", "--elastic", "--min-workers", "2", "--env", "FAKE_STATE_DIR"],
            "worker1=leaveafter:ready-worker0,worker=savestop,*=sleep", command=RESUMABLE)
        self.assertEqual(rc, 75, err)
        self.assertIn("1 live worker, fewer than --min-workers 2", err)
        self.assertNotIn("restart 1", err)
        self.assertNothingLeft()


@unittest.skipUnless(os.access(TALLY, os.X_OK), f"{TALLY} is not built")
class ElasticTallyTest(LaunchCase):
    """tools/launch.py --elastic on `tally train` dist_sync jobs of 3 workers and 1 server:
    worker 2 is killed (kill -9) once it has trained a few steps."""

    def run_job(self, launch_args, extra=()):
        """Runs the job, kills worker 2 at its step 5; returns (status, stdout, stderr)."""
        self.dir = tempfile.mkdtemp(prefix="tally-launch-elastic-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        command = [TALLY, "train", "--kv-store", "dist_sync"] + MODEL + [
            "--model-prefix", os.path.join(self.dir, "m")] + list(extra)
        launcher = self.start(["-s", "1", "--elastic", "--env", "TALLY_DEAD_TIMEOUT_MS:1000"] + launch_args,
                              command=command)
        lines, started = [], threading.Event()

        def read():
            for line in launcher.stdout:
                lines.append(line)
                if re.match(r"^\[worker 2\] Epoch\[0\] Batch \[\d+-5\]", line):
                    started.set()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        if not started.wait(JOB_BOUND_S):
            launcher.kill()
            self.fail("worker 2 did not train 5 steps:\n" + "".join(lines[-30:]))
        victim = [pid for pid in tagged_pids(self.tag) if self.is_worker_2(pid)]
        self.assertEqual(len(victim), 1, victim)
        os.kill(victim[0], signal.SIGKILL)
        try:
            err = launcher.stderr.read()
            launcher.wait(JOB_BOUND_S)
        except subprocess.TimeoutExpired:
            launcher.kill()
            self.fail("the job did not end:\n" + "".join(lines[-30:]))
        reader.join(5)
        launcher.stdout.close()
        launcher.stderr.close()
        return launcher.returncode, "".join(lines), err

    @staticmethod
    def has_env(pid, *items):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            return False
        return all(item in environ for item in items)

    def is_worker_2(self, pid):
        return self.has_env(pid, b"DMLC_ROLE=worker", b"TALLY_RANK=2") and not self.has_env(pid, b"TALLY_JOIN=1")

    def test_a_killed_worker_is_replaced_and_the_job_ends_with_every_worker(self):
        rc, out, err = self.run_job(["--max-workers", "3"])
        self.assertEqual(rc, 0, err[-4000:])
        self.assertIn("launch.py: worker 2 on localhost was killed by signal 9 (SIGKILL); it leaves the job "
                      "(--elastic) once the scheduler has decided the step; a new worker 2 on localhost joins in 1 s",
                      err)
        self.assertIn("launch.py: started worker 2 on localhost to join the job (TALLY_JOIN=1, join 1 of at most 3",
                      err)
        joined = re.search(r"launch.py: worker 2 on localhost joined the job: from step (\d+)", err)
        self.assertIsNotNone(joined, err[-4000:])
        self.assertIn("launch.py: the job finished: the scheduler, 1 server and 3 workers exited 0", err)
        # The joiner trained to the end: it printed the last epoch's steps and exited 0.
        self.assertRegex(out, r"(?m)^\[worker 2\] tally train: worker 2 joined the job at step %s" % joined.group(1))
        self.assertRegex(out, r"(?m)^\[worker 2\] Epoch\[2\] Batch \[\d+-75\]")
        self.assertNothingLeft()

    def test_below_min_workers_the_job_stops_with_a_checkpoint_and_a_restart_finishes_it(self):
        rc, out, err = self.run_job(["-n", "3", "--min-workers", "3", "--max-restarts", "1", "--grace", "60"],
                                    ["--resume", "auto"])
        self.assertEqual(rc, 0, err[-4000:])
        self.assertIn("launch.py: 2 live workers, fewer than --min-workers 3; stopping the job at an agreed step "
                      "with its checkpoint", err)
        self.assertIn("launch.py: the job stopped below --min-workers at the workers' agreed step, the checkpoint "
                      "saved", err)
        self.assertIn("launch.py: restart 1 of 1 after 2 live workers, fewer than --min-workers 3", err)
        self.assertIn("the job completed on attempt 2 of 2", err)
        self.assertRegex(out, r"(?m)^\[worker 0\] .*stopping, the job was asked to \(SIGTERM\)")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "m-0003.params")))
        self.assertNothingLeft()


if __name__ == "__main__":
    unittest.main(verbosity=2)
