"""An sshd on a free port of 127.0.0.1 for the ssh launcher tests.

It runs from a temporary directory with its own host key and accepts one key, made
here, for the user running the tests; `ssh_opts` are the client options that use it, with
a known_hosts file that holds the host key under both names the tests use (127.0.0.1 and
localhost, on its port), so that ssh checks the host as it would any other. Its sessions
get a TMPDIR of their own (`remote_tmp`), where the remote shells make the secret's files.
"""

import os
import socket
import subprocess
import tempfile
import time

SSHD = "/usr/sbin/sshd"


class LocalSshd:
    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="tally-sshd-")
        self.process = None
        self.port = None
        self.key = os.path.join(self.dir.name, "user_key")
        self.known_hosts = os.path.join(self.dir.name, "known_hosts")
        self.remote_tmp = os.path.join(self.dir.name, "remote-tmp")

    def client_opts(self, known_hosts):
        """Client options for this sshd with `known_hosts` as the user's known hosts file."""
        return f"-i {self.key} -o UserKnownHostsFile={known_hosts} -o LogLevel=ERROR"

    @property
    def ssh_opts(self):
        return self.client_opts(self.known_hosts)

    def known_hosts_lines(self, key_file="host_key.pub"):
        """known_hosts lines naming `key_file` (of this directory) the key of 127.0.0.1 and
        localhost on this sshd's port."""
        with open(os.path.join(self.dir.name, key_file)) as f:
            key = " ".join(f.read().split()[:2])
        return "".join(f"[{name}]:{self.port} {key}\n" for name in ("127.0.0.1", "localhost"))

    def start(self):
        """Starts sshd and waits until a login works; returns None or why it failed."""
        if not os.path.exists(SSHD):
            return f"{SSHD} is not installed (Debian package openssh-server)"
        d = self.dir.name
        for name in ("host_key", "user_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            os.path.join(d, name)], check=True)
        with open(self.key + ".pub") as src, open(os.path.join(d, "authorized_keys"), "w") as dst:
            dst.write(src.read())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        with open(self.known_hosts, "w") as f:
            f.write(self.known_hosts_lines())
        config = os.path.join(d, "sshd_config")
        with open(config, "w") as f:
            f.write(f"Port {self.port}\nListenAddress 127.0.0.1\n"
                    f"HostKey {d}/host_key\nPidFile {d}/sshd.pid\n"
                    f"AuthorizedKeysFile {d}/authorized_keys\n"
                    "PermitRootLogin yes\nUsePAM no\nStrictModes no\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "MaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n"
                    f"SetEnv TMPDIR={self.remote_tmp}\n")
        os.makedirs(self.remote_tmp)
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation
        log = open(os.path.join(d, "sshd.log"), "w")
        self.process = subprocess.Popen([SSHD, "-f", config, "-D", "-e"], stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            probe = subprocess.run(["ssh", "-o", "BatchMode=yes", "-p", str(self.port)]
                                   + self.ssh_opts.split()
                                   + ["127.0.0.1", "true"], stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True)
            if probe.returncode == 0:
                return None
            time.sleep(0.2)
        with open(os.path.join(d, "sshd.log")) as f:
            why = f.read().strip() or "no login within 10 s"
        self.stop()
        return f"sshd did not start: {why}"

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.dir.cleanup()
