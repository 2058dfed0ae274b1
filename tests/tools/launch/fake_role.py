#!/usr/bin/env python3
"""A stand-in for the training binary in the launcher tests.

It checks the variables the launcher must give every role, MXNet's DMLC_TASK_ID,
DMLC_WORKER_ID, DMLC_SERVER_ID, DMLC_NUM_ATTEMPT and DMLC_JOB_CLUSTER included (exit 2
naming the first bad one), prints them on one line, and then does what FAKE_ROLE_PLAN
says for its role:

    FAKE_ROLE_PLAN="worker1=exit3:0.5,worker=exit0,*=grandchild"

Entries are `who=action`; `who` is `worker1` (role and rank), `worker` (role) or `*`,
the most specific entry wins, and with no entry the process exits 0. Actions:
    exitN[:SECONDS]  wait SECONDS (default 0), then exit with status N
    exitafter:N:A+B  exit with status N once FAKE_STATE_DIR/A and B exist
    sleep            sleep until killed
    grandchild       start a child that sleeps, then sleep until killed
    ignoreterm       ignore SIGTERM, then sleep until killed
    savestop         sleep; on SIGTERM exit with TALLY_STOPPED_STATUS, as `tally train` does
                     after a stop whose checkpoint it saved
    stop             stop itself with SIGSTOP; once continued, sleep until killed
    once:ACTION      ACTION the first time this role and rank runs, exit 0 after that
                     (a restarted job); a file under FAKE_STATE_DIR remembers the runs
    leave[:SECONDS]  wait SECONDS, say `worker R left the job` as `tally train --elastic` does
                     after its SIGTERM, touch FAKE_STATE_DIR/left-R.N (its rank's Nth leave)
                     and exit 0
    leaveafter:A+B   leave once FAKE_STATE_DIR/A and B exist
    waitfile:NAME[:SECONDS]  wait until FAKE_STATE_DIR/NAME exists, then SECONDS, then exit 0
    leaveonterm      sleep; on SIGTERM say `worker R left the job` and exit 0, as
                     `tally train --elastic`'s workers but 0 do
    termline[:SECONDS]  (the scheduler) sleep; on SIGTERM say (on stdout) what `tally
                     train`'s scheduler says, wait SECONDS and exit 0
    announce:R[:SECONDS]  (the scheduler) wait until a joiner of worker R has started, say
                     the scheduler's line for a decided join, touch FAKE_STATE_DIR/joined-R,
                     wait SECONDS, exit 0
With FAKE_STATE_DIR set, savestop, leaveonterm and termline touch FAKE_STATE_DIR/ready-<who>
(`ready-worker0`) once their SIGTERM handler is in place.
A process with TALLY_JOIN=1 (a joiner, --max-workers) touches FAKE_STATE_DIR/joining-R and
takes the entry `join<who>` before the others (`joinworker1=...`, `joinworker=...`).
FAKE_PRINT_VARS="A,B" also prints those variables, one `var NAME=VALUE` line each.
FAKE_SECRET_REPORT=1 prints how the job's secret reached the process (secret_report).
"""

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time

SLEEP_SECONDS = 600  # "until killed", bounded so a broken test cannot leave it forever


def fail(message):
    print(f"fake_role: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def integer(name, low, high):
    value = os.environ.get(name, "")
    if not value.isdigit() or not low <= int(value) <= high:
        fail(f"{name}={value!r} is not an integer in [{low}, {high}]")
    return int(value)


def checked_env():
    role = os.environ.get("DMLC_ROLE")
    if role not in ("scheduler", "server", "worker"):
        fail(f"DMLC_ROLE={role!r}")
    workers = integer("DMLC_NUM_WORKER", 1, 1 << 16)
    servers = integer("DMLC_NUM_SERVER", 1, 1 << 16)
    count = {"scheduler": 1, "server": servers, "worker": workers}[role]
    rank = integer("TALLY_RANK", 0, count - 1)
    port = integer("DMLC_PS_ROOT_PORT", 1, 65535)
    for name in ("DMLC_PS_ROOT_URI", "DMLC_NODE_HOST"):
        if not os.environ.get(name):
            fail(f"{name} is empty")
    check_task_ids(role, rank, workers, servers)
    if os.environ.get("DMLC_JOB_CLUSTER") not in ("local", "ssh", "mpi", "slurm"):
        fail(f"DMLC_JOB_CLUSTER={os.environ.get('DMLC_JOB_CLUSTER')!r}")
    integer("DMLC_NUM_ATTEMPT", 0, 1 << 16)
    return role, rank, workers, servers, port


def check_task_ids(role, rank, workers, servers):
    """dmlc-tracker's numbering: workers, then servers; the scheduler after them."""
    task = {"worker": rank, "server": workers + rank, "scheduler": workers + servers}[role]
    if integer("DMLC_TASK_ID", 0, workers + servers) != task:
        fail(f"DMLC_TASK_ID={os.environ['DMLC_TASK_ID']} for {role} {rank}, not {task}")
    for own, name in (("worker", "DMLC_WORKER_ID"), ("server", "DMLC_SERVER_ID")):
        if role == own and integer(name, 0, rank) != rank:
            fail(f"{name}={os.environ[name]} for {role} {rank}")
        if role != own and name in os.environ:
            fail(f"{name} is set for the {role}")


def secret_report():
    """One line: `secret file=PATH mode=0600 dir_mode=0700 regular=True mine=True
    digest=D inline=False`, where D is a digest of the 64 hex digits the file holds (equal
    in every process of one job; `none` if the file holds something else) and inline says
    whether TALLY_JOB_SECRET is set; `secret file=None inline=...` without a file."""
    path = os.environ.get("TALLY_JOB_SECRET_FILE")
    inline = "TALLY_JOB_SECRET" in os.environ
    if path is None:
        return f"secret file=None inline={inline}"
    st, parent = os.lstat(path), os.lstat(os.path.dirname(path))
    with open(path) as f:
        text = f.read().strip()
    hexdigits = len(text) == 64 and all(c in "0123456789abcdef" for c in text)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12] if hexdigits else "none"
    mine = st.st_uid == parent.st_uid == os.geteuid()
    return (f"secret file={path} mode={stat.S_IMODE(st.st_mode):04o} "
            f"dir_mode={stat.S_IMODE(parent.st_mode):04o} regular={stat.S_ISREG(st.st_mode)} "
            f"mine={mine} digest={digest} inline={inline}")


def action_for(role, rank, plan, joiner=False):
    actions = {}
    for entry in filter(None, plan.split(",")):
        who, _, action = entry.partition("=")
        actions[who] = action
    own = (f"join{role}{rank}", f"join{role}") if joiner else ()
    for who in own + (f"{role}{rank}", role, "*"):
        if who in actions:
            return actions[who]
    return "exit0"


def state_path(name):
    return os.path.join(os.environ["FAKE_STATE_DIR"], name)


def wait_for_file(name):
    deadline = time.monotonic() + SLEEP_SECONDS
    while not os.path.exists(state_path(name)):
        if time.monotonic() > deadline:
            fail(f"{name} did not appear in {SLEEP_SECONDS} s")
        time.sleep(0.05)


def ready(who):
    """Says that who's SIGTERM handler is in place (FAKE_STATE_DIR/ready-<who>)."""
    if os.environ.get("FAKE_STATE_DIR"):
        open(state_path(f"ready-{who}"), "w").close()


def elastic_action(rank, action):
    """Does the --elastic actions (leave, waitfile, announce): True if `action` was one."""
    kind, _, rest = action.partition(":")
    if kind == "leaveafter":
        for name in rest.split("+"):
            wait_for_file(name)
        kind, rest = "leave", ""
    if kind == "leave":
        time.sleep(float(rest or 0))
        leaves = len([n for n in os.listdir(os.environ["FAKE_STATE_DIR"]) if n.startswith(f"left-{rank}.")])
        open(state_path(f"left-{rank}.{leaves + 1}"), "w").close()
        print(f"fake_role: worker {rank} left the job", flush=True)
    elif kind == "waitfile":
        name, _, delay = rest.partition(":")
        wait_for_file(name)
        time.sleep(float(delay or 0))
    elif kind in ("leaveonterm", "termline"):
        def on_term(*_):
            if kind == "termline":
                print("tally: SIGTERM: serving on until the workers have saved their checkpoint and finished",
                      flush=True)
                time.sleep(float(rest or 0))
            else:
                print(f"fake_role: worker {rank} left the job", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        ready(f"{os.environ['DMLC_ROLE']}{rank}")
        time.sleep(SLEEP_SECONDS)
    elif kind == "announce":
        joiner, _, delay = rest.partition(":")
        wait_for_file(f"joining-{joiner}")
        print(f"I1129 00:00:00.000000 1 scheduler.cc:392] membership 1: worker {joiner} joined "
              f"(127.0.0.1:1, pid 1); from step 7 the live workers are ...", file=sys.stderr, flush=True)
        open(state_path(f"joined-{joiner}"), "w").close()
        time.sleep(float(delay or 0))
    else:
        return False
    return True


def main():
    role, rank, workers, servers, port = checked_env()
    print(f"role={role} rank={rank} root={os.environ['DMLC_PS_ROOT_URI']}:{port} "
          f"workers={workers} servers={servers} host={os.environ['DMLC_NODE_HOST']} "
          f"cwd={os.getcwd()} task={os.environ['DMLC_TASK_ID']} "
          f"attempt={os.environ['DMLC_NUM_ATTEMPT']} cluster={os.environ['DMLC_JOB_CLUSTER']}",
          flush=True)
    for name in filter(None, os.environ.get("FAKE_PRINT_VARS", "").split(",")):
        print(f"var {name}={os.environ.get(name)}", flush=True)
    if os.environ.get("FAKE_SECRET_REPORT"):
        print(secret_report(), flush=True)
    print(f"{role} {rank} on stderr", file=sys.stderr, flush=True)
    joiner = os.environ.get("TALLY_JOIN") == "1"
    if joiner:
        open(state_path(f"joining-{rank}"), "w").close()
    action = action_for(role, rank, os.environ.get("FAKE_ROLE_PLAN", ""), joiner)
    if action.startswith("once:"):
        marker = os.path.join(os.environ["FAKE_STATE_DIR"], f"{role}{rank}.ran")
        action = "exit0" if os.path.exists(marker) else action[5:]
        open(marker, "w").close()
    if elastic_action(rank, action):
        sys.exit(0)
    if action.startswith("exitafter:"):
        status, _, names = action[len("exitafter:"):].partition(":")
        for name in names.split("+"):
            wait_for_file(name)
        action = "exit" + status
    if action.startswith("exit"):
        status, _, delay = action[4:].partition(":")
        time.sleep(float(delay or 0))
        if int(status):  # a last line that says why, as a failing program's should
            print(f"fake_role: exiting with status {status} as planned", file=sys.stderr, flush=True)
        sys.exit(int(status))
    if action == "grandchild":
        subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({SLEEP_SECONDS})"])
    elif action == "ignoreterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif action == "savestop":
        status = int(os.environ["TALLY_STOPPED_STATUS"])
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(status))
        ready(f"{role}{rank}")
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action != "sleep":
        fail(f"unknown action {action!r}")
    time.sleep(SLEEP_SECONDS)


if __name__ == "__main__":
    main()
