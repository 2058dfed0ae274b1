"""What a job is: its processes, the host each runs on and the environment each gets.

Nothing here starts a process; `commands` turns a `Proc` into a command line and
`supervise` runs and watches them.
"""

import random
import socket
from dataclasses import dataclass, field

ROLES = ("scheduler", "server", "worker")

# The variables the launcher sets itself; `--env` may not override them, so that a
# typo on the command line cannot give two processes the same rank.
JOB_VARS = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER",
            "DMLC_NUM_SERVER", "DMLC_NODE_HOST", "DMLC_TASK_ID", "DMLC_WORKER_ID",
            "DMLC_SERVER_ID", "DMLC_NUM_ATTEMPT", "DMLC_JOB_CLUSTER", "TALLY_RANK",
            "TALLY_JOB_SECRET", "TALLY_JOB_SECRET_FILE", "TALLY_PLAIN", "TALLY_STOPPED_STATUS",
            "TALLY_SERVER_REPLICAS", "TALLY_SPARE_SERVERS", "TALLY_ELASTIC", "TALLY_JOIN")

# How the launcher asks `tally train` to exit after a stop on SIGTERM whose checkpoint was
# saved (TALLY_STOPPED_STATUS; on its own it exits 0 then): a status of its own, so that the
# launcher tells such a stop from the end of training. 75 is EX_TEMPFAIL: "try again". A
# stop without a checkpoint exits 128 + SIGTERM either way.
SAVED_STOP_STATUS = 75

# What MXNet's ssh launcher (dmlc-tracker's ssh.py) passes to remote processes when it is
# set on the launching machine; the ssh and mpi launchers do the same, since a remote login
# would not have them. `--env` overrides them.
FORWARDED_VARS = ("OMP_NUM_THREADS", "KMP_AFFINITY", "LD_LIBRARY_PATH", "AWS_ACCESS_KEY_ID",
                  "AWS_SECRET_ACCESS_KEY", "DMLC_INTERFACE")

# Forwarded variables that are credentials: like the job's secret, they stay off every
# command line (where each user of the host can read them); `commands` sends them apart.
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

# The variable that carries the job's secret where it must travel in an environment (mpirun's,
# srun's). It never appears on a command line, which every user of the host can read.
SECRET_VAR = "TALLY_JOB_SECRET"
# The variable that names a file of mode 600 holding the secret: how local processes and,
# through ssh's stdin and a file the remote shell writes, remote ones get it.
SECRET_FILE_VAR = "TALLY_JOB_SECRET_FILE"


class UsageError(Exception):
    """A mistake in the command line or the hostfile; reported without a traceback."""


@dataclass
class Proc:
    """One process of the job: its role, rank within the role, host and variables."""
    role: str
    rank: int
    host: str  # where it runs, as the user named it (used for ssh, mpirun, srun)
    env: dict = field(default_factory=dict)  # the job's variables only, not os.environ
    ssh_port: int = None  # its host's ssh port; None: ssh's default
    secret: str = None  # the job's secret (64 hex digits); None with --plain
    secret_file: str = None  # local: the file of mode 600 that holds it (secret.SecretDir)
    joins: int = 0  # --max-workers: 0 for the job's own process, N for its rank's Nth joiner

    @property
    def name(self):
        return "scheduler" if self.role == "scheduler" else f"{self.role} {self.rank}"


def rotation(hosts, needed):
    """The order in which processes of one role are placed on hosts: its first `needed`
    entries, the most a role uses (processes past the end wrap round).

    Round-robin over the hosts; a host with k slots takes part in the first k rounds.
    Hosts a (2 slots), b (1) and c (2) give a, b, c, a, c.
    """
    order = []
    for round_index in range(max(host.slots for host in hosts)):
        order.extend(host for host in hosts if host.slots > round_index)
        if len(order) >= needed:
            break
    return order


def forwarded_env(environ):
    """The variables of FORWARDED_VARS that are set in environ, the launching environment."""
    return {name: environ[name] for name in FORWARDED_VARS if name in environ}


def parse_env_options(items, environ):
    """Turns `--env K:V` and `--env K` options into a dict.

    `K:V` sets K to V (V may contain colons); a bare `K` forwards K's value from
    `environ`, the launching environment.
    """
    result = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not name or not (name[0].isalpha() or name[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in name):
            raise UsageError(f"--env {item}: expected NAME:VALUE or NAME")
        if name in JOB_VARS:
            raise UsageError(f"--env {item}: {name} is set by the launcher for each process")
        if not sep:
            if name not in environ:
                raise UsageError(f"--env {name}: not set in the launching environment")
            value = environ[name]
        result[name] = value
    return result


def flag_values(command, name):
    """The values `command` gives the gflags flag `name` (dashed, e.g. "model-prefix"):
    `--name=V`, `--name V`, with one dash or two, `_` for `-` as gflags allows."""
    values = []
    for i, arg in enumerate(command):
        if not arg.startswith("-"):
            continue
        flag, eq, value = arg.lstrip("-").partition("=")
        if flag.replace("_", "-") != name:
            continue
        if eq:
            values.append(value)
        elif i + 1 < len(command):
            values.append(command[i + 1])
    return values


def check_restartable(command):
    """Raises UsageError unless a rerun of `command` continues from its latest checkpoint.

    `tally train` does with --model-prefix PREFIX and --resume auto: the first attempt
    starts from the beginning when PREFIX has no checkpoint yet, each restart from the
    newest one that loads. The launcher does not add the flags itself: a command that
    never saved would silently start over on every restart.
    """
    missing = []
    if not any(flag_values(command, "model-prefix")):
        missing.append("--model-prefix PREFIX")
    if "auto" not in flag_values(command, "resume"):
        missing.append("--resume auto")
    if missing:
        raise UsageError("--max-restarts restarts the job from its latest checkpoint; the "
                         "command needs " + " and ".join(missing))


def set_root_port(procs, port):
    """Points every process at a scheduler listening on `port` (a restart's new port)."""
    for proc in procs:
        proc.env["DMLC_PS_ROOT_PORT"] = str(port)


def free_port(host=""):
    """A TCP port that nothing on this machine listens on at the moment, chosen below the
    kernel's ephemeral range where there is room: a port from that range (what bind to port 0
    gives) can be handed to one of the job's own processes, a server or worker listening on
    port 0, between this choice and the scheduler's bind, which then fails with "Address
    already in use"."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(100 if low >= 10000 else 0):
        port = rng.randrange(low - 8192, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ephemeral_low():
    """The first port of Linux's ephemeral range (32768 where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def set_attempt(procs, attempt):
    """Tells every process which attempt of the job it belongs to (0: the first; each
    --max-restarts restart counts one up), as dmlc-tracker's DMLC_NUM_ATTEMPT does."""
    for proc in procs:
        proc.env["DMLC_NUM_ATTEMPT"] = str(attempt)


def task_ids(role, rank, num_workers, num_servers, spare_servers=0):
    """The ids MXNet's launcher (dmlc-tracker) gives a process: DMLC_TASK_ID numbers the
    workers first, then the servers, as its local launcher does; the scheduler, which
    dmlc-tracker starts itself without one, comes after them, so that every process of the
    job has an id of its own (spare servers, ranks num_servers on, count as servers).
    DMLC_WORKER_ID and DMLC_SERVER_ID are the rank in the role."""
    if role == "worker":
        return {"DMLC_TASK_ID": str(rank), "DMLC_WORKER_ID": str(rank)}
    if role == "server":
        return {"DMLC_TASK_ID": str(num_workers + rank), "DMLC_SERVER_ID": str(rank)}
    return {"DMLC_TASK_ID": str(num_workers + num_servers + spare_servers)}


def plan_job(num_workers, num_servers, hosts, root_uri, port, extra_env, node_host=None,
             cluster="local", server_hosts=None, server_replicas=0, spare_servers=0, elastic=False):
    """Returns every process of the job, scheduler first, then servers, then workers.

    `hosts` is [hosts.Host]; the scheduler goes on the first host, servers and workers
    each follow `rotation(hosts)`. `node_host`, when given, replaces the host name in
    DMLC_NODE_HOST (the local launcher gives 127.0.0.1). `cluster` is the launcher's name,
    for DMLC_JOB_CLUSTER. `server_hosts`, when given, takes the servers (in their own
    rotation) and leaves `hosts` to the scheduler and the workers. `spare_servers` more
    servers (ranks num_servers on) wait to take a lost server's place (docs/faults.md).
    `elastic`: TALLY_ELASTIC=1, workers may leave the job (docs/faults.md).
    """
    all_servers = num_servers + spare_servers
    order = rotation(hosts, max(num_workers, all_servers))
    server_order = rotation(server_hosts, all_servers) if server_hosts else order
    placed = [("scheduler", 0, hosts[0])]
    placed += [("server", r, server_order[r % len(server_order)]) for r in range(all_servers)]
    placed += [("worker", r, order[r % len(order)]) for r in range(num_workers)]
    procs = []
    for role, rank, host in placed:
        env = {
            "DMLC_ROLE": role,
            "DMLC_PS_ROOT_URI": root_uri,
            "DMLC_PS_ROOT_PORT": str(port),
            "DMLC_NUM_WORKER": str(num_workers),
            "DMLC_NUM_SERVER": str(num_servers),
            "DMLC_NODE_HOST": node_host or host.name,
            "TALLY_RANK": str(rank),
            **task_ids(role, rank, num_workers, num_servers, spare_servers),
            "DMLC_NUM_ATTEMPT": "0",
            "DMLC_JOB_CLUSTER": cluster,
            "TALLY_STOPPED_STATUS": str(SAVED_STOP_STATUS),
            "TALLY_SERVER_REPLICAS": str(server_replicas),
            # Several processes share each host's cores: OpenMP threads that spin while they
            # wait would take the core another process needs (a 3x slowdown seen with two
            # workers on two cores). --env OMP_WAIT_POLICY:active overrides it.
            "OMP_WAIT_POLICY": "passive",
        }
        if spare_servers:
            env["TALLY_SPARE_SERVERS"] = str(spare_servers)
        if elastic:
            env["TALLY_ELASTIC"] = "1"
        env.update(extra_env)
        procs.append(Proc(role, rank, host.name, env, ssh_port=host.port))
    return procs
