"""Tests of tally.torch (python/tally/torch.py, docs/python.md): two workers and one server
under tools/launch.py train a small CNN with synchronous SGD (tests/python/torch_job.py),
through the DDP hook and through DistributedOptimizer, and must match one process on the
combined batches within 1e-5 at every step (losses) and at the end (weights); torch's own
DDP over gloo must give the same losses; misuse raises clear exceptions.

Usage: /usr/bin/python3 torch_test.py BUILD/python [unittest args]
Without the extension in BUILD/python/tally, or without torch, it prints why and reports
itself skipped.
"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "..", "tools", "launch.py")
JOB = os.path.join(HERE, "torch_job.py")
sys.path.insert(0, os.path.join(HERE, ".."))
from testutil import free_port, import_tally  # noqa: E402 (tests/testutil.py)

PACKAGE_ROOT = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
tally = import_tally(PACKAGE_ROOT)
try:
    import torch
except ImportError:
    print("SKIPPED python: torch is not importable from %s (Debian's python3-torch is, from "
          "/usr/bin/python3)" % sys.executable)
    sys.exit(0)
import tally.torch  # noqa: E402

TOLERANCE = 1e-5


def job_env():
    return dict(os.environ, PYTHONPATH=PACKAGE_ROOT, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def run(cmd, env, what):
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    if done.returncode != 0:
        raise AssertionError("%s failed (status %d):\n%s" % (what, done.returncode, (done.stdout + done.stderr)[-4000:]))


def single(out):
    run([sys.executable, JOB, "single", out], job_env(), "the single process")
    return torch.load(os.path.join(out, "single-0.pt"))


def tally_job(mode, out):
    run([sys.executable, LAUNCH, "-n", "2", "-s", "1", "--launcher", "local", "--", sys.executable, JOB, mode, out],
        job_env(), "the %s job" % mode)
    return [torch.load(os.path.join(out, "%s-%d.pt" % (mode, r))) for r in (0, 1)]


def gloo_job(out):
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, JOB, "gloo", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=dict(job_env(), RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                                  MASTER_PORT=port))
             for r in (0, 1)]
    for r, p in enumerate(procs):
        text = p.communicate(timeout=150)[0]
        if p.returncode != 0:
            raise AssertionError("gloo rank %d failed (status %d):\n%s" % (r, p.returncode, text[-4000:]))
    return [torch.load(os.path.join(out, "gloo-%d.pt" % r)) for r in (0, 1)]


class SyncTrainingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp()
        cls.reference = single(cls.out)

    def assertMatchesReference(self, workers, mode):
        want = self.reference["losses"]
        for r, got in enumerate(workers):
            self.assertEqual(len(got["losses"]), len(want))
            for step, (g, w) in enumerate(zip(got["losses"], want)):
                self.assertLess(abs(g - w[r]), TOLERANCE, "%s worker %d step %d: loss %.8f, single %.8f"
                                % (mode, r, step, g, w[r]))
            for name, w in self.reference["state"].items():
                diff = (got["state"][name] - w).abs().max().item()
                self.assertLess(diff, TOLERANCE, "%s worker %d: %s differs by %g" % (mode, r, name, diff))
        # The reference itself moved: a job that trained nothing cannot pass.
        self.assertGreater(abs(want[0][0] - want[-1][0]), 0.1)

    def test_the_ddp_hook_matches_one_process(self):
        self.assertMatchesReference(tally_job("hook", self.out), "hook")

    def test_the_distributed_optimizer_matches_one_process(self):
        self.assertMatchesReference(tally_job("optimizer", self.out), "optimizer")

    def test_torch_ddp_over_gloo_gives_the_same_losses(self):
        gloo = gloo_job(self.out)
        hook = tally_job("hook", tempfile.mkdtemp())
        for r in (0, 1):
            for step, (g, h) in enumerate(zip(gloo[r]["losses"], hook[r]["losses"])):
                self.assertLess(abs(g - h), TOLERANCE, "worker %d step %d: gloo %.8f, tally hook %.8f" % (r, step, g, h))
        self.assertMatchesReference(gloo, "gloo")


class ErrorTest(unittest.TestCase):
    """What tally.torch refuses, on a local store (no job needed)."""

    def assertRaisesWith(self, exc, words, fn, *args, **kwargs):
        with self.assertRaises(exc) as c:
            fn(*args, **kwargs)
        for w in words:
            self.assertIn(w, str(c.exception))

    def test_a_model_of_float64_parameters(self):
        model = torch.nn.Linear(3, 2).double()
        self.assertRaisesWith(TypeError, ["float64", "key 0"], tally.torch.HookState, tally.kv.create("local"), model)

    def test_not_a_store_and_not_a_model(self):
        model = torch.nn.Linear(3, 2)
        self.assertRaisesWith(TypeError, ["tally.kv.KVStore", "dict"], tally.torch.broadcast_parameters, model, {})
        self.assertRaisesWith(TypeError, ["item 1", "int"], tally.torch.broadcast_parameters,
                              [torch.zeros(2), 3], tally.kv.create("local"))
        self.assertRaisesWith(TypeError, ["torch.optim.Optimizer"], tally.torch.DistributedOptimizer,
                              model, tally.kv.create("local"))
        self.assertRaisesWith(TypeError, ["torch.nn.Module"], tally.torch.DistributedDataParallel,
                              model.state_dict(), tally.kv.create("local"))

    def test_a_tensor_of_another_model(self):
        kv = tally.kv.create("local")
        tally.torch.broadcast_parameters(torch.nn.Linear(3, 2), kv)
        other = torch.nn.Linear(4, 2)
        self.assertRaisesWith(KeyError, ["shape (2, 4)", "not among the 2 tensors"],
                              tally.torch.broadcast_parameters, other, kv)

    def test_a_gradient_it_cannot_send_and_parameters_of_another_model(self):
        model = torch.nn.Linear(3, 2)
        kv = tally.kv.create("local")
        opt = tally.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), kv)
        model.weight.grad = torch.zeros(3, 2).t()
        self.assertRaisesWith(ValueError, ["key 0", "contiguous"], opt.step)
        other = torch.nn.Linear(3, 5)
        self.assertRaisesWith(KeyError, ["shape (5, 3)", "not among"], tally.torch.DistributedOptimizer,
                              torch.optim.SGD(other.parameters(), lr=0.1), kv)

    def test_a_gpu_tensor_is_refused_by_name(self):
        meta = torch.nn.Linear(3, 2, device="meta")
        self.assertRaisesWith(ValueError, ["meta", "CPU"], tally.torch.broadcast_parameters, meta,
                              tally.kv.create("local"))


class OneProcessTest(unittest.TestCase):
    """With one worker (a local store), the hook and the optimizer leave training unchanged."""

    def test_the_hook_and_the_optimizer_train_as_plain_sgd(self):
        torch.manual_seed(0)
        x, y = torch.randn(4, 6, 3), torch.randn(4, 6, 2)
        results = []
        for how in ("plain", "hook", "optimizer"):
            torch.manual_seed(1)
            model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
            net, opt = model, torch.optim.SGD(model.parameters(), lr=0.1)
            if how == "hook":
                net = tally.torch.DistributedDataParallel(model, tally.kv.create("local"))
            elif how == "optimizer":
                opt = tally.torch.DistributedOptimizer(opt, tally.kv.create("local"))
            for step in range(4):
                opt.zero_grad()
                torch.nn.functional.mse_loss(net(x[step]), y[step]).backward()
                opt.step()
            results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        torch.manual_seed(1)
        start = torch.cat([p.detach().flatten() for p in torch.nn.Sequential(
            torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).parameters()])
        self.assertGreater((results[0] - start).abs().max().item(), 1e-3, "plain SGD did not move the weights")
        torch.testing.assert_close(results[1], results[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(results[2], results[0], rtol=0, atol=1e-6)


if __name__ == "__main__":
    unittest.main(verbosity=2)
