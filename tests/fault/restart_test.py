"""tools/launch.py --max-restarts: a dist_sync job (scheduler, 1 server, 2 workers) in which
one process is killed with SIGKILL mid-run is started again from its latest checkpoint and
ends with the weights and momentum of an uninterrupted run, bit for bit.

Usage: python3 restart_test.py TALLY_BINARY [unittest args]
"""
import os
import re
import signal

import fault_job
from fault_job import FINAL, STEPS_PER_EPOCH, FaultCase


class RestartTest(FaultCase):
    def test_sigkill_mid_run_then_restart_equals_an_uninterrupted_run(self):
        reference = self.reference()
        prefix = os.path.join(self.dir, "run", "m")
        proc, path = self.start_launch(prefix, "run", ["--max-restarts", "2"], ["--resume", "auto"])
        # Inside the second epoch: the restart continues from the first epoch's checkpoint.
        self.wait_step(path, proc, STEPS_PER_EPOCH + 20)
        os.kill(self.pid_of("worker", 1), signal.SIGKILL)
        code = self.wait_launch(proc, path)
        out = fault_job.read(path)
        self.assertEqual(code, 0, out[-4000:])
        self.assertLogHas(out, r"launch.py: worker 1 on localhost was killed by signal 9 \(SIGKILL\); stopping the job")
        self.assertLogHas(out, r"launch.py: restart 1 of 2 after worker 1 on localhost was killed by signal 9")
        self.assertLogHas(out, r"\[worker 0\] tally train: resuming from %s-000[12]\.params" % re.escape(prefix))
        self.assertLogHas(out, r"launch.py: the job completed on attempt 2 of 3")
        self.assertSameCheckpoint(prefix + FINAL, reference)


if __name__ == "__main__":
    fault_job.main()
