"""tally.kv: Tally's KVStore from Python, with MXNet's method names (docs/python.md).

    import numpy as np
    import tally

    kv = tally.kv.create("dist_sync")       # joins the job tools/launch.py started
    kv.set_optimizer(type="sgd", lr=0.1, momentum=0.9, wd=1e-4)
    kv.init([0, 1], [w0, w1])               # every key in one call (dist types)
    kv.pushpull(0, g0, out=w0)              # returns with the updated weights in w0
    kv.pushpull(1, g1, out=w1, wait=False)  # returns at once; w1 is ready...
    kv.wait_all()                           # ...once this returns
    kv.close()                              # or `with tally.kv.create(...) as kv:`

Values are NumPy arrays (float32, float16) or CPU torch tensors (float32, float16,
bfloat16), contiguous, used without copying. As in MXNet, a script may read what it pulled
and write what it pushed as soon as the call returns: push, pull and pushpull wait for the
keys they name. With wait=False they return at once and overlap with what follows (as
tally.torch's gradient hooks do); then a pushed array must not be written, and a pulled one
not read, until wait(key) or wait_all() returns. The store holds a reference to each array
for as long as it uses the array's memory.
"""
import atexit
import os
import struct
import sys

import numpy as np

from . import _tally
from ._tally import TallyError

TYPES = ("local", "device", "dist_sync", "dist_device_sync", "dist_async")

# The optimizer-states file (docs/python.md, "Optimizer states file"), little-endian.
STATES_MAGIC = b"TALLYOPT"
STATES_VERSION = 1
_STATES_HEADER = struct.Struct("<8sII")   # magic, version, number of keys
_STATES_ENTRY = struct.Struct("<iIq")     # key, flags, number of float32 values
_STATES_HAS_STATE = 1                     # flags: the values follow (else none: momentum 0)

# Distributed stores not yet closed: kept alive to the end of the process (the worker's
# membership of the job lasts as long), when they finish the job.
_open_stores = set()


def create(type="local", num_devices=1):
    """A KVStore of `type` (one of TYPES). The dist_* types join the job described by the
    DMLC_* environment that tools/launch.py sets, as a worker; each push and pull then
    takes one value per device of this process (num_devices)."""
    if type not in TYPES:
        raise ValueError("tally.kv.create: type %r is not one of %s" % (type, ", ".join(TYPES)))
    if type.startswith("dist") and "DMLC_ROLE" not in os.environ:
        raise TallyError("tally.kv.create(%r): environment variable DMLC_ROLE is not set; a distributed "
                         "store joins a job: start the script with tools/launch.py, e.g. "
                         "tools/launch.py -n 2 -s 1 --launcher local python3 script.py" % type)
    store = KVStore(_tally.KVStore(type, num_devices), type)
    if type.startswith("dist"):
        _open_stores.add(store)
    return store


def _key(op, key):
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return int(key)
    raise TypeError("tally.kv %s: key %r is not an int" % (op, key))


def _no_wd_keys(no_wd_keys, wd_mult):
    """The sorted keys without weight decay of set_optimizer's no_wd_keys and wd_mult."""
    op = "set_optimizer"
    keys = set()
    for k in no_wd_keys or ():
        keys.add(_key(op + " no_wd_keys", k))
    for k, mult in dict(wd_mult or {}).items():
        k = _key(op + " wd_mult", k)
        if mult == 0:
            keys.add(k)
        elif mult != 1:
            raise ValueError("tally.kv set_optimizer: wd_mult of key %d is %r: the servers take a key's weight "
                             "decay whole (1) or not at all (0)" % (k, mult))
    for k in keys:
        if k < 0:
            raise ValueError("tally.kv set_optimizer: no_wd_keys has key %d; keys are >= 0" % k)
    return sorted(keys)


def _array(op, key, value):
    """value as a NumPy array over the same memory (torch tensors included)."""
    if type(value) is np.ndarray:
        if value.dtype.kind == "u":  # the extension reads uint16 as bfloat16 bits
            raise TypeError("tally.kv %s: key %d: dtype %s is not supported; expected float32 or float16 "
                            "(NumPy or torch) or bfloat16 (torch)" % (op, key, value.dtype))
        return value
    torch = sys.modules.get("torch")  # never imported here: only a loaded torch can have made value
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError("tally.kv %s: key %d: the tensor is on %s; tally.kv takes CPU tensors"
                             % (op, key, value.device))
        if not value.is_contiguous():
            raise ValueError("tally.kv %s: key %d: the tensor is not contiguous; pass tensor.contiguous()"
                             % (op, key))
        value = value.detach()
        if value.dtype == torch.bfloat16:
            return value.view(torch.int16).numpy().view(np.uint16)
        if value.dtype in (torch.float32, torch.float16):
            return value.numpy()
        raise TypeError("tally.kv %s: key %d: dtype %s is not supported; expected float32, float16 or bfloat16"
                        % (op, key, value.dtype))
    if isinstance(value, np.ndarray):
        return value
    raise TypeError("tally.kv %s: key %d: expected a NumPy array or a CPU torch tensor, got %s"
                    % (op, key, type(value).__name__))


class KVStore:
    """One store; made by create(). Driven by one thread at a time."""

    def __init__(self, impl, type):
        self._kv = impl
        self._type = type
        # [fn, the last membership epoch fn was told of]: it starts at this worker's start (a
        # joiner's before its own join: the changes before it are the job's history).
        self._membership_fns = []

    # -- what the store is --------------------------------------------------------------
    @property
    def type(self):
        return self._type

    @property
    def rank(self):
        return self._kv.rank

    @property
    def num_workers(self):
        """The workers of the job; under --elastic (TALLY_ELASTIC=1) the live ones as heard
        from the scheduler, every change the last pull's sums were decided under included
        (docs/faults.md, "A worker leaves")."""
        return len(self._poll_membership())

    @property
    def live_ranks(self):
        """The ranks of the live workers, as num_workers counts them (every rank without
        --elastic)."""
        return list(self._poll_membership())

    @property
    def worker_slots(self):
        """The ranks a worker of the job can have: 0 .. worker_slots - 1 (DMLC_NUM_WORKER, the
        workers the job started with; a joiner takes the rank of one that left)."""
        return self._kv.num_workers

    @property
    def elastic(self):
        """Whether workers may leave and join this job (a dist type under TALLY_ELASTIC=1,
        tools/launch.py --elastic; the same on every worker of the job)."""
        return self._type.startswith("dist") and os.environ.get("TALLY_ELASTIC") == "1"

    @property
    def summed_workers(self):
        """The workers whose pushes the last pull summed, as its server said: under --elastic
        the live ones of that very step (what an average divides by); else num_workers."""
        return self._kv.summed_workers

    @property
    def joined(self):
        """True in a worker that joined a running --elastic job (started with TALLY_JOIN=1, as
        tools/launch.py --max-workers starts a leaver's replacement): its init received the
        job's values, and it pushes from the job's step first_step."""
        return self._kv.joined

    @property
    def first_step(self):
        """The job's step of this worker's first push: 0, or in a joiner the step its join
        took effect from (every worker's sum counts it from there on)."""
        return self._kv.first_step

    def on_membership(self, fn):
        """Calls fn(epoch, from_step, live_ranks) for each membership change (--elastic), in
        epoch order, each once, on the caller's thread, at the first call of this store's
        (push, pull, pushpull, wait, wait_all, num_workers, live_ranks) after the change is
        heard of: epoch numbers the job's changes 1, 2, ...; from_step is the job's step
        from which the live workers are live_ranks. fn is told every change since this
        worker started, whenever it was registered; a joiner's fn its own join and what
        follows, not the job's history before it. Returns fn."""
        self._membership_fns.append([fn, self._kv.joined_after_epoch])
        return fn

    def _poll_membership(self):
        """The live ranks now; tells the callbacks of every change not told yet."""
        if not self._type.startswith("dist"):
            return self._kv.membership[2]
        changes = self._kv.heard_membership()
        for entry in list(self._membership_fns):
            for epoch, from_step, live in changes:
                if epoch > entry[1]:
                    entry[1] = epoch
                    entry[0](epoch, from_step, list(live))
        return changes[-1][2] if changes else self._kv.membership[2]

    @property
    def num_devices(self):
        return self._kv.num_devices

    def barrier(self):
        """Waits until every worker of the job has called barrier()."""
        self._kv.barrier()

    # -- the optimizer --------------------------------------------------------------------
    def set_optimizer(self, type="sgd", **settings):
        """The servers' (or this store's) optimizer, before init: type sgd, nag, adam, adamw,
        adagrad, rmsprop, signum, lars or lamb, and keyword settings under MXNet 1.9.1's names:
        lr (or learning_rate), momentum, wd, rescale_grad, clip_gradient (<= 0 or None: none),
        multi_precision, lazy_update; beta1, beta2, epsilon (or eps) for adam, adamw and lamb;
        gamma1, gamma2, centered, clip_weights for rmsprop; eps and eta, momentum_correction
        for lars (eta also scales adamw's step); wd_lh for signum; lower_bound, upper_bound,
        bias_correction for lamb. A setting left out or None takes MXNet's default. Without an
        optimizer, a push replaces the stored value with the pushed sum. The rules other than
        sgd and nag run on CPUs: the dist_* types' servers, or the local type.

        Weight decay left out for some keys (BN and bias, as `tally train --wd-exclude` does):
        no_wd_keys=[keys], or MXNet's Optimizer.wd_mult as {key: 0.0} (a multiplier of 1
        leaves the key as it is; others are refused: a key takes wd whole or not at all). The
        keys travel with the optimizer to the servers; lars also gives them the plain lr."""
        no_wd = _no_wd_keys(settings.pop("no_wd_keys", None), settings.pop("wd_mult", None))
        aliases = {"learning_rate": "lr", "eps": "epsilon"}
        for alias, name in aliases.items():
            if alias in settings:
                if name in settings:
                    raise TypeError("tally.kv set_optimizer: %s and %s are the same setting: give one" % (alias, name))
                settings[name] = settings.pop(alias)
        known = ("lr", "momentum", "wd", "rescale_grad", "clip_gradient", "multi_precision", "lazy_update", "beta1",
                 "beta2", "epsilon", "gamma1", "gamma2", "centered", "clip_weights", "eta", "momentum_correction",
                 "wd_lh", "lower_bound", "upper_bound", "bias_correction")
        for name in settings:
            if name not in known:
                raise TypeError("tally.kv set_optimizer: unknown setting %r (expected %s)" % (name, ", ".join(known)))
        for name, ok, rule in (("lr", lambda v: v >= 0, ">= 0"), ("momentum", lambda v: 0 <= v < 1, "in [0, 1)"),
                               ("wd", lambda v: v >= 0, ">= 0")):
            if settings.get(name) is not None and not ok(settings[name]):
                raise ValueError("tally.kv set_optimizer: %s=%r must be %s" % (name, settings[name], rule))
        if no_wd:
            settings["no_wd_keys"] = no_wd
        self._kv.set_optimizer(type=type, **settings)

    def set_learning_rate(self, lr):
        self._kv.set_learning_rate(float(lr))

    def set_gradient_compression(self, compression_params):
        """MXNet's gradient compression, e.g. {'type': '2bit', 'threshold': 0.5} ('1bit' too):
        every later push sends packed bits and this worker keeps a residual per key of what
        they did not carry (docs/wire.md, "Compressed pushes"). dist_* types only; before
        the first push."""
        params = dict(compression_params)
        kind = params.pop("type", None)
        threshold = params.pop("threshold", 0.5)
        if params:
            raise TypeError("tally.kv set_gradient_compression: unknown setting(s) %s (type, threshold)"
                            % ", ".join(sorted(map(repr, params))))
        if kind is None:
            raise ValueError("tally.kv set_gradient_compression: 'type' is required ('2bit' or '1bit')")
        self._kv.set_gradient_compression(type=str(kind), threshold=float(threshold))

    # -- keys and values ------------------------------------------------------------------
    def _flat(self, op, keys, values):
        """([key, ...], [key 0's device 0, key 0's device 1, ..., key 1's device 0, ...])"""
        nd = self._kv.num_devices
        if isinstance(keys, (list, tuple)):
            ks = [_key(op, k) for k in keys]
            if not isinstance(values, (list, tuple)) or len(values) != len(ks):
                raise ValueError("tally.kv %s: %d keys need a list of %d values" % (op, len(ks), len(ks)))
        else:
            ks, values = [_key(op, keys)], [values]
        flat = []
        for k, v in zip(ks, values):
            if isinstance(v, (list, tuple)):
                if len(v) != nd:
                    raise ValueError("tally.kv %s: key %d: %d values for %d devices" % (op, k, len(v), nd))
                flat.extend(_array(op, k, x) for x in v)
            elif nd == 1:
                flat.append(_array(op, k, v))
            else:
                raise ValueError("tally.kv %s: key %d: one value per device (%d) expected" % (op, k, nd))
        return ks, flat

    def init(self, key, value):
        """Registers key(s) with initial value(s), copied: one value per key, whatever the
        number of devices. The distributed types need every key in one call, on every worker
        (worker 0's values are the ones the servers keep). In a worker that joined a running
        job (joined) the servers hold the job's values already: init sends nothing and writes
        their values after the step before first_step into value, which must be writable."""
        if isinstance(key, (list, tuple)):
            keys = [_key("init", k) for k in key]
            if not isinstance(value, (list, tuple)) or len(value) != len(keys):
                raise ValueError("tally.kv init: %d keys need a list of %d values" % (len(keys), len(keys)))
            values = [_array("init", k, v) for k, v in zip(keys, value)]
        else:
            keys = [_key("init", key)]
            values = [_array("init", keys[0], value)]
        self._kv.init(keys, values)

    def push(self, key, value, priority=0, wait=True):
        """Pushes value(s) of key(s): per key, one value or one per device, summed in device
        order (and, in the dist_sync types, over the workers) before the optimizer. Returns
        once value may be written again; wait=False: at once (see the module's text)."""
        keys, values = self._flat("push", key, value)
        self._kv.push(keys, values, int(priority))
        self._finish(keys, wait)

    def pull(self, key, out=None, priority=0, wait=True):
        """Copies the stored value of key(s) into `out` (one array, or one per device),
        converting the dtype. Returns with the values in out; wait=False: at once, and out
        is ready once wait(key) or wait_all() returns."""
        if out is None:
            raise ValueError("tally.kv pull: out= is required (the arrays that receive the values)")
        keys, outs = self._flat("pull", key, out)
        self._kv.pull(keys, outs, int(priority))
        self._finish(keys, wait)

    def pushpull(self, key, value, out=None, priority=0, wait=True):
        """push then pull in one round trip; out=None pulls into value itself. Returns with
        the values in out; wait=False: at once (see the module's text)."""
        keys, values = self._flat("pushpull", key, value)
        outs = values if out is None else self._flat("pushpull", key, out)[1]
        self._kv.pushpull(keys, values, outs, int(priority))
        self._finish(keys, wait)

    def _finish(self, keys, wait):
        # A failure of the job raises here, so a caller never reads an output that was
        # left half-written.
        if wait:
            self._kv.wait(keys)
        if self._membership_fns:
            self._poll_membership()

    def wait(self, key):
        """Waits for the calls of key(s) alone (KVStore::WaitKey); the GIL is released."""
        keys = [_key("wait", k) for k in key] if isinstance(key, (list, tuple)) else [_key("wait", key)]
        self._kv.wait(keys)
        if self._membership_fns:
            self._poll_membership()

    def wait_all(self):
        """Waits for every push and pull; raises TallyError when the job failed."""
        self._kv.wait_all()
        if self._membership_fns:
            self._poll_membership()

    # -- optimizer states -----------------------------------------------------------------
    def save_optimizer_states(self, fname):
        """Writes every key's optimizer state (every slot: momentum; adam's mean, var, count) to fname. The distributed types read
        it from the servers as of this worker's last push; it waits for every call first."""
        self._kv.wait_all()
        keys = self._kv.keys()
        states = self._kv.get_optimizer_states(keys)
        with open(fname, "wb") as f:
            f.write(_STATES_HEADER.pack(STATES_MAGIC, STATES_VERSION, len(keys)))
            for k, s in zip(keys, states):
                n = self._kv.key_size(k) if s is None else s.size  # slots x the key's elements
                f.write(_STATES_ENTRY.pack(k, 0 if s is None else _STATES_HAS_STATE, n))
                if s is not None:
                    f.write(s.astype("<f4", copy=False).tobytes())

    def load_optimizer_states(self, fname):
        """Restores what save_optimizer_states wrote, after init and before the first push.
        The distributed types: every worker calls it."""
        keys, states = read_optimizer_states(fname)
        known = set(self._kv.keys())
        for k, s in zip(keys, states):
            if k not in known:
                raise KeyError("tally.kv load_optimizer_states: %s has key %d, which was not initialised" % (fname, k))
            # One state slot per key_size values (momentum: 1; adam: mean, var, count).
            if s is not None and (s.size == 0 or s.size % self._kv.key_size(k) != 0):
                raise ValueError("tally.kv load_optimizer_states: %s: key %d has %d values, not a multiple of the "
                                 "key's %d" % (fname, k, s.size, self._kv.key_size(k)))
        self._kv.set_optimizer_states(keys, states)

    # -- the end --------------------------------------------------------------------------
    def close(self):
        """Waits for every call, and, for the distributed types, finishes this worker's part
        of the job (the job ends when every worker has). Idempotent."""
        _open_stores.discard(self)
        self._kv.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except TallyError:
            if exc_type is None:
                raise  # otherwise the first failure is the one worth reporting

    def __repr__(self):
        if self._kv.closed:
            return "<tally.kv.KVStore %s, closed>" % self._type
        return "<tally.kv.KVStore %s, rank %d of %d>" % (self._type, self.rank, self.num_workers)


def read_optimizer_states(fname):
    """(keys, states) of an optimizer-states file: states[i] is a float32 array or None.

    The file is untrusted: every count is checked against the bytes it holds before it is
    used, and a refusal is a ValueError naming the file, the byte offset and the field."""
    with open(fname, "rb") as f:
        data = f.read()

    def fail(offset, field, why):
        raise ValueError("tally.kv load_optimizer_states: %s: byte %d: %s: %s" % (fname, offset, field, why))

    if len(data) < _STATES_HEADER.size:
        fail(0, "the header", "truncated: %d of its %d bytes" % (len(data), _STATES_HEADER.size))
    magic, version, count = _STATES_HEADER.unpack_from(data, 0)
    if magic != STATES_MAGIC:
        fail(0, "the magic", "not an optimizer-states file (magic %r, expected %r)" % (magic, STATES_MAGIC))
    if version != STATES_VERSION:
        fail(8, "the version", "%d (this tally reads %d)" % (version, STATES_VERSION))
    room = (len(data) - _STATES_HEADER.size) // _STATES_ENTRY.size
    if count > room:
        fail(12, "the key count", "%d keys, but the file is truncated: the %d bytes after the header hold at "
             "most %d entries" % (count, len(data) - _STATES_HEADER.size, room))
    pos, keys, states = _STATES_HEADER.size, [], []
    for i in range(count):
        entry = "entry %d" % i
        if pos + _STATES_ENTRY.size > len(data):
            fail(pos, entry, "truncated: %d of its %d bytes" % (len(data) - pos, _STATES_ENTRY.size))
        key, flags, n = _STATES_ENTRY.unpack_from(data, pos)
        if keys and key <= keys[-1]:
            fail(pos, entry + "'s key", "%d after key %d (keys are written in increasing order)" % (key, keys[-1]))
        if flags & ~_STATES_HAS_STATE:
            fail(pos + 4, entry + "'s flags", "unknown bits 0x%x (key %d)" % (flags & ~_STATES_HAS_STATE, key))
        if n < 0:
            fail(pos + 8, entry + "'s value count", "%d is negative (key %d)" % (n, key))
        pos += _STATES_ENTRY.size
        state = None
        if flags & _STATES_HAS_STATE:
            if 4 * n > len(data) - pos:
                fail(pos, entry + "'s values", "truncated: key %d's %d float32 values need %d bytes, the file has %d "
                     "left" % (key, n, 4 * n, len(data) - pos))
            state = np.frombuffer(data, dtype="<f4", count=n, offset=pos).astype(np.float32)
            pos += 4 * n
        keys.append(key)
        states.append(state)
    if pos != len(data):
        fail(pos, "the end", "%d bytes after the last entry" % (len(data) - pos))
    return keys, states


@atexit.register
def _finish_open_stores():
    # A worker that leaves without finishing would look dead to the job and fail it; like
    # MXNet's, a script need not close its store.
    for store in list(_open_stores):
        try:
            store.close()
        except TallyError as e:
            print("tally.kv: closing the %s store at exit: %s" % (store.type, e), file=sys.stderr)
