"""A cluster of network namespaces on one machine: every node in its own namespace with one
link to a switch, shaped by `tc tbf` to the same rate each way, as a node's NIC on a
non-blocking switch. What `tally bench scaling` runs its jobs in.

    with Fabric(["w0", "w1", "s0"], mbit=625) as fabric:
        fabric.address("w0")         # "10.77.0.1"
        fabric.run("w0", ["ping", "-c1", fabric.address("s0")])

Layout: a namespace `<prefix>sw` holds a bridge; node i's namespace `<prefix>n<i>` holds
`eth0` (10.77.0.<i+1>/24), a veth whose peer `p<i>` is a port of the bridge. The tbf on
eth0 limits what the node sends, the tbf on p<i> what it receives. Needs root and iproute2;
`Fabric.check()` says what is missing.
"""

import os
import shutil
import subprocess

SUBNET = "10.77.0"


class FabricError(Exception):
    """The namespaces cannot be made here; the message says what is missing."""


def _ip(*args, ns=None):
    return _run(["ip"] + list(args), ns)


def _tc(*args, ns=None):
    return _run(["tc"] + list(args), ns)


def _run(argv, ns=None):
    argv = (["ip", "netns", "exec", ns] if ns else []) + argv
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise FabricError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def check():
    """Raises FabricError naming what this machine lacks to build a Fabric."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise FabricError(f"`{tool}` is not installed (Debian package iproute2)")
    if os.geteuid() != 0:
        raise FabricError("network namespaces need root: run as root (or with CAP_NET_ADMIN "
                          "and CAP_SYS_ADMIN)")
    probe = "tallyprobe"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    try:
        _ip("netns", "add", probe)
        _ip("link", "add", "tp0", "type", "veth", "peer", "name", "tp1", ns=probe)
        _tc("qdisc", "add", "dev", "tp0", "root", "tbf", "rate", "1mbit", "burst", "32kb",
            "latency", "100ms", ns=probe)
    except FabricError as e:
        raise FabricError(f"cannot make a network namespace with a shaped veth link here: {e}")
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


class Fabric:
    def __init__(self, nodes, mbit, prefix="tsb-"):
        if len(nodes) > 250:
            raise FabricError(f"{len(nodes)} nodes: at most 250 fit in {SUBNET}.0/24")
        self.nodes = list(nodes)
        self.mbit = mbit
        self.prefix = prefix
        self.switch = prefix + "sw"
        self.made = []

    def namespace(self, node):
        return f"{self.prefix}n{self.nodes.index(node)}"

    def address(self, node):
        return f"{SUBNET}.{self.nodes.index(node) + 1}"

    def hosts(self):
        """{address: namespace} of every node, what tools/bench/netns_ssh.py reads."""
        return {self.address(n): self.namespace(n) for n in self.nodes}

    def run(self, node, argv, **kwargs):
        return subprocess.run(["ip", "netns", "exec", self.namespace(node)] + list(argv), **kwargs)

    def _shape(self, dev, ns):
        # tbf's bucket must hold the largest packet veth hands it (64 KB with segmentation
        # offload) and a few ms of traffic, or the rate falls short of the one asked for.
        rate_bytes = self.mbit * 1e6 / 8
        burst = max(128 * 1024, int(rate_bytes * 0.004))
        _tc("qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{self.mbit}mbit",
            "burst", str(burst), "latency", "200ms", ns=ns)

    def __enter__(self):
        self.close(stale=True)
        try:
            _ip("netns", "add", self.switch)
            self.made.append(self.switch)
            _ip("link", "add", "br0", "type", "bridge", ns=self.switch)
            _ip("link", "set", "br0", "up", ns=self.switch)
            for i, node in enumerate(self.nodes):
                ns = self.namespace(node)
                _ip("netns", "add", ns)
                self.made.append(ns)
                _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p{i}",
                    "netns", self.switch)
                _ip("addr", "add", f"{self.address(node)}/24", "dev", "eth0", ns=ns)
                _ip("link", "set", "eth0", "up", ns=ns)
                _ip("link", "set", "lo", "up", ns=ns)
                _ip("link", "set", f"p{i}", "master", "br0", ns=self.switch)
                _ip("link", "set", f"p{i}", "up", ns=self.switch)
                self._shape("eth0", ns)
                self._shape(f"p{i}", self.switch)
        except BaseException:
            self.close()
            raise
        return self

    def close(self, stale=False):
        """Deletes the namespaces (with stale, also those a killed run left behind)."""
        names = self.made
        if stale:
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            names = [line.split()[0] for line in listed.splitlines()
                     if line.split() and line.split()[0].startswith(self.prefix)]
        for ns in reversed(names):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []

    def __exit__(self, *exc):
        self.close()
