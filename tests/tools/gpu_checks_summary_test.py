"""tools/gpu_checks_summary.py's account of the one-GPU-worker, two-server jobs and their
emulation (run-gpu-checks.sh twotoone), from logs written as the jobs write them."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools")
sys.path.insert(0, TOOLS)
import gpu_checks_summary as summary  # noqa: E402


def speedometer(speeds):
    return "".join(f"[worker 0] Epoch[0] Batch [{20 * i}-{20 * (i + 1)}]\tSpeed: {v:.2f} samples/sec\t"
                   f"cross-entropy=6.9\n" for i, v in enumerate(speeds))


def replay(step_ms, steps=12):
    starts = [[round(i * step_ms, 3), 1, 0, 2, 0] for i in range(steps + 1)]
    return "REPLAY " + json.dumps({"rank": 0, "steps": starts}) + "\n"


class TwoToOneTest(unittest.TestCase):
    def write(self, d, name, text):
        with open(os.path.join(d, "jobs", name + ".log"), "w") as f:
            f.write(text)

    def test_ratios_are_medians_after_the_warm_up(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "jobs"))
            # The first two lines are warm-up, left out whatever they say.
            self.write(d, "2to1-device", speedometer([10, 10, 7000, 7300, 7200]))
            self.write(d, "2to1-dist-secure", speedometer([1, 1, 3500, 3600, 3550]))
            self.write(d, "2to1-dist-plain", speedometer([1, 1, 3700, 3650, 3690]))
            self.write(d, "2to1-emulation", replay(70.0))
            self.write(d, "2to1-emulation-alone", replay(35.0))
            t = summary.two_to_one(d)
            self.assertEqual(t["samples_per_s"]["2to1-device"], 7200)
            self.assertEqual(t["secure_over_device"], round(3550 / 7200, 3))
            self.assertEqual(t["plain_over_device"], round(3690 / 7200, 3))
            self.assertAlmostEqual(t["emulation_step_s"], 0.070)
            self.assertEqual(t["emulation_ratio"], 0.5)
            out = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu_checks_summary.py"), "--median-speed",
                                  os.path.join(d, "jobs", "2to1-device.log")], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(float(out.stdout), 7200)

    def test_jobs_that_did_not_run_give_none(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "jobs"))
            self.assertIsNone(summary.two_to_one(d))
            self.write(d, "2to1-device", speedometer([10, 10, 7000]))
            t = summary.two_to_one(d)
            self.assertIsNone(t["secure_over_device"])
            self.assertIsNone(t["emulation_ratio"])
            out = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu_checks_summary.py"), "--median-speed",
                                  os.path.join(d, "jobs", "missing.log")], capture_output=True, text=True)
            self.assertNotEqual(out.returncode, 0)


if __name__ == "__main__":
    unittest.main()
