"""tally.torch under --elastic: how the workers agree, step by step, on what each step's sum
counts while workers leave and join (docs/python.md, "Elastic workers"). tally.torch uses it;
a script does not call it.

    rounds = Rounds(kv, table)                 # after the key table's init
    zeros = not rounds.pushes_gradients()      # a joiner's first step pushes zeros
    info = rounds.gradients(pushed_keys)       # after a step's pushes: pushes the rest, waits
    n = info.divisor                           # the workers whose gradients the sums hold
    rounds.settle("step")                      # after a join: the lead's weights to everyone

The servers run no optimizer, so they hold gradient sums, never weights: a worker that joins
the running job cannot pull the job's weights, and its first push must add nothing. Which
workers a step's sum counts is decided by the scheduler and the servers (docs/faults.md: a
step counts a leaver's push everywhere or nowhere), and a joiner learns the changes before
its own only as it joins; so rather than re-derive it from the membership changes, every
worker pushes, with every step, one small control key (the table's last) saying what it
pushed: present, whether it holds the job's weights (synced), whether it takes part in a
broadcast, whether it leads one. The pulled sum of that key is, on every worker alike (the
joiner too, from its first step), exactly what the step's other sums counted: the same
servers, the same step, counted on all of them or on none. From it each worker computes

- a gradient step's divisor: the synced workers it counted (a joiner's zeros excluded),
  whatever joined or left at that very step, however many;
- whether a broadcast is due: a worker counted whose weights are not the job's;
- the broadcast's lead: the lowest synced rank counted (never a joiner; rank 0 need not be
  live). A broadcast whose lead is not counted (it left at that step) changes nothing, and
  the next step broadcasts again from the next lowest.

Every key is pushed at every step (those without a gradient as zeros), so that each key's
step count is the job's step: a joiner counts every key's pushes from its first step
(kvstore/dist_kvstore.h), and a broadcast pushes every key.
"""
import collections

import torch

from . import kv as _kvmod

# A gradient step's outcome, as every worker computed it from the control key's sum
# (tally.torch.step_info): step, the job's step; counted, the ranks whose gradients the sums
# hold (the synced workers the step counted); divisor, what the sums are divided by (their
# number); present, every rank the step counted a push of (a joiner's zeros included).
StepInfo = collections.namedtuple("StepInfo", "step counted divisor present")


class Rounds:
    """The elastic rounds of one store's key table. Driven by one thread."""

    def __init__(self, kv, table):
        self.kv = kv
        self.table = table
        self.rank = kv.rank
        self.slots = kv.worker_slots
        # A worker that joined the running job knows nothing yet of the others' state: its
        # first step pushes zeros, takes no broadcast, and learns the state from the sums.
        self.fresh = kv.joined
        self.synced = not kv.joined
        self.step = kv.first_step  # the job's step of the next push (every key)
        self.broadcast_due = False
        # Before any sum, the lead is the lowest live rank as heard now; every worker of the
        # job's start hears the same unless one left at once, and then the sums correct it.
        self.lead = min(kv.live_ranks) if kv.live_ranks else 0
        self.last = None
        self.control = torch.zeros(2 + 3 * self.slots, dtype=torch.float32)
        n = max(table.numels) if table.numels else 0
        self._zeros = torch.zeros(n, dtype=torch.float32)  # the keys without a gradient

    # -- the control key: [broadcast, leads, present[W], synced[W], takes[W]] -------------
    def _fill(self, broadcast, lead, takes):
        c, w = self.control, self.slots
        c.zero_()
        c[0] = float(broadcast)
        c[1] = float(lead)
        c[2 + self.rank] = 1.0
        c[2 + w + self.rank] = float(self.synced and not self.fresh)
        c[2 + 2 * w + self.rank] = float(takes)

    def _sums(self):
        c, w = self.control.tolist(), self.slots

        def ranks(base):
            return {r for r in range(w) if c[base + r] >= 0.5}
        return c[0] >= 0.5, int(round(c[1])), ranks(2), ranks(2 + w), ranks(2 + 2 * w)

    def _push_control(self):
        self.kv.pushpull(self.table.control_key, self.control, priority=-(1 << 30), wait=False)

    # -- a gradient step ------------------------------------------------------------------
    def pushes_gradients(self):
        """Whether this worker's gradients count at its next gradient step (else it pushes
        zeros: it joined and holds weights that are not the job's)."""
        return self.synced and not self.fresh

    def gradients(self, pushed_keys):
        """After this step's gradient pushes (pushed_keys, wait=False): pushes the other keys
        as zeros and the control key, waits for every sum, and learns the step's outcome:
        returns its StepInfo (its divisor divides the gradient sums), or None when this was a
        joiner's first step and the others broadcast at it."""
        was_fresh = self.fresh
        self._fill(broadcast=False, lead=False, takes=False)
        self._push_rest(pushed_keys)
        self._push_control()
        self.kv.wait_all()
        broadcast, leads, present, synced, takes = self._sums()
        if broadcast and not was_fresh:
            raise _kvmod.TallyError(
                "tally.torch: at step %d worker %d pushed gradients while another broadcast (every worker "
                "calls broadcast_parameters at the same step)" % (self.step, self.rank))
        if broadcast:  # a joiner's first step fell on the others' broadcast: it took nothing
            self._learn(present, (synced | takes) if leads == 1 else synced)
            return None
        if not synced:
            raise _kvmod.TallyError("tally.torch: step %d counted no worker that holds the job's weights "
                                    "(workers %s joined with weights of their own)" % (self.step, sorted(present)))
        self._learn(present, synced)
        self.last = StepInfo(self.step - 1, sorted(synced), len(synced), sorted(present))
        return self.last

    def _push_rest(self, pushed_keys):
        pushed = set(pushed_keys)
        for k, n in enumerate(self.table.numels):
            if k not in pushed:
                z = self._zeros[:n]
                z.zero_()  # a skipped step writes its restored values into what it pulled
                self.kv.pushpull(k, z, priority=-k, wait=False)

    # -- a broadcast ----------------------------------------------------------------------
    def broadcast(self, op):
        """One broadcast step: the lead's values of every key into every worker that takes
        part (all but a joiner at its first step), when the lead was counted; else nothing
        changes and broadcast_due stays. Returns whether the lead was counted."""
        table = self.table
        lead = self.rank == self.lead and self.synced and not self.fresh
        takes = not self.fresh
        staged = []
        for t in table.tensors:
            buf = torch.zeros(t.numel(), dtype=t.dtype if t.dtype in table.kv_dtypes else torch.float32)
            if lead:
                buf.copy_(t.detach().reshape(-1))
            staged.append(buf)
        self._fill(broadcast=takes, lead=lead, takes=takes)
        self.kv.pushpull(list(range(len(staged))), staged, priority=0, wait=False)
        self._push_control()
        self.kv.wait_all()
        broadcast, leads, present, synced, took = self._sums()
        # From the sums alone, so that every worker agrees even if they named different leads
        # (only a synced worker leads, and every other pushes zeros).
        valid = leads == 1
        if synced - took:
            raise _kvmod.TallyError("tally.torch %s: at step %d worker %d broadcast while workers %s pushed "
                                    "gradients (every worker calls broadcast_parameters at the same step)"
                                    % (op, self.step, self.rank, sorted(synced - took)))
        if valid and takes:
            with torch.no_grad():
                for t, buf in zip(table.tensors, staged):
                    t.copy_(buf.view(t.shape))
        self._learn(present, (synced | took) if valid else synced)
        return valid

    def _learn(self, present, synced_after):
        """The state after a step, the same on every worker that pushed it."""
        self.synced = self.rank in synced_after
        self.fresh = False
        self.step += 1
        self.broadcast_due = bool(present - synced_after)
        if synced_after:
            self.lead = min(synced_after)
        elif self.broadcast_due:
            raise _kvmod.TallyError("tally.torch: after step %d no live worker holds the job's weights (the "
                                    "workers counted, %s, all joined with weights of their own)"
                                    % (self.step - 1, sorted(present)))

    def settle(self, op):
        """Broadcasts until every worker counted holds the job's weights."""
        while self.broadcast_due:
            self.broadcast(op)
