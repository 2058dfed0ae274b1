"""Gradient compression in real jobs of Python workers under tools/launch.py (secured, as
launch.py starts every job): kv.set_gradient_compression({'type': '2bit', 'threshold': 0.5})
on two workers, the fixtures' gradients pushed (tests/fixtures/gradient_compression.json,
made by tools/make_compression_fixtures.py from MXNet's published algorithm), and what each
worker pulls compared with the fixtures' sums value for value; with two servers and
--server-replicas 1, a key sliced over both servers compared with the reference computed
here for the same pushes; and SGD on the server against the same sums.

Usage: /usr/bin/python3 compression_test.py BUILD/python [unittest args]
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
LAUNCH = os.path.join(ROOT, "tools", "launch.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gradient_compression.json")
sys.path.insert(0, os.path.join(HERE, ".."))
from testutil import import_tally  # noqa: E402 (tests/testutil.py)

PACKAGE_ROOT = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
tally = import_tally(PACKAGE_ROOT)

# argv: fixtures, mode ("none" or "sgd"), big (0 or the values of a key sliced over servers).
SCRIPT = textwrap.dedent("""
    import json
    import sys
    import numpy as np
    import tally
    sys.path.insert(0, %(tools)r)
    import make_compression_fixtures as ref

    fixtures, mode, big = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cases = [c for c in json.load(open(fixtures))["cases"] if c["type"] == "2bit" and c["threshold"] == 0.5]
    assert len(cases) == 2, [c["name"] for c in cases]
    def floats(hexes):
        return np.array([int(h, 16) for h in hexes], np.uint32).view(np.float32)

    kv = tally.kv.create("dist_sync")
    r = kv.rank
    lr = 0.25
    if mode == "sgd":
        kv.set_optimizer(type="sgd", lr=lr, momentum=0.0, wd=0.0)
    kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
    weights = [np.zeros(c["n"], np.float32) for c in cases]
    keys = list(range(len(cases)))
    if big:
        weights.append(np.zeros(big, np.float32))
        keys.append(len(cases))
        residuals = [np.zeros(big, np.float32) for _ in range(2)]
    kv.init(keys, [w.copy() for w in weights])
    want = [w.copy() for w in weights]
    for step in range(len(cases[0]["pushes"])):
        sums = []
        for k, c in enumerate(cases):
            push = c["pushes"][step]
            kv.pushpull(k, floats(push["workers"][r]["grad"]), out=weights[k])
            sums.append(floats(push["sum"]))
        if big:
            grads = [np.random.default_rng(1000 * step + w).uniform(-1, 1, big).astype(np.float32) for w in range(2)]
            kv.pushpull(keys[-1], grads[r], out=weights[-1])
            total = np.zeros(big, np.float32)
            for w in range(2):
                packed, residuals[w] = ref.quantize("2bit", 0.5, grads[w], residuals[w])
                total = (total + ref.dequantize("2bit", 0.5, packed, big)).astype(np.float32)
            sums.append(total)
        for k in keys:
            if mode == "sgd":
                want[k] = (want[k] - np.float32(lr) * sums[k]).astype(np.float32)
                assert np.allclose(weights[k], want[k], rtol=1e-6, atol=1e-6), (step, k, weights[k][:4], want[k][:4])
            else:
                assert weights[k].tobytes() == sums[k].tobytes(), (step, k, weights[k][:4], sums[k][:4])
    print("worker %%d: compressed sums match the reference" %% r, flush=True)
""") % {"tools": os.path.join(ROOT, "tools")}


def run_job(test, mode, servers, big, extra=()):
    d = tempfile.mkdtemp()
    script = os.path.join(d, "job.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    cmd = [sys.executable, LAUNCH, "-n", "2", "-s", str(servers), "--launcher", "local", *extra, "--",
           sys.executable, script, FIXTURES, mode, str(big)]
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=110)
    out = run.stdout + run.stderr
    test.assertEqual(run.returncode, 0, out[-4000:])
    for r in (0, 1):
        test.assertIn("worker %d: compressed sums match the reference" % r, out)


class CompressionJobTest(unittest.TestCase):
    def test_two_workers_pull_the_fixtures_sums(self):
        run_job(self, "none", 1, 0)

    def test_two_servers_with_a_replica_and_a_sliced_key(self):
        run_job(self, "none", 2, 1200000, ("--server-replicas", "1"))

    def test_sgd_on_the_server_applies_the_dequantised_sums(self):
        run_job(self, "sgd", 1, 0)

    def test_a_bad_setting_is_refused_in_python(self):
        kv = tally.kv.create("local")
        with self.assertRaises(ValueError):
            kv.set_gradient_compression({"type": "3bit"})
        with self.assertRaises(TypeError):
            kv.set_gradient_compression({"type": "2bit", "treshold": 0.5})
        with self.assertRaises(tally.TallyError):
            kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})  # local: not a dist type


if __name__ == "__main__":
    unittest.main()
