"""Runs the processes of a job and owns them until every one has ended.

Each process starts in a session (and so a process group) of its own, so stopping it
reaches everything it started. Output is forwarded line by line with a `[worker 1] `
prefix. The job ends when all of it exits 0, when any process fails, when the launcher
is interrupted, or when scheduler and servers outlive the workers by the shutdown
timeout; in the last three cases every process still running gets SIGTERM and, after
the grace period, SIGKILL. With --max-restarts, a job that ended because a process failed
is then started again whole (`run_with_restarts`). A process that ends on a SIGTERM the
launcher did not send (Slurm's scancel --signal=TERM) is a stop, not a failure: the rest of
the job is left to stop at the workers' agreed step, and nothing restarts.
"""

import os
import signal
import subprocess
import sys
import threading
import time

from . import commands

POLL_SECONDS = 0.05
# The longest output line a failure message quotes: the line is there to say why, not to
# flood the terminal with a stack dump.
QUOTED_LINE_CHARS = 300
# How `tally train` exits after a stop on SIGTERM (docs/checkpoint.md), and the launcher too
# when the job ends that way.
STOPPED_STATUS = 128 + signal.SIGTERM


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


def stopped_on_request(returncode):
    """True for the status of a process that ended on SIGTERM: `tally train` exits 143 after
    a stop it agreed with the others (docs/checkpoint.md), other programs die of it."""
    return returncode in (STOPPED_STATUS, -signal.SIGTERM)


def census(children):
    """"the scheduler, 2 servers and 3 workers": what the job consists of, in words."""
    counts = {}
    for child in children:
        counts[child.proc.role] = counts.get(child.proc.role, 0) + 1
    parts = [f"{n} {role}s" if n > 1 else ("the scheduler" if role == "scheduler" else f"{n} {role}")
             for role, n in counts.items()]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


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
        # When the process exited (time.monotonic()), stamped by a thread that waits for it,
        # so that of two processes that failed close together the first is named.
        self.exited_at = None
        # The process's last line on stderr (else stdout), which usually says why it failed.
        self.last_lines = {}
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
        waiter = threading.Thread(target=self.wait_for_exit, daemon=True)
        waiter.start()
        self.threads.append(waiter)
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
            if line.strip() and self.tells_why(line):
                self.last_lines[target] = line.decode(errors="replace").strip()
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

    def tells_why(self, line):
        """False for a line that the program did not print (srun's own), which cannot say
        why the program failed."""
        return True

    def wait_for_exit(self):
        code = self.popen.wait()
        self.exited_at = time.monotonic()
        self.returncode = code

    def poll(self):
        """The exit status, or None while the process runs (or before it started)."""
        return self.returncode

    def last_output(self):
        """The process's last line on stderr, else on stdout, shortened; None if it printed
        nothing. A failed process's last words usually say why it failed."""
        # The output may still be on its way through the pipes; a moment lets it arrive,
        # unless something that outlived the process holds them open.
        for thread in self.threads:
            thread.join(0.5)
        line = self.last_lines.get(sys.stderr) or self.last_lines.get(sys.stdout)
        if line and len(line) > QUOTED_LINE_CHARS:
            line = line[:QUOTED_LINE_CHARS] + "..."
        return line

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


class SlurmChild(Child):
    """A process that srun runs as a job step of its own. srun takes SIGTERM as an order to
    cancel its step (SIGKILL soon after), not to pass it on, so the launcher stops the step
    through Slurm: `scancel --signal=TERM JOB.STEP` gives the process the SIGTERM that Tally's
    workers answer by saving a checkpoint, as Slurm's own preemption does."""

    OWN_LINES = (b"srun: ", b"slurmstepd")

    def __init__(self, proc, argv, env, out_lock, step_name):
        super().__init__(proc, argv, env, out_lock)
        self.step_name = step_name
        self.step = None
        self.cancels = []

    def tells_why(self, line):
        return not line.startswith(self.OWN_LINES)

    def step_id(self):
        """JOB.STEP of the process's step while it runs, found by its unique name; None
        outside an allocation or when Slurm does not answer."""
        job = os.environ.get("SLURM_JOB_ID")
        if self.step is None and job:
            try:
                listed = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"],
                                        capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return None
            for line in listed.splitlines():
                step, _, name = line.strip().partition(" ")
                if name == self.step_name:
                    self.step = step
        return self.step

    def cancel(self, signal_name):
        step = self.step_id() if self.poll() is None else None
        if step is None:
            return False
        self.cancels.append(subprocess.Popen(["scancel", f"--signal={signal_name}", step],
                                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True))
        return True

    def terminate(self, table):
        if not self.cancel("TERM"):
            super().terminate(table)

    def kill(self, table):
        if not self.cancel("KILL"):
            super().kill(table)

    def finish(self, timeout):
        super().finish(timeout)
        for cancel in self.cancels:
            try:
                cancel.wait(timeout)
            except subprocess.TimeoutExpired:
                cancel.kill()
                cancel.wait()


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
        if self.received == signal.SIGTERM:
            self.report_stop()
        return status

    def report_stop(self):
        """After a SIGTERM to the launcher (Slurm's `--signal=B:TERM@60`, say): whether
        every worker stopped as `tally train` does on SIGTERM, the checkpoint saved."""
        workers = [c for c in self.children if c.proc.role == "worker" and c.popen is not None]
        other = [c for c in workers if c.poll() not in (0, STOPPED_STATUS)]
        if workers and not other:
            say(f"every worker exited {STOPPED_STATUS} or 0: stopped at the agreed step, the "
                f"checkpoint saved if the command has --model-prefix")
        elif other:
            say("not stopped at an agreed step: " + ", ".join(
                f"{c.label} {describe_status(c.poll()) if c.poll() is not None else 'still ran'}"
                for c in other))

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
        began = time.monotonic()
        workers = [c for c in self.children if c.proc.role == "worker"]
        others = [c for c in self.children if c.proc.role != "worker"]
        workers_done_at = others_done_at = None
        noted_waiting = False
        while True:
            if self.received is not None:
                return self.interrupted()
            ended = [c for c in self.children if c.poll() not in (None, 0)]
            if ended:
                first = min(ended, key=lambda c: c.exited_at or 0)
                if stopped_on_request(first.poll()):
                    return self.wait_for_stop(first)
                return self.fail(first)
            if all(c.poll() == 0 for c in self.children):
                say(f"the job finished: {census(self.children)} exited 0 after "
                    f"{time.monotonic() - began:.1f} s")
                return 0
            now = time.monotonic()
            if workers_done_at is None and all(c.poll() == 0 for c in workers):
                workers_done_at = now
            if workers_done_at is not None and now - workers_done_at > self.shutdown_timeout:
                late = ", ".join(c.label for c in others if c.poll() is None)
                say(f"the workers finished but {late} did not exit within "
                    f"{self.shutdown_timeout:g} s; stopping the job")
                return 1
            # Scheduler and servers exit 0 once the workers have told the scheduler they are
            # done, a moment before the workers' own processes end: normal, and said only if
            # a worker is still running long after.
            if others_done_at is None and all(c.poll() == 0 for c in others):
                others_done_at = now
            if not noted_waiting and others_done_at is not None and \
                    now - others_done_at > self.shutdown_timeout:
                noted_waiting = True
                late = ", ".join(c.label for c in workers if c.poll() is None)
                say(f"the scheduler and servers exited 0 {self.shutdown_timeout:g} s ago; "
                    f"still waiting for {late}")
            time.sleep(POLL_SECONDS)

    def interrupted(self):
        say(f"received {signal.Signals(self.received).name}; stopping the job")
        return 128 + self.received

    def fail(self, child):
        """Names the process whose failure ends the job, and why; returns the status."""
        say(f"{child.label} {describe_status(child.poll())}; stopping the job")
        line = child.last_output()
        if line:
            say(f"{child.proc.name}'s last line: {line}")
        self.failed = child
        return exit_code(child.poll())

    def wait_for_stop(self, first):
        """A process stopped on a SIGTERM the launcher did not send (Slurm's scancel
        --signal=TERM, a spot instance's notice): Tally's workers agree on a step to stop
        after, worker 0 saves a checkpoint there, and the job ends by itself. The launcher
        lets it, up to --grace seconds, and does not restart it."""
        say(f"{first.label} {describe_status(first.poll())}: stopped on SIGTERM; waiting up to "
            f"{self.grace:g} s for the rest of the job to stop at the same step")
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            if self.received is not None:
                return self.interrupted()
            failed = [c for c in self.children
                      if c.poll() not in (None, 0) and not stopped_on_request(c.poll())]
            if failed:
                return self.fail(min(failed, key=lambda c: c.exited_at or 0))
            if all(c.poll() is not None for c in self.children):
                say(f"the job stopped on SIGTERM: {census(self.children)} have exited "
                    f"(workers {STOPPED_STATUS}: stopped at the agreed step, the checkpoint "
                    f"saved if the command has --model-prefix)")
                return STOPPED_STATUS
            time.sleep(POLL_SECONDS)
        late = ", ".join(c.label for c in self.children if c.poll() is None)
        say(f"{late} did not stop within {self.grace:g} s of the SIGTERM; stopping the job")
        return STOPPED_STATUS

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
