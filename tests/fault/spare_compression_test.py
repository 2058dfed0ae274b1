"""A spare server under gradient compression (--spare-servers with --gradient-compression).

SpareCompressionTest: the fault suite's job with 2bit pushes (threshold 0.5), 2 servers,
--server-replicas 1 and 1 spare. Server 0 is killed: the spare takes its place and receives
its slices (fp32 values and optimizer state: compression changes only what the workers
push, and the workers keep their residuals). A step is then skipped for a NaN (its slice
goes uncompressed; the step is rolled back on the spare too); then server 1 is killed and
the spare alone ends the job. The final checkpoint, weights and optimizer state, equals bit
for bit that of the same job with compression, the NaN and no fault: every compressed push
after the kill reached the spare and was applied as the first servers would have.

Usage: python3 spare_compression_test.py TALLY_BINARY [unittest args]
"""
import os
import re
import signal
import time

import fault_job
from fault_job import FINAL, FaultCase, read

COMPRESSION = ["--gradient-compression", "2bit", "--gc-threshold", "0.5"]
NAN = {"TALLY_TEST_NAN": "0:70"}


class SpareCompressionTest(FaultCase):
    def wait_log(self, path, proc, pattern, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if re.search(pattern, read(path)):
                return
            if proc.poll() is not None:
                self.fail("the job ended (%s) before %r:\n%s" % (proc.returncode, pattern, read(path)[-4000:]))
            time.sleep(0.05)
        self.fail("no %r within %d s:\n%s" % (pattern, timeout, read(path)[-4000:]))

    def test_the_spare_applies_the_compressed_pushes_as_the_lost_server_would(self):
        ref = os.path.join(self.dir, "ref", "m")
        code, out = self.run_launch(ref, "reference", ["-s", "2"], COMPRESSION, env=NAN)
        self.assertEqual(code, 0, out[-4000:])
        self.assertLogHas(out, r"gradient compression 2bit")
        self.assertLogHas(out, r"step 70 skipped")
        prefix = os.path.join(self.dir, "run", "m")
        proc, path = self.start_launch(prefix, "run", ["-s", "2", "--server-replicas", "1", "--spare-servers", "1"],
                                       COMPRESSION, env=NAN)
        self.wait_step(path, proc, 30)
        os.kill(self.pid_of("server", 0), signal.SIGKILL)
        self.wait_log(path, proc, r"\[scheduler\] .*server 2 .* holds the slices of the place it took")
        # Past the skipped step: from here server 1 and the spare hold the only copies.
        self.wait_step(path, proc, 90)
        os.kill(self.pid_of("server", 1), signal.SIGKILL)
        code = self.wait_launch(proc, path)
        out = read(path)
        self.assertEqual(code, 0, out[-4000:])
        self.assertLogHas(out, r"\[worker 0\] .*server 0 .* stopped answering; its slices go on .*spare server 2 .* "
                               r"takes its place")
        self.assertLogHas(out, r"\[worker 0\] .*server 1 .* stopped answering; its slices go on")
        self.assertLogHas(out, r"gradient compression 2bit")
        self.assertLogHas(out, r"step 70 skipped")
        self.assertNotIn("restart", out)
        self.assertSameCheckpoint(prefix + FINAL, ref + FINAL)


if __name__ == "__main__":
    fault_job.main()
