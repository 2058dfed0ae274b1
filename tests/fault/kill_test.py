"""kill -9 of a random role (scheduler, server, worker) at a random step of a dist_sync job.

With `tools/launch.py --max-restarts 2` the job completes with the final weights and
momentum of an uninterrupted run, bit for bit; started role by role without a launcher,
every other process exits non-zero within 5 s, naming the killed node; under launch.py
without restarts, the launcher exits within 5 s with the killed node's status, naming it.

Each seed picks the role and the step; the test prints both. FAULT_SEEDS="4,5" runs other
seeds (to reproduce a failure, run its seed alone).

Usage: python3 kill_test.py TALLY_BINARY [unittest args]
"""
import os
import random
import re
import signal
import time

import fault_job
from fault_job import EPOCHS, EXIT_WITHIN_S, FINAL, ROLES, STEPS_PER_EPOCH, FaultCase, RoleJob, role_name


def pick(seed):
    """The role and the step (of worker 0) at which seed kills it."""
    rng = random.Random(seed)
    return rng.choice(ROLES), rng.randrange(5, EPOCHS * STEPS_PER_EPOCH - 5)


class KillRestartTest(FaultCase):
    def test_random_kill_then_restart_equals_an_uninterrupted_run(self):
        reference = self.reference()
        # Seeds 1, 5, 6, 9: server 0, worker 0, scheduler, worker 1.
        for seed in fault_job.seeds([1, 5, 6, 9]):
            (role, rank), step = pick(seed)
            name = role_name(role, rank)
            with self.subTest(seed=seed, role=name, step=step):
                print("seed %d: kill -9 %s at step %d, --max-restarts 2" % (seed, name, step))
                prefix = os.path.join(self.dir, "seed%d" % seed, "m")
                proc, path = self.start_launch(prefix, "seed%d" % seed, ["--max-restarts", "2"],
                                               ["--resume", "auto"])
                self.wait_step(path, proc, step)
                os.kill(self.pid_of(role, rank), signal.SIGKILL)
                code = self.wait_launch(proc, path)
                out = fault_job.read(path)
                self.assertEqual(code, 0, out[-4000:])
                self.assertLogHas(out, r"launch.py: restart 1 of 2 after %s on localhost was killed by signal 9"
                                  % re.escape(name))
                self.assertSameCheckpoint(prefix + FINAL, reference)


class KillTest(FaultCase):
    def test_random_kill_makes_every_other_process_exit_naming_it(self):
        # Seeds 2, 7, 8, 12: scheduler, worker 0, server 0, worker 1.
        for seed in fault_job.seeds([2, 7, 8, 12]):
            victim, step = pick(seed)
            name = role_name(*victim)
            with self.subTest(seed=seed, role=name, step=step):
                print("seed %d: kill -9 %s at step %d, no launcher" % (seed, name, step))
                prefix = os.path.join(self.dir, "seed%d" % seed, "m")
                job = RoleJob(self, "seed%d" % seed, extra=["--model-prefix", prefix])
                job.wait_step(step)
                os.kill(job.procs[victim].pid, signal.SIGKILL)
                job.assertOthersFail({victim}, time.time(), EXIT_WITHIN_S, [name])
                job.kill()
                print("  the latest checkpoint loads: %s" % self.assertLatestLoads(prefix))

    def test_random_kill_under_the_launcher_ends_it_naming_the_node(self):
        # The same seeds: launch.py without --max-restarts stops the job and exits non-zero.
        for seed in fault_job.seeds([2, 7, 8, 12]):
            (role, rank), step = pick(seed)
            name = role_name(role, rank)
            with self.subTest(seed=seed, role=name, step=step):
                print("seed %d: kill -9 %s at step %d, launch.py without restarts" % (seed, name, step))
                prefix = os.path.join(self.dir, "seed%d" % seed, "m")
                proc, path = self.start_launch(prefix, "seed%d" % seed)
                self.wait_step(path, proc, step)
                os.kill(self.pid_of(role, rank), signal.SIGKILL)
                killed = time.time()
                code = self.wait_launch(proc, path)
                took = time.time() - killed
                print("  launch.py exited %d after %.2f s" % (code, took))
                out = fault_job.read(path)
                self.assertEqual(code, 128 + signal.SIGKILL, out[-4000:])
                self.assertLogHas(out, r"launch.py: %s on localhost was killed by signal 9 \(SIGKILL\); stopping "
                                  r"the job" % re.escape(name))
                self.assertLess(took, EXIT_WITHIN_S, out[-4000:])
                print("  the latest checkpoint loads: %s" % self.assertLatestLoads(prefix))

    def test_a_worker_refusing_its_flags_ends_the_job_at_once(self):
        # Before the job gathers there is nothing to save: the scheduler and the servers
        # exit on the launcher's SIGTERM instead of waiting for workers that will not come.
        start = time.time()
        code, out = self.run_launch(os.path.join(self.dir, "flags", "m"), "flags", extra=["--dtype", "float16"])
        took = time.time() - start
        self.assertEqual(code, 2, out[-4000:])
        self.assertLogHas(out, r"worker \d on localhost exited with status 2; stopping the job")
        self.assertLogHas(out, r"\[scheduler\] tally: SIGTERM before the job gathered: nothing to save, exiting")
        self.assertLess(took, EXIT_WITHIN_S, out[-4000:])


if __name__ == "__main__":
    fault_job.main()
