"""tools/launch.py --elastic with --max-workers and --min-workers, on jobs of fake_role.py:
a worker that leaves is replaced by a joiner (TALLY_JOIN=1, its rank, its host, the job's
secret), named when the scheduler says it joined; a rank's joiners are bounded; fewer live
workers than --min-workers stop the job for --max-restarts. Each job is checked to leave no
process behind (launch_case.LaunchCase).

The processes wait on each other through files (fake_role.py's FAKE_STATE_DIR), not on time,
so that a slow machine changes nothing but the duration. ctest runs the class as
launch_test.ElasticLauncherTest (launch_test.py imports it).
"""

import os
import sys
import tempfile
import unittest

from launch_case import FAKE, ROLE_LINE, LaunchCase

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
            "worker2=leave,*=waitfile:left-2.3")
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
            "worker2=once:leave,worker=once:savestop,*=once:sleep", command=RESUMABLE)
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

    def test_below_min_workers_without_restarts_exits_75(self):
        rc, out, err, _ = self.launch_elastic(
            ["-n", "2", "-s", "1", "--elastic", "--min-workers", "2", "--env", "FAKE_STATE_DIR"],
            "worker1=leave,worker=savestop,*=sleep", command=RESUMABLE)
        self.assertEqual(rc, 75, err)
        self.assertIn("1 live worker, fewer than --min-workers 2", err)
        self.assertNotIn("restart 1", err)
        self.assertNothingLeft()


if __name__ == "__main__":
    unittest.main(verbosity=2)
