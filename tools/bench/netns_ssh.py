#!/usr/bin/env python3
"""`ssh` for tools/launch.py's ssh launcher when the hosts are network namespaces of this
machine (tools/bench/netns.py): `ssh [-o OPT]... [-p PORT] HOST COMMAND` runs COMMAND with
`sh -c` in HOST's namespace, as a session leader (as sshd starts a remote shell, so that
$$ is its process group), with this process's stdin, stdout and stderr.

`tally bench scaling` puts a directory holding an `ssh` that runs this first on the
launcher's PATH, and names the namespaces in TALLY_NETNS_HOSTS: "ADDRESS=NAMESPACE,...".
"""

import os
import sys


def parse(argv):
    """(host, command) from ssh's arguments."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-o", "-p", "-i", "-l", "-F") else 1
    if i + 1 >= len(argv):
        raise SystemExit(f"netns ssh: expected HOST COMMAND, got {argv}")
    return argv[i], " ".join(argv[i + 1:])


def main():
    host, command = parse(sys.argv[1:])
    hosts = dict(item.split("=", 1) for item in os.environ.get("TALLY_NETNS_HOSTS", "").split(",") if item)
    if host not in hosts:
        print(f"netns ssh: no namespace for host {host} (TALLY_NETNS_HOSTS)", file=sys.stderr)
        return 255
    os.execvp("ip", ["ip", "netns", "exec", hosts[host], "setsid", "--wait", "sh", "-c", command])


if __name__ == "__main__":
    sys.exit(main())
