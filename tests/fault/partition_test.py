"""A network partition in the middle of a dist_sync job: the nodes run in two network
namespaces joined by a veth pair, and the link is cut (set down, or deleted). Every process
exits non-zero within 5 s of the heartbeat dead timeout, naming a node on the other side.

Needs root and iproute2 (`ip netns`); without them the test says so and is skipped.
Delay and loss are not made here: the transport injects them (TALLY_TEST_FAULTS).

Usage: python3 partition_test.py TALLY_BINARY [unittest args]
"""
import os
import subprocess
import sys
import time
import unittest

import fault_job
from fault_job import DEAD_TIMEOUT_S, EXIT_WITHIN_S, FaultCase, RoleJob, role_name

SIDE_A, SIDE_B = "10.77.0.1", "10.77.0.2"


def ip(*args):
    result = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=20)
    if result.returncode != 0:
        raise OSError("ip %s: %s" % (" ".join(args), result.stderr.strip()))


class PartitionTest(FaultCase):
    def setUp(self):
        super().setUp()
        stem = "tf%d" % os.getpid()
        self.ns = {SIDE_A: stem + "a", SIDE_B: stem + "b"}
        self.link = stem + "va"
        try:
            if os.geteuid() != 0:
                raise OSError("needs root (network namespaces)")
            for ns in self.ns.values():
                ip("netns", "add", ns)
                self.addCleanup(subprocess.run, ["ip", "netns", "del", ns], capture_output=True)
            ip("link", "add", self.link, "netns", self.ns[SIDE_A], "type", "veth",
               "peer", "name", stem + "vb", "netns", self.ns[SIDE_B])
            # Each side's address sits on its loopback, so that it outlives the link: the
            # nodes of one side still reach each other once the link is gone.
            for addr, dev, peer in ((SIDE_A, self.link, SIDE_B), (SIDE_B, stem + "vb", SIDE_A)):
                ip("-n", self.ns[addr], "link", "set", "lo", "up")
                ip("-n", self.ns[addr], "addr", "add", addr + "/32", "dev", "lo")
                ip("-n", self.ns[addr], "link", "set", dev, "up")
                ip("-n", self.ns[addr], "route", "add", peer + "/32", "dev", dev)
        except (OSError, subprocess.SubprocessError) as e:
            print("\nSKIPPED PartitionTest: %s" % e, file=sys.stderr)
            raise unittest.SkipTest(str(e))

    def partition(self, side_b, cut):
        """Runs the nodes in `side_b` on side B, the others (the scheduler among them) on
        side A; inside the second epoch, `cut` (ip arguments) breaks the link."""
        hosts = {key: SIDE_B if key in side_b else SIDE_A for key in fault_job.ROLES}
        prefix = os.path.join(self.dir, "run", "m")
        job = RoleJob(self, "partition", extra=["--model-prefix", prefix], hosts=hosts,
                      wrap=lambda role, rank: ["ip", "netns", "exec", self.ns[hosts[(role, rank)]]])
        job.wait_step(fault_job.STEPS_PER_EPOCH + 15)
        ip(*cut)
        cut_at = time.time()
        print("cut the link (ip %s) between %s and the rest" % (
            " ".join(cut), ", ".join(role_name(*k) for k in side_b)))
        a_names = [role_name(*k) for k in hosts if hosts[k] == SIDE_A]
        b_names = [role_name(*k) for k in side_b]
        # Each side names a node it lost: one of the other side's.
        job.assertOthersFail(set(side_b), cut_at, DEAD_TIMEOUT_S + EXIT_WITHIN_S, b_names)
        job.assertOthersFail(set(hosts) - set(side_b), cut_at, DEAD_TIMEOUT_S + EXIT_WITHIN_S, a_names)
        self.assertEqual(self.assertLatestLoads(prefix), 1)

    def test_link_down_cuts_off_a_worker(self):
        self.partition([("worker", 1)], ["-n", self.ns[SIDE_A], "link", "set", self.link, "down"])

    def test_link_deleted_cuts_off_the_server(self):
        self.partition([("server", 0)], ["-n", self.ns[SIDE_A], "link", "del", self.link])


if __name__ == "__main__":
    fault_job.main()
