"""The command line each launcher runs for one process of the job.

Every builder returns (argv, env): argv to run on the launching machine and the
variables to add to the launcher's own environment when running it.
"""

import re
import shlex

from .job import CREDENTIAL_VARS, SECRET_FILE_VAR, SECRET_VAR, UsageError

# The first line a remote process prints on stderr: the id of its process group on the
# remote host, then the directory of the secret's file when there is one. sshd starts the
# remote shell as a session leader, so $$ is that group's id and everything the command
# starts belongs to it; a second ssh kills the group (and, with SIGKILL, which leaves the
# shell no time to, removes the directory).
REMOTE_PGID_MARK = "TALLY_REMOTE_PGID="
# What the directory's name must look like for that ssh to remove it (REMOTE_SECRET_FILE).
REMOTE_SECRET_DIR = re.compile(r"^/[A-Za-z0-9._/-]*/tally-job\.[A-Za-z0-9]{10}$")

# How --dry-run shows the local launcher's secret file, which it does not write.
DRY_RUN_SECRET_FILE = "<secret file>"


def quote_env(env):
    return [f"{k}={v}" for k, v in env.items()]


def display(argv, env=None):
    """One shell line that does what running argv with env's additions would do; the job's
    secret and credentials show as <secret>."""
    shown = {k: ("<secret>" if k == SECRET_VAR or k in CREDENTIAL_VARS else v)
             for k, v in (env or {}).items()}
    prefix = " ".join(shlex.quote(item) for item in quote_env(shown)) + " " if shown else ""
    return prefix + shlex.join(argv)


def secret_env(proc):
    return {SECRET_VAR: proc.secret} if proc.secret else {}


def split_env(proc):
    """(public, secret): proc's variables that may go on a command line, and those that
    must not (the job's secret first, then credentials)."""
    public, secret = {}, secret_env(proc)
    for name, value in proc.env.items():
        (secret if name in CREDENTIAL_VARS else public)[name] = value
    return public, secret


def local(proc, command):
    """The process inherits the launcher's environment (less any secret of its own: see
    children.Child) plus the job's variables, and the path of the secret's file."""
    env = dict(proc.env)
    if proc.secret:
        env[SECRET_FILE_VAR] = proc.secret_file
    return list(command), env


def ssh_base(ssh_opts, ssh_port):
    """ssh with the client's own host-key checking: a host whose key is not in known_hosts,
    or differs from it, is refused before anything (the secret above all) is sent.
    --ssh-accept-new-host-keys adds StrictHostKeyChecking=accept-new to ssh_opts."""
    base = ["ssh", "-o", "BatchMode=yes"]
    if ssh_port:
        base += ["-p", str(ssh_port)]
    return base + list(ssh_opts)


# The remote shell's first steps when the job has a secret: a private directory (mktemp -d
# makes it mode 700), the secret's line from ssh's stdin into a file of mode 600 there, and
# the directory removed when the shell ends. The shell waits for the command rather than
# exec it, so that it is there to remove the file: `trap :` lets it outlive the SIGTERM,
# SIGINT or SIGHUP that stops the command's group (the command itself gets the signal as
# usual, since a caught signal is reset by exec) and end with the command's status. A
# SIGKILL from the launcher comes with the directory's removal (remote_kill); after a lost
# connection the file stays behind, readable by the user alone, holding a secret that dies
# with its job.
REMOTE_SECRET_FILE = (
    'd=$(mktemp -d "${TMPDIR:-/tmp}/tally-job.XXXXXXXXXX") || exit 125; '
    "trap 'rm -rf \"$d\"' EXIT; trap : HUP INT TERM; "
    f"IFS= read -r {SECRET_VAR} && "
    f"(umask 077 && printf '%s\\n' \"${SECRET_VAR}\" >\"$d/secret\") && "
    f"unset {SECRET_VAR} && ")


def ssh(proc, command, cwd, ssh_opts):
    """ssh to proc's host, on its port. The remote shell reads the job's secret and the
    credentials from its stdin, one line each (see ssh_stdin), so that they are on no
    command line; the secret goes on into a file (REMOTE_SECRET_FILE) that the command
    finds in TALLY_JOB_SECRET_FILE."""
    public, secret = split_env(proc)
    for name, value in secret.items():
        if "\n" in value:
            raise UsageError(f"{name} holds a newline; over ssh it travels as one line of "
                             f"ssh's stdin")
    prelude = REMOTE_SECRET_FILE if SECRET_VAR in secret else "trap : HUP INT TERM; "
    prelude += "".join(f"IFS= read -r {name} && export {name} && "
                       for name in secret if name != SECRET_VAR)
    secret_file = f'{SECRET_FILE_VAR}="$d/secret" ' if SECRET_VAR in secret else ""
    secret_dir = ' "$d"' if SECRET_VAR in secret else ""
    remote = (f"{prelude}echo {REMOTE_PGID_MARK}$${secret_dir} >&2 && cd {shlex.quote(cwd)} && env "
              + secret_file + " ".join(shlex.quote(item) for item in quote_env(public)) + " "
              + shlex.join(command))
    return ssh_base(ssh_opts, proc.ssh_port) + [proc.host, remote], {}


def ssh_stdin(proc):
    """What the launcher writes to ssh's stdin for ssh(): one line per secret value, in
    the order the remote shell reads them, or nothing."""
    _, secret = split_env(proc)
    return "".join(value + "\n" for value in secret.values()).encode() or None


def remote_kill(host, pgid, signal_name, ssh_opts, ssh_port, secret_dir=None):
    """ssh that signals the remote group; with SIGKILL, which the remote shell cannot
    outlive to clean up, it also removes the secret's directory (checked to be one that
    REMOTE_SECRET_FILE makes)."""
    command = f"kill -s {signal_name} -- -{int(pgid)}"
    if signal_name == "KILL" and secret_dir and REMOTE_SECRET_DIR.match(secret_dir):
        command += f"; rm -rf -- {shlex.quote(secret_dir)}"
    return ssh_base(ssh_opts, ssh_port) + [host, command]


def sync(host, src, dst, ssh_opts, ssh_port):
    """A pipeline (tar argv, ssh argv) that copies src's contents into dst on host."""
    pack = ["tar", "-C", src, "-cf", "-", "."]
    unpack = ssh_base(ssh_opts, ssh_port) + [
        host, f"mkdir -p {shlex.quote(dst)} && tar -C {shlex.quote(dst)} -xf -"]
    return pack, unpack


def mpi(proc, command, cwd, ssh_opts, ssh_port, as_root):
    """One mpirun per process, pinned to its host, so each rank's exit status, host and
    output stay its own (the launcher names the one that failed)."""
    argv = ["mpirun", "-n", "1", "--host", proc.host, "--oversubscribe", "--wdir", cwd]
    if as_root:
        argv.append("--allow-run-as-root")
    agent = ssh_base(ssh_opts, ssh_port)[1:]
    if ssh_opts or ssh_port:
        argv += ["--mca", "plm_rsh_args", shlex.join(agent)]
    public, secret = split_env(proc)
    for item in quote_env(public):
        argv += ["-x", item]
    for name in secret:  # by name: mpirun forwards the value from its own environment
        argv += ["-x", name]
    return argv + list(command), secret


def step_name(proc):
    """The name of proc's job step, `worker-1` (`worker-1-join2` for its rank's second joiner,
    so that a step still ending under the old name is never taken for it): how the launcher
    finds the step to signal."""
    return proc.name.replace(" ", "-") + (f"-join{proc.joins}" if proc.joins else "")


def slurm(proc, command, cwd):
    """srun for one task on proc's host; variables are named in --export and, since
    --export cannot quote a comma, values are also put in srun's own environment."""
    public, secret = split_env(proc)
    exports = [k if "," in v else f"{k}={v}" for k, v in public.items()]
    exports += list(secret)  # by name, the value in srun's environment
    # --overlap: each process is a job step of its own, and by default a step waits for
    # the CPUs that earlier steps hold; every process of the job must run at once.
    argv = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={proc.host}", f"--chdir={cwd}",
            "--overlap", f"--job-name={step_name(proc)}",
            "--export=" + ",".join(["ALL"] + exports)]
    return argv + list(command), {**{k: v for k, v in public.items() if "," in v}, **secret}
