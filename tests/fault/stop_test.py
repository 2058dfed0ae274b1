"""SIGSTOP of one node of a dist_sync job for longer than the heartbeat dead timeout.

Started role by role, without a launcher: every other process exits non-zero within 5 s of
the timeout, naming the stopped node; once continued, the stopped node exits non-zero too.
With `tools/launch.py --max-restarts 2` the job completes with an uninterrupted run's final
weights. Never a hang.

Usage: python3 stop_test.py TALLY_BINARY [unittest args]
"""
import os
import signal
import subprocess
import time

import fault_job
from fault_job import DEAD_TIMEOUT_S, EXIT_WITHIN_S, FINAL, STEPS_PER_EPOCH, FaultCase, RoleJob, role_name


class StopTest(FaultCase):
    def stop_and_watch(self, victim, resume):
        """Stops `victim` inside the second epoch (a checkpoint is on disk) and, when `resume`,
        continues it once the others ended."""
        name = role_name(*victim)
        prefix = os.path.join(self.dir, "run", "m")
        job = RoleJob(self, "stop", extra=["--model-prefix", prefix])
        job.wait_step(STEPS_PER_EPOCH + 15)
        proc = job.procs[victim]
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.time()
        print("SIGSTOP %s%s" % (name, ", SIGCONT once the others ended" if resume else ""))
        job.assertOthersFail({victim}, stopped, DEAD_TIMEOUT_S + EXIT_WITHIN_S, [name])
        if not resume:
            self.assertLatestLoads(prefix)
            return
        os.kill(proc.pid, signal.SIGCONT)
        continued = time.time()
        try:
            code = proc.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.fail("%s still running %g s after SIGCONT, its job gone:\n%s" % (name, EXIT_WITHIN_S, job.logs()))
        self.assertNotEqual(code, 0, job.output(victim)[-3000:])
        print("  %s exited %d, %.2f s after SIGCONT (stopped for %.2f s)" % (
            name, code, time.time() - continued, continued - stopped))
        self.assertLatestLoads(prefix)

    def test_worker_stopped_then_continued(self):
        self.stop_and_watch(("worker", 1), resume=True)

    def test_server_stopped_for_good(self):
        self.stop_and_watch(("server", 0), resume=False)

    def test_scheduler_stopped_then_continued(self):
        self.stop_and_watch(("scheduler", 0), resume=True)


class StopRestartTest(FaultCase):
    def test_stopped_worker_then_restart_equals_an_uninterrupted_run(self):
        reference = self.reference()
        prefix = os.path.join(self.dir, "run", "m")
        proc, path = self.start_launch(prefix, "run", ["--max-restarts", "2"], ["--resume", "auto"])
        self.wait_step(path, proc, STEPS_PER_EPOCH + 10)
        os.kill(self.pid_of("worker", 0), signal.SIGSTOP)
        code = self.wait_launch(proc, path)
        out = fault_job.read(path)
        self.assertEqual(code, 0, out[-4000:])
        self.assertLogHas(out, r"worker 0 .*stopped answering")
        self.assertLogHas(out, r"launch.py: restart 1 of 2 after ")
        self.assertSameCheckpoint(prefix + FINAL, reference)


if __name__ == "__main__":
    fault_job.main()
