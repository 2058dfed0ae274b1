"""tally.torch under --elastic (docs/python.md, "Elastic workers"): membership changes that
the count of live workers alone cannot tell apart, in real processes (a scheduler, a server,
workers that are each a process, as elastic_test.py starts them):

- two workers join at the same step (after two left): that step's average divides by the
  two workers whose gradients it holds, and the lowest live rank's weights reach both;
- a worker leaves at the very step a new one joins (the live count stays 2): the step
  divides by the one worker left that holds the job's weights, and the joiner gets them.

Each time every live worker ends with the same weights, bit for bit, and they match one
process that applies the same gradients (each worker's data is drawn from a seed it prints)
as the steps' sums counted them. Through DistributedOptimizer and through the DDP hook.

Usage: /usr/bin/python3 elastic_torch_test.py BUILD/python [unittest args]
"""
import os
import re
import subprocess
import tempfile
import textwrap
import time
import unittest

import kv_test
from kv_test import DEAD_TIMEOUT_MS, start_job, write_script

BOUND_S = 300  # how long a process may take to do what the test waits for (ends at once when done)
LR = 0.05
MODEL = "torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))"

# Each worker trains MODEL (with BatchNorm: its buffers, which no gradient pushes, must keep
# every key's step count the job's for a joiner) with plain SGD, from weights of its own (a
# seed of its rank; a joiner's of 1000 + rank). A worker in DIE dies (SIGKILL) just before its push of
# step DIE_AT. Once the file PAUSE exists, the workers that started with the job wait before
# their next step until TARGET workers are live: the joins are then decided while no step is
# applied, so they share their first step F. A worker in LEAVE dies just before its push of
# step F. Every worker stops at step F + 5, then prints its weights (float32 hex).
SCRIPT = textwrap.dedent("""
    import os, signal, time
    import torch
    import tally
    import tally.torch

    kv = tally.kv.create("dist_sync")
    torch.manual_seed(1000 + kv.rank if kv.joined else kv.rank)
    model = eval(MODEL)
    tally.torch.broadcast_parameters(model, kv)
    if MODE == "ddp":
        net = tally.torch.DistributedDataParallel(model, kv)
        opt = torch.optim.SGD(net.parameters(), lr=LR)
    else:
        net = model
        opt = tally.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), kv, model)
    changes = []
    kv.on_membership(lambda epoch, from_step, live: changes.append((epoch, from_step, live)))
    first = kv.first_step if kv.joined else None
    if kv.joined:
        print("joined: first step %d" % first, flush=True)
    i = 0
    while first is None or tally.torch.next_step(kv) < first + 5:
        t = tally.torch.next_step(kv)
        if kv.rank in DIE and not kv.joined and t == DIE_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        if first is None and os.path.exists(PAUSE):
            print("pausing before step %d" % t, flush=True)
            deadline = time.time() + 120
            while kv.num_workers < TARGET:
                assert time.time() < deadline, "no join in 120 s"
                time.sleep(0.01)
            first = max(f for e, f, live in changes)
            print("paused before step %d: the joins count from step %d" % (t, first), flush=True)
        if kv.rank in LEAVE and not kv.joined and first is not None and t == first:
            os.kill(os.getpid(), signal.SIGKILL)
        seed = (1 + kv.rank) * 100000 + (50000 if kv.joined else 0) + i
        g = torch.Generator().manual_seed(seed)
        x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        info = tally.torch.step_info(kv)
        if info is not None and info.step >= t:
            print("gstep %d seed %d counted %s present %s divisor %d"
                  % (info.step, seed, info.counted, info.present, info.divisor), flush=True)
        i += 1
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    print("weights %s" % w.numpy().tobytes().hex(), flush=True)
    print("heard epochs %s" % [e for e, f, live in changes], flush=True)
""")


def steps_of(out):
    """{step: (seed, counted, present, divisor)} of a worker's gstep lines."""
    found = {}
    for m in re.finditer(r"^gstep (\d+) seed (\d+) counted \[([\d, ]*)\] present \[([\d, ]*)\] divisor (\d+)$",
                         out, re.M):
        ranks = [[int(r) for r in g.split(",") if r.strip()] for g in (m.group(3), m.group(4))]
        found[int(m.group(1))] = (int(m.group(2)), ranks[0], ranks[1], int(m.group(5)))
    return found


def reference(logs):
    """The weights one process gets applying, step by step, the mean of the gradients each
    step's sums counted, each on the data of the seed its worker printed (the gradients
    summed in rank order, as the servers do), from worker 0's initial weights. logs:
    {(role, rank): steps_of(its output)}; the counted ranks' own lines hold their seeds."""
    torch = kv_test.torch
    torch.manual_seed(0)
    model = eval(MODEL)
    steps = sorted({s for found in logs.values() for s in found})
    for s in steps:
        agreed = {(tuple(found[s][1]), found[s][3]) for found in logs.values() if s in found}
        assert len(agreed) == 1, (s, agreed)
        counted, divisor = agreed.pop()
        total = None
        for r in counted:
            seeds = [found[s][0] for key, found in logs.items() if s in found and key[1] == r]
            assert len(seeds) == 1, (s, r, seeds)
            g = torch.Generator().manual_seed(seeds[0])
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads = [p.grad.clone() for p in model.parameters()]
            total = grads if total is None else [a + b for a, b in zip(total, grads)]
        with torch.no_grad():
            for p, g in zip(model.parameters(), total):
                p.add_(g / divisor, alpha=-LR)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@unittest.skipIf(kv_test.torch is None, "torch is not importable")
class ElasticTorchTest(unittest.TestCase):
    def run_case(self, mode, workers, die, die_at, target, joiners, leave):
        pause = os.path.join(tempfile.mkdtemp(), "pause")
        head = ("MODEL = %r\nMODE = %r\nLR = %r\nDIE = %r\nDIE_AT = %d\nPAUSE = %r\nTARGET = %d\nLEAVE = %r\n"
                % (MODEL, mode, LR, die, die_at, pause, target, leave))
        procs, output = start_job(self, write_script(head + SCRIPT), workers,
                                  dict(TALLY_ELASTIC="1", TALLY_DEAD_TIMEOUT_MS=str(DEAD_TIMEOUT_MS)))
        stay = [r for r in range(workers) if r not in die]
        # The deaths at DIE_AT are decided: the others' steps count the live ones alone.
        self.wait_for(procs, output, stay, lambda out: re.search(
            r"^gstep \d+ .* present %s " % re.escape(str(stay)), out, re.M), "the leaves")
        open(pause, "w").close()
        # One paused worker holds every step (the others' pushes wait for its), so the joins
        # are decided while no step is applied.
        self.wait_for(procs, output, stay, lambda out: "pausing before step" in out, "the pause", every=False)
        for r in joiners:
            output.start(("joiner", r), r, dict(TALLY_JOIN="1"))
        ends = [("worker", r) for r in stay if r not in leave] + [("joiner", r) for r in joiners]
        deadline = time.time() + BOUND_S
        for key in ends + [("server", 0), ("scheduler", 0)]:
            try:
                procs[key].wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                self.fail("%s still running after %d s:\n%s" % (key, BOUND_S, "\n".join(
                    "--- %s %d:\n%s" % (k[0], k[1], output(k)[-2000:]) for k in procs)))
            self.assertEqual(procs[key].returncode, 0, output(key)[-3000:])
        firsts = {int(re.search(r"joined: first step (\d+)", output(("joiner", r))).group(1)) for r in joiners}
        self.assertEqual(len(firsts), 1, firsts)
        first = firsts.pop()
        weights = {key: re.findall(r"^weights (\w+)$", output(key), re.M) for key in ends}
        self.assertEqual(len({tuple(w) for w in weights.values()}), 1, weights)
        self.assertEqual(len(weights[ends[0]]), 1, weights)
        logs = {key: steps_of(output(key)) for key in procs if key[0] in ("worker", "joiner")}
        # on_membership tells every change once, in order, though the joins come at once: a
        # worker of the start from the first, a joiner from its own join.
        for key in ends:
            heard = re.search(r"^heard epochs \[([\d, ]*)\]$", output(key), re.M)
            self.assertIsNotNone(heard, output(key)[-2000:])
            epochs = [int(e) for e in heard.group(1).split(",") if e.strip()]
            self.assertTrue(epochs and epochs == list(range(epochs[0], epochs[-1] + 1)), (key, epochs))
            if key[0] == "worker":
                self.assertEqual(epochs[0], 1, (key, epochs))
        return first, weights[ends[0]][0], logs, ends

    def wait_for(self, procs, output, ranks, found, what, every=True):
        deadline = time.time() + BOUND_S
        while not (all if every else any)(found(output(("worker", r))) for r in ranks):
            for key in [("worker", r) for r in ranks] + [("server", 0), ("scheduler", 0)]:
                self.assertIsNone(procs[key].poll(), "%s exited early:\n%s" % (key, output(key)[-3000:]))
            self.assertLess(time.time(), deadline, "%s took over %d s" % (what, BOUND_S))
            time.sleep(0.05)

    def check_reference(self, weights, logs):
        torch = kv_test.torch
        got = torch.frombuffer(bytearray(bytes.fromhex(weights)), dtype=torch.float32)
        want = reference(logs)
        diff = (got - want).abs().max().item()
        self.assertLess(diff, 1e-6, (got, want))
        return diff

    def test_two_workers_join_at_the_same_step(self):
        for mode in ("optimizer", "ddp"):
            with self.subTest(mode=mode):
                first, weights, logs, ends = self.run_case(mode, 4, die=[2, 3], die_at=3, target=4,
                                                           joiners=[2, 3], leave=[])
                at = logs["worker", 0][first]
                # The join step holds workers 0 and 1's gradients, divided by 2; the joiners'
                # zeros are there too.
                self.assertEqual((at[1], at[2], at[3]), ([0, 1], [0, 1, 2, 3], 2), at)
                after = logs["worker", 0][max(logs["worker", 0])]
                self.assertEqual((after[1], after[3]), ([0, 1, 2, 3], 4), after)
                for r in (2, 3):
                    self.assertIn(first, logs["joiner", r], "joiner %d: %s" % (r, logs["joiner", r]))
                diff = self.check_reference(weights, logs)
                print("%s: both joiners' first step %d; every worker ends with the same weights, %g from "
                      "the reference" % (mode, first, diff))

    def test_a_leave_at_a_joiners_first_step(self):
        for mode in ("optimizer", "ddp"):
            with self.subTest(mode=mode):
                first, weights, logs, ends = self.run_case(mode, 3, die=[2], die_at=3, target=3,
                                                           joiners=[2], leave=[1])
                at = logs["worker", 0][first]
                # Worker 1 left and worker 2 joined at the same step: the live count stays 2,
                # yet the step holds worker 0's gradients alone.
                self.assertEqual((at[1], at[2], at[3]), ([0], [0, 2], 1), at)
                self.assertEqual(logs["joiner", 2][first][1:], at[1:])
                after = logs["worker", 0][max(logs["worker", 0])]
                self.assertEqual((after[1], after[3]), ([0, 2], 2), after)
                diff = self.check_reference(weights, logs)
                print("%s: worker 1 left at worker 2's first step %d; every worker ends with the same "
                      "weights, %g from the reference" % (mode, first, diff))

    def test_worker_0_leaves_and_a_new_worker_0_joins(self):
        # The lead is the lowest rank that holds the job's weights: worker 1 once worker 0 is
        # gone, also for the new worker 0's broadcast (docs/faults.md, "The lead").
        first, weights, logs, ends = self.run_case("optimizer", 3, die=[0], die_at=3, target=3,
                                                   joiners=[0], leave=[])
        at = logs["worker", 1][first]
        self.assertEqual((at[1], at[2], at[3]), ([1, 2], [0, 1, 2], 2), at)
        after = logs["worker", 1][max(logs["worker", 1])]
        self.assertEqual((after[1], after[3]), ([0, 1, 2], 3), after)
        diff = self.check_reference(weights, logs)
        print("worker 0 left, a new worker 0 joined at step %d; every worker ends with the same weights, %g from "
              "the reference" % (first, diff))


if __name__ == "__main__":
    unittest.main(verbosity=2)
