"""A live job fed 10^5 mutated frames on its ports keeps running and ends with unchanged weights.

A dist_sync job of `tally train` (scheduler, 1 server, 2 workers, on loopback, with a job
secret: authenticated, the default) is run once undisturbed and once while a sender without
the secret throws mutated frames at every node's listening port:

- raw TCP: mutated ZMTP greetings, handshake commands (NULL's READY, CURVE's HELLO) and
  message frames carrying Tally Metas, a few per connection, on fresh connections;
- ZeroMQ DEALER sockets (python3-zmq), which ZeroMQ admits (Tally's security is its own,
  above ZeroMQ), sending mutated copies of valid plain Tally messages (a Meta frame and its
  data frames), of Tally HELLOs naming real members, and of sealed messages (docs/wire.md).

Pass: every process of the job exits 0, the frames were all sent while it trained, the
nodes report (their `delivery:` line at exit) that they rejected what reached them, and the
final checkpoint equals the undisturbed run's bit for bit (training is deterministic:
docs/checkpoint.md).

Usage: /usr/bin/python3 live_frames_test.py TALLY_BINARY [unittest args]
"""
import os
import random
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import free_port, read_tensors  # noqa: E402 (tests/testutil.py)


TALLY = None
FRAMES = 100_000
ZMQ_SHARE = 0.4  # of FRAMES, sent through ZeroMQ sockets; the rest as raw TCP
SEED = 20240611
WORKERS, SERVERS, EPOCHS = 2, 1, 2
MODEL = ["--num-layers", "8", "--image-shape", "3,16,16", "--num-classes", "4", "--batch-size", "16",
         "--num-examples", "8000", "--num-epochs", str(EPOCHS), "--disp-batches", "10",
         "--num-val-examples", "32", "--seed", "5", "--optimizer", "nag"]
ROLES = [("scheduler", 0)] + [("server", r) for r in range(SERVERS)] + [("worker", r) for r in range(WORKERS)]


def listening_ports(pid):
    """The TCP ports process `pid` listens on (from /proc/<pid>/fd and /proc/net/tcp*)."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:  # 0A: LISTEN
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return sorted(ports)


# ---- What the sender mutates -------------------------------------------------------------

def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number, value):
    """One protobuf field: an int (varint) or bytes (length-delimited)."""
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


def meta(command, sender, step, slices=(), dtype=0, pull_dtype=0, request_id=1, stop=False):
    """A tally.wire.Meta (net/wire.proto), encoded by hand: no protobuf module needed."""
    out = field(1, command) + field(2, sender) + field(3, 1) + field(4, request_id) + field(5, step)
    for key, offset, length in slices:
        out += field(8, field(1, key) + field(2, offset) + field(3, length))
    out += field(9, dtype) + field(10, pull_dtype) + field(14, WORKERS)
    if stop:
        out += field(18, 1)
    return out


def tally_messages(rng):
    """Valid-looking Tally messages (lists of frames) of every command a node receives."""
    worker = 1 + SERVERS + rng.randrange(WORKERS)
    step = rng.choice([0, 1, 5, 300, -1, 2 ** 40])
    slices = [(rng.choice([0, 1, 2, 7, 2 ** 63]), rng.choice([0, 0, 4, 2 ** 62]), rng.choice([1, 4, 16]))
              for _ in range(rng.randrange(1, 3))]
    data = [struct.pack("<%df" % n, *([1e30] * n)) for _, _, n in slices]
    return [
        [meta(21, worker, step, slices, request_id=rng.randrange(1 << 20), stop=rng.random() < 0.5)] + data,  # PUSH
        [meta(26, worker, step, slices, pull_dtype=1)] + data,  # PUSHPULL
        [meta(22, worker, step, slices)],  # PULL
        [meta(20, 1 + SERVERS, -1, slices)] + data,  # INIT
        [meta(24, 1 + SERVERS, step) + struct.pack("<Bf", 12 << 3 | 5, 1e9)],  # SET_LR, lr 1e9
        [meta(7, 0, 0) + field(15, b"forged")],  # SHUTDOWN from "the scheduler"
        [meta(8, 0, 0) + field(6, field(1, 3) + field(2, 0) + field(3, 1 + SERVERS))],  # NODE_DEAD
        [meta(1, 0, 0) + field(6, field(1, 3) + field(2, 0) + field(4, b"127.0.0.1") + field(5, 1))],  # REGISTER
        [meta(5, worker, 0)],  # HEARTBEAT
    ]


def zmtp_greeting(mechanism, as_server=0):
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x01" + mechanism.ljust(20, b"\0") + bytes([as_server]) + b"\0" * 31


def zmtp_frame(body, more=False, command=False):
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def zmtp_samples(rng):
    """Byte strings a ZMTP peer might send: greetings, handshake commands, Tally frames."""
    ready = zmtp_frame(b"\x05READY\x0bSocket-Type" + struct.pack(">I", 4) + b"PUSH", command=True)
    hello = zmtp_frame(b"\x05HELLO\x01\x00" + b"\0" * 72 + rng.randbytes(32) + rng.randbytes(8) + rng.randbytes(80),
                       command=True)
    frames = b"".join(zmtp_frame(f, more=i + 1 < len(m)) for m in tally_messages(rng)[:3] for i, f in enumerate(m))
    return [zmtp_greeting(b"NULL") + ready + frames, zmtp_greeting(b"CURVE") + hello, ready, frames,
            b"\xff" + b"\0" * 8 + b"\x7f" + b"\x01\x00", rng.randbytes(64)]


def mutate(rng, data):
    """A few random edits: bit flips, boundary bytes, insertions, deletions, duplications."""
    data = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        kind = rng.randrange(6)
        at = rng.randrange(len(data) + 1)
        if kind == 0 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1 and data:
            data[min(at, len(data) - 1)] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
        elif kind == 2:
            data[at:at] = rng.randbytes(rng.randrange(1, 16))
        elif kind == 3:
            del data[at:at + rng.randrange(1, 16)]
        elif kind == 4 and data:
            piece = data[at:at + rng.randrange(1, 32)]
            data[at:at] = piece
        else:
            del data[at:]  # truncated
    return bytes(data)


# ---- The sender ---------------------------------------------------------------------------

class Sender:
    """Sends mutated frames to `ports` from a thread of its own and counts them."""

    def __init__(self, ports, frames, seed):
        self.ports = ports
        self.zmq_frames = int(frames * ZMQ_SHARE)
        self.raw_frames = frames - self.zmq_frames
        self.rng = random.Random(seed)
        # What gets mutated, drawn once: making it anew for every frame would slow the sender.
        self.messages = [m for _ in range(40) for m in tally_messages(self.rng)]
        self.samples = [b for _ in range(40) for b in zmtp_samples(self.rng)]
        self.sent_raw = 0
        self.sent_zmq = 0
        self.connections = 0
        self.zmq_messages = 0
        self.error = None
        self.zmq_s = self.raw_s = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()

    def join(self, timeout):
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def run(self):
        try:
            started = time.time()
            self.send_zmq()
            self.zmq_s = time.time() - started
            self.send_raw()
            self.raw_s = time.time() - started - self.zmq_s
        except Exception as e:  # reported by the test
            self.error = repr(e)

    def send_raw(self):
        rng = self.rng
        refused = 0
        while self.sent_raw < self.raw_frames:
            port = rng.choice(self.ports)
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError as e:
                refused += 1
                if refused > 100:
                    raise AssertionError("the job's ports stopped taking connections: %r" % e)
                continue
            refused = 0
            with s:
                self.connections += 1
                try:
                    for _ in range(rng.randrange(1, 40)):
                        if self.sent_raw >= self.raw_frames:
                            break
                        s.sendall(mutate(rng, rng.choice(self.samples)))
                        self.sent_raw += 1
                except OSError:
                    pass  # the node hung up on garbage: what it should do

    def send_zmq(self):
        """Through ZeroMQ DEALER sockets, as a node's own sending sockets connect. ZeroMQ's
        handshake succeeds (no ZeroMQ security: Tally seals its messages itself), so every
        message reaches Tally; a socket whose queue fills is replaced by a fresh one."""
        rng = self.rng
        context = zmq.Context()
        open_sockets = []
        sealed = [m for _ in range(40) for m in secure_messages(rng)]

        def connect(port):
            s = context.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 1000)
            s.setsockopt(zmq.RCVHWM, 10)  # its answers are never read
            s.connect("tcp://127.0.0.1:%d" % port)
            return [s, port]

        try:
            open_sockets = [connect(port) for port in self.ports for _ in range(2)]
            while self.sent_zmq < self.zmq_frames:
                i = rng.randrange(len(open_sockets))
                message = rng.choice(self.messages if rng.random() < 0.5 else sealed)
                frames = [mutate(rng, f) if rng.random() < 0.7 else f for f in message]
                frames = frames[:self.zmq_frames - self.sent_zmq]  # exactly FRAMES in all
                try:
                    open_sockets[i][0].send_multipart(frames, flags=zmq.NOBLOCK)
                except zmq.Again:
                    open_sockets[i][0].close()
                    open_sockets[i] = connect(open_sockets[i][1])
                    continue
                self.sent_zmq += len(frames)
                self.zmq_messages += 1
            time.sleep(0.5)  # let the last queues drain
        finally:
            for entry in open_sockets:
                entry[0].close()
            context.term()


def secure_messages(rng):
    """HELLOs naming real members, and sealed messages with made-up counters and tags
    (net/secure_frames.h): what a sender without the secret can produce."""
    names = [b"scheduler"] + [b"server %d" % r for r in range(SERVERS)] + [b"worker %d" % r for r in range(WORKERS)]
    client, server = rng.choice(names), rng.choice(names)
    hello = b"TLY2\x01" + rng.randbytes(32) + bytes([len(client)]) + client + bytes([len(server)]) + server
    header = b"TLY2\x03\0\0\0" + struct.pack(">QI", rng.randrange(1, 1 << 20), 2)
    body = meta(21, 1 + SERVERS, 1, [(0, 0, 4)])
    return [[hello], [header + rng.randbytes(len(body) + 16), rng.randbytes(16 + 16)],
            [b"TLY2\x02" + rng.randbytes(88)], [b"TLY2\x04\x01"]]


# ---- The job ------------------------------------------------------------------------------

class Job:
    """The processes of one job started role by role, each with its output in a file."""

    def __init__(self, case, name, prefix):
        self.case = case
        self.procs = {}
        self.paths = {}
        self.port = free_port()
        secret = secrets.token_hex(32)
        for role, rank in ROLES:
            env = dict(os.environ, DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(self.port),
                       DMLC_NUM_WORKER=str(WORKERS), DMLC_NUM_SERVER=str(SERVERS), DMLC_NODE_HOST="127.0.0.1",
                       TALLY_RANK=str(rank), TALLY_JOB_SECRET=secret, OMP_NUM_THREADS="1",
                       OMP_WAIT_POLICY="passive")
            env.pop("TALLY_PLAIN", None)
            path = os.path.join(case.dir, "%s-%s%d.log" % (name, role, rank))
            with open(path, "w") as out:
                self.procs[(role, rank)] = subprocess.Popen(
                    [TALLY, "train", "--kv-store", "dist_sync"] + MODEL + ["--model-prefix", prefix],
                    env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            self.paths[(role, rank)] = path
        case.addCleanup(self.kill)

    def output(self, key):
        with open(self.paths[key], errors="replace") as f:
            return f.read()

    def logs(self):
        return "\n".join("--- %s %d\n%s" % (k[0], k[1], self.output(k)[-2500:]) for k in self.procs)

    def running(self):
        return all(p.poll() is None for p in self.procs.values())

    def wait_training(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all("Batch [" in self.output(("worker", r)) for r in range(WORKERS)):
                return
            if not self.running():
                self.case.fail("the job ended before training:\n" + self.logs())
            time.sleep(0.05)
        self.case.fail("the job did not start training within %d s:\n%s" % (timeout, self.logs()))

    def ports(self):
        """Every port a process of the job listens on, the scheduler's first."""
        ports = [self.port]
        for key, proc in self.procs.items():
            ports += [p for p in listening_ports(proc.pid) if p not in ports]
        return ports

    def wait(self, timeout=240):
        deadline = time.time() + timeout
        codes = {}
        for key, proc in self.procs.items():
            try:
                codes[key] = proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                codes[key] = None
        return codes

    def kill(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class LiveFramesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name

    def assertJobOk(self, job):
        codes = job.wait()
        bad = {"%s %d" % k: c for k, c in codes.items() if c != 0}
        self.assertEqual(bad, {}, "processes that did not exit 0 (None: still running):\n" + job.logs())

    def test_mutated_frames_change_nothing(self):
        started = time.time()
        ref = Job(self, "ref", os.path.join(self.dir, "ref", "m"))
        self.assertJobOk(ref)
        ref_s = time.time() - started

        job = Job(self, "run", os.path.join(self.dir, "run", "m"))
        job.wait_training()
        ports = job.ports()
        self.assertGreaterEqual(len(ports), 1 + SERVERS + WORKERS, "a node's port was not found: %s" % ports)
        sender = Sender(ports, FRAMES, SEED)
        started = time.time()
        sender.start()
        finished = sender.join(timeout=200)
        send_s = time.time() - started
        still_training = job.running()
        print("ports %s: %d ZeroMQ frames (%d messages) in %.1f s, %d raw frames on %d connections in "
              "%.1f s; the undisturbed run took %.1f s" % (ports, sender.sent_zmq, sender.zmq_messages, sender.zmq_s,
                                                          sender.sent_raw, sender.connections, sender.raw_s, ref_s))
        self.assertTrue(finished, "the sender did not finish within 200 s")
        self.assertIsNone(sender.error, "the sender failed")
        self.assertEqual(sender.sent_raw + sender.sent_zmq, FRAMES)
        self.assertJobOk(job)
        self.assertTrue(still_training, "the job ended before every frame was sent: make it longer")
        # Valid HELLOs are answered, not rejected; what else reached a node was. A connection
        # that has not proved the job's secret is closed after 64 frames (docs/security.md),
        # so most of what the sender queued on its ZeroMQ sockets never arrives at all.
        rejected = sum(int(n) for key in job.procs for n in re.findall(r"delivery: .* (\d+) rejected", job.output(key)))
        closed = sum(int(n) for key in job.procs
                     for n in re.findall(r"receiver: .* (\d+) closed past the unproved budget", job.output(key)))
        print("the nodes rejected %d messages and closed %d connections past their budget" % (rejected, closed))
        self.assertGreater(rejected, 0, "the ZeroMQ messages did not reach the job's checks")
        self.assertGreater(closed, 0, "no connection was held to the budget of what it may send unproved")

        final = "-%04d" % EPOCHS
        for ext in (".params", ".states"):
            a, _ = read_tensors(os.path.join(self.dir, "run", "m" + final + ext))
            b, _ = read_tensors(os.path.join(self.dir, "ref", "m" + final + ext))
            self.assertEqual(sorted(a), sorted(b), ext)
            self.assertEqual([k for k in a if a[k] != b[k]], [], ext + ": tensors differ from the undisturbed run's")


if __name__ == "__main__":
    TALLY = sys.argv.pop(1)
    unittest.main()
