"""tally.kv under --elastic (TALLY_ELASTIC=1; docs/python.md, "Elastic workers"): a killed
worker leaves and the others' sums count the live workers; a new process with TALLY_JOIN=1
joins the running job at its rank, receives the job's values in its init, pushes from the
step the scheduler and servers agreed on, and every sum counts it again.

Usage: /usr/bin/python3 elastic_test.py BUILD/python [unittest args]
(kv_test.py, imported, takes BUILD/python and skips without the extension.)
"""
import os
import re
import signal
import subprocess
import textwrap
import time
import unittest

import kv_test
from kv_test import DEAD_TIMEOUT_MS, start_job, wait_for_step, write_script

# How long a process may take to do what the test waits for: generous, for a slow machine;
# each wait ends as soon as the thing happens.
BOUND_S = 300

# Every worker pushes ones, so each step's pulled sum is the workers it counted. Each prints
# each step as the job numbers it (a joiner starts at kv.first_step). Workers stop 3 steps
# after the first step whose sum counts 3 workers again after a step that counted 2 (the same
# step for every worker, from the servers' answers; a joiner's first step is that step), then
# wait to hear of the last change. Run by workers 0 and 1 of both tests, worker 2 runs until
# killed, and in the second test a new worker 2 joins.
ELASTIC_SCRIPT = textwrap.dedent("""
    import time
    import numpy as np
    import tally

    kv = tally.kv.create("dist_sync")
    heard = []
    kv.on_membership(lambda epoch, from_step, live: heard.append((epoch, from_step, live)))
    w = np.zeros(1000, np.float32)
    kv.init(0, w)
    if kv.joined:
        print("joined: first step %d, init values %g, num_workers %d" % (kv.first_step, w[0], kv.num_workers),
              flush=True)
    step, last, saw_fewer = kv.first_step, None, kv.joined
    while last is None or step <= last:
        kv.pushpull(0, np.ones(1000, np.float32), out=w)
        kv.wait_all()
        n = kv.summed_workers
        print("step %d sum %g summed %d num_workers %d" % (step, w[0], n, kv.num_workers), flush=True)
        assert (w == n).all(), (step, w[:3], n)
        saw_fewer = saw_fewer or n < 3
        if last is None and saw_fewer and (n == 3 or ONLY_LEAVE):
            last = step + 3
        step += 1
    deadline = time.time() + 60
    while (not heard or len(heard[-1][2]) != kv.num_workers) and time.time() < deadline:
        kv.num_workers  # calls the callbacks of a change heard of
        time.sleep(0.01)
    print("worker %d heard %s, num_workers %d" % (kv.rank, heard, kv.num_workers), flush=True)
""")

# tally.torch's DistributedOptimizer on a small linear model, plain SGD: every process starts
# from weights of its own (seeded by its pid), broadcast_parameters makes them worker 0's, and
# a joiner gets them after its first step (it pushes zeros there). Each training step prints
# the workers it averaged; workers stop 3 steps after a join step (the same step everywhere)
# and print a digest of their weights, which must be equal on every worker.
TORCH_SCRIPT = textwrap.dedent("""
    import hashlib, os
    import torch
    import tally
    import tally.torch

    def digest(model):
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        return hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]

    torch.manual_seed(os.getpid())
    kv = tally.kv.create("dist_sync")
    model = torch.nn.Linear(8, 4)
    tally.torch.broadcast_parameters(model, kv)
    if kv.joined:
        print("joiner's own weights %s" % digest(model), flush=True)
    if MODE == "ddp":  # the hook; the broadcast after a join comes before the next forward
        ddp = tally.torch.DistributedDataParallel(model, kv)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    else:
        ddp = model
        opt = tally.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), kv, model)
    data = torch.Generator().manual_seed(kv.rank)
    step, last, counts = 0, None, []
    while last is None or step <= last:
        x, y = torch.randn(16, 8, generator=data), torch.randn(16, 4, generator=data)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        counts.append(kv.summed_workers)
        print("tstep %d summed %d" % (step, counts[-1]), flush=True)
        joined = kv.joined and step == 0 or len(counts) > 1 and counts[-1] > counts[-2]
        if last is None and joined:
            last = step + 3
        step += 1
    print("weights %s" % digest(model), flush=True)
""")


def script(only_leave):
    return write_script("ONLY_LEAVE = %s\n" % only_leave + ELASTIC_SCRIPT)


class ElasticTest(unittest.TestCase):
    def start(self, only_leave):
        procs, output = start_job(self, script(only_leave), 3,
                                  dict(TALLY_ELASTIC="1", TALLY_DEAD_TIMEOUT_MS=str(DEAD_TIMEOUT_MS)))
        wait_for_step(self, procs, output, 3)
        os.kill(procs["worker", 2].pid, signal.SIGKILL)
        return procs, output

    def wait_all_exit_0(self, procs, output, keys):
        deadline = time.time() + BOUND_S
        for key in keys:
            try:
                procs[key].wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                self.fail("%s still running %d s after worker 2 was killed:\n%s" % (key, BOUND_S, "\n".join(
                    "--- %s %d:\n%s" % (k[0], k[1], output(k)[-1500:]) for k in procs)))
            self.assertEqual(procs[key].returncode, 0, output(key)[-3000:])

    def wait_for_sums_of_two(self, procs, output, text):
        """Once both others sum two workers, the leave is decided: a new worker 2 may join."""
        deadline = time.time() + BOUND_S
        while not all(text in output(("worker", r)) for r in (0, 1)):
            for key in [("worker", 0), ("worker", 1), ("server", 0), ("scheduler", 0)]:
                self.assertIsNone(procs[key].poll(), "%s exited early:\n%s" % (key, output(key)[-3000:]))
            self.assertLess(time.time(), deadline, "the leave was not decided in %d s" % BOUND_S)
            time.sleep(0.05)

    def heard(self, out, rank):
        lines = [line for line in out.splitlines() if line.startswith("worker %d heard" % rank)]
        self.assertEqual(len(lines), 1, out[-3000:])
        return lines[0]

    def test_a_killed_worker_leaves_and_the_others_count_and_hear_the_live_workers(self):
        procs, output = self.start(only_leave=True)
        self.wait_all_exit_0(procs, output, [("worker", 0), ("worker", 1), ("server", 0), ("scheduler", 0)])
        for r in (0, 1):
            out = output(("worker", r))
            self.assertIn("sum 3 summed 3 num_workers 3", out)
            self.assertIn("sum 2 summed 2 num_workers 2", out)
            heard = self.heard(out, r)
            self.assertRegex(heard, r"heard \[\(1, \d+, \[0, 1\]\)\], num_workers 2$")
            print(heard)

    def test_a_new_worker_joins_and_the_sums_count_three_then_two_then_three(self):
        procs, output = self.start(only_leave=False)
        self.wait_for_sums_of_two(procs, output, "summed 2")
        output.start(("joiner", 2), 2, dict(TALLY_JOIN="1"))
        self.wait_all_exit_0(procs, output, [("worker", 0), ("worker", 1), ("joiner", 2), ("server", 0),
                                             ("scheduler", 0)])
        joined = output(("joiner", 2))
        found = re.search(r"joined: first step (\d+), init values 2, num_workers 3", joined)
        self.assertIsNotNone(found, joined[-3000:])
        first = int(found.group(1))
        for r in (0, 1):
            out = output(("worker", r))
            sums = [int(n) for n in re.findall(r"^step \d+ sum \d+ summed (\d+)", out, re.M)]
            # 3, then 2, then 3 workers, in that order, each for a run of steps.
            runs = [n for i, n in enumerate(sums) if i == 0 or sums[i - 1] != n]
            self.assertEqual(runs, [3, 2, 3], out[-3000:])
            self.assertIn("step %d sum 3 summed 3 num_workers 3" % first, out)
            self.assertIn("step %d sum 2 summed 2" % (first - 1), out)
            heard = self.heard(out, r)
            self.assertRegex(heard, r"heard \[\(1, \d+, \[0, 1\]\), \(2, %d, \[0, 1, 2\]\)\], num_workers 3$" % first)
            print(heard)
        self.assertIn("step %d sum 3 summed 3 num_workers 3" % first, joined)
        self.assertRegex(self.heard(joined, 2), r"heard \[\(2, %d, \[0, 1, 2\]\)\], num_workers 3$" % first)
        print(found.group(0))

    @unittest.skipIf(kv_test.torch is None, "torch is not importable")
    def test_torch_a_joiner_takes_worker_0s_weights_and_every_worker_ends_with_the_same(self):
        for mode in ("optimizer", "ddp"):
            with self.subTest(mode=mode):
                self.torch_join(mode)

    def torch_join(self, mode):
        procs, output = start_job(self, write_script("MODE = %r\n" % mode + TORCH_SCRIPT), 3,
                                  dict(TALLY_ELASTIC="1", TALLY_DEAD_TIMEOUT_MS=str(DEAD_TIMEOUT_MS)))
        wait_for_step(self, procs, output, 3, word="tstep")
        os.kill(procs["worker", 2].pid, signal.SIGKILL)
        self.wait_for_sums_of_two(procs, output, "summed 2")
        output.start(("joiner", 2), 2, dict(TALLY_JOIN="1"))
        self.wait_all_exit_0(procs, output, [("worker", 0), ("worker", 1), ("joiner", 2), ("server", 0),
                                             ("scheduler", 0)])
        digests = {key: re.findall(r"^weights (\w+)$", output(key), re.M) for key in
                   [("worker", 0), ("worker", 1), ("joiner", 2)]}
        self.assertEqual(len({tuple(d) for d in digests.values()}), 1, digests)
        self.assertEqual(len(digests["worker", 0]), 1, digests)
        own = re.search(r"joiner's own weights (\w+)", output(("joiner", 2)))
        self.assertIsNotNone(own, output(("joiner", 2))[-3000:])
        self.assertNotEqual(own.group(1), digests["worker", 0][0])
        for r in (0, 1):
            sums = [int(n) for n in re.findall(r"^tstep \d+ summed (\d+)", output(("worker", r)), re.M)]
            self.assertEqual([n for i, n in enumerate(sums) if i == 0 or sums[i - 1] != n], [3, 2, 3],
                             output(("worker", r))[:2000])
        print("%s: every worker ends with weights %s (the joiner started from %s)"
              % (mode, digests["worker", 0][0], own.group(1)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
