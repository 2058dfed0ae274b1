"""Tests of the tally Python extension (python/, docs/python.md): tally.kv's semantics, its
zero-copy arrays (NumPy and torch), its errors, a dist_sync job of Python workers under
tools/launch.py, and a killed server making every worker raise (--elastic: elastic_test.py).

Usage: /usr/bin/python3 kv_test.py BUILD/python [unittest args]
Without the extension in BUILD/python/tally (pybind11 or the Python headers were missing
when the build was configured) it prints why and reports itself skipped.
"""
import gc
import os
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "..", "tools", "launch.py")
sys.path.insert(0, os.path.join(HERE, ".."))
from testutil import free_port, import_tally  # noqa: E402 (tests/testutil.py)

PACKAGE_ROOT = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
tally = import_tally(PACKAGE_ROOT)

try:
    import torch
except ImportError:
    torch = None
needs_torch = unittest.skipIf(torch is None, "torch is not importable from %s" % sys.executable)

# Within this after a node dies, every other node knows (TALLY_DEAD_TIMEOUT_MS below, plus
# the heartbeat and the process start): docs/faults.md.
DEAD_TIMEOUT_MS = 1000
RAISE_WITHIN_S = 5.0


def f32(*values):
    return np.array(values, dtype=np.float32)


class LocalTest(unittest.TestCase):
    def test_without_optimizer_a_push_replaces_the_value_and_pull_copies_it(self):
        kv = tally.kv.create("local")
        kv.init(3, f32(1, 2, 3, 4))
        out = np.zeros(4, np.float32)
        kv.pull(3, out=out)
        np.testing.assert_array_equal(out, f32(1, 2, 3, 4))
        kv.push(3, f32(5, 6, 7, 8))
        kv.pull(3, out=out)
        kv.wait_all()
        np.testing.assert_array_equal(out, f32(5, 6, 7, 8))
        self.assertEqual((kv.type, kv.rank, kv.num_workers), ("local", 0, 1))

    def test_the_devices_values_are_summed(self):
        for kind in ("local", "device"):
            kv = tally.kv.create(kind, num_devices=2)
            kv.init(0, np.zeros(3, np.float32))
            kv.push(0, [f32(1, 2, 3), f32(10, 20, 30)])
            outs = [np.zeros(3, np.float32), np.zeros(3, np.float32)]
            kv.pull(0, out=outs)
            for out in outs:
                np.testing.assert_array_equal(out, f32(11, 22, 33), kind)

    def test_pushpull_applies_sgd_to_each_key_of_a_list(self):
        kv = tally.kv.create("local")
        kv.set_optimizer(type="sgd", lr=0.5, momentum=0.0, wd=0.0, rescale_grad=2.0)
        kv.init([0, 1], [f32(1, 1), f32(4, 4, 4)])
        outs = [np.zeros(2, np.float32), np.zeros(3, np.float32)]
        kv.pushpull([0, 1], [f32(1, 2), f32(0.5, 0.5, 0.5)], out=outs)
        kv.wait_all()
        np.testing.assert_allclose(outs[0], f32(0, -1))        # 1 - 0.5 * 2 * g
        np.testing.assert_allclose(outs[1], f32(3.5, 3.5, 3.5))

    def test_pushpull_without_out_updates_the_value_in_place(self):
        kv = tally.kv.create("local")
        kv.init(0, f32(0, 0))
        grads = f32(3, 4)
        kv.pushpull(0, grads)
        np.testing.assert_array_equal(grads, f32(3, 4))

    def test_float16_values_on_a_float32_key(self):
        kv = tally.kv.create("local")
        kv.init(0, np.zeros(3, np.float32))
        kv.push(0, np.array([0.5, 1.5, -2], np.float16))
        out = np.zeros(3, np.float16)
        kv.pull(0, out=out)
        np.testing.assert_array_equal(out, np.array([0.5, 1.5, -2], np.float16))

    def test_optimizer_states_survive_a_file(self):
        def store(w):
            kv = tally.kv.create("local")
            kv.set_optimizer(type="sgd", lr=0.1, momentum=0.9, wd=0.0)
            kv.init(0, w.copy())
            return kv

        g = f32(1, -1, 2)
        w = f32(0, 0, 0)
        kv = store(w)
        for _ in range(2):
            kv.pushpull(0, g, out=w)
        path = os.path.join(tempfile.mkdtemp(), "m.states")
        kv.save_optimizer_states(path)
        keys, states = tally.kv.read_optimizer_states(path)
        self.assertEqual(keys, [0])
        self.assertTrue(np.any(states[0] != 0), "the momentum after two steps is zero")
        at_step2 = w.copy()
        kv.pushpull(0, g, out=w)  # step 3, uninterrupted

        resumed_w = at_step2.copy()
        resumed = store(resumed_w)
        resumed.load_optimizer_states(path)
        resumed.pushpull(0, g, out=resumed_w)
        np.testing.assert_array_equal(resumed_w, w)
        # Without the states the third step differs: the file is what made them equal.
        fresh_w = at_step2.copy()
        store(fresh_w).pushpull(0, g, out=fresh_w)
        self.assertFalse(np.allclose(fresh_w, w))

    def test_adam_by_mxnets_names_and_its_states_survive_a_file(self):
        def store(w):
            kv = tally.kv.create("local")
            kv.set_optimizer("adam", learning_rate=0.05, beta1=0.8, beta2=0.99, eps=1e-3, wd=0.01,
                             rescale_grad=0.5, clip_gradient=None, lazy_update=True)
            kv.init(0, w.copy())
            return kv

        grads = [f32(1, -1, 2), f32(0.5, 0.25, -3), f32(-2, 1, 1)]
        w = f32(0.5, -0.25, 1)
        kv = store(w)
        # MXNet 1.9.1's Adam, in float64: the weight decay joins the rescaled gradient, the
        # bias correction goes into the lr.
        ref, m, v = w.astype(np.float64), np.zeros(3), np.zeros(3)
        for t, g in enumerate(grads[:2], start=1):
            kv.pushpull(0, g, out=w)
            gr = 0.5 * g + 0.01 * ref
            m, v = 0.8 * m + 0.2 * gr, 0.99 * v + 0.01 * gr * gr
            ref = ref - 0.05 * np.sqrt(1 - 0.99 ** t) / (1 - 0.8 ** t) * m / (np.sqrt(v) + 1e-3)
            np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-6)
        path = os.path.join(tempfile.mkdtemp(), "adam.states")
        kv.save_optimizer_states(path)
        keys, states = tally.kv.read_optimizer_states(path)
        self.assertEqual(states[0].size, 9)  # mean, var and the update count, 3 values each
        np.testing.assert_allclose(states[0][:6], np.concatenate([m, v]), rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(states[0][6:], [2, 2, 2])
        at_step2 = w.copy()
        kv.pushpull(0, grads[2], out=w)
        resumed_w = at_step2.copy()
        resumed = store(resumed_w)
        resumed.load_optimizer_states(path)
        resumed.pushpull(0, grads[2], out=resumed_w)
        np.testing.assert_array_equal(resumed_w, w)

    def test_the_optimizers_settings_are_checked_by_name(self):
        kv = tally.kv.create("local")
        for exc, words, args, kwargs in ((ValueError, ["beta1"], ("lamb",), dict(beta1=1.0)),
                                         (ValueError, ["--optimizer", "adamax"], ("adamax",), {}),
                                         (TypeError, ["gamma3"], ("rmsprop",), dict(gamma3=0.5)),
                                         (TypeError, ["eps", "epsilon"], ("lars",), dict(eps=0.1, epsilon=0.1))):
            with self.assertRaises(exc) as c:
                kv.set_optimizer(*args, **kwargs)
            for w in words:
                self.assertIn(w, str(c.exception))
        kv.set_optimizer("lars", lr=0.1, momentum=0.9, eta=0.001, eps=0.0, momentum_correction=False)

    def test_no_wd_keys_and_wd_mult_leave_weight_decay_out(self):
        # sgd, lr 0.1, wd 0.5, a zero gradient: a key with weight decay shrinks by 5% a step,
        # one without stays.
        for exclusion in (dict(no_wd_keys=[0, 2]), dict(wd_mult={0: 0.0, 1: 1.0, 2: 0})):
            kv = tally.kv.create("local")
            kv.set_optimizer("sgd", lr=0.1, momentum=0.0, wd=0.5, **exclusion)
            kv.init([0, 1, 2], [f32(1, 2), f32(1, 2), f32(4)])
            outs = [np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros(1, np.float32)]
            kv.pushpull([0, 1, 2], [np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros(1, np.float32)],
                        out=outs)
            np.testing.assert_array_equal(outs[0], f32(1, 2), str(exclusion))
            np.testing.assert_allclose(outs[1], f32(0.95, 1.9), rtol=1e-6, err_msg=str(exclusion))
            np.testing.assert_array_equal(outs[2], f32(4), str(exclusion))
        kv = tally.kv.create("local")
        for exc, words, kwargs in ((ValueError, ["wd_mult", "key 1", "0.5"], dict(wd_mult={1: 0.5})),
                                   (ValueError, ["no_wd_keys", "-3"], dict(no_wd_keys=[-3])),
                                   (TypeError, ["no_wd_keys", "'bias'"], dict(no_wd_keys=["bias"])),
                                   (TypeError, ["wd_mult", "'fc_bias'"], dict(wd_mult={"fc_bias": 0.0}))):
            with self.assertRaises(exc) as c:
                kv.set_optimizer("sgd", **kwargs)
            for w in words:
                self.assertIn(w, str(c.exception))


class ZeroCopyTest(unittest.TestCase):
    def test_a_pull_writes_into_the_callers_memory(self):
        kv = tally.kv.create("local")
        kv.init(7, f32(1, 2, 3))
        buf = np.zeros(8, np.float32)
        kv.pull(7, out=buf[2:5])  # a contiguous view: the values must land in buf itself
        np.testing.assert_array_equal(buf, f32(0, 0, 1, 2, 3, 0, 0, 0))

    def test_the_store_holds_a_reference_while_it_uses_the_array(self):
        kv = tally.kv.create("local")
        kv.init(0, f32(1, 2))
        out = np.zeros(2, np.float32)
        before = sys.getrefcount(out)
        kv.pull(0, out=out)  # the local store keeps its last pull's outputs (rollback)
        self.assertEqual(sys.getrefcount(out), before + 1)
        kv.close()
        gc.collect()
        self.assertEqual(sys.getrefcount(out), before)

    @needs_torch
    def test_torch_tensors_of_every_dtype(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            kv = tally.kv.create("local")
            kv.init(0, torch.tensor([1.0, 2.0, 3.0], dtype=dtype))
            kv.push(0, torch.tensor([0.5, -4.0, 8.0], dtype=dtype))
            out = torch.zeros(2, 3, dtype=dtype)
            kv.pull(0, out=out[1])  # row 1 of out: its memory, not a copy
            self.assertEqual(out[1].tolist(), [0.5, -4.0, 8.0], dtype)
            self.assertEqual(out[0].tolist(), [0.0, 0.0, 0.0], dtype)

    @needs_torch
    def test_a_tensor_that_requires_grad_is_used_as_it_is(self):
        kv = tally.kv.create("local")
        w = torch.zeros(4, requires_grad=True)
        kv.init(0, torch.ones(4))
        kv.pull(0, out=w)
        self.assertEqual(w.tolist(), [1.0] * 4)


class ErrorTest(unittest.TestCase):
    def setUp(self):
        self.kv = tally.kv.create("local")
        self.kv.init(5, f32(1, 2, 3, 4))

    def assertRaisesWith(self, exc, words, fn, *args, **kwargs):
        with self.assertRaises(exc) as c:
            fn(*args, **kwargs)
        for w in words:
            self.assertIn(w, str(c.exception))

    def test_a_value_of_another_dtype(self):
        self.assertRaisesWith(TypeError, ["push", "key 5", "float64", "float32"],
                              self.kv.push, 5, np.zeros(4))
        self.assertRaisesWith(TypeError, ["key 5", "int32"], self.kv.push, 5, np.zeros(4, np.int32))
        self.assertRaisesWith(TypeError, ["key 5", "uint16"], self.kv.push, 5, np.zeros(4, np.uint16))
        self.assertRaisesWith(TypeError, ["key 5", "list"], self.kv.pull, 5, out=[[1, 2, 3, 4]])

    def test_a_non_contiguous_array(self):
        self.assertRaisesWith(ValueError, ["pull", "key 5", "contiguous"],
                              self.kv.pull, 5, out=np.zeros(8, np.float32)[::2])

    def test_the_wrong_size(self):
        self.assertRaisesWith(ValueError, ["key 5", "3 values", "the key has 4"], self.kv.push, 5, f32(1, 2, 3))

    def test_an_unknown_key(self):
        self.assertRaisesWith(KeyError, ["key 9", "init"], self.kv.pull, 9, out=f32(0))
        self.assertRaisesWith(TypeError, ["'w'", "not an int"], self.kv.push, "w", f32(0))

    def test_a_key_initialised_twice(self):
        self.assertRaisesWith(ValueError, ["key 5", "already"], self.kv.init, 5, f32(1, 2, 3, 4))

    def test_a_read_only_output(self):
        out = np.zeros(4, np.float32)
        out.setflags(write=False)
        self.assertRaisesWith(ValueError, ["key 5", "read-only"], self.kv.pull, 5, out=out)

    def test_bad_store_types_and_optimizer_settings(self):
        self.assertRaisesWith(ValueError, ["'mxnet'", "dist_sync"], tally.kv.create, "mxnet")
        self.assertRaisesWith(ValueError, ["set_optimizer", "adamax"], self.kv.set_optimizer, type="adamax")
        self.assertRaisesWith(TypeError, ["'beta3'"], self.kv.set_optimizer, beta3=0.9)

    def test_a_distributed_store_outside_a_job(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
        run = subprocess.run([sys.executable, "-c", "import tally; tally.kv.create('dist_sync')"],
                             env=dict(env, PYTHONPATH=PACKAGE_ROOT), capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("TallyError", run.stderr)
        self.assertIn("DMLC_ROLE is not set", run.stderr)
        self.assertTrue(issubclass(tally.TallyError, RuntimeError))

    def test_a_broken_optimizer_states_file(self):
        path = os.path.join(tempfile.mkdtemp(), "bad.states")
        with open(path, "wb") as f:
            f.write(b"NOTSTATES" + bytes(20))
        self.assertRaisesWith(ValueError, [path, "magic"], self.kv.load_optimizer_states, path)
        self.kv.save_optimizer_states(path)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 1)
        self.assertRaisesWith(ValueError, [path, "truncated"], self.kv.load_optimizer_states, path)

    def test_crafted_optimizer_states_files_name_the_offset_and_field(self):
        path = os.path.join(tempfile.mkdtemp(), "crafted.states")
        head = lambda count: b"TALLYOPT" + struct.pack("<II", 1, count)
        entry = lambda key, flags, n: struct.pack("<iIq", key, flags, n)
        cases = [
            # 2^32 - 1 keys in a 16-byte file: refused before any entry is looked at.
            (head(0xFFFFFFFF), "byte 12: the key count: 4294967295 keys, but the file is truncated: the 0 bytes"),
            # 2^61 values declared, 4 bytes present.
            (head(1) + entry(0, 1, 1 << 61) + bytes(4),
             "byte 32: entry 0's values: truncated: key 0's 2305843009213693952 float32 values"),
            (head(1) + entry(0, 1, -1), "byte 24: entry 0's value count: -1 is negative"),
            (head(1) + entry(0, 6, 0), "byte 20: entry 0's flags: unknown bits 0x6"),
            (head(2) + entry(3, 0, 4) + entry(3, 0, 4), "byte 32: entry 1's key: 3 after key 3"),
            (head(1) + entry(0, 0, 4) + b"x", "byte 32: the end: 1 bytes after the last entry"),
            (b"TALLYOPT" + struct.pack("<II", 2, 0), "byte 8: the version: 2"),
        ]
        for data, words in cases:
            with open(path, "wb") as f:
                f.write(data)
            self.assertRaisesWith(ValueError, [path + ": " + words], tally.kv.read_optimizer_states, path)

    @needs_torch
    def test_torch_tensors_it_cannot_take(self):
        self.assertRaisesWith(TypeError, ["key 5", "torch.int32"], self.kv.push, 5, torch.zeros(4, dtype=torch.int32))
        self.assertRaisesWith(ValueError, ["key 5", "contiguous"], self.kv.push, 5, torch.zeros(2, 4).t()[0])


# Every role runs this script: `import tally` serves the scheduler's and the server's role.
DIST_SCRIPT = textwrap.dedent("""
    import sys
    import threading
    import time
    import numpy as np
    import tally

    kv = tally.kv.create("dist_sync")
    r, n = kv.rank, kv.num_workers
    if sys.argv[1] == "sgd":
        kv.set_optimizer(type="sgd", lr=0.1, momentum=0.0, wd=0.0)
    elif sys.argv[1] == "no_wd":  # weight decay on key 0 only: key 1 is left out on the servers
        kv.set_optimizer(type="sgd", lr=0.1, momentum=0.0, wd=0.5, no_wd_keys=[1])
    w0 = np.zeros(1000, np.float32)
    w1 = np.zeros(7, np.float16)
    kv.init([0, 1], [w0, w1])
    total = sum(range(1, n + 1))  # worker r pushes r + 1
    for step in range(3):
        kv.pushpull(0, np.full(1000, r + 1, np.float32), out=w0, priority=0)
        kv.pushpull(1, np.full(7, 2 * (r + 1), np.float16), out=w1, priority=-1)
        kv.wait_all()
        if sys.argv[1] == "sgd":
            want0, want1 = -0.1 * total * (step + 1), -0.1 * 2 * total * (step + 1)
        elif sys.argv[1] == "no_wd":
            want0 = want0 * 0.95 - 0.1 * total if step else -0.1 * total
            want1 = -0.1 * 2 * total * (step + 1)
        else:
            want0, want1 = total, 2 * total
        assert np.allclose(w0, want0, rtol=1e-5), (step, w0[:3], want0)
        assert np.allclose(w1, want1, rtol=1e-2), (step, w1[:3], want1)
    # The GIL is released while Tally waits: a ticking thread goes on during a barrier that
    # waits half a second for worker 1.
    ticks, stop = [0], threading.Event()
    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)
    ticker = threading.Thread(target=tick)
    ticker.start()
    if r == 1:
        time.sleep(0.5)
    before = ticks[0]
    kv.barrier()
    during = ticks[0] - before
    stop.set()
    ticker.join()
    assert r == 1 or during > 50, ("the GIL was held during barrier: %d ticks" % during)
    print("worker %d of %d: summed values OK" % (r, n), flush=True)
""")

# An MXNet user's script, line by line: init, push, pull, read, with no wait in between (as
# MXNet's engine makes safe), the pushed array reused at once.
MXNET_STYLE_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tally

    kv = tally.kv.create("dist_sync")
    shape = (1200, 1000)  # over 10^6 values: sliced over both servers, in flight for a while
    kv.init(3, np.ones(shape, np.float32))
    a = np.zeros(shape, np.float32)
    grad = np.empty(shape, np.float32)
    total = sum(range(1, kv.num_workers + 1))
    for step in range(5):
        grad[:] = kv.rank + 1 + step
        kv.push(3, grad)
        grad[:] = -1e6              # MXNet lets a pushed array be written again at once
        kv.pull(3, out=a)
        want = total + kv.num_workers * step  # no optimizer: the store keeps the pushed sum
        assert (a == want).all(), (step, a.ravel()[:3], want)
    print("worker %d: mxnet-style push and pull read the sum" % kv.rank, flush=True)
""")


KILL_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tally

    kv = tally.kv.create("dist_sync")
    w = np.zeros(100000, np.float32)
    kv.init(0, w)
    step = 0
    try:
        while True:
            kv.pushpull(0, np.ones(100000, np.float32), out=w)
            kv.wait_all()
            print("step %d" % step, flush=True)
            step += 1
    except tally.TallyError as e:
        print("raised TallyError: %s" % e, flush=True)
        sys.exit(3)
""")

def write_script(text):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "job.py")
    with open(path, "w") as f:
        f.write(text)
    return path


def job_env():
    return dict(os.environ, PYTHONPATH=PACKAGE_ROOT, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


class DistSyncTest(unittest.TestCase):
    def launch(self, mode):
        script = write_script(DIST_SCRIPT)
        cmd = [sys.executable, LAUNCH, "-n", "2", "-s", "1", "--launcher", "local", "--",
               sys.executable, script, mode]
        run = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=90)
        out = run.stdout + run.stderr
        self.assertEqual(run.returncode, 0, out[-4000:])
        for r in (0, 1):
            self.assertIn("worker %d of 2: summed values OK" % r, out)

    def test_two_workers_sum_without_optimizer(self):
        self.launch("none")

    def test_two_workers_sum_through_sgd_on_the_server(self):
        self.launch("sgd")

    def test_no_wd_keys_reach_the_servers(self):
        self.launch("no_wd")

    def test_an_mxnet_style_script_reads_what_it_pulled_without_waiting(self):
        script = write_script(MXNET_STYLE_SCRIPT)
        cmd = [sys.executable, LAUNCH, "-n", "2", "-s", "2", "--launcher", "local", "--",
               sys.executable, script]
        run = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=90)
        out = run.stdout + run.stderr
        self.assertEqual(run.returncode, 0, out[-4000:])
        for r in (0, 1):
            self.assertIn("worker %d: mxnet-style push and pull read the sum" % r, out)


def start_job(test, script, workers, extra_env):
    """A scheduler, one server and `workers` workers of `script`, each its own process with
    its output in a temporary file; the test's cleanup kills what is left. Returns (procs,
    output): output(key) is the output so far of procs[key], and output.start(key, rank,
    more_env) starts one more worker of the job (a joiner) as procs[key]."""
    port, secret = free_port(), os.urandom(32).hex()
    procs, logs = {}, {}

    def start(key, role, rank, more_env=None):
        env = dict(job_env(), DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                   DMLC_NUM_WORKER=str(workers), DMLC_NUM_SERVER="1", DMLC_NODE_HOST="127.0.0.1",
                   TALLY_RANK=str(rank), TALLY_JOB_SECRET=secret, **extra_env, **(more_env or {}))
        logs[key] = tempfile.TemporaryFile("w+")
        procs[key] = subprocess.Popen([sys.executable, script], env=env, stdout=logs[key],
                                      stderr=subprocess.STDOUT, start_new_session=True)
    for role, rank in [("scheduler", 0), ("server", 0)] + [("worker", r) for r in range(workers)]:
        start((role, rank), role, rank)

    def cleanup():
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for f in logs.values():
            f.close()
    test.addCleanup(cleanup)

    def output(key):
        logs[key].flush()
        logs[key].seek(0)
        return logs[key].read()
    output.start = lambda key, rank, more_env: start(key, "worker", rank, more_env)
    return procs, output


def wait_for_step(test, procs, output, workers, step=3, within_s=300, word="step"):
    """Waits until every worker printed "<word> <step>" (no process may exit before): progress,
    with a bound generous enough for a slow machine."""
    deadline = time.time() + within_s
    while not all("%s %d" % (word, step) in output(("worker", r)) for r in range(workers)):
        for key, p in procs.items():
            test.assertIsNone(p.poll(), "%s %d exited early:\n%s" % (key[0], key[1], output(key)))
        test.assertLess(time.time(), deadline, "the job did not run %d steps in %d s" % (step, within_s))
        time.sleep(0.05)


class KilledServerTest(unittest.TestCase):
    def test_every_worker_raises_when_the_server_dies(self):
        procs, output = start_job(self, write_script(KILL_SCRIPT), 2,
                                  dict(TALLY_DEAD_TIMEOUT_MS=str(DEAD_TIMEOUT_MS)))
        wait_for_step(self, procs, output, 2)
        os.kill(procs["server", 0].pid, signal.SIGKILL)
        killed = time.time()
        for r in (0, 1):
            p = procs["worker", r]
            try:
                p.wait(timeout=max(0.1, killed + RAISE_WITHIN_S - time.time()))
            except subprocess.TimeoutExpired:
                self.fail("worker %d still running %.0f s after the server was killed:\n%s"
                          % (r, RAISE_WITHIN_S, output(("worker", r))[-2000:]))
            out = output(("worker", r))
            self.assertIn("raised TallyError", out, out[-2000:])
            self.assertIn("server 0", out[out.index("raised TallyError"):], out[-2000:])
            self.assertNotEqual(p.returncode, 0)
        said = next(line for line in output(("worker", 0)).splitlines() if "raised TallyError" in line)
        print("both workers raised within %.1f s of the kill; worker 0: %s" % (time.time() - killed, said))


if __name__ == "__main__":
    unittest.main(verbosity=2)
