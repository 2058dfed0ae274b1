"""Where the job's secret lies on the launching machine: a file of mode 600 in a directory of
mode 700 that only the launcher's user can enter, named to the local processes by
TALLY_JOB_SECRET_FILE. The secret stays out of every environment, which other programs pass
on (a node's own children, a crash reporter's dump) and root's tools show.

    with SecretDir() as secrets_dir:
        path = secrets_dir.write(attempt, secret)   # one file per attempt, the last removed
        ... start the processes with TALLY_JOB_SECRET_FILE=path ...
    # the directory and its files are gone

A launcher killed by SIGKILL leaves the directory behind, readable by its user alone; a
secret is drawn for each attempt of each job, so it opens nothing once its job has ended.
"""

import os
import shutil
import stat
import tempfile


class SecretDir:
    """A private directory, made at the first write, holding the current attempt's secret
    file; leaving the `with` block removes it."""

    def __init__(self):
        self.path = None
        self.current = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def make(self):
        # mkdtemp makes a new directory of mode 700 or fails; it never reuses one that exists.
        self.path = tempfile.mkdtemp(prefix="tally-job-")
        st = os.lstat(self.path)
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o700:
            self.remove()
            raise OSError(f"{self.path}: not a private directory (owner {st.st_uid}, mode "
                          f"{stat.S_IMODE(st.st_mode):03o})")

    def write(self, attempt, secret):
        """Writes `secret` (a line) to a new file of mode 600 and returns its path; the
        previous attempt's file, whose processes have all ended, is removed."""
        if self.path is None:
            self.make()
        path = os.path.join(self.path, f"secret.attempt{attempt}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.fchmod(fd, 0o600)  # the umask may only take bits away; say it outright
            os.write(fd, (secret + "\n").encode())
        finally:
            os.close(fd)
        if self.current is not None:
            os.unlink(self.current)
        self.current = path
        return path

    def remove(self):
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = self.current = None
