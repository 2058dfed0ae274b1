"""`tally train --gradient-compression 2bit --gc-threshold T` in a dist_sync job of 2 workers and
1 server through tools/launch.py: every worker says it compresses, the job trains to its end
with finite losses; 1bit under dist_device_sync too, and 2bit between the 2 CPU devices of
one process (--kv-store device); bad settings are refused naming the flag or the kvstore type.

Usage: python3 compression_train_test.py TALLY_BINARY [unittest args]
"""
import math
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "..", "tools", "launch.py")
TALLY = None
TRAIN = ["train", "--num-layers", "8", "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "8",
         "--num-examples", "240", "--num-epochs", "2", "--disp-batches", "10", "--num-val-examples", "16",
         "--seed", "3", "--lr", "0.05", "--progress=false"]


def run(argv, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


class CompressedJobTest(unittest.TestCase):
    def job(self, kv_store, kind, threshold):
        code, out = run([sys.executable, LAUNCH, "-n", "2", "-s", "1", "--launcher", "local", "--", TALLY] + TRAIN +
                        ["--kv-store", kv_store, "--gradient-compression", kind, "--gc-threshold", threshold])
        self.assertEqual(code, 0, out[-4000:])
        for r in (0, 1):
            # Batch means times the batch (8) and the workers (2): MXNet's batch sums.
            self.assertRegex(out, r"\[worker %d\].*kvstore: gradient compression %s, threshold %s for gradients times 16:"
                             % (r, kind, threshold))
            losses = re.findall(r"\[worker %d\] Epoch\[\d\] Train-cross-entropy=(\S+)" % r, out)
            self.assertEqual(len(losses), 2, out[-3000:])
            self.assertTrue(all(math.isfinite(float(v)) for v in losses), losses)

    def test_two_bit_under_dist_sync(self):
        self.job("dist_sync", "2bit", "0.5")

    def test_one_bit_under_dist_device_sync(self):
        self.job("dist_device_sync", "1bit", "0")

    def test_two_bit_between_the_devices_of_one_process(self):
        code, out = run([TALLY] + TRAIN + ["--kv-store", "device", "--cpu-devices", "2", "--gradient-compression", "2bit"])
        self.assertEqual(code, 0, out[-4000:])
        losses = re.findall(r"Epoch\[\d\] Train-cross-entropy=(\S+)", out)
        self.assertEqual(len(losses), 2, out[-3000:])
        self.assertTrue(all(math.isfinite(float(v)) for v in losses), losses)


class RefusalTest(unittest.TestCase):
    def test_an_unknown_type_and_a_bad_threshold(self):
        code, out = run([TALLY] + TRAIN + ["--gradient-compression", "3bit"], timeout=60)
        self.assertNotEqual(code, 0)
        self.assertIn("gradient compression '3bit' is unknown", out)
        code, out = run([TALLY] + TRAIN + ["--gradient-compression", "2bit", "--gc-threshold", "0"], timeout=60)
        self.assertNotEqual(code, 0)
        self.assertIn("threshold must be a positive number", out)

    def test_a_single_process_store(self):
        code, out = run([TALLY] + TRAIN + ["--kv-store", "local", "--gradient-compression", "2bit"], timeout=60)
        self.assertNotEqual(code, 0)
        self.assertIn("gradient compression needs the device kvstore or a dist_* one, not local", out)


if __name__ == "__main__":
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
