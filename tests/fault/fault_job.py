"""What the fault tests share: one small dist_sync job of `tally train`, started through
tools/launch.py or role by role, its logs, and the comparison of its final checkpoint with
an uninterrupted run's.

Every process of a job carries FAULT_JOB_TAG=<unique id> in its environment, so a test
finds a role's pid (to kill or stop it) and, when it ends, kills whatever of the job is
still alive: a failed test never leaves processes behind.
"""
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import free_port, read_tensors  # noqa: E402 (tests/testutil.py)


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LAUNCH = os.path.join(ROOT, "tools", "launch.py")
TALLY = None  # set by main()

# Nodes declare a silent peer dead after this long (TALLY_DEAD_TIMEOUT_MS, 2000 by default);
# after that, or after a process dies, every other process must have exited within this.
DEAD_TIMEOUT_S = 2.0
EXIT_WITHIN_S = 5.0

WORKERS, SERVERS = 2, 1
EPOCHS = 3
# Each worker: 1200 synthetic examples in batches of 16, 75 steps an epoch; a checkpoint after each.
MODEL = ["--num-layers", "8", "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "16",
         "--num-examples", "1200", "--num-epochs", str(EPOCHS), "--disp-batches", "1",
         "--num-val-examples", "32", "--seed", "5", "--lr-scheduler", "cosine", "--optimizer", "nag"]
STEPS_PER_EPOCH = 75
ROLES = [("scheduler", 0)] + [("server", r) for r in range(SERVERS)] + [("worker", r) for r in range(WORKERS)]
FINAL = "-%04d" % EPOCHS

# "Epoch[1] Batch [11-12]" (with --disp-batches 1: one line a step).
BATCH_LINE = re.compile(r"Epoch\[(\d+)\] Batch \[\d+-(\d+)\]")


def role_name(role, rank):
    return "scheduler" if role == "scheduler" else "%s %d" % (role, rank)


def tagged_pids(tag, role=None, rank=None):
    """Live processes whose environment holds FAULT_JOB_TAG=tag (and the role and rank)."""
    want = [b"FAULT_JOB_TAG=" + tag.encode()]
    if role is not None:
        want += [b"DMLC_ROLE=" + role.encode(), b"TALLY_RANK=%d" % rank]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                environ = f.read().split(b"\0")
            with open("/proc/%s/stat" % entry, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and all(w in environ for w in want):
            found.append(int(entry))
    return found


def global_step(text):
    """Steps done so far by the worker whose output is `text` (0 if none yet)."""
    last = None
    for last in BATCH_LINE.finditer(text):
        pass
    return 0 if last is None else int(last.group(1)) * STEPS_PER_EPOCH + int(last.group(2))


def seeds(default):
    """The seeds a randomized case runs: FAULT_SEEDS="1,2,3" overrides the default list."""
    text = os.environ.get("FAULT_SEEDS")
    return [int(s) for s in text.split(",")] if text else list(default)


class FaultCase(unittest.TestCase):
    """A temporary directory, a job tag, and no process of the job left at the end."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.tag = uuid.uuid4().hex
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self):
        for pid in tagged_pids(self.tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def environ(self, extra=None):
        env = dict(os.environ, FAULT_JOB_TAG=self.tag, TALLY_JOB_SECRET=secrets.token_hex(32),
                   OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
        env.update(extra or {})
        return env

    # ---- through tools/launch.py ----

    def start_launch(self, prefix, name, launch_args=(), extra=(), env=None):
        """Starts launch.py on the job; returns (process, path of its output)."""
        path = os.path.join(self.dir, name + ".log")
        command = [TALLY, "train", "--kv-store", "dist_sync"] + MODEL + ["--model-prefix", prefix] + list(extra)
        with open(path, "w") as out:
            proc = subprocess.Popen([sys.executable, LAUNCH, "-n", str(WORKERS), "-s", str(SERVERS), "--grace", "10"]
                                    + list(launch_args) + command, env=self.environ(env), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.addCleanup(self.stop_launcher, proc)
        return proc, path

    def stop_launcher(self, proc):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def process_of(self, pid):
        """The command line and environment of process `pid` (as it was started)."""
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(e.decode().split("=", 1) for e in f.read().split(b"\0") if b"=" in e)
        return argv, env

    def start_joiner(self, argv, env, log_path):
        """A worker process started as `argv` with `env` plus TALLY_JOIN=1, which joins the
        running --elastic job (docs/faults.md, "A worker joins"); its output in log_path."""
        with open(log_path, "w") as out:
            joiner = subprocess.Popen(argv, env=dict(env, TALLY_JOIN="1"), stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.addCleanup(self.stop_launcher, joiner)
        return joiner

    def wait_launch(self, proc, path, timeout=180):
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail("launch.py still running after %d s (a hang):\n%s" % (timeout, tail(path)))

    def run_launch(self, prefix, name, launch_args=(), extra=(), env=None, timeout=180):
        proc, path = self.start_launch(prefix, name, launch_args, extra, env)
        return self.wait_launch(proc, path, timeout), read(path)

    def reference(self):
        """The final checkpoint prefix of an uninterrupted run of the job."""
        prefix = os.path.join(self.dir, "ref", "m")
        code, out = self.run_launch(prefix, "reference")
        self.assertEqual(code, 0, out[-4000:])
        return prefix + FINAL

    def wait_step(self, path, proc, step, timeout=60):
        """Waits until worker 0 of a launched job has done `step` steps."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = read(path)
            done = global_step("\n".join(l[len("[worker 0] "):] for l in text.splitlines()
                                         if l.startswith("[worker 0] ")))
            if done >= step:
                return done
            if proc.poll() is not None:
                self.fail("the job ended (%s) before step %d:\n%s" % (proc.returncode, step, text[-4000:]))
            time.sleep(0.02)
        self.fail("no step %d within %d s:\n%s" % (step, timeout, tail(path)))

    def pid_of(self, role, rank, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pids = tagged_pids(self.tag, role, rank)
            if len(pids) == 1:
                return pids[0]
            time.sleep(0.05)
        self.fail("no single process for %s" % role_name(role, rank))

    def assertLogHas(self, log, pattern):
        """`pattern` (a regular expression) is in `log`; on failure, shows the log's end."""
        if not re.search(pattern, log):
            self.fail("no %r in the output:\n%s" % (pattern, log[-5000:]))

    def assertLatestLoads(self, prefix):
        """The newest PREFIX-NNNN.params on disk loads as tally reads it: whole files, its
        .states (or .states.prev, docs/checkpoint.md) of the same checkpoint id, epoch NNNN.
        Returns NNNN, or "none yet" when there is no checkpoint."""
        folder, stem = os.path.split(prefix)
        found = [re.fullmatch(re.escape(stem) + r"-(\d{4,})\.params", n) for n in os.listdir(folder)]
        numbers = sorted(int(m.group(1)) for m in found if m)
        if not numbers:
            return "none yet"
        path = "%s-%04d" % (prefix, numbers[-1])
        _, params = read_tensors(path + ".params")
        ids = []
        for states in (path + ".states", path + ".states.prev"):
            if os.path.exists(states):
                ids.append(read_tensors(states)[1]["checkpoint"])
        self.assertIn(params["checkpoint"], ids, "%s.params has no .states of its checkpoint" % path)
        self.assertEqual(int(params["epoch"]), numbers[-1])
        return numbers[-1]

    def assertSameCheckpoint(self, a, b):
        for ext in (".params", ".states"):
            ta, ma = read_tensors(a + ext)
            tb, mb = read_tensors(b + ext)
            self.assertEqual(sorted(ta), sorted(tb), ext)
            differ = [k for k in ta if ta[k] != tb[k]]
            self.assertEqual(differ, [], "%s: tensors differ from the uninterrupted run's" % ext)
            for key in ("epoch", "batch", "step"):
                self.assertEqual(ma[key], mb[key], key)


class RoleJob:
    """The processes of one job started role by role (no launcher), each with its output in a
    file; `wrap(role, rank)` may put a command (such as `ip netns exec NS`) before each."""

    def __init__(self, case, name, extra=(), env=None, hosts=None, wrap=None, epochs=None):
        self.case = case
        self.procs = {}
        self.paths = {}
        port = free_port()
        base = case.environ(env)
        for role, rank in ROLES:
            host = "127.0.0.1" if hosts is None else hosts[(role, rank)]
            root = "127.0.0.1" if hosts is None else hosts[("scheduler", 0)]
            environ = dict(base, DMLC_ROLE=role, DMLC_PS_ROOT_URI=root, DMLC_PS_ROOT_PORT=str(port),
                           DMLC_NUM_WORKER=str(WORKERS), DMLC_NUM_SERVER=str(SERVERS), DMLC_NODE_HOST=host,
                           TALLY_RANK=str(rank))
            model = list(MODEL)
            if epochs is not None:
                model[model.index("--num-epochs") + 1] = str(epochs)
            command = [TALLY, "train", "--kv-store", "dist_sync"] + model + list(extra)
            if wrap is not None:
                command = wrap(role, rank) + command
            path = os.path.join(case.dir, "%s-%s%d.log" % (name, role, rank))
            with open(path, "w") as out:
                self.procs[(role, rank)] = subprocess.Popen(command, env=environ, stdin=subprocess.DEVNULL,
                                                            stdout=out, stderr=subprocess.STDOUT,
                                                            start_new_session=True)
            self.paths[(role, rank)] = path
        case.addCleanup(self.kill)

    def output(self, key):
        return read(self.paths[key])

    def logs(self):
        return "\n".join("--- %s\n%s" % (role_name(*k), self.output(k)[-2500:]) for k in self.procs)

    def wait_step(self, step, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if global_step(self.output(("worker", 0))) >= step:
                return
            for key, proc in self.procs.items():
                if proc.poll() is not None:
                    self.case.fail("%s exited (%s) before step %d:\n%s" % (
                        role_name(*key), proc.returncode, step, self.logs()))
            time.sleep(0.02)
        self.case.fail("no step %d within %d s:\n%s" % (step, timeout, self.logs()))

    def assertOthersFail(self, skip, since, within, named):
        """Every process but those in `skip` exits non-zero by `since + within`, its output
        naming one of `named` (a node it lost). Exit times are noted as the processes end,
        even while the test was doing something else: a process polled late but ended in time
        passes."""
        left = {k: p for k, p in self.procs.items() if k not in skip}
        ended = {}
        while left and time.time() < since + within:
            for key, proc in list(left.items()):
                if proc.poll() is not None:
                    ended[key] = time.time() - since
                    del left[key]
            time.sleep(0.01)
        if left:
            self.case.fail("%s still running %.1f s after the fault:\n%s" % (
                ", ".join(role_name(*k) for k in left), time.time() - since, self.logs()))
        for key, seconds in ended.items():
            code, out = self.procs[key].returncode, self.output(key)
            self.case.assertNotEqual(code, 0, "%s exited 0:\n%s" % (role_name(*key), out[-3000:]))
            self.case.assertTrue(any(n in out for n in named), "%s did not name %s:\n%s" % (
                role_name(*key), " or ".join(named), out[-3000:]))
            print("  %s exited %d, %.2f s after the fault" % (role_name(*key), code, seconds))

    def kill(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def tail(path, n=4000):
    return read(path)[-n:]


def main():
    """`python3 X_test.py TALLY_BINARY [unittest args]`."""
    global TALLY
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main(module="__main__")
