"""The disk fills up while a checkpoint is written: --model-prefix is on a small tmpfs that
holds two checkpoints and half of a third.

The job exits non-zero with an error naming the file, leaves no partial file behind, and
the latest checkpoint on disk still loads: once space is freed, the same command with
--resume auto (or a restart by `tools/launch.py --max-restarts`) continues from it and ends
with an uninterrupted run's final weights.

Needs root (mount -t tmpfs); without it the test says so and is skipped.

Usage: python3 disk_full_test.py TALLY_BINARY [unittest args]
"""
import os
import re
import subprocess
import sys
import time
import unittest

import fault_job
from fault_job import FINAL, FaultCase

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import read_tensors  # noqa: E402 (tests/testutil.py)

PAGE = 4096


def pages(n):
    return (n + PAGE - 1) // PAGE * PAGE


class DiskFullTest(FaultCase):
    def setUp(self):
        super().setUp()
        self.ref = self.reference()
        params, states = (os.path.getsize(self.ref + ext) for ext in (".params", ".states"))
        # Checkpoints 1 and 2, then the third's .params and half of its .states.
        size = 2 * (pages(params) + pages(states)) + pages(params) + pages(states // 2)
        self.mount = os.path.join(self.dir, "disk")
        os.mkdir(self.mount)
        try:
            if os.geteuid() != 0:
                raise OSError("needs root (mount -t tmpfs)")
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", self.mount],
                           check=True, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as e:
            why = getattr(e, "stderr", None) or str(e)
            print("\nSKIPPED DiskFullTest: mount -t tmpfs: %s" % why.strip(), file=sys.stderr)
            raise unittest.SkipTest(why)
        self.addCleanup(subprocess.run, ["umount", "-l", self.mount], capture_output=True)
        self.prefix = os.path.join(self.mount, "m")

    def free_space(self):
        subprocess.run(["mount", "-o", "remount,size=64m", self.mount], check=True, timeout=20)

    def assertFailedNamingTheFile(self, out):
        self.assertLogHas(out, r"\[worker 0\] tally train: checkpoint after epoch 2: .*%s-0003\.(params|states)"
                          % re.escape(self.prefix))
        self.assertLogHas(out, r"No space left on device")
        self.assertLogHas(out, r"launch.py: worker 0 on localhost exited with status 1")

    def assertLatestLoads(self):
        """m-0002 is whole and m-0003 was never put in place; nothing half-written is left
        (m-symbol.json, MXNet's view of the network, is written with each checkpoint)."""
        names = sorted(os.listdir(self.mount))
        self.assertEqual(names, ["m-0001.params", "m-0001.states", "m-0002.params", "m-0002.states",
                                 "m-symbol.json"])
        _, params = read_tensors(self.prefix + "-0002.params")
        _, states = read_tensors(self.prefix + "-0002.states")
        self.assertEqual(params["checkpoint"], states["checkpoint"])
        self.assertEqual(params["epoch"], "2")

    def test_full_disk_fails_naming_the_file_then_resume_after_freeing_space(self):
        code, out = self.run_launch(self.prefix, "full", extra=["--resume", "auto"])
        self.assertNotEqual(code, 0, out[-4000:])
        self.assertFailedNamingTheFile(out)
        self.assertLatestLoads()
        self.free_space()
        code, out = self.run_launch(self.prefix, "resume", extra=["--resume", "auto"])
        self.assertEqual(code, 0, out[-4000:])
        self.assertLogHas(out, r"resuming from %s-0002\.params" % re.escape(self.prefix))
        self.assertSameCheckpoint(self.prefix + FINAL, self.ref)

    def test_restart_after_space_is_freed_resumes(self):
        proc, path = self.start_launch(self.prefix, "restart", ["--max-restarts", "1"], ["--resume", "auto"])
        deadline = time.time() + 120
        while "stopping the job" not in fault_job.read(path):
            if proc.poll() is not None or time.time() > deadline:
                self.fail("the job did not fail on the full disk:\n" + fault_job.tail(path))
            time.sleep(0.02)
        # The restarted job trains an epoch before it saves again: time enough to free space.
        self.free_space()
        code = self.wait_launch(proc, path)
        out = fault_job.read(path)
        self.assertEqual(code, 0, out[-4000:])
        self.assertFailedNamingTheFile(out)
        self.assertLogHas(out, r"launch.py: restart 1 of 1 after worker 0 on localhost exited with status 1")
        self.assertLogHas(out, r"resuming from %s-0002\.params" % re.escape(self.prefix))
        self.assertSameCheckpoint(self.prefix + FINAL, self.ref)


if __name__ == "__main__":
    fault_job.main()
