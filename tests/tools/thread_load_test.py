"""tools/bench/thread_load.py: CPU per step of a job's threads, from a job that burns a known
amount of CPU a step."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "tools", "bench", "thread_load.py")

# Burns about `ms` of CPU on its main thread, then prints the step as bench replay does.
JOB = r"""
import sys, time
ms = float(sys.argv[1])
for step in range(int(sys.argv[2])):
    t = time.process_time()
    while (time.process_time() - t) * 1000 < ms:
        pass
    print(f"replay worker 0: step {step}: forward 1 ms", flush=True)
"""


class ThreadLoadTest(unittest.TestCase):
    def run_tool(self, *args, ms=40, steps=12):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "load.json")
            job = [sys.executable, "-c", JOB, str(ms), str(steps)]
            r = subprocess.run([sys.executable, TOOL, "--exe", "python", "--json", out, *args, "--", *job],
                               capture_output=True, text=True, timeout=600)
            figures = json.load(open(out)) if os.path.exists(out) else None
            return r, figures

    def test_the_busiest_thread_spends_what_the_job_burns_a_step(self):
        r, figures = self.run_tool("--step-ms", "20")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("step 11:", r.stdout)  # the job's output passes through
        self.assertEqual(figures["steps"], 11 - 3)
        busiest = figures["threads"][0]["ms_per_step"]
        # 40 ms burnt a step, read in clock ticks (10 ms) over 8 steps: within a tick a step or so.
        self.assertGreater(busiest, 25)
        self.assertLess(busiest, 80)
        self.assertAlmostEqual(figures["bound"], min(1.0, 20 / busiest), places=6)
        self.assertIn("at most", r.stdout)

    def test_a_job_without_progress_lines_measures_nothing_and_says_so(self):
        r, figures = self.run_tool("--progress", r"never (\d+)")
        self.assertNotEqual(r.returncode, 0)
        self.assertIsNone(figures)
        self.assertIn("nothing measured", r.stderr)


if __name__ == "__main__":
    unittest.main()
