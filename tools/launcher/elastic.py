"""--elastic's workers as the launcher keeps them (`--min-workers`, `--max-workers`): when a
new process takes the place of a worker that left, and whether enough workers are live.

    joins = Joins(Policy(min_workers=2, replace=True, max_joins=3), make_joiner)
    note = joins.left(child, time.monotonic())  # a worker left; says when its rank is started
    for joiner in joins.due(time.monotonic()):  # new Child objects, TALLY_JOIN=1, to start
        joiner.start()
    joins.heard(line)                           # a scheduler's line; joined() drains its joins

A joiner is the leaver's process again: the same rank, host and variables (the job's secret
included), plus TALLY_JOIN=1, which makes `tally train` and `tally.kv` join the running job
instead of gathering with it (docs/faults.md, "A worker joins"). Nothing here starts or
signals a process; `supervise.Job` does, from its one thread. `heard` alone runs on the
scheduler's output thread.
"""

import dataclasses
import re
import threading

# The scheduler's line for a decided join (scheduler/scheduler.cc): "membership 2: worker 2
# joined (10.0.0.5:41233, pid 5512); from step 71 the 4 live workers are 0, 1, 2, 3".
JOINED_LINE = re.compile(r"membership (\d+): worker (\d+) joined \(.*\); from step (\d+)")
# What `tally train`'s scheduler says on a SIGTERM (tools/train_command.cc): the whole job was
# asked to stop (Slurm's scancel --signal=TERM JOB, a node's shutdown), so the workers that
# leave on their SIGTERM under --elastic do not leave the job to go on: nobody takes their
# place, and a count below --min-workers is the stop itself, not a reason for one more.
JOB_STOPPING_LINE = "SIGTERM: serving on until the workers have saved"
# The first joiner for a rank starts this long after its leave, each next one twice as long
# after the last one's end, up to MAX_BACKOFF_S: a host that kills every process it starts
# (a full disk, a missing GPU) is not hammered, and a short outage is ridden out.
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
# The variable that makes a worker join a running job (net/cluster_config.cc reads it).
JOIN_VAR = "TALLY_JOIN"


@dataclasses.dataclass
class Policy:
    """What --elastic's flags ask of the launcher."""
    min_workers: int = 1  # below this many live workers the job stops with a checkpoint
    replace: bool = False  # --max-workers: a worker that left is replaced by a joiner
    max_joins: int = 3  # joiners per rank, at most (--max-joins)


def joiner_proc(proc, number):
    """A copy of `proc` (job.Proc) for its `number`th joiner: TALLY_JOIN=1 added."""
    return dataclasses.replace(proc, env={**proc.env, JOIN_VAR: "1"}, joins=number)


class Joins:
    """The joiners of one attempt of the job: those waiting out their back-off, the count
    started per rank, and the joins the scheduler has decided."""

    def __init__(self, policy, make_joiner):
        self.policy = policy
        self.make_joiner = make_joiner  # make_joiner(proc) -> children.Child, not started
        self.started = {}  # rank -> joiners started for it
        self.pending = {}  # rank -> (due time, the Child whose place it takes)
        self.closed = False  # the job ends: no joiner starts any more
        self.decided = []  # (membership epoch, rank, from step) heard from the scheduler
        self.job_stopping = False  # the scheduler got SIGTERM: the whole job stops
        self.lock = threading.Lock()

    def left(self, child, now):
        """`child`, a worker, left the job at `now`; returns what the launcher does about
        it, in words, for its line."""
        rank = child.proc.rank
        if self.job_stopping:
            return "the whole job is stopping on SIGTERM"
        if not self.policy.replace:
            return "the others go on"
        if self.closed:
            return "the job is ending: no new worker takes its place"
        count = self.started.get(rank, 0)
        if count >= self.policy.max_joins:
            return (f"no new worker {rank} (--max-joins {self.policy.max_joins} used for its rank); "
                    f"the others go on")
        delay = min(FIRST_BACKOFF_S * 2 ** count, MAX_BACKOFF_S)
        self.pending[rank] = (now + delay, child)
        return f"a new worker {rank} on {child.display_host} joins in {delay:g} s (TALLY_JOIN=1)"

    def due(self, now):
        """The joiners whose back-off has passed, as Child objects to start; each counted."""
        if self.closed or self.job_stopping:
            return []
        ready = sorted(rank for rank, (when, _) in self.pending.items() if when <= now)
        joiners = []
        for rank in ready:
            _, child = self.pending.pop(rank)
            self.started[rank] = self.started.get(rank, 0) + 1
            joiners.append(self.make_joiner(joiner_proc(child.proc, self.started[rank])))
        return joiners

    def waiting(self):
        """The ranks whose joiner waits out its back-off."""
        return sorted(self.pending)

    def close(self):
        """The job ends (a worker finished, or it stops): pending joiners never start."""
        self.closed = True
        self.pending.clear()

    def heard(self, line):
        """Notes a join the scheduler decided, or that the whole job stops, from one line of
        its output (bytes)."""
        text = line.decode(errors="replace")
        if JOB_STOPPING_LINE in text:
            self.job_stopping = True
        match = JOINED_LINE.search(text)
        if match:
            with self.lock:
                self.decided.append(tuple(int(g) for g in match.groups()))

    def joined(self):
        """The joins decided since the last call: [(epoch, rank, from step)]."""
        with self.lock:
            decided, self.decided = self.decided, []
        return decided
