"""Kill -9 one node of a running dist_sync job: every other process must exit within 5 s,
non-zero, naming the dead node's role and rank.

One test per role, each with a fixed victim (server 1, worker 0, the scheduler) once the
job trains: the quick, deterministic cases. kill_test.py beside it draws the role and the
step from seeds and adds the launcher and restarts (docs/faults.md).

Usage: python3 kill_each_role_test.py TALLY_BINARY [unittest args]
The job is a scheduler, 2 servers and 2 workers of `tally train`, on loopback.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import free_port  # noqa: E402 (tests/testutil.py)


TALLY = None
EXIT_WITHIN_S = 5.0


class Job:
    """The processes of one job, each with its output in a file."""

    def __init__(self, workers=2, servers=2):
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory()
        self.procs = {}
        roles = [("scheduler", 0)] + [("server", r) for r in range(servers)] + \
                [("worker", r) for r in range(workers)]
        secret = os.urandom(32).hex()  # the job's (docs/security.md)
        for role, rank in roles:
            env = dict(os.environ, DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1",
                       DMLC_PS_ROOT_PORT=str(self.port), DMLC_NUM_WORKER=str(workers),
                       DMLC_NUM_SERVER=str(servers), DMLC_NODE_HOST="127.0.0.1",
                       TALLY_RANK=str(rank), OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", TALLY_JOB_SECRET=secret)
            log = open(os.path.join(self.dir.name, "%s%d.log" % (role, rank)), "w+")
            cmd = [TALLY, "train", "--kv-store", "dist_sync", "--num-layers", "8",
                   "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "8",
                   "--num-examples", "8000", "--num-epochs", "1000", "--disp-batches", "10"]
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            self.procs[(role, rank)] = (proc, log)

    def output(self, key):
        log = self.procs[key][1]
        log.flush()
        log.seek(0)
        return log.read()

    def wait_training(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all("Batch [" in self.output(("worker", r)) for r in (0, 1)):
                return
            for key, (proc, _) in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError("%s %d exited early:\n%s" % (key[0], key[1], self.output(key)))
            time.sleep(0.1)
        raise AssertionError("the job did not start training within %d s" % timeout)

    def stop(self):
        for proc, log in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
        self.dir.cleanup()


class KillEachRoleTest(unittest.TestCase):
    def kill_and_watch(self, victim, named):
        job = Job()
        try:
            job.wait_training()
            proc, _ = job.procs[victim]
            os.kill(proc.pid, signal.SIGKILL)
            killed = time.time()
            for key, (p, _) in job.procs.items():
                if key == victim:
                    continue
                left = max(0.0, killed + EXIT_WITHIN_S - time.time())
                try:
                    code = p.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    self.fail("%s %d still running %.1f s after %s %d was killed:\n%s" % (
                        key + (EXIT_WITHIN_S,) + victim + (job.output(key),)))
                out = job.output(key)
                self.assertNotEqual(code, 0, "%s %d exited 0:\n%s" % (key + (out,)))
                self.assertIn(named, out, "%s %d did not name the dead node:\n%s" % (key + (out,)))
                print("%s %d exited %d after %.2f s" % (key + (code, time.time() - killed)))
        finally:
            job.stop()

    def test_kill_server(self):
        self.kill_and_watch(("server", 1), "server 1")

    def test_kill_worker(self):
        self.kill_and_watch(("worker", 0), "worker 0")

    def test_kill_scheduler(self):
        self.kill_and_watch(("scheduler", 0), "scheduler")


if __name__ == "__main__":
    TALLY = sys.argv.pop(1)
    unittest.main()
