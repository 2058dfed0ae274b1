"""A compromised worker says what a worker may not, and the job ends as if it had not
(docs/wire.md, "Who may send what" and "Steps"; docs/faults.md).

A secure dist_sync job of `tally train` (scheduler, 2 servers with --server-replicas 1,
2 workers, role by role on loopback) runs once undisturbed and once while `evil_worker`
(tests/fault/evil_worker.cc), holding the job's secret, proves the names "worker 1" and
"worker 0" on connections of its own and sends, mid-training: pushes, pulls, pushpulls
and rollbacks of steps far ahead; INITs naming chains no server holds; SHUTDOWN,
NODE_DEAD, NODE_TABLE, BARRIER_DONE and SERVER_LOST to servers and a worker; a replica
step to the servers and fake answers to a worker; a barrier of the servers' group, a
spare's signal and notices to the scheduler; each also from ids that are no node's.

Pass: every process exits 0, the final checkpoint equals the undisturbed run's bit for bit,
and each refusal is in the logs: the line of each refused message, and the counts at exit.

Usage: python3 evil_worker_test.py TALLY_BINARY EVIL_WORKER_BINARY [unittest args]
"""
import os
import re
import subprocess
import sys
import time

import fault_job
from fault_job import FaultCase, read, role_name
from testutil import free_port, read_tensors

EVIL = None  # set below, from the command line
WORKERS, SERVERS, EPOCHS = 2, 2, 2
FINAL = "-%04d" % EPOCHS
ROLES = [("scheduler", 0)] + [("server", r) for r in range(SERVERS)] + [("worker", r) for r in range(WORKERS)]


class Job:
    """The job's processes, each on a port chosen here so that the attacker can reach it."""

    def __init__(self, case, name, secret):
        self.case, self.procs, self.paths, self.addrs = case, {}, {}, {}
        model = list(fault_job.MODEL)
        model[model.index("--num-epochs") + 1] = str(EPOCHS)
        self.prefix = os.path.join(case.dir, name, "m")
        for role, rank in ROLES:
            port = free_port()
            self.addrs[(role, rank)] = "127.0.0.1:%d" % port
            env = case.environ(dict(DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1",
                                    DMLC_PS_ROOT_PORT=self.addrs[("scheduler", 0)].split(":")[1],
                                    DMLC_NUM_WORKER=str(WORKERS), DMLC_NUM_SERVER=str(SERVERS),
                                    DMLC_NODE_HOST="127.0.0.1", TALLY_RANK=str(rank), TALLY_PORT=str(port),
                                    TALLY_SERVER_REPLICAS="1", TALLY_JOB_SECRET=secret))
            path = os.path.join(case.dir, "%s-%s%d.log" % (name, role, rank))
            command = [fault_job.TALLY, "train", "--kv-store", "dist_sync"] + model + ["--model-prefix", self.prefix]
            with open(path, "w") as out:
                self.procs[(role, rank)] = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                                            stderr=subprocess.STDOUT, start_new_session=True)
            self.paths[(role, rank)] = path
        case.addCleanup(self.kill)

    def output(self, key):
        return read(self.paths[key])

    def logs(self):
        return "\n".join("--- %s\n%s" % (role_name(*k), self.output(k)[-3000:]) for k in self.procs)

    def wait_step(self, step, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if fault_job.global_step(self.output(("worker", 0))) >= step:
                return
            for key, proc in self.procs.items():
                if proc.poll() is not None:
                    self.case.fail("%s exited (%s) before step %d:\n%s" % (role_name(*key), proc.returncode, step,
                                                                           self.logs()))
            time.sleep(0.02)
        self.case.fail("no step %d within %d s:\n%s" % (step, timeout, self.logs()))

    def wait_end(self, timeout=240):
        deadline = time.time() + timeout
        for key, proc in self.procs.items():
            try:
                code = proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                self.case.fail("%s still running after %d s (a hang):\n%s" % (role_name(*key), timeout, self.logs()))
            self.case.assertEqual(code, 0, "%s exited %s:\n%s" % (role_name(*key), code, self.logs()))

    def kill(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def first_slice(params_path):
    """key:offset:length of key 0, the model's first trainable array: the first `arg:` array
    of a checkpoint, in the order the trainer numbers its keys. With 2 servers and
    --server-replicas 1 every server holds every slice; key 0 is small, so it is one slice."""
    tensors, _ = read_tensors(params_path)
    name = next(n for n in tensors if n.startswith("arg:"))
    return "0:0:%d" % (len(tensors[name]) // 4)


class EvilWorkerTest(FaultCase):
    def test_a_compromised_worker_changes_nothing(self):
        ref = Job(self, "ref", os.urandom(32).hex())
        ref.wait_end()
        secret = os.urandom(32).hex()
        job = Job(self, "run", secret)
        job.wait_step(10)
        command = [EVIL, "--servers", str(SERVERS), "--workers", str(WORKERS),
                   "--scheduler", job.addrs[("scheduler", 0)], "--worker", job.addrs[("worker", 0)],
                   "--slice", first_slice(ref.prefix + FINAL + ".params")]
        for rank in range(SERVERS):
            command += ["--server", job.addrs[("server", rank)]]
        evil = subprocess.run(command, env=dict(os.environ, TALLY_JOB_SECRET=secret), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=120)
        said = evil.stdout.decode(errors="replace")
        self.assertEqual(evil.returncode, 0, said)
        job.wait_step(11)  # training goes on past the step the attack began at, however slowly
        job.wait_end()
        self.assertSameCheckpoint(job.prefix + FINAL, ref.prefix + FINAL)
        self.check_refusals(job)
        print("  %d messages sent by the evil worker, every one refused; final weights and momenta unchanged"
              % said.count("\nsent "))

    def check_refusals(self, job):
        servers = [job.output(("server", r)) for r in range(SERVERS)]
        worker0, scheduler = job.output(("worker", 0)), job.output(("scheduler", 0))
        for out in servers:
            # Steps far ahead, each kind of request, as worker 1 (node 4).
            for command in ("PUSH", "PULL", "PUSHPULL"):
                self.assertLogHas(out, r"server: refused %s from node 4: step (1099511627776|1000000) of key 0 "
                                       r"\[0, \+\d+\) is more than 4 after its last step applied" % command)
            self.assertLogHas(out, r"server: refused ROLLBACK from node 4: step 1099511627776 .* is more than 1 after")
            # INIT of chains no server holds, as worker 0 (node 3): refused, the server goes on.
            for chain in (99, -5, 1 << 30):
                self.assertLogHas(out, r"server: refused INIT from node 3: chain %d is not one this server holds"
                                  % chain)
            self.assertLogHas(out, r"refused REPLICATE from node 4 \(worker 1\) to a server: only a server sends it, "
                                   r"authenticated as worker 1")
            self.assertLogHas(out, r"refused PUSH from node -3 \(no node of this job\) to a server")
            self.assertLogHas(out, r"server: refused \d+ requests")
        for out in servers + [worker0]:
            for command in ("SHUTDOWN", "NODE_DEAD", "NODE_TABLE", "BARRIER_DONE", "SERVER_LOST"):
                self.assertLogHas(out, r"refused %s from node 4 \(worker 1\) to a (server|worker): only the "
                                       r"scheduler sends it, authenticated as worker 1" % command)
                self.assertLogHas(out, r"refused %s from node -1 \(no id yet\)" % command)
                self.assertLogHas(out, r"refused %s from node -7 \(no node of this job\)" % command)
            self.assertLogHas(out, r"dropped SHUTDOWN numbered 7 from node -2, no node's id")
            self.assertLogHas(out, r"refused \d+ messages that their senders may not send: .*SHUTDOWN \d+")
        self.assertLogHas(worker0, r"refused RESPONSE from node 4 \(worker 1\) to a worker: only a server sends it")
        for pattern in (r"SHUTDOWN from node 4 \(worker 1\) to the scheduler: nobody sends it",
                        r"NODE_DEAD from node 4 \(worker 1\) to the scheduler: nobody sends it",
                        r"BARRIER of group 2 from node 4 \(worker 1\), which is not in it",
                        r"REPLICA_READY from node 4 \(worker 1\) to the scheduler: only a server sends it",
                        r"WORKER_DONE from node -4 \(no node of this job\)",
                        r"scheduler: refused 6 messages that their senders may not send"):
            self.assertLogHas(scheduler, r"scheduler: refused " + pattern if "refused 6" not in pattern else pattern)


if __name__ == "__main__":
    EVIL = os.path.abspath(sys.argv.pop(2))
    fault_job.main()
