"""Command line of tools/launch.py: parses it, plans the job and runs (or prints) it."""

import argparse
import os
import shlex
import secrets
import shutil
import subprocess
import sys
import threading

from . import commands
from .hosts import Host, common_ssh_port, parse_hostfile, refuse_ports, with_default_port
from .job import (UsageError, check_restartable, forwarded_env, free_port, parse_env_options,
                  plan_job, set_attempt, set_root_port)
from .children import Child, RemoteChild, SlurmChild
from .elastic import Joins, Policy
from .secret import SecretDir
from .supervise import run_with_restarts, say

LAUNCHERS = ("local", "ssh", "mpi", "slurm")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="launch.py", allow_abbrev=False,
        description="Start a Tally job: one scheduler, NUM_WORKERS workers and NUM_SERVERS "
                    "servers, each running COMMAND with its role in the environment "
                    "(see docs/launch.md).")
    parser.add_argument("-n", "--num-workers", type=int,
                        help="number of worker processes (required unless --max-workers gives it)")
    parser.add_argument("-s", "--num-servers", type=int,
                        help="number of server processes (default: NUM_WORKERS)")
    parser.add_argument("-H", "--hostfile",
                        help="hosts, one per line: `host`, `host:port` (ssh port) or either "
                             "followed by `slots=N`, as in MXNet's launcher (ssh, mpi, slurm)")
    parser.add_argument("--server-hostfile", metavar="FILE",
                        help="put the servers on these hosts (the format of -H) and the "
                             "workers on -H's: CPU server nodes apart from the GPU nodes (ssh)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="local",
                        help="how processes are started (default: local)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME[:VALUE]",
                        help="set NAME to VALUE in every process, or forward NAME's value "
                             "from this environment; repeatable")
    parser.add_argument("--port", type=int,
                        help="scheduler port (default: a port free on this machine)")
    parser.add_argument("--sync-dst-dir", metavar="DIR",
                        help="copy the current directory to DIR on every host and run "
                             "there (ssh, mpi)")
    parser.add_argument("--ssh-opts", default="", metavar="OPTS",
                        help="extra ssh options, one shell-quoted string (ssh, mpi)")
    parser.add_argument("--ssh-accept-new-host-keys", action="store_true",
                        help="accept the key of a host that ssh does not know yet and add it to "
                             "known_hosts (StrictHostKeyChecking=accept-new); a known host whose "
                             "key differs is still refused (ssh, mpi)")
    parser.add_argument("--ssh-port", type=int,
                        help="port of the hosts' sshd where the hostfile gives none (ssh, mpi)")
    parser.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="after the workers finish, how long scheduler and servers "
                             "may take to exit before they are stopped (default: 30)")
    parser.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                        help="time between SIGTERM and SIGKILL when stopping (default: 30)")
    parser.add_argument("--plain", action="store_true",
                        help="run without authentication, for a trusted network only; by "
                             "default every process gets the job's secret and all traffic is "
                             "authenticated and encrypted (docs/security.md)")
    parser.add_argument("--max-restarts", type=int, default=0, metavar="K",
                        help="after a process fails, stop the job and start it again, up to "
                             "K times; the command must have --model-prefix and --resume auto "
                             "(default: 0)")
    parser.add_argument("--server-replicas", type=int, default=0, metavar="R",
                        help="keep every server's slices also on the next R servers, so that the "
                             "job goes on without a restart when a server dies, as long as one "
                             "server of each chain lives (default: 0; docs/faults.md)")
    parser.add_argument("--spare-servers", type=int, default=0, metavar="K",
                        help="start K more servers that hold nothing until one takes the place of a "
                             "server that died, receiving its slices, so that --server-replicas "
                             "holds again (needs --server-replicas; synchronous kvstores; default: 0)")
    parser.add_argument("--elastic", action="store_true",
                        help="a worker (of any rank) that dies or gets SIGTERM leaves the job and the "
                             "others go on (TALLY_ELASTIC=1 to every process; docs/faults.md, \"Elastic "
                             "workers\"); without it a dead worker ends the job")
    parser.add_argument("--max-workers", type=int, metavar="N",
                        help="--elastic: the job starts with N workers (-n, if given, must agree), and a "
                             "worker that leaves is replaced: after a back-off (1 s, doubling) a new "
                             "process takes its rank on its host with TALLY_JOIN=1 and joins the running job")
    parser.add_argument("--min-workers", type=int, metavar="M",
                        help="--elastic: when fewer than M workers are live, the job stops at an agreed "
                             "step with its checkpoint, as on a SIGTERM, and --max-restarts starts it again "
                             "whole (default: 1, the job goes on with one worker)")
    parser.add_argument("--max-joins", type=int, metavar="K",
                        help="--max-workers: at most K new processes for each rank (default: 3)")
    parser.add_argument("--log-dir", metavar="DIR",
                        help="also write each process's output, without the [role] prefix, to "
                             "DIR/ROLE-RANK.log (DIR/scheduler.log); a restarted job's attempt N "
                             "to ROLE-RANK.attemptN.log")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the command of every process, one per line, and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the training command, run by every process")
    return parser


def slurm_hosts():
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist or not shutil.which("scontrol"):
        raise UsageError("--launcher slurm needs -H HOSTFILE or a Slurm allocation "
                         "(SLURM_JOB_NODELIST and scontrol)")
    names = subprocess.run(["scontrol", "show", "hostnames", nodelist], check=True,
                           capture_output=True, text=True).stdout.split()
    return [Host(name, where="SLURM_JOB_NODELIST") for name in names]


def plan_hosts(args):
    """Returns (hosts, root_uri, node_host) for the launcher; node_host is the address
    every process gets as DMLC_NODE_HOST, or None for its host's name. Each host's port is
    the hostfile's, else --ssh-port; for mpi, args.ssh_port becomes the one port of all."""
    if args.launcher == "local":
        if args.hostfile:
            raise UsageError("-H is for --launcher ssh, mpi or slurm")
        return [Host("localhost")], "127.0.0.1", "127.0.0.1"
    if args.launcher == "slurm":
        hosts = parse_hostfile(args.hostfile) if args.hostfile else slurm_hosts()
        refuse_ports(hosts)
        return hosts, hosts[0].name, None
    if args.hostfile:
        hosts = with_default_port(parse_hostfile(args.hostfile, warn=say), args.ssh_port)
        placement = hosts, hosts[0].name, None
    elif args.launcher == "ssh":
        raise UsageError("--launcher ssh needs -H HOSTFILE")
    else:
        placement = [Host("localhost", port=args.ssh_port)], "127.0.0.1", "127.0.0.1"
    if args.launcher == "mpi":
        args.ssh_port = common_ssh_port(placement[0])  # commands.mpi gives it to mpirun
    return placement


def plan(args):
    """Checks the arguments and returns (procs, cwd, hosts)."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("no command given")
    if command[0].startswith("-"):
        raise UsageError(f"unknown option {command[0]}")
    args.command = command
    check_elastic(args)
    if args.num_workers < 1:
        raise UsageError("-n must be at least 1")
    num_servers = args.num_workers if args.num_servers is None else args.num_servers
    if num_servers < 1:
        raise UsageError("-s must be at least 1")
    if args.max_restarts < 0:
        raise UsageError("--max-restarts must be at least 0")
    if not 0 <= args.server_replicas < num_servers:
        raise UsageError(f"--server-replicas {args.server_replicas}: from 0 to one less than the "
                         f"server count ({num_servers}), each replica on a server of its own")
    if args.spare_servers < 0 or (args.spare_servers and not args.server_replicas):
        raise UsageError(f"--spare-servers {args.spare_servers}: a spare takes a lost server's place "
                         f"in its chains, which needs --server-replicas 1 or more")
    if args.max_restarts:
        check_restartable(command)
    remote_only = {"--sync-dst-dir": args.sync_dst_dir, "--ssh-opts": args.ssh_opts,
                   "--ssh-port": args.ssh_port,
                   "--ssh-accept-new-host-keys": args.ssh_accept_new_host_keys}
    for option, value in remote_only.items():
        if value and args.launcher not in ("ssh", "mpi"):
            raise UsageError(f"{option} is for --launcher ssh or mpi")
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        raise UsageError(f"--ssh-port {args.ssh_port}: not a TCP port")
    hosts, root_uri, node_host = plan_hosts(args)
    server_hosts = plan_server_hosts(args)
    port = args.port if args.port is not None else free_port()
    if not 0 < port < 65536:
        raise UsageError(f"--port {port}: not a TCP port")
    # Processes that ssh or mpirun start on other hosts do not inherit this environment.
    extra = forwarded_env(os.environ) if args.launcher in ("ssh", "mpi") else {}
    extra.update(parse_env_options(args.env, os.environ))
    procs = plan_job(args.num_workers, num_servers, hosts, root_uri, port, extra, node_host,
                     cluster=args.launcher, server_hosts=server_hosts,
                     server_replicas=args.server_replicas, spare_servers=args.spare_servers,
                     elastic=args.elastic)
    cwd = args.sync_dst_dir or os.getcwd()
    return procs, cwd, hosts + (server_hosts or [])


def check_elastic(args):
    """Checks --elastic's flags, naming the one at fault; sets args.num_workers from
    --max-workers when -n is omitted."""
    for option, value in (("--max-workers", args.max_workers), ("--min-workers", args.min_workers),
                          ("--max-joins", args.max_joins)):
        if value is not None and not args.elastic:
            raise UsageError(f"{option} needs --elastic (workers that leave and join a running job)")
    if args.max_joins is not None and args.max_workers is None:
        raise UsageError("--max-joins bounds the new processes of --max-workers, which is not given")
    if args.num_workers is None:
        if args.max_workers is None:
            raise UsageError("-n/--num-workers is required (or --elastic --max-workers N)")
        args.num_workers = args.max_workers
    if args.max_workers is not None and args.max_workers != args.num_workers:
        raise UsageError(f"--max-workers {args.max_workers} and -n {args.num_workers} differ: the job "
                         f"starts with its --max-workers workers (omit -n)")
    if args.min_workers is not None and not 1 <= args.min_workers <= args.num_workers:
        raise UsageError(f"--min-workers {args.min_workers}: from 1 to the job's workers ({args.num_workers}, "
                         + ("--max-workers)" if args.max_workers is not None else "-n)"))
    if args.max_joins is not None and args.max_joins < 1:
        raise UsageError(f"--max-joins {args.max_joins}: at least 1")


def join_policy(args):
    """--elastic's elastic.Policy; None without --elastic."""
    if not args.elastic:
        return None
    return Policy(min_workers=args.min_workers or 1, replace=args.max_workers is not None,
                  max_joins=3 if args.max_joins is None else args.max_joins)


def plan_server_hosts(args):
    """The hosts of --server-hostfile, or None: the servers share -H's hosts."""
    if not args.server_hostfile:
        return None
    if args.launcher != "ssh":
        raise UsageError("--server-hostfile is for --launcher ssh")
    if not args.hostfile:
        raise UsageError("--server-hostfile needs -H HOSTFILE for the workers")
    return with_default_port(parse_hostfile(args.server_hostfile, warn=say), args.ssh_port)


def ssh_options(args):
    """The options every ssh of the job gets after BatchMode and the port. Host keys are
    checked as ssh checks them: a spoofed host would receive the job's secret."""
    accept_new = ["-o", "StrictHostKeyChecking=accept-new"] if args.ssh_accept_new_host_keys else []
    return accept_new + shlex.split(args.ssh_opts)


def make_child(args, proc, cwd, out_lock):
    ssh_opts = ssh_options(args)
    if args.launcher == "local":
        argv, env = commands.local(proc, args.command)
    elif args.launcher == "ssh":
        argv, env = commands.ssh(proc, args.command, cwd, ssh_opts)
        return RemoteChild(proc, argv, env, out_lock, ssh_opts)
    elif args.launcher == "mpi":
        argv, env = commands.mpi(proc, args.command, cwd, ssh_opts, args.ssh_port,
                                 as_root=os.geteuid() == 0)
    else:
        argv, env = commands.slurm(proc, args.command, cwd)
        return SlurmChild(proc, argv, env, out_lock, commands.step_name(proc))
    return Child(proc, argv, env, out_lock)


def log_path(log_dir, proc, attempt):
    """DIR/worker-0.log for the first attempt, DIR/worker-0.attempt2.log for the second
    restart, DIR/worker-2.join1.log for the first process that took worker 2's place
    (--max-workers); the file starts empty."""
    stem = (proc.name.replace(" ", "-") + (f".attempt{attempt}" if attempt else "")
            + (f".join{proc.joins}" if proc.joins else ""))
    path = os.path.join(log_dir, stem + ".log")
    open(path, "wb").close()
    return path


def sync_all(args, hosts, dry_run):
    ssh_opts = ssh_options(args)
    # Two lines may name one machine on two ports (containers, say): each is copied to.
    for host, port in dict.fromkeys((host.name, host.port) for host in hosts):
        pack, unpack = commands.sync(host, os.getcwd(), args.sync_dst_dir, ssh_opts, port)
        if dry_run:
            print(shlex.join(pack) + " | " + shlex.join(unpack))
            continue
        tar = subprocess.Popen(pack, stdout=subprocess.PIPE)
        copy = subprocess.run(unpack, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        tar.stdout.close()
        if tar.wait() != 0 or copy.returncode != 0:
            raise UsageError(f"--sync-dst-dir: copying {os.getcwd()} to {host}:"
                             f"{args.sync_dst_dir} failed")


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    with SecretDir() as secret_dir:
        return run(parser, args, secret_dir)


def run(parser, args, secret_dir):
    """Plans the job and runs it (or prints it); the launcher's exit status."""
    try:
        procs, cwd, hosts = plan(args)
        out_lock = threading.Lock()
        if args.log_dir and not args.dry_run:
            try:
                os.makedirs(args.log_dir, exist_ok=True)
            except OSError as e:
                raise UsageError(f"--log-dir {args.log_dir}: {e.strerror}")

        def make_children(attempt):
            job_secret = None if args.plain else secrets.token_hex(32)
            # The last attempt's scheduler port may linger in TIME_WAIT or be taken by now.
            if attempt and args.port is None:
                set_root_port(procs, free_port())
            set_attempt(procs, attempt)
            # A fresh secret each attempt: a process left over from the last one cannot join.
            # Local processes find it in a file of mode 600 (the last attempt's is removed).
            secret_file = None
            if job_secret and args.launcher == "local":
                secret_file = (commands.DRY_RUN_SECRET_FILE if args.dry_run
                               else secret_dir.write(attempt, job_secret))
            for proc in procs:
                proc.secret, proc.secret_file = job_secret, secret_file
                if args.plain:
                    proc.env["TALLY_PLAIN"] = "1"
            children = [make_child(args, proc, cwd, out_lock) for proc in procs]
            if args.log_dir and not args.dry_run:
                for child in children:
                    child.log_path = log_path(args.log_dir, child.proc, attempt)
            return children

        try:
            children = make_children(0)
        except OSError as e:  # the secret's file could not be written
            say(f"error: the job's secret file: {e}")
            return 1
        if args.dry_run:
            if args.sync_dst_dir:
                sync_all(args, hosts, dry_run=True)
            for child in children:
                print(commands.display(child.argv, child.env))
            return 0
        if args.sync_dst_dir:
            sync_all(args, hosts, dry_run=False)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        say(f"error: {e}")
        return 2
    except KeyboardInterrupt:  # before any role started: nothing to stop
        return 130
    return run_with_restarts(lambda attempt: make_children(attempt) if attempt else children,
                             args.shutdown_timeout, args.grace, args.max_restarts, args.server_replicas,
                             make_joins=elastic_joins(args, cwd, out_lock))


def elastic_joins(args, cwd, out_lock):
    """make_joins(attempt) for run_with_restarts: each attempt's elastic.Joins, whose joiners
    are made as the job's own processes are; None without --elastic."""
    policy = join_policy(args)
    if policy is None:
        return None

    def make_joins(attempt):
        def make_joiner(proc):
            child = make_child(args, proc, cwd, out_lock)
            if args.log_dir:
                child.log_path = log_path(args.log_dir, proc, attempt)
            return child
        return Joins(policy, make_joiner)
    return make_joins
