"""Runs the processes of a job and owns them until every one has ended.

Each process starts in a session (and so a process group) of its own, so stopping it
reaches everything it started. Output is forwarded line by line with a `[worker 1] `
prefix. The job ends when all of it exits 0, when any process fails, when the launcher
is interrupted, or when scheduler and servers outlive the workers by the shutdown
timeout; in the last three cases every process still running gets SIGTERM and, after
the grace period, SIGKILL. With --max-restarts, a job that ended because a process failed
is then started again whole (`run_with_restarts`).
"""

import os
import signal
import subprocess
import sys
import threading
import time

from . import commands

POLL_SECONDS = 0.05
# The scheduler ends the job once every worker has said it is done, and the workers' processes
# may take a few seconds more to exit (freeing a GPU, say): a scheduler or server that exits
# cleanly is reported only if the workers are still running this long after.
EARLY_EXIT_GRACE_SECONDS = 10.0


def say(message):
    sys.stderr.write(f"launch.py: {message}\n")
    sys.stderr.flush()


def describe_status(returncode):
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"


def exit_code(returncode):
    return 128 - returncode if returncode < 0 else returncode


def process_table():
    """{pid: (ppid, pgid, start time)} of every live (not zombie) process, from /proc;
    None where there is no /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    table = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The fields after the command name, which may itself hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 19 and fields[0] != b"Z":
            table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def descendants(pid, table):
    children = {}
    for child, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


class Child:
    """One process of the job as the launcher runs it, with its output forwarders."""

    def __init__(self, proc, argv, env, out_lock, stdin_data=None):
        self.proc = proc
        self.argv = argv
        self.env = env  # added to the launcher's environment
        self.stdin_data = stdin_data  # bytes written to the child's stdin, then closed
        self.out_lock = out_lock
        # --log-dir: the process's output also goes here, without the role prefix, so that
        # per-process tools (MXNet's parse_log.py) read it as a single process's log.
        self.log_path = None
        self.log = None
        self.popen = None
        self.threads = []
        self.returncode = None
        # Descendants that left the process group (mpirun puts each rank in a group of
        # its own): {pid: start time}, remembered so that they die with the job.
        self.strays = {}

    @property
    def label(self):
        return f"{self.proc.name} on {self.display_host}"

    @property
    def display_host(self):
        return self.proc.host

    def start(self):
        env = dict(os.environ)
        env.update(self.env)
        stdin = subprocess.PIPE if self.stdin_data is not None else subprocess.DEVNULL
        self.popen = subprocess.Popen(self.argv, env=env, stdin=stdin,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True)
        if self.stdin_data is not None:
            try:
                self.popen.stdin.write(self.stdin_data)
                self.popen.stdin.close()
            except OSError:  # it died at once; its exit status tells why
                pass
        if self.log_path is not None:
            self.log = open(self.log_path, "ab")
        prefix = f"[{self.proc.name}] ".encode()
        for stream, target in ((self.popen.stdout, sys.stdout), (self.popen.stderr, sys.stderr)):
            thread = threading.Thread(target=self.forward, args=(stream, target, prefix),
                                      daemon=True)
            thread.start()
            self.threads.append(thread)

    def forward(self, stream, target, prefix):
        out = getattr(target, "buffer", None)
        for line in iter(stream.readline, b""):
            if self.intercept(line):
                continue
            if not line.endswith(b"\n"):
                line += b"\n"
            with self.out_lock:
                if out is not None:
                    out.write(prefix + line)
                else:
                    target.write((prefix + line).decode(errors="replace"))
                target.flush()
                if self.log is not None:
                    self.log.write(line)
                    self.log.flush()
        stream.close()

    def intercept(self, line):
        """True when a line is for the launcher, not the user."""
        return False

    def poll(self):
        if self.returncode is None and self.popen is not None:
            self.returncode = self.popen.poll()
        return self.returncode

    def alive(self, table):
        """True while the process, anything left in its group, or a stray runs."""
        if self.popen is None:
            return False
        if self.poll() is None:
            return True
        pgid = self.popen.pid
        if table is None:
            try:
                os.killpg(pgid, 0)
                return True
            except (ProcessLookupError, PermissionError):
                return False
        return any(group == pgid for _, group, _ in table.values()) or any(
            table.get(pid, (0, 0, None))[2] == start for pid, start in self.strays.items())

    def signal_group(self, signum, table=None):
        """Sends signum to the process group and to every descendant outside it."""
        if self.popen is None:
            return
        pgid = self.popen.pid
        if table is not None:
            if self.poll() is None:
                for pid in descendants(pgid, table):
                    if table[pid][1] != pgid:
                        self.strays[pid] = table[pid][2]
            for pid, start in self.strays.items():
                if table.get(pid, (0, 0, None))[2] == start:
                    try:
                        os.kill(pid, signum)
                    except (ProcessLookupError, PermissionError):
                        pass
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self, table):
        self.signal_group(signal.SIGTERM, table)
        # A stopped process (SIGSTOP, a debugger) acts on SIGTERM only once it runs again.
        self.signal_group(signal.SIGCONT, table)

    def kill(self, table):
        self.signal_group(signal.SIGKILL, table)

    def finish(self, timeout):
        """Reaps the process and waits for its output to drain."""
        if self.popen is not None:
            try:
                self.returncode = self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        for thread in self.threads:
            thread.join(timeout)
        if self.log is not None and not any(t.is_alive() for t in self.threads):
            self.log.close()
            self.log = None


class RemoteChild(Child):
    """A process started through ssh; it is stopped by signalling its remote group."""

    def __init__(self, proc, argv, env, out_lock, ssh_opts):
        super().__init__(proc, argv, env, out_lock, commands.ssh_stdin(proc))
        self.ssh_opts = ssh_opts
        self.remote_pgid = None
        self.killers = []

    def intercept(self, line):
        text = line.decode(errors="replace").strip()
        if self.remote_pgid is None and text.startswith(commands.REMOTE_PGID_MARK):
            value = text[len(commands.REMOTE_PGID_MARK):]
            if value.isdigit():
                self.remote_pgid = int(value)
                return True
        return False

    def signal_remote(self, signal_name):
        if self.remote_pgid is None:
            return False
        argv = commands.remote_kill(self.proc.host, self.remote_pgid, signal_name,
                                    self.ssh_opts, self.proc.ssh_port)
        self.killers.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL,
                                             start_new_session=True))
        return True

    def terminate(self, table):
        if self.poll() is None and not self.signal_remote("TERM"):
            self.signal_group(signal.SIGTERM, table)

    def kill(self, table):
        # The local ssh client goes once the remote group is gone (Job.stop kills it
        # if that takes too long); killing it first would leave the remote side running.
        if self.poll() is not None or not self.signal_remote("KILL"):
            self.signal_group(signal.SIGKILL, table)

    def finish(self, timeout):
        super().finish(timeout)
        for killer in self.killers:
            try:
                killer.wait(timeout)
            except subprocess.TimeoutExpired:
                killer.kill()
                killer.wait()


class Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP to the launcher, remembered across restarts."""

    def __init__(self):
        self.received = None
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.on_signal)

    def on_signal(self, signum, frame):
        self.received = signum


class Job:
    """Starts the children, watches them and returns the launcher's exit status."""

    def __init__(self, children, shutdown_timeout, grace, interrupts):
        self.children = children
        self.shutdown_timeout = shutdown_timeout
        self.grace = grace
        self.interrupts = interrupts
        # The child whose failure ended the job; None when it ended otherwise.
        self.failed = None

    @property
    def received(self):
        return self.interrupts.received

    def run(self):
        status = self.watch()
        self.stop()
        return status

    def start_all(self):
        for child in self.children:
            if self.received is not None:
                return None
            try:
                child.start()
            except OSError as e:
                say(f"cannot start {child.label}: {e}; stopping the job")
                return 127
        return None

    def watch(self):
        status = self.start_all()
        if status is not None:
            return status
        workers = [c for c in self.children if c.proc.role == "worker"]
        others = [c for c in self.children if c.proc.role != "worker"]
        workers_done_at = None
        exited_at = {}
        noted_early = set()
        while True:
            if self.received is not None:
                name = signal.Signals(self.received).name
                say(f"received {name}; stopping the job")
                return 128 + self.received
            for child in self.children:
                code = child.poll()
                if code is not None and code != 0:
                    say(f"{child.label} {describe_status(code)}; stopping the job")
                    self.failed = child
                    return exit_code(code)
            if workers_done_at is None:
                if all(c.poll() == 0 for c in workers):
                    workers_done_at = time.monotonic()
                else:
                    now = time.monotonic()
                    for child in others:
                        if child.poll() == 0 and child not in noted_early:
                            if now - exited_at.setdefault(child, now) > EARLY_EXIT_GRACE_SECONDS:
                                noted_early.add(child)
                                say(f"{child.label} exited {EARLY_EXIT_GRACE_SECONDS:g} s before "
                                    f"the workers finished")
            if all(c.poll() == 0 for c in self.children):
                return 0
            if workers_done_at is not None and \
                    time.monotonic() - workers_done_at > self.shutdown_timeout:
                late = ", ".join(c.label for c in others if c.poll() is None)
                say(f"the workers finished but {late} did not exit within "
                    f"{self.shutdown_timeout:g} s; stopping the job")
                return 1
            time.sleep(POLL_SECONDS)

    def stop(self):
        """Ends every process the job started, including any left in their groups."""
        started = [c for c in self.children if c.popen is not None]

        def running():
            table = process_table()
            return table, [c for c in started if c.alive(table)]

        table, left = running()
        if left:
            for child in left:
                child.terminate(table)
            deadline = time.monotonic() + self.grace
            while left and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
                table, left = running()
            if left:
                say("still running after %g s, killing: %s"
                    % (self.grace, ", ".join(c.label for c in left)))
                for child in left:
                    child.kill(table)
                deadline = time.monotonic() + self.grace
                while left and time.monotonic() < deadline:
                    time.sleep(POLL_SECONDS)
                    table, left = running()
                for child in left:
                    child.signal_group(signal.SIGKILL, table)
        # Output drains at once unless something that escaped the job (a daemon that
        # called setsid) holds a pipe; the launcher does not wait for that for long.
        deadline = time.monotonic() + 5
        for child in started:
            child.finish(timeout=max(0.1, deadline - time.monotonic()))


def run_with_restarts(make_children, shutdown_timeout, grace, max_restarts):
    """Runs the job and, after a process fails, stops it and starts it whole again, up to
    max_restarts times; make_children(attempt) gives each attempt's children (attempt 0
    is the first). Returns the exit status of the last attempt.

    Only a failed process leads to a restart: a signal to the launcher, a process that
    cannot be started or a scheduler or server that outlives the workers end the run.
    """
    interrupts = Interrupts()
    attempt = 0
    while True:
        job = Job(make_children(attempt), shutdown_timeout, grace, interrupts)
        status = job.run()
        if status == 0:
            if attempt:
                say(f"the job completed on attempt {attempt + 1} of {max_restarts + 1}")
            return status
        if job.failed is None or interrupts.received is not None:
            return status
        failure = f"{job.failed.label} {describe_status(job.failed.returncode)}"
        if attempt == max_restarts:
            if max_restarts:
                say(f"no restarts left ({max_restarts} used); the last failure: {failure}")
            return status
        attempt += 1
        say(f"restart {attempt} of {max_restarts} after {failure}: starting every process "
            f"again, to continue from the latest checkpoint")
