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
Under --elastic a worker (of any rank) that ends leaves the job instead of ending it; with
--max-workers a new process takes its rank's place (elastic.Joins), and below --min-workers
live workers the job stops at an agreed step with its checkpoint, for --max-restarts.
"""

import signal
import sys
import time

from .children import process_table
from .job import SAVED_STOP_STATUS

POLL_SECONDS = 0.05
# How long the launcher waits, at most, for a SIGKILL on its way to a remote process (an ssh
# that runs `kill`, an scancel) before it gives up on it and kills the local ssh or srun.
DELIVERY_BOUND_S = 120
# How `tally train` exits after a stop on SIGTERM without a checkpoint (docs/checkpoint.md),
# and the launcher too when the job ends that way. A stop whose checkpoint was saved exits
# SAVED_STOP_STATUS, and the launcher then 0: nothing was lost, `--resume auto` continues.
STOPPED_STATUS = 128 + signal.SIGTERM


RESUME_ADVICE = ("the workers stopped at their agreed step with the checkpoint saved: the same "
                 "command with --resume auto (or a Slurm requeue) continues the run")


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
    """True for the status of a process that ended on SIGTERM: `tally train` exits 75 (its
    checkpoint saved) or 143 after a stop it agreed with the others (docs/checkpoint.md),
    other programs die of it."""
    return returncode in (SAVED_STOP_STATUS, STOPPED_STATUS, -signal.SIGTERM)


def saved_stop(workers):
    """True when the workers all stopped at the agreed step with the checkpoint saved (one
    may have finished its last step's exit 0 in the meantime)."""
    codes = [c.poll() for c in workers]
    return SAVED_STOP_STATUS in codes and all(code in (SAVED_STOP_STATUS, 0) for code in codes)


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

    def __init__(self, children, shutdown_timeout, grace, interrupts, server_replicas=0, joins=None):
        self.children = children
        self.shutdown_timeout = shutdown_timeout
        self.grace = grace
        self.interrupts = interrupts
        # The child whose failure ended the job; None when it ended otherwise.
        self.failed = None
        # --server-replicas: servers that died while their slices may live on elsewhere.
        # Whether the job can go on is the scheduler's call (it ends the job when a chain
        # has no live server left, and the workers then fail naming why).
        self.server_replicas = server_replicas
        self.lost = []
        # --elastic (an elastic.Joins; None without): a worker (worker 0 too) that dies or leaves
        # (on a SIGTERM of its own, it exits 0 saying so) is not the end of the job; the
        # scheduler decides the step. Its joiners join self.children when they start.
        self.joins = joins
        for child in children:
            if joins is not None and child.proc.role == "scheduler":
                child.on_line = joins.heard  # its "membership N: worker R joined" lines
        # Why the job stopped below --min-workers, for --max-restarts' line; None otherwise.
        self.below_min = None

    def live(self):
        return [c for c in self.children if c not in self.lost]

    def lose(self, child):
        """A server died under --server-replicas: noted, and not the end of the job."""
        self.lost.append(child)
        # Spares (--spare-servers) have ranks from DMLC_NUM_SERVER on; one may have taken a
        # place by now, which only the scheduler knows.
        spare = child.proc.rank >= int(child.proc.env.get("DMLC_NUM_SERVER", child.proc.rank + 1))
        say(f"{child.label} {describe_status(child.poll())}; " + (
            "it was a spare server (--spare-servers): the job goes on without it" if spare else
            f"its slices go on on their replicas (--server-replicas {self.server_replicas}) while another "
            f"server of its chain lives"))

    def leaves(self, child):
        """--elastic: whether `child`, which just ended, left the job (noted and said) rather
        than ending it."""
        if self.joins is None or child.proc.role != "worker":
            return False
        if child.poll() in (SAVED_STOP_STATUS, STOPPED_STATUS):
            # `tally train`'s stop at the step the workers agreed on (the lead's, with its
            # checkpoint): the whole job stops, whatever the rank (wait_for_stop).
            return False
        if child.poll() == 0:
            if "left the job" not in (child.last_lines.get(sys.stdout) or ""):
                return False
            said = f"{child.label} left the job (exited 0 after its SIGTERM)"
        else:
            said = (f"{child.label} {describe_status(child.poll())}; it leaves the job (--elastic) once "
                    f"the scheduler has decided the step")
        self.lost.append(child)
        say(f"{said}; {self.joins.left(child, time.monotonic())}")
        return True

    def drop_late_joiners(self, workers):
        """The scheduler has ended the job: a joiner it never admitted has no job to join."""
        late = [c for c in workers if c.proc.joins and not c.joined and c.poll() is None]
        for child in late:
            say(f"{child.label} had not joined when the job ended; stopping it")
            child.terminate(process_table())
            self.lost.append(child)

    def live_workers(self):
        return [c for c in self.live() if c.proc.role == "worker"]

    def tend_joins(self):
        """--elastic: starts the joiners whose back-off has passed, names the joins the
        scheduler decided, and stops the job when too few workers are left. Returns the
        job's status when it must end now, else None."""
        for epoch, rank, step in self.joins.joined():
            joiner = next((c for c in reversed(self.live_workers()) if c.proc.rank == rank), None)
            if joiner is not None:
                joiner.joined = True
            where = joiner.label if joiner else f"worker {rank}"
            say(f"{where} joined the job: from step {step} (membership {epoch})")
        for joiner in self.joins.due(time.monotonic()):
            self.children.append(joiner)
            try:
                joiner.start()
            except OSError as e:
                say(f"cannot start {joiner.label}: {e}; stopping the job")
                return 127
            say(f"started {joiner.label} to join the job (TALLY_JOIN=1, join {joiner.proc.joins} of "
                f"at most {self.joins.policy.max_joins} for its rank)")
        live = [c for c in self.live_workers() if c.poll() in (None, 0)]
        if len(live) < self.joins.policy.min_workers and not self.joins.job_stopping:
            return self.stop_below_min(live)
        return None

    def stop_below_min(self, live):
        """Fewer live workers than --min-workers: the job stops as a SIGTERM to it stops it
        (run: the workers agree on a step, the lead saves the checkpoint), and ends as failed,
        so that --max-restarts starts it again whole."""
        waiting = self.joins.waiting()
        self.joins.close()
        self.below_min = (f"{len(live)} live worker{'s' if len(live) != 1 else ''}, fewer than "
                          f"--min-workers {self.joins.policy.min_workers}")
        say(f"{self.below_min}" + (f" (the joiner of worker {', '.join(map(str, waiting))} not started yet)"
                                   if waiting else "")
            + "; stopping the job at an agreed step with its checkpoint")
        return 1

    @property
    def received(self):
        return self.interrupts.received

    def run(self):
        status = self.watch()
        if self.joins is not None:
            self.joins.close()
        self.stop()
        if self.received == signal.SIGTERM and self.report_stop():
            return 0
        if self.below_min is not None:
            return self.report_stop_below_min()
        return status

    def report_stop_below_min(self):
        """After the stop below --min-workers: EX_TEMPFAIL (SAVED_STOP_STATUS) when the live
        workers stopped with the checkpoint saved, else 1."""
        workers = [c for c in self.live_workers() if c.popen is not None]
        if workers and saved_stop(workers):
            say("the job stopped below --min-workers at the workers' agreed step, the checkpoint saved: "
                "the same command with --resume auto continues it (--max-restarts does)")
            return SAVED_STOP_STATUS
        say("the job stopped below --min-workers without a checkpoint saved: " + ", ".join(
            f"{c.label} {describe_status(c.poll()) if c.poll() is not None else 'still ran'}"
            for c in workers))
        return 1

    def report_stop(self):
        """After a SIGTERM to the launcher (Slurm's `--signal=B:TERM@60`, say): whether
        every worker stopped as `tally train` does on SIGTERM; True when the checkpoint
        was saved, so that nothing was lost."""
        # --elastic: the workers that left or died before the stop (self.lost) are no part of it.
        workers = [c for c in self.live() if c.proc.role == "worker" and c.popen is not None]
        other = [c for c in workers if c.poll() not in (0, SAVED_STOP_STATUS, STOPPED_STATUS)]
        if workers and saved_stop(workers):
            say(RESUME_ADVICE)
            return True
        if workers and not other:
            say(f"every worker exited {STOPPED_STATUS} or 0: stopped at the agreed step, no "
                f"checkpoint saved (the command has no --model-prefix)")
        elif other:
            say("not stopped at an agreed step: " + ", ".join(
                f"{c.label} {describe_status(c.poll()) if c.poll() is not None else 'still ran'}"
                for c in other))
        return False

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
        others = [c for c in self.children if c.proc.role != "worker"]
        workers_done_at = others_done_at = None
        noted_waiting = False
        while True:
            if self.received is not None:
                return self.interrupted()
            if any(self.leaves(c) for c in self.live() if c.poll() is not None):
                continue
            if self.joins is not None:
                status = self.tend_joins()
                if status is not None:
                    return status
            workers = self.live_workers()
            ended = [c for c in self.live() if c.poll() not in (None, 0)]
            if ended:
                first = min(ended, key=lambda c: c.exited_at or 0)
                if self.server_replicas and first.proc.role == "server" and \
                        not stopped_on_request(first.poll()):
                    self.lose(first)
                    others = [c for c in others if c is not first]
                    continue
                if stopped_on_request(first.poll()):
                    return self.wait_for_stop(first)
                return self.fail(first)
            if all(c.poll() == 0 for c in self.live()):
                lost = f" ({', '.join(c.label for c in self.lost)} lost on the way)" if self.lost else ""
                say(f"the job finished: {census(self.live())} exited 0 after "
                    f"{time.monotonic() - began:.1f} s{lost}")
                return 0
            now = time.monotonic()
            if self.joins is not None and any(c.poll() == 0 for c in workers):
                self.joins.close()  # a worker finished its training: nobody joins any more
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
                self.drop_late_joiners(workers)
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
            failed = [c for c in self.live()
                      if c.poll() not in (None, 0) and not stopped_on_request(c.poll())]
            if failed:
                return self.fail(min(failed, key=lambda c: c.exited_at or 0))
            if all(c.poll() is not None for c in self.children):
                workers = [c for c in self.children if c.proc.role == "worker"]
                if saved_stop(workers):
                    say(f"the job stopped on SIGTERM: {census(self.children)} have exited; "
                        + RESUME_ADVICE)
                    return 0
                say(f"the job stopped on SIGTERM: {census(self.children)} have exited "
                    f"(workers {STOPPED_STATUS}: stopped at the agreed step, no checkpoint saved "
                    f"without --model-prefix)")
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
                # A SIGKILL ends a process at once, but one sent through ssh or scancel
                # arrives only when that command has run, which a loaded machine may take
                # longer than --grace to do: the launcher waits for it (up to
                # DELIVERY_BOUND_S), rather than leave a remote process running.
                began = time.monotonic()
                while left and time.monotonic() - began < DELIVERY_BOUND_S and (
                        time.monotonic() - began < self.grace or any(c.delivering() for c in left)):
                    time.sleep(POLL_SECONDS)
                    table, left = running()
                for child in left:
                    child.signal_group(signal.SIGKILL, table)
        # Output drains at once unless something that escaped the job (a daemon that
        # called setsid) holds a pipe; the launcher does not wait for that for long.
        deadline = time.monotonic() + 5
        for child in started:
            child.finish(timeout=max(0.1, deadline - time.monotonic()))


def run_with_restarts(make_children, shutdown_timeout, grace, max_restarts, server_replicas=0, make_joins=None):
    """Runs the job and, after a process fails, stops it and starts it whole again, up to
    max_restarts times; make_children(attempt) gives each attempt's children (attempt 0
    is the first), make_joins(attempt), under --elastic, its elastic.Joins. Returns the exit
    status of the last attempt.

    Only a failed process leads to a restart: a signal to the launcher, a process that
    cannot be started or a scheduler or server that outlives the workers end the run.
    """
    interrupts = Interrupts()
    attempt = 0
    while True:
        job = Job(make_children(attempt), shutdown_timeout, grace, interrupts, server_replicas,
                  make_joins(attempt) if make_joins else None)
        status = job.run()
        if status == 0:
            if attempt:
                say(f"the job completed on attempt {attempt + 1} of {max_restarts + 1}")
            return status
        if (job.failed is None and job.below_min is None) or interrupts.received is not None:
            return status
        failure = job.below_min or f"{job.failed.label} {describe_status(job.failed.returncode)}"
        if attempt == max_restarts:
            if max_restarts:
                say(f"no restarts left ({max_restarts} used); the last failure: {failure}")
            return status
        attempt += 1
        say(f"restart {attempt} of {max_restarts} after {failure}: starting every process "
            f"again, to continue from the latest checkpoint")
