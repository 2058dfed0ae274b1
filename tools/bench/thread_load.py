#!/usr/bin/python3
"""Runs a job and says how much CPU each of its threads spends per training step.

    tools/bench/thread_load.py --step-ms 35.3 -- python3 tools/launch.py -n 1 -s 2 \\
        build/bin/tally bench replay --batch-size 256 --img-per-s 300 --wire fp16 --steps 40

A step can go no faster than the busiest single thread of any process that every step's
bytes cross (a server's serving thread, a worker's sending thread): a thread that needs
40 ms of CPU per step holds a 35 ms GPU step to 35/40 of its speed whatever the number of
cores. Thread CPU time hardly depends on how many cores there are, so this bound measured
on a small machine at a low rate says what a many-core host will meet at full speed.

The job's output passes through. Progress is read from it: the step number of lines like
bench replay's "step 12:" or the Speedometer's "Batch [40]" (--progress). CPU times are
read from /proc for every process of the job whose executable is tally's, between the
first progress line after --skip steps and the last one. Prints a table, busiest threads
first, and with --json writes the same figures.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def job_processes(root_pid, exe_prefix):
    """{pid: (role, rank)} of root_pid's descendants whose executable name starts with exe_prefix."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = {}, [root_pid]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if exe.startswith(exe_prefix):
            found[pid] = (env.get(b"DMLC_ROLE", b"?").decode(), env.get(b"TALLY_RANK", b"").decode())
    return found


def thread_times(processes):
    """{(pid, tid): (thread name, CPU ms so far)} for every thread of the processes."""
    times = {}
    for pid in processes:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            times[(pid, int(tid))] = (name, (int(fields[11]) + int(fields[12])) * 1000.0 / CLOCK_TICKS)
    return times


def report(first, last, steps, processes, step_ms, top):
    rows = []
    for key, (name, ms) in last.items():
        spent = ms - first.get(key, (name, 0.0))[1]
        if spent > 0:
            rows.append((spent / steps, key, name))
    rows.sort(reverse=True)
    per_process = {}
    for per_step, (pid, _), _ in rows:
        per_process[pid] = per_process.get(pid, 0.0) + per_step
    out = {"steps": steps, "threads": [], "processes": []}
    print(f"thread_load: CPU per step over {steps} steps, busiest threads first")
    for per_step, (pid, tid), name in rows[:top]:
        role, rank = processes.get(pid, ("?", ""))
        print(f"  {role + rank:>10} pid {pid:>7} {name:<16} {per_step:8.2f} ms")
        out["threads"].append({"role": role, "rank": rank, "pid": pid, "tid": tid, "name": name, "ms_per_step": per_step})
    for pid, total in sorted(per_process.items(), key=lambda kv: -kv[1]):
        role, rank = processes.get(pid, ("?", ""))
        print(f"  {role + rank:>10} pid {pid:>7} all threads      {total:8.2f} ms")
        out["processes"].append({"role": role, "rank": rank, "pid": pid, "ms_per_step": total})
    if rows and step_ms:
        busiest = rows[0][0]
        bound = min(1.0, step_ms / busiest)
        print(f"  busiest thread {busiest:.1f} ms a step against a {step_ms:g} ms step: "
              f"at most {bound:.2f} of that speed")
        out.update(step_ms=step_ms, busiest_ms=busiest, bound=bound)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--progress", default=r"\bstep (\d+):|Batch \[(?:\d+-)?(\d+)\]",
                    help="a regex whose first matching group is the job's step number")
    ap.add_argument("--skip", type=int, default=3, help="steps to leave out at the start (default 3)")
    ap.add_argument("--step-ms", type=float, help="the step time to compare the busiest thread with")
    ap.add_argument("--exe", default="tally", help="count processes whose executable starts with this")
    ap.add_argument("--top", type=int, default=12, help="threads to print")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command to run (put it after --)")
    progress = re.compile(args.progress)
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = last = None
    processes = {}
    for line in job.stdout:
        sys.stdout.write(line)
        m = progress.search(line)
        if not m:
            continue
        step = int(next(g for g in m.groups() if g is not None))
        if step < args.skip:
            continue
        processes.update(job_processes(job.pid, args.exe))
        sample = (step, thread_times(processes), time.monotonic())
        if first is None:
            first = sample
        else:
            last = sample
    code = job.wait()
    if first is None or last is None or last[0] <= first[0]:
        print(f"thread_load: fewer than two progress lines after step {args.skip}: nothing measured", file=sys.stderr)
        return code or 1
    out = report(first[1], last[1], last[0] - first[0], processes, args.step_ms, args.top)
    out["wall_ms_per_step"] = (last[2] - first[2]) * 1000.0 / (last[0] - first[0])
    print(f"  wall time {out['wall_ms_per_step']:.1f} ms a step")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
