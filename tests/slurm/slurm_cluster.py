"""A real Slurm cluster of one node, this machine, for tests: Debian's munge and slurm-wlm
daemons run from a temporary directory, on free ports, without systemd.

    cluster = SlurmCluster()
    why = cluster.start()        # None, or why there is no cluster (then skip)
    cluster.run(["sbatch", ...]) # a Slurm command pointed at this cluster
    cluster.stop()               # kills the daemons, removes the directory

Everything of the cluster lives in its directory: slurm.conf, the munge key and socket,
state, spool, pid and log files. Clients find it through SLURM_CONF (`cluster.env`), so
several clusters (parallel ctest runs) do not meet. The one node is named `localhost`,
which every process of a job resolves, with NodeAddr 127.0.0.1.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testutil import free_port  # noqa: E402 (tests/testutil.py)

DAEMONS = ("munged", "slurmctld", "slurmd")
NODE = "localhost"
CPUS = 2
READY_TIMEOUT_S = 30


def missing_reason():
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their users, SlurmUser=root)"
    for name in DAEMONS + ("sinfo", "srun", "sbatch", "scontrol"):
        if shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
            return (f"{name} is not installed (Debian packages slurm-wlm and munge; "
                    f"tools/install_deps.sh)")
    return None


def slurm_conf(d, ports, socket):
    """The cluster's slurm.conf: one node, two partitions (the second preempts the first), no
    cgroups, no accounting."""
    return f"""\
ClusterName=tallytest
SlurmctldHost={NODE}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
# Processes are tracked by their process group: no cgroup hierarchy is needed.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
ReturnToService=2
# Let a cancelled job's processes have the time Tally's workers take to save a checkpoint.
KillWait=30
MinJobAge=300
# scontrol requeue and sbatch --requeue; a requeued job starts again at once.
JobRequeue=1
# Preemption as on a cluster with spot-like capacity: a job of partition `urgent` that needs
# the CPUs a `debug` job holds requeues it (SIGTERM, KillWait, then the job waits again).
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=urgent Nodes={NODE} MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
"""


class SlurmCluster:
    def __init__(self):
        self.dir = None
        self.procs = {}
        self.env = None

    def start(self):
        """Starts munged, slurmctld and slurmd and waits until the node is idle. Returns
        None, or why it cannot (then nothing is left running)."""
        why = missing_reason()
        if why:
            return why
        self.dir = tempfile.mkdtemp(prefix="tally-slurm-")
        d = self.dir
        for sub in ("state", "spool", "munge"):
            os.makedirs(os.path.join(d, sub), mode=0o700)
        socket = os.path.join(d, "munge", "munge.socket")
        key = os.path.join(d, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        conf = os.path.join(d, "slurm.conf")
        with open(conf, "w") as f:
            f.write(slurm_conf(d, (free_port(), free_port()), socket))
        self.env = dict(os.environ, SLURM_CONF=conf)
        self.env["PATH"] = self.env.get("PATH", "") + ":/usr/sbin"
        self.spawn("munged", ["munged", "-F", "--force", f"--socket={socket}",
                              f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
                              f"--seed-file={d}/munge/seed", f"--log-file={d}/munged.log"])
        if not self.wait(lambda: os.path.exists(socket), 10):
            return self.give_up("munged did not create its socket")
        self.spawn("slurmctld", ["slurmctld", "-D", "-i"])
        self.spawn("slurmd", ["slurmd", "-D", "-N", NODE])
        if not self.wait(self.node_idle, READY_TIMEOUT_S):
            return self.give_up(f"the node was not idle within {READY_TIMEOUT_S} s")
        return None

    def spawn(self, name, argv):
        log = open(os.path.join(self.dir, name + ".out"), "wb")
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        log.close()

    def wait(self, ready, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return True
            if any(p.poll() is not None for p in self.procs.values()):
                return False
            time.sleep(0.2)
        return False

    def node_idle(self):
        out = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False).stdout
        states = out.split()  # one line per partition the node is in
        return bool(states) and all(state == "idle" for state in states)

    def give_up(self, why):
        ended = [f"{name} exited {p.poll()}" for name, p in self.procs.items()
                 if p.poll() is not None]
        logs = self.logs()
        self.stop()
        return f"{why} ({', '.join(ended) or 'daemons running'})\n{logs}"

    def logs(self, chars=3000):
        """The end of every daemon's log, for a failure message."""
        text = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log", "munged.out",
                     "slurmctld.out", "slurmd.out"):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text.append(f"--- {name}\n{f.read()[-chars:]}")
        return "\n".join(text)

    def run(self, argv, check=True, timeout=60, **kwargs):
        """Runs a Slurm client command against this cluster; returns CompletedProcess."""
        result = subprocess.run(argv, env=kwargs.pop("env", self.env), capture_output=True,
                                text=True, timeout=timeout, **kwargs)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: "
                               f"{result.stdout}{result.stderr}")
        return result

    def stop(self):
        """Cancels every job, kills the daemons and removes the directory."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            self.run(["scancel", "--full", "--signal=KILL", "--partition=debug,urgent"], check=False)
            self.run(["scancel", "--partition=debug,urgent"], check=False)
        # slurmd first: its job steps die with it (slurmstepd follows its slurmd).
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


if __name__ == "__main__":
    # By hand: start a cluster, show it, stop it.
    cluster = SlurmCluster()
    problem = cluster.start()
    if problem:
        sys.exit(f"no cluster: {problem}")
    try:
        print(cluster.run(["sinfo"]).stdout)
        print(cluster.run(["srun", "-N1", "hostname"]).stdout)
    finally:
        cluster.stop()
