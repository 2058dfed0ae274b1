"""What a job is: its processes, the host each runs on and the environment each gets.

Nothing here starts a process; `commands` turns a `Proc` into a command line and
`supervise` runs and watches them.
"""

import socket
from dataclasses import dataclass, field

ROLES = ("scheduler", "server", "worker")

# The variables the launcher sets itself; `--env` may not override them, so that a
# typo on the command line cannot give two processes the same rank.
JOB_VARS = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER",
            "DMLC_NUM_SERVER", "DMLC_NODE_HOST", "TALLY_RANK", "TALLY_JOB_SECRET",
            "TALLY_JOB_SECRET_FILE", "TALLY_PLAIN")

# The variable that carries the job's secret. It never appears on a command line (which
# every user of the host can read): it travels in the environment, or through ssh's stdin.
SECRET_VAR = "TALLY_JOB_SECRET"


class UsageError(Exception):
    """A mistake in the command line or the hostfile; reported without a traceback."""


@dataclass
class Proc:
    """One process of the job: its role, rank within the role, host and variables."""
    role: str
    rank: int
    host: str  # where it runs, as the user named it (used for ssh, mpirun, srun)
    env: dict = field(default_factory=dict)  # the job's variables only, not os.environ
    secret: str = None  # the job's secret (64 hex digits); None with --plain

    @property
    def name(self):
        return "scheduler" if self.role == "scheduler" else f"{self.role} {self.rank}"


def parse_hostfile(path):
    """Returns [(host, slots)] from a file of `host` or `host:slots` lines.

    Blank lines and everything after a `#` are ignored.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError(f"cannot read hostfile: {e}") from None
    hosts = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        host, sep, slots = text.partition(":")
        host = host.strip()
        if not host or " " in host or "\t" in host:
            raise UsageError(f"{path}:{number}: expected `host` or `host:slots`, got {text!r}")
        count = 1
        if sep:
            if not slots.strip().isdigit() or int(slots) < 1:
                raise UsageError(f"{path}:{number}: slots must be a positive integer, got {text!r}")
            count = int(slots)
        hosts.append((host, count))
    if not hosts:
        raise UsageError(f"{path}: no hosts")
    return hosts


def rotation(hosts):
    """The order in which processes of one role are placed on hosts.

    Round-robin over the hosts; a host with k slots takes part in the first k rounds.
    [("a", 2), ("b", 1), ("c", 2)] gives a, b, c, a, c.
    """
    order = []
    for round_index in range(max(slots for _, slots in hosts)):
        order.extend(host for host, slots in hosts if slots > round_index)
    return order


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
    """A TCP port that nothing on this machine listens on at the moment."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def plan_job(num_workers, num_servers, hosts, root_uri, port, extra_env, node_host=None):
    """Returns every process of the job, scheduler first, then servers, then workers.

    `hosts` is [(host, slots)]; the scheduler goes on the first host, servers and workers
    each follow `rotation(hosts)`. `node_host`, when given, replaces the host name in
    DMLC_NODE_HOST (the local launcher gives 127.0.0.1).
    """
    order = rotation(hosts)
    placed = [("scheduler", 0, hosts[0][0])]
    placed += [("server", r, order[r % len(order)]) for r in range(num_servers)]
    placed += [("worker", r, order[r % len(order)]) for r in range(num_workers)]
    procs = []
    for role, rank, host in placed:
        env = {
            "DMLC_ROLE": role,
            "DMLC_PS_ROOT_URI": root_uri,
            "DMLC_PS_ROOT_PORT": str(port),
            "DMLC_NUM_WORKER": str(num_workers),
            "DMLC_NUM_SERVER": str(num_servers),
            "DMLC_NODE_HOST": node_host or host,
            "TALLY_RANK": str(rank),
            # Several processes share each host's cores: OpenMP threads that spin while they
            # wait would take the core another process needs (a 3x slowdown seen with two
            # workers on two cores). --env OMP_WAIT_POLICY:active overrides it.
            "OMP_WAIT_POLICY": "passive",
        }
        env.update(extra_env)
        procs.append(Proc(role, rank, host, env))
    return procs
