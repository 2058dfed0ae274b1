"""The hosts of a job, as the hostfile (-H) names them.

A line means what it means to MXNet's launcher (dmlc-tracker's ssh.py), so that an MXNet
user's hostfile keeps working: `host`, `host:port` where port is the host's **ssh port**,
and either followed by `slots=N` (Open MPI's hostfile syntax), how many processes of each
role the host takes in turn. Tally once read `host:N` as N slots; a small port, the likely
remnant of that, is warned about (`parse_hostfile`).
"""

import re
from typing import NamedTuple

from .job import UsageError

FORMS = "`host`, `host:port` (port: the host's ssh port) or either followed by `slots=N`"
PORT = re.compile(r"[0-9]{1,5}")
COUNT = re.compile(r"[0-9]+")


class Host(NamedTuple):
    """One line of the hostfile (or one host of a Slurm allocation)."""
    name: str
    slots: int = 1
    port: int = None  # the host's ssh port; None: --ssh-port, else ssh's own default
    where: str = ""  # `FILE:LINE`, for messages


def parse_line(text, where):
    """The Host that one line (comment and blanks stripped) names."""
    def bad(why):
        return UsageError(f"{where}: {why} in {text!r}; a line is {FORMS}")

    first, *options = text.split()
    slots = None
    for option in options:
        key, eq, value = option.partition("=")
        if key != "slots" or not eq:
            raise bad(f"unexpected {option!r}")
        if slots is not None:
            raise bad("slots= given twice")
        if not COUNT.fullmatch(value) or int(value) < 1:
            raise bad(f"slots must be a positive integer, not {value!r}")
        slots = int(value)
    name, colon, port = first.partition(":")
    if not name or "=" in name:
        raise bad("no host name")
    if ":" in port:
        raise bad("more than one colon (an IPv6 address is not accepted: use a host name)")
    if colon and (not PORT.fullmatch(port) or not 0 < int(port) < 65536):
        raise bad(f"{port!r} after the colon is not an ssh port (1-65535)")
    return Host(name, slots or 1, int(port) if colon else None, where)


def parse_hostfile(path, warn=None):
    """Returns [Host] from the file at path; blank lines and everything after a `#` are
    ignored. warn(message), when given, hears of ports that look like a slot count."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read hostfile: {e}") from None
    hosts = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        host = parse_line(text, f"{path}:{number}")
        # Before it followed MXNet, Tally read `node:2` as 2 slots; such a file would now
        # send ssh to port 2 and fail only at connection time, with a less helpful message.
        if warn and host.port is not None and host.port < 1024 and host.port != 22:
            warn(f"{host.where}: {text!r} means ssh port {host.port} (as in MXNet's launcher); "
                 f"for {host.port} slots write `{host.name} slots={host.port}`")
        hosts.append(host)
    if not hosts:
        raise UsageError(f"{path}: no hosts; a line is {FORMS}")
    return hosts


def with_default_port(hosts, port):
    """hosts, with `port` (--ssh-port) for each line that gives none."""
    return [host._replace(port=host.port or port) for host in hosts]


def common_ssh_port(hosts):
    """The ssh port every host shares, for mpirun; None for ssh's default.

    mpirun reaches hosts with one set of ssh options for all of them (--mca plm_rsh_args),
    so a port cannot differ by host: rather than reach some hosts on the wrong port, the
    launcher refuses such a file.
    """
    ports = {}
    for host in hosts:
        ports.setdefault(host.port, host)
    if len(ports) > 1:
        named = ", ".join(f"{h.where or h.name}: {p or 'none (ssh default)'}"
                          for p, h in ports.items())
        raise UsageError(f"--launcher mpi needs one ssh port for every host, since mpirun "
                         f"takes one for all of them; the hostfile has {named}. Give every "
                         f"line the same port, or use --launcher ssh")
    return next(iter(ports))


def refuse_ports(hosts):
    """A UsageError for the first line with an ssh port, which --launcher slurm cannot use:
    srun, not ssh, starts the processes. Refused rather than ignored, since a file that
    meant `node:2` as 2 slots would otherwise place the job differently without a word."""
    for host in hosts:
        if host.port is not None:
            raise UsageError(f"{host.where}: {host.name}:{host.port} gives an ssh port, which "
                             f"means nothing to --launcher slurm (srun starts the processes); "
                             f"write `{host.name}` or `{host.name} slots=N`")
