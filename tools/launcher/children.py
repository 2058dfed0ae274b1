"""One process of a job as the launcher runs it: started in a session of its own, its
output forwarded line by line with a `[worker 1] ` prefix, and signalled as a whole group,
locally (`Child`), over ssh (`RemoteChild`) or as a Slurm job step (`SlurmChild`).

    child = Child(proc, argv, env, out_lock)   # proc: job.Proc
    child.start()
    ...
    child.terminate(process_table())           # SIGTERM to its group; kill() for SIGKILL
"""

import os
import signal
import subprocess
import sys
import threading
import time

from . import commands
from .job import SECRET_FILE_VAR, SECRET_VAR

# The longest output line a failure message quotes: the line is there to say why, not to
# flood the terminal with a stack dump.
QUOTED_LINE_CHARS = 300


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
        # Called with each line of output (bytes), on the thread that forwards it: how the
        # launcher hears the scheduler's decisions (--elastic's joins).
        self.on_line = None
        # --max-workers: a joiner the scheduler has said it admitted (supervise.Job).
        self.joined = False
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
        # A secret in the launcher's own environment is not this job's: the job's is in
        # self.env (or in ssh's stdin), and a node refuses two.
        env = {k: v for k, v in os.environ.items() if k not in (SECRET_VAR, SECRET_FILE_VAR)}
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
            if self.on_line is not None:
                self.on_line(line)
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

    def delivering(self):
        """True while a signal sent to the process is still on its way (an ssh or scancel
        that has not ended): the process cannot have acted on it yet."""
        return False

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
    """A process started through ssh; it is stopped by signalling its remote group. Until
    the remote shell has said which group that is, a signal waits (`pending`): killing the
    local ssh client instead would leave the remote command running with no one to stop it."""

    def __init__(self, proc, argv, env, out_lock, ssh_opts):
        super().__init__(proc, argv, env, out_lock, commands.ssh_stdin(proc))
        self.ssh_opts = ssh_opts
        self.remote_pgid = None
        self.secret_dir = None  # the remote directory of the secret's file, if any
        self.pending = None  # "TERM" or "KILL", to send once remote_pgid is known
        self.remote_lock = threading.Lock()
        self.killers = []

    def intercept(self, line):
        text = line.decode(errors="replace").strip()
        if self.remote_pgid is None and text.startswith(commands.REMOTE_PGID_MARK):
            value, _, secret_dir = text[len(commands.REMOTE_PGID_MARK):].partition(" ")
            if value.isdigit():
                with self.remote_lock:
                    self.remote_pgid = int(value)
                    self.secret_dir = secret_dir or None
                    if self.pending:
                        self.send_remote(self.pending)
                return True
        return False

    def send_remote(self, signal_name):
        # REQUIRES: remote_lock held, remote_pgid known.
        argv = commands.remote_kill(self.proc.host, self.remote_pgid, signal_name,
                                    self.ssh_opts, self.proc.ssh_port, self.secret_dir)
        self.killers.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL,
                                             start_new_session=True))

    def signal_remote(self, signal_name):
        """Sends the signal to the remote group now, or as soon as its id arrives."""
        with self.remote_lock:
            if self.remote_pgid is None:
                self.pending = signal_name
            else:
                self.send_remote(signal_name)

    def terminate(self, table):
        if self.poll() is None:
            self.signal_remote("TERM")
        else:  # what the ssh client left in its group (a ProxyCommand, say)
            self.signal_group(signal.SIGTERM, table)

    def kill(self, table):
        # The local ssh client goes once the remote group is gone (Job.stop kills it
        # if that takes too long); killing it first would leave the remote side running.
        if self.poll() is None:
            self.signal_remote("KILL")
        else:
            self.signal_group(signal.SIGKILL, table)

    def delivering(self):
        with self.remote_lock:
            waiting = self.pending is not None and self.remote_pgid is None and self.poll() is None
            return waiting or any(killer.poll() is None for killer in self.killers)

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

    def delivering(self):
        return any(cancel.poll() is None for cancel in self.cancels)

    def finish(self, timeout):
        super().finish(timeout)
        for cancel in self.cancels:
            try:
                cancel.wait(timeout)
            except subprocess.TimeoutExpired:
                cancel.kill()
                cancel.wait()
