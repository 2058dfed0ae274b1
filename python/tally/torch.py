"""tally.torch: PyTorch training through Tally's servers (docs/python.md, "tally.torch").

    import torch
    import tally
    import tally.torch

    kv = tally.kv.create("dist_sync")                  # a worker of the job
    model = Net()
    tally.torch.broadcast_parameters(model, kv)         # worker 0's weights everywhere
    ddp = tally.torch.DistributedDataParallel(model, kv)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for x, y in batches:                                # this worker's share
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()                   # gradients averaged by the servers
        opt.step()

or, without DDP, `opt = tally.torch.DistributedOptimizer(torch.optim.SGD(...), kv)`.

Keys: the first tally.torch call on a store registers the tensors it is given (a model's
state: parameters and floating-point buffers, or a list of tensors) as keys 0, 1, ... in
that order, all in one kv.init (the distributed types need every key in one Init). Later
calls find their tensors among those, by storage. The servers run no optimizer: a push
replaces a key's value with the sum over the workers, which makes one round trip both the
gradient sum and, with zeros pushed by every worker but 0, the broadcast. Each worker then
applies its own torch optimizer to the same averaged gradients, so weights stay equal.

Elastic workers (--elastic, TALLY_ELASTIC=1): every step pushes every key (those without a
gradient as zeros) and one small control key, whose sum tells every worker alike what the
step counted (tally/torch_elastic.py): a gradient step's average divides by the workers
whose gradients it holds; a worker that joined the running job (TALLY_JOIN=1, kv.joined)
pushes zeros at its first step, since the servers hold gradients, not weights, and the
lowest live rank that holds the job's weights then broadcasts its weights and buffers to it
(docs/python.md, "Elastic workers").
"""
import weakref

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as _TorchDDP

from . import kv as _kvmod
from . import torch_elastic as _elastic
from .torch_elastic import StepInfo

__all__ = ["broadcast_parameters", "HookState", "allreduce_hook", "DistributedDataParallel",
           "DistributedOptimizer", "init_process_group", "step_info", "next_step", "StepInfo"]

_KV_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# The key table of each store (a store has one Init, hence one table).
_tables = weakref.WeakKeyDictionary()


def _tensors_of(what, op):
    """The tensors of a module (parameters, then buffers), a state dict, or an iterable."""
    if isinstance(what, torch.nn.Module):
        seen, out = set(), []
        for t in list(what.parameters()) + list(what.buffers()):
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out
    if isinstance(what, dict):
        tensors = list(what.values())
    else:
        try:
            tensors = list(what)
        except TypeError:
            raise TypeError("tally.torch %s: expected a torch.nn.Module, a state dict or an iterable of "
                            "tensors, got %s" % (op, type(what).__name__)) from None
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError("tally.torch %s: item %d is a %s, not a torch.Tensor" % (op, i, type(t).__name__))
    return tensors


def _check_cpu(t, op):
    if t.device.type != "cpu":
        raise ValueError("tally.torch %s: a tensor is on %s; tally.torch trains on CPU tensors" % (op, t.device))


class _KeyTable:
    """Key k is the k-th distinct tensor (by storage) the table was built from."""

    def __init__(self, kv, tensors, op):
        self.kv = kv
        self.kv_dtypes = _KV_DTYPES
        self.numels, self.where, self.tensors = [], {}, []
        self.steps = 0  # without --elastic: the rounds so far, and the last gradient one's
        self.gradient_step = None
        values = []
        for t in tensors:
            _check_cpu(t, op)
            if t.numel() == 0 or self._slot(t) in self.where:
                continue  # an empty tensor has nothing to send; a tied one is sent once
            if t.dtype.is_floating_point and t.dtype not in _KV_DTYPES:
                raise TypeError("tally.torch %s: key %d: a tensor of %s, shape %s; the kvstore takes float32, "
                                "float16 or bfloat16 (convert the model, e.g. model.float())"
                                % (op, len(self.numels), t.dtype, tuple(t.shape)))
            if not t.dtype.is_floating_point and not _exact_in_float32(t):
                raise TypeError("tally.torch %s: key %d: a tensor of %s whose values float32 cannot hold exactly"
                                % (op, len(self.numels), t.dtype))
            key = len(self.numels)
            self.where[self._slot(t)] = key
            self.numels.append(t.numel())
            self.tensors.append(t)
            # init copies: a view of a tensor the kvstore takes, a float32 copy of an integer one.
            # A joiner's init writes the servers' values (the last step's gradient sums) into
            # them: a copy of its own then, which is thrown away.
            v = t.detach().contiguous()
            v = v if v.dtype in _KV_DTYPES else v.to(torch.float32)
            values.append(v.clone() if kv.joined else v)
        if not values:
            raise ValueError("tally.torch %s: no tensor with values to register" % op)
        # --elastic: one more key, the control key every step pushes (tally/torch_elastic.py).
        # dist_async has no step that every worker's push is in: it averages as before.
        elastic = kv.elastic and kv.type != "dist_async"
        self.control_key = len(values) if elastic else None
        if elastic:
            values.append(torch.zeros(2 + 3 * kv.worker_slots, dtype=torch.float32))
        kv.init(list(range(len(values))), values)
        self.rounds = _elastic.Rounds(kv, self) if elastic else None

    @property
    def fresh(self):
        """A worker that joined the running job and has pushed nothing yet (--elastic)."""
        return self.rounds is not None and self.rounds.fresh

    def gradients_done(self, pushed_keys):
        """After a step's gradient pushes (wait=False): waits for them and returns (the
        workers to divide the sums by, whether this worker's own gradients counted). Under
        --elastic the other keys and the control key go too (tally/torch_elastic.py);
        without, every worker counts, as many as the servers summed."""
        if self.rounds is None:
            self.kv.wait_all()
            self.gradient_step = self.steps
            self.steps += 1
            return self.kv.summed_workers, True
        mine = self.rounds.pushes_gradients()
        info = self.rounds.gradients(pushed_keys)
        if info is None:  # a joiner's first step fell on the others' broadcast
            return 1, False
        return info.divisor, mine

    def pushes_gradients(self):
        return self.rounds is None or self.rounds.pushes_gradients()

    def settle(self, op):
        """--elastic: broadcasts until every worker counted holds the job's weights."""
        if self.rounds is not None:
            self.rounds.settle(op)

    @staticmethod
    def _slot(t):
        return (t.data_ptr(), t.numel(), t.dtype)

    def key(self, t, op):
        k = self.where.get(self._slot(t))
        if k is None:
            raise KeyError("tally.torch %s: a tensor of shape %s (%s) is not among the %d tensors this store's "
                           "keys were made from (the first tally.torch call on a store registers them; pass "
                           "the model there)" % (op, tuple(t.shape), t.dtype, len(self.numels)))
        return k


def _exact_in_float32(t):
    """An integer or bool tensor whose values float32 holds exactly (|v| <= 2^24)."""
    if t.dtype == torch.bool:
        return True
    return t.numel() == 0 or int(t.detach().abs().max()) <= 1 << 24


def _table(kv, what, op):
    if not isinstance(kv, _kvmod.KVStore):
        raise TypeError("tally.torch %s: kv must be a tally.kv.KVStore (tally.kv.create), got %s"
                        % (op, type(kv).__name__))
    table = _tables.get(kv)
    if table is None:
        table = _KeyTable(kv, _tensors_of(what, op), op)
        _tables[kv] = table
    return table


def broadcast_parameters(model_or_state_dict, kv):
    """Copies worker 0's values of every tensor of model_or_state_dict (a module's parameters
    and buffers, a state dict, or tensors) into every worker's. Every worker calls it, with
    the same model. Returns once the values have arrived."""
    op = "broadcast_parameters"
    tensors = _tensors_of(model_or_state_dict, op)
    table = _table(kv, tensors, op)
    if table.rounds is None:
        _broadcast(kv, table, tensors, op)
        table.steps += 1
        return
    for t in tensors:
        if t.numel():
            table.key(t, op)  # a tensor of another model raises, as without --elastic
    if table.fresh:
        return  # a joiner: it takes the job's weights after its first step, not now
    # --elastic: every key travels (each key's step is the job's), from the lowest live
    # rank that holds the job's weights; again until one such rank was counted.
    table.rounds.broadcast(op)
    table.settle(op)


def step_info(kv):
    """The last gradient step tally.torch took on kv's store: a StepInfo(step, counted,
    divisor, present). Under --elastic, step is the job's step, counted the ranks whose
    gradients the sums held, divisor what they were divided by (len(counted)), present the
    ranks the step counted a push of (a joiner's zeros at its first step among them);
    without, counted and present are every rank. None before the first."""
    table = _tables.get(kv)
    if table is None:
        return None
    if table.rounds is not None:
        return table.rounds.last
    if table.gradient_step is None:
        return None
    ranks = list(range(kv.num_workers))
    return StepInfo(table.gradient_step, ranks, kv.summed_workers, ranks)


def next_step(kv):
    """The job's step of tally.torch's next push on kv's store (--elastic: every key is
    pushed at every step, so it is each key's; a joiner starts at kv.first_step)."""
    table = _tables.get(kv)
    if table is None:
        return kv.first_step
    return table.rounds.step if table.rounds is not None else table.steps


def _broadcast(kv, table, tensors, op):
    """Worker 0's values of tensors into every worker's: one pushpull, the others pushing zeros."""
    keys, sends, staged = [], [], []
    for t in tensors:
        if t.numel() == 0:
            continue
        k = table.key(t, op)
        if k in keys:
            continue
        if t.dtype in _KV_DTYPES and t.is_contiguous():
            buf = t.detach()
        else:
            buf = t.detach().to(torch.float32).contiguous()
            staged.append((t, buf))
        if kv.rank != 0:
            buf.zero_()  # worker 0's values plus zeros are worker 0's values
        keys.append(k)
        sends.append(buf)
    # One call, pulled into the pushed memory: the sum of one worker's values and zeros.
    kv.pushpull(keys, sends, priority=0)
    with torch.no_grad():
        for t, buf in staged:
            t.copy_(buf)


class HookState:
    """The state of allreduce_hook: the store and the model's keys (registered here when this
    is the store's first tally.torch call)."""

    def __init__(self, kv, model_or_params):
        self.kv = kv
        self.table = _table(kv, model_or_params, "HookState")
        self.num_workers = kv.num_workers  # at the start; the averages divide by the step's count
        self._pending = []  # (future, bucket buffer) of this backward pass's buckets so far
        self._keys = []  # the keys this backward pass pushed so far
        # --elastic: after a join the lead's weights are broadcast before the next forward
        # (after the optimizer's step; during backward they are still in use), by the module's
        # forward pre-hook: a list of parameters has no forward to hook.
        if isinstance(model_or_params, torch.nn.Module):
            model_or_params.register_forward_pre_hook(self._before_forward)
        elif self.table.rounds is not None:
            raise TypeError("tally.torch HookState: under --elastic (TALLY_ELASTIC=1) pass the module, not its "
                            "parameters: a worker that joins takes the job's weights before a forward")

    def _before_forward(self, module, inputs):
        self.table.settle("allreduce_hook")


def allreduce_hook(state, bucket):
    """A DDP communication hook: averages the bucket's gradients over the workers through
    the servers. Each parameter's slice of the bucket is pushed as its key (priority -key,
    so the first layers come back first) and pulled back in place. The futures of a backward
    pass complete together when its last bucket is handed over, so that the round trips of
    the earlier buckets overlap the rest of the backward pass, as gloo's allreduce does."""
    buf = bucket.buffer()
    keys, views, offset = [], [], 0
    for p in bucket.parameters():
        n = p.numel()
        keys.append(state.table.key(p, "allreduce_hook"))
        views.append(buf[offset:offset + n])
        offset += n
    if offset != buf.numel():
        raise ValueError("tally.torch allreduce_hook: the bucket holds %d values, its parameters %d"
                         % (buf.numel(), offset))
    if not state.table.pushes_gradients():
        buf.zero_()  # a joiner's first step: gradients of weights that are not the job's
    state.kv.pushpull(keys, views, priority=-min(keys), wait=False)
    state._keys.extend(keys)
    future = torch.futures.Future()
    state._pending.append((future, buf))
    if bucket.is_last():
        pending, state._pending = state._pending, []
        pushed, state._keys = state._keys, []
        n, mine = state.table.gradients_done(pushed)  # --elastic: the workers this step counted
        for f, b in pending:
            if mine:
                b.div_(n)  # DDP's allreduce averages
            else:
                b.zero_()  # a joiner's first step applies nothing: the broadcast brings the weights
            f.set_result(b)
    return future


def init_process_group():
    """A process group of one process (gloo over an in-memory store), which DDP requires
    before it will wrap a module. Tally's servers do the reduction in allreduce_hook, so no
    worker needs to reach another: no address or port to agree on. Does nothing when a
    process group exists already."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def DistributedDataParallel(module, kv, **ddp_kwargs):
    """torch's DistributedDataParallel over a one-process group, with allreduce_hook doing
    the averaging through kv. Call broadcast_parameters first: a group of one broadcasts
    nothing. Keyword arguments go to torch's DDP."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("tally.torch.DistributedDataParallel: expected a torch.nn.Module, got %s"
                        % type(module).__name__)
    state = HookState(kv, module)
    init_process_group()
    ddp = _TorchDDP(module, **ddp_kwargs)
    ddp.register_comm_hook(state, allreduce_hook)
    return ddp


class DistributedOptimizer:
    """Wraps a torch optimizer: step() averages every parameter's gradient over the workers
    through the servers (pushed in reverse order, priority -key: the last layers' gradients
    were ready first), then runs the wrapped optimizer's step on the averages. Any torch
    optimizer works, since the update itself stays on the worker. A parameter without a
    gradient is averaged as zeros, so every worker pushes the same keys (dist_sync needs it)."""

    def __init__(self, optimizer, kv, model_or_params=None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("tally.torch.DistributedOptimizer: expected a torch.optim.Optimizer, got %s"
                            % type(optimizer).__name__)
        self.optimizer = optimizer
        self.kv = kv
        self._params = [p for g in optimizer.param_groups for p in g["params"]]
        self.table = _table(kv, self._params if model_or_params is None else model_or_params,
                            "DistributedOptimizer")
        self._keys = [self.table.key(p, "DistributedOptimizer") for p in self._params]

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none=False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def synchronize(self):
        """Averages the gradients in place (step() does it first). Returns whether they are
        this worker's share of the step (False in a worker that joined, at its first step:
        its gradients are then zeros)."""
        zeros = not self.table.pushes_gradients()
        for p, k in sorted(zip(self._params, self._keys), key=lambda pk: -pk[1]):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if zeros:
                p.grad.zero_()  # a joiner's first step: gradients of weights that are not the job's
            self.kv.pushpull(k, p.grad, priority=-k, wait=False)
        n, mine = self.table.gradients_done(self._keys)  # --elastic: the workers this step counted
        with torch.no_grad():
            for p in self._params:
                if mine:
                    p.grad.div_(n)
                else:
                    p.grad.zero_()
        return mine

    def step(self, closure=None):
        """synchronize(), the wrapped optimizer's step, and under --elastic, after a join,
        the broadcast of the lead's weights and buffers. A worker that joined skips the
        wrapped step at its first step (its weights are not the job's; the broadcast brings
        them), so its optimizer's state starts at its next step."""
        result = None
        if self.synchronize():
            result = self.optimizer.step(closure)
        self.table.settle("DistributedOptimizer")
        return result

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)
