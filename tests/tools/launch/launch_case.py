"""The harness of the launcher tests (launch_test.py): LaunchCase starts tools/launch.py on
fake_role.py and checks that no process of the job outlives it.

Every job's processes carry FAKE_JOB_TAG=<unique id> in their environment, so a test
can list, by reading /proc, every process of its job still alive after the launcher has
returned; there must be none.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
LAUNCH = os.path.join(ROOT, "tools", "launch.py")
FAKE = os.path.join(HERE, "fake_role.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))

ROLE_LINE = re.compile(r"^\[(scheduler|server \d+|worker \d+)\] role=(\w+) rank=(\d+) "
                       r"root=(\S+) workers=(\d+) servers=(\d+) host=(\S+) cwd=(\S+) "
                       r"task=(\d+) attempt=(\d+) cluster=(\w+)$")

# How long a process of an ended job may take to finish exiting (assertNothingLeft).
LEFTOVER_BOUND_S = 10
# How long a job of these tests may take: seconds here, but a stop over ssh on a loaded
# machine waits for each ssh that carries a signal (tools/launcher/supervise.py). Only a
# hung launcher comes near it.
JOB_BOUND_S = 120

# dmlc-tracker's DMLC_TASK_ID for -n 3 -s 2: workers first, then servers; the scheduler last.
TASK_IDS_3_2 = {"worker 0": "0", "worker 1": "1", "worker 2": "2", "server 0": "3",
                "server 1": "4", "scheduler": "5"}


def tagged_pids(tag):
    """Live processes on this machine whose environment holds FAKE_JOB_TAG=tag."""
    needle = f"FAKE_JOB_TAG={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != b"Z":
            found.append(int(entry))
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


class LaunchCase(unittest.TestCase):
    """Starts launch.py on fake_role.py and checks that it leaves nothing behind."""

    launcher_args = []
    launch_env = {}  # added to the launcher's environment (MpiLauncherTest's own TMPDIR)

    def setUp(self):
        self.tag = uuid.uuid4().hex
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self):
        for pid in tagged_pids(self.tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def start(self, args, plan="", env=None, command=None, cwd=None):
        environ = dict(os.environ, FAKE_JOB_TAG=self.tag, FAKE_ROLE_PLAN=plan, **self.launch_env)
        environ.update(env or {})
        argv = ([sys.executable, LAUNCH] + self.launcher_args + args
                + ["--env", "FAKE_JOB_TAG", "--env", "FAKE_ROLE_PLAN"]
                + (command or [sys.executable, FAKE]))
        return subprocess.Popen(argv, env=environ, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def launch(self, args, plan="", timeout=JOB_BOUND_S, **kwargs):
        began = time.monotonic()
        launcher = self.start(args, plan, **kwargs)
        try:
            out, err = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            launcher.kill()
            out, err = launcher.communicate()
            self.fail(f"launch.py still running after {timeout} s\n{out}\n{err}")
        return launcher.returncode, out, err, time.monotonic() - began

    def assertNothingLeft(self):
        # The launcher has returned: any process of the job still alive is an orphan. It has
        # seen every process end, but a remote one only as its ssh session's end, which
        # follows the process's closing its output: a step of its exit that comes before it
        # is a zombie. A moment is allowed for the rest (LEFTOVER_BOUND_S, for a loaded
        # machine); an orphan sleeps for minutes.
        deadline = time.monotonic() + LEFTOVER_BOUND_S
        while tagged_pids(self.tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [f"{pid}: {cmdline(pid)}" for pid in tagged_pids(self.tag)]
        self.assertEqual(left, [], "processes of the job outlived the launcher")

    def roles(self, out):
        """{"worker 1": (role, rank, root, workers, servers, host, cwd, task, attempt,
        cluster)} from the output."""
        found = {}
        for line in out.splitlines():
            match = ROLE_LINE.match(line)
            if match:
                found[match.group(1)] = match.groups()[1:]
        return found

    def secret_reports(self, out):
        """{"worker 1": {"file": ..., "mode": ..., ...}} from fake_role's FAKE_SECRET_REPORT
        lines."""
        found = {}
        for line in out.splitlines():
            match = re.match(r"^\[([a-z]+(?: \d+)?)\] secret (file=.*)$", line)
            if match:
                found[match.group(1)] = dict(item.split("=", 1) for item in match.group(2).split())
        return found

    def assertPrivateSecretFiles(self, reports, count, one_file):
        """Each of `count` processes found the secret in a file of mode 600 of its user, in a
        directory of mode 700, all the same secret, with no TALLY_JOB_SECRET; one_file: the
        same file for all. Returns the files, which must be gone once the job has ended."""
        self.assertEqual(len(reports), count, reports)
        for name, report in reports.items():
            self.assertEqual({k: report[k] for k in ("mode", "dir_mode", "regular", "mine", "inline")},
                             {"mode": "0600", "dir_mode": "0700", "regular": "True", "mine": "True",
                              "inline": "False"}, name)
        self.assertEqual(len({r["digest"] for r in reports.values()} - {"none"}), 1, reports)
        files = {r["file"] for r in reports.values()}
        self.assertEqual(len(files), 1 if one_file else count, reports)
        return files

    def assertRemoved(self, files):
        """The secret's files and their directories are gone."""
        for path in files:
            self.assertFalse(os.path.exists(os.path.dirname(path)), path)

    def interrupt_when_started(self, args, plan, signum, expected_roles, command=None,
                               env=None, while_running=None):
        """Starts a job, waits until every role has printed, calls while_running() if
        given, sends signum to launch.py; returns (status, stderr, seconds it took to
        stop, stdout)."""
        launcher = self.start(args, plan, command=command, env=env)
        lines, started = [], threading.Event()

        def read():
            for line in launcher.stdout:
                lines.append(line)
                if len(self.roles("".join(lines))) == expected_roles:
                    started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self.assertTrue(started.wait(JOB_BOUND_S), "the job did not start:\n" + "".join(lines))
        time.sleep(0.3)  # let the grandchildren start too
        if while_running:
            try:
                while_running()
            except BaseException:
                launcher.kill()
                raise
        began = time.monotonic()
        launcher.send_signal(signum)
        err = launcher.stderr.read()
        launcher.wait(JOB_BOUND_S)
        reader.join(5)
        launcher.stdout.close()
        launcher.stderr.close()
        return launcher.returncode, err, time.monotonic() - began, "".join(lines)

    def check_failing_worker(self, host, launcher_kills=True):
        rc, out, err, _ = self.launch(["-n", "3", "-s", "2", "--grace", "1"],
                                      "worker1=exit3:1,server1=ignoreterm,*=grandchild")
        self.assertEqual(rc, 3, err)
        self.assertIn(f"launch.py: worker 1 on {host} exited with status 3; stopping the job",
                      err)
        if launcher_kills:
            self.assertRegex(err, r"still running after 1 s, killing: .*server 1 on ")
        self.assertNothingLeft()
