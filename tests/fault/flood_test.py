"""A flood of strangers changes neither a secure job's result nor, beyond 50 MB, its memory.

A dist_sync job of `tally train` (scheduler, 1 server, 2 workers on loopback, with a job
secret: authenticated, the default) runs once undisturbed and once while 500 connections
from a process without the secret hit every node's listening port from the moment the
scheduler listens until the job ends:

- half send HELLOs naming real members (each answered with a WELCOME: the handshake's
  expensive path), never proving anything;
- half send one-byte frames with MORE set, a multipart message that never ends (before,
  ZeroMQ's ROUTER kept such frames in memory without bound).

A connection the node closes (it passed what an unproved connection may send, or made room)
is opened again at once, so 500 stay open. Raw sockets that speak ZMTP 3 (greeting, READY
as a DEALER), as a ZeroMQ DEALER would.

Pass: every process exits 0, the final checkpoint equals the undisturbed run's bit for bit,
and each node's peak anonymous resident memory (the largest RssAnon read from /proc every
20 ms while it runs: heap and stacks, all a flood could grow) is within 50 MB of the
undisturbed run's. The peak of the whole resident set (VmHWM) is printed beside it but not
held to the bound: its file-backed part, the binary's and libraries' pages, follows the
page cache and moved by up to 60 MB between two undisturbed runs. The figures printed: job
times, peak memory per node, what the flooder sent and what the nodes did with it.

Usage: python3 flood_test.py TALLY_BINARY [FloodTest]
"""
import errno
import os
import random
import re
import resource
import selectors
import socket
import struct
import sys
import threading
import time

from fault_job import ROLES, FaultCase, RoleJob, main, role_name

CONNECTIONS = 500
MEMORY_SLACK_MB = 50
JOB_BOUND_S = 240
EPOCHS = 5  # about 2 s an epoch on a 2-core machine: the flood has time to settle
FINAL = "-%04d" % EPOCHS


def listening_ports(pid):
    """The TCP ports process `pid` listens on (/proc/<pid>/fd and /proc/<pid>/net/tcp*)."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
        ports = set()
        for table in ("tcp", "tcp6"):
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        return sorted(ports)
    except OSError:
        return []


def memory_kb(pid):
    """{field: KB} of a live process's /proc/<pid>/status: VmHWM (the peak resident set so
    far), RssAnon (its anonymous memory: heap, stacks) and RssFile (mapped files: the
    binary and its libraries); {} once it has ended."""
    fields = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                name = line.split(":", 1)[0]
                if name in ("VmHWM", "RssAnon", "RssFile"):
                    fields[name] = int(line.split()[1])
    except OSError:
        return {}
    return fields


class Watcher:
    """Follows a job's processes from a thread: each node's peak memory and listening port."""

    def __init__(self, job):
        self.job = job
        self.peaks = {}  # node name -> {field: the largest KB seen}
        self.ports = {}  # node name -> port
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            for (role, rank), proc in self.job.procs.items():
                name = role_name(role, rank)
                peaks = self.peaks.setdefault(name, {})
                for field, kb in memory_kb(proc.pid).items():
                    peaks[field] = max(kb, peaks.get(field, 0))
                if name not in self.ports:
                    ports = listening_ports(proc.pid)
                    if ports:
                        self.ports[name] = ports[0]
            time.sleep(0.02)

    def finish(self):
        self.stop = True
        self.thread.join()


def zmtp_greeting():
    """A DEALER's ZMTP 3.0 greeting and READY (NULL mechanism)."""
    ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31
    return greeting + bytes([4, len(ready)]) + ready


def hello(rng, client, server):
    """A Tally HELLO (docs/wire.md, "Secured messages") in one ZMTP frame."""
    body = b"TLY2\x01" + rng.randbytes(32) + bytes([len(client)]) + client + bytes([len(server)]) + server
    return bytes([0, len(body)]) + body


class Flooder:
    """Keeps CONNECTIONS connections to the ports its watcher finds, from one thread."""

    def __init__(self, watcher, seed):
        self.watcher = watcher
        self.rng = random.Random(seed)
        self.selector = selectors.DefaultSelector()
        self.greeting = zmtp_greeting()
        self.frames = b"\x01\x01x" * 2000  # 2000 one-byte frames, MORE set
        self.stop = False
        self.error = None
        self.opened = self.closed_by_node = self.hellos = self.answer_bytes = self.frames_sent = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()

    def finish(self):
        self.stop = True
        self.thread.join()

    def open(self, index):
        """Connection `index` goes to node index mod 4, or to the scheduler while that node
        does not listen yet: the flood is on from the start, while the job gathers."""
        ports = dict(self.watcher.ports)
        node = role_name(*ROLES[index % len(ROLES)])
        if node not in ports:
            node = "scheduler"
        if node not in ports:
            return False
        s = socket.socket()
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", ports[node]))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            return False
        # Every node gets both kinds: index mod 4 picks the node, the next bit the kind.
        state = {"index": index, "node": node.encode(), "out": self.greeting, "kind": index // len(ROLES) % 2,
                 "next": 0.0}
        self.selector.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, state)
        self.opened += 1
        return True

    def drop(self, s, state):
        self.selector.unregister(s)
        s.close()
        self.closed_by_node += 1
        self.open(state["index"])

    def feed(self, state):
        """What the connection sends next: a HELLO every 20 ms, or frames without end."""
        if state["kind"] == 0:
            now = time.time()
            if now < state["next"]:
                return b""
            state["next"] = now + 0.02
            self.hellos += 1
            member = self.rng.choice([b"scheduler", b"server 0", b"worker 0", b"worker 1"])
            return hello(self.rng, member, state["node"])
        self.frames_sent += len(self.frames) // 3
        return self.frames

    def run(self):
        try:
            index = 0
            while not self.stop:
                while index < CONNECTIONS and self.open(index):
                    index += 1
                for key, events in self.selector.select(timeout=0.005):
                    s, state = key.fileobj, key.data
                    try:
                        if events & selectors.EVENT_READ:
                            data = s.recv(65536)
                            if not data:
                                self.drop(s, state)
                                continue
                            self.answer_bytes += len(data)
                        if events & selectors.EVENT_WRITE:
                            if not state["out"]:
                                state["out"] = self.feed(state)
                            if state["out"]:
                                sent = s.send(state["out"])
                                state["out"] = state["out"][sent:]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        self.drop(s, state)
        except Exception as e:  # reported by the test
            self.error = repr(e)
        finally:
            for key in list(self.selector.get_map().values()):
                key.fileobj.close()


class FloodTest(FaultCase):
    def run_job(self, name, flood):
        """Runs the job to its end; returns (seconds, peak KB per node, flooder or None)."""
        started = time.time()
        job = RoleJob(self, name, extra=["--model-prefix", os.path.join(self.dir, name, "m")], epochs=EPOCHS)
        watcher = Watcher(job)
        flooder = Flooder(watcher, seed=20240611) if flood else None
        if flooder:
            flooder.start()
        codes = {}
        for key, proc in job.procs.items():
            try:
                codes[role_name(*key)] = proc.wait(timeout=max(1, started + JOB_BOUND_S - time.time()))
            except Exception:
                codes[role_name(*key)] = None
        seconds = time.time() - started
        if flooder:
            flooder.finish()
        watcher.finish()
        bad = {k: c for k, c in codes.items() if c != 0}
        self.assertEqual(bad, {}, "processes that did not exit 0 (None: still running):\n" + job.logs())
        return seconds, watcher, flooder, job

    def test_strangers_change_nothing(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
        ref_s, ref, _, _ = self.run_job("ref", flood=False)
        run_s, run, flooder, job = self.run_job("run", flood=True)
        ref_peaks, run_peaks = ref.peaks, run.peaks

        print("job time: %.1f s undisturbed, %.1f s under the flood" % (ref_s, run_s))
        print("flood: %d connections opened (%d closed by the nodes), %d HELLOs (%d bytes of answers), "
              "%d one-byte frames; ports %s" % (flooder.opened, flooder.closed_by_node, flooder.hellos,
                                                flooder.answer_bytes, flooder.frames_sent, run.ports))
        for key in job.procs:
            lines = re.findall(r"receiver: .*", job.output(key))
            print("  %-9s %s" % (role_name(*key), lines[-1] if lines else "(no receiver line)"))
        print("peak memory per node, undisturbed -> flooded (MB): VmHWM; largest RssAnon, RssFile seen")
        for role, rank in ROLES:
            name = role_name(role, rank)
            a, b = ref_peaks.get(name, {}), run_peaks.get(name, {})
            print("  %-9s " % name + "   ".join("%s %6.1f -> %6.1f" % (f, a.get(f, 0) / 1024, b.get(f, 0) / 1024)
                                             for f in ("VmHWM", "RssAnon", "RssFile")))
        self.assertIsNone(flooder.error, "the flooder failed")
        self.assertGreater(flooder.hellos, 1000, "the flood was too small to mean anything")
        self.assertGreater(flooder.closed_by_node, CONNECTIONS, "no node closed the endless multipart messages")
        for role, rank in ROLES:
            name = role_name(role, rank)
            self.assertIn(name, run_peaks)
            self.assertLessEqual(run_peaks[name]["RssAnon"], ref_peaks[name]["RssAnon"] + MEMORY_SLACK_MB * 1024,
                                 "%s grew past the undisturbed run's peak by over %d MB" % (name, MEMORY_SLACK_MB))
        self.assertSameCheckpoint(os.path.join(self.dir, "run", "m" + FINAL), os.path.join(self.dir, "ref", "m" + FINAL))


if __name__ == "__main__":
    main()
