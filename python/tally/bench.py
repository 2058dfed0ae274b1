"""Push/pull from Python against the same from C++, in one run (docs/python.md, "Benchmark").

    PYTHONPATH=build/python /usr/bin/python3 -m tally.bench --tally build/bin/tally

Measures pushpull of ResNet-50's 161 arrays (tally.resnet50_key_sizes()), fp32 and fp16,
one worker and one server, over loopback TCP, in three jobs run one after the other:
  C++     `tally bench ps --json` (its roles are threads of one process); the figures of
          its cases SECURITY-1w1s-resnet50-pushpull-fp32 and -fp16.
  Python  this module as the worker: it pushpulls each key from Python, in key order with
          priority -key as `tally bench ps` does, then waits for all; the median of --iters
          steps after two of warm-up. Twice:
            threads  the scheduler and the server are threads of the worker's process
                     (_tally.RoleThreads), the shape of `tally bench ps`, so that the ratio
                     is Python's own cost: the goal, at least 0.95x C++;
            launch   a real job started by tools/launch.py --launcher local, every role a
                     process running this module (cases ending -launch).
The three alternate --rounds times and each figure is the median over the rounds.
Bandwidth is bytes moved per second, the pushed and the pulled bytes (2 x the set's size),
as `tally bench ps` counts it.
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

SETS = (("fp32", np.float32), ("fp16", np.float16))
SHAPE_NOTES = {"threads": "scheduler and server threads of the worker's process, as in tally bench ps",
               "launch": "every role a process, started by tools/launch.py"}


def page_faults():
    """This process's page faults so far, every thread's (minor and major)."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_minflt + u.ru_majflt


def worker(args):
    """One worker's part of the Python job; worker 0 writes the medians to args.out."""
    import tally
    sizes = tally.resnet50_key_sizes()
    grads, weights = [], []
    for _, dtype in SETS:
        grads += [np.zeros(n, dtype) for n in sizes]
        weights += [np.zeros(n, dtype) for n in sizes]
    medians, faults = {}, {}
    roles = tally._tally.RoleThreads() if args.roles_in_threads else None
    with tally.kv.create("dist_sync") as kv:
        kv.init(list(range(len(weights))), weights)
        for s, (name, _) in enumerate(SETS):
            keys = range(s * len(sizes), (s + 1) * len(sizes))
            times = []
            for i in range(args.iters + 2):
                if i == 2:
                    faults0 = page_faults()
                t0 = time.perf_counter()
                for k in keys:
                    kv.pushpull(k, grads[k], out=weights[k], priority=-k, wait=False)
                kv.wait_all()
                if i >= 2:
                    times.append(time.perf_counter() - t0)
            medians[name] = sorted(times)[len(times) // 2]
            faults[name] = (page_faults() - faults0) / args.iters
        if kv.rank == 0:
            with open(args.out, "w") as f:
                json.dump({"elements": int(sum(sizes)), "seconds": medians, "faults": faults}, f)
    if roles is not None:
        roles.join()


def cpp_figures(args):
    """{set: GB/s} from `tally bench ps` (one worker, one server)."""
    cmd = [args.tally, "bench", "ps", "--json", "--security", args.security, "--sizes", "4K",
           "--iters", str(args.iters)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("tally.bench: %s failed (%d):\n%s" % (" ".join(cmd), run.returncode, run.stderr[-4000:]))
    out = {}
    for line in run.stdout.splitlines():
        row = json.loads(line)
        for name, _ in SETS:
            if row["case"] == "%s-1w1s-resnet50-pushpull-%s" % (args.security, name):
                out[name] = row["value"]
    if len(out) != len(SETS):
        sys.exit("tally.bench: `tally bench ps` printed no resnet50-pushpull cases:\n" + run.stdout)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_figures(args, shape):
    """{set: GB/s} from a Python job of one worker and one server, of `shape`:
    threads  the scheduler and the server are threads of the worker's process, as in
             `tally bench ps` (so the two differ by Python alone);
    launch   every role a process of its own, started by tools/launch.py."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "python.json")
        bench = [sys.executable, "-m", "tally.bench", "--worker", "--iters", str(args.iters), "--out", out]
        if shape == "threads":
            env.update(DMLC_ROLE="worker", DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
                       DMLC_NUM_WORKER="1", DMLC_NUM_SERVER="1", TALLY_RANK="0")
            if args.security == "plain":
                env["TALLY_PLAIN"] = "1"
            else:
                env["TALLY_JOB_SECRET"] = os.urandom(32).hex()
            cmd = bench + ["--roles-in-threads"]
        else:
            cmd = [sys.executable, args.launch, "-n", "1", "-s", "1", "--launcher", "local"]
            cmd += ["--plain"] if args.security == "plain" else []
            cmd += ["--"] + bench
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(out):
            sys.exit("tally.bench: the Python job (%s) failed (%d):\n%s"
                     % (shape, run.returncode, (run.stdout + run.stderr)[-4000:]))
        with open(out) as f:
            result = json.load(f)
    gbps = {name: 2.0 * np.dtype(dtype).itemsize * result["elements"] / result["seconds"][name] / 1e9
            for name, dtype in SETS}
    return gbps, result["faults"]


def main():
    p = argparse.ArgumentParser(prog="python3 -m tally.bench", description=__doc__.split("\n")[0])
    p.add_argument("--tally", default="build/bin/tally", help="the tally executable (default: %(default)s)")
    p.add_argument("--launch", help="tools/launch.py (default: beside the tally executable's build tree)")
    p.add_argument("--security", choices=("plain", "secure"), default="plain",
                   help="the jobs unencrypted (--plain) or authenticated and encrypted (default: %(default)s)")
    p.add_argument("--iters", type=int, default=20, help="timed steps of each set (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3,
                   help="C++ then Python, this many times; the medians are reported (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON object per line and measurement")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--roles-in-threads", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if args.iters < 1 or args.rounds < 1:
        p.error("--iters and --rounds must be positive")
    if not os.access(args.tally, os.X_OK):
        p.error("--tally %s is not an executable (build it with tools/build.sh)" % args.tally)
    if args.launch is None:
        source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.tally))))
        args.launch = os.path.join(source, "tools", "launch.py")
    if not os.path.exists(args.launch):
        p.error("--launch %s does not exist (pass tools/launch.py)" % args.launch)
    # Rounds alternate the three jobs, and each figure is the median over the rounds, so that
    # a neighbour's load on a shared machine weighs on every side alike.
    shapes = ("threads", "launch")
    rounds, fault_rounds = [], []
    for _ in range(args.rounds):
        figures = {shape: python_figures(args, shape) for shape in shapes}
        rounds.append(dict(cpp=cpp_figures(args), **{shape: figures[shape][0] for shape in shapes}))
        fault_rounds.append({shape: figures[shape][1] for shape in shapes})
    median = {side: {name: float(np.median([r[side][name] for r in rounds])) for name, _ in SETS}
              for side in ("cpp",) + shapes}
    faults = {shape: {name: float(np.median([r[shape][name] for r in fault_rounds])) for name, _ in SETS}
              for shape in shapes}
    if not args.json:
        print("%-44s %11s %11s %7s   (medians of %d rounds)" % ("case", "python", "c++", "ratio", args.rounds))
    for shape in shapes:
        for name, _ in SETS:
            case = "%s-1w1s-resnet50-pushpull-%s%s" % (args.security, name, "" if shape == "threads" else "-launch")
            py, cpp = median[shape][name], median["cpp"][name]
            if args.json:
                print(json.dumps({"bench": "python-ps", "case": case, "value": round(py, 4), "unit": "GB/s",
                                  "peer": round(cpp, 4), "peer_name": "tally bench ps (C++), same run",
                                  "ratio": round(py / cpp, 3),
                                  "note": "medians of %d rounds; %s; goal: ratio >= 0.95"
                                          % (args.rounds, SHAPE_NOTES[shape])}))
            else:
                print("%-44s %6.3f GB/s %6.3f GB/s %6.3f" % (case, py, cpp, py / cpp))
    for shape in shapes:
        for name, _ in SETS:
            case = "%s-1w1s-resnet50-page-faults-per-step-%s%s" % (args.security, name,
                                                                   "" if shape == "threads" else "-launch")
            value = faults[shape][name]
            if args.json:
                print(json.dumps({"bench": "python-ps", "case": case, "value": round(value, 1), "unit": "faults",
                                  "peer": 200, "peer_name": "goal", "ratio": round(200 / max(value, 1e-9), 3),
                                  "note": "medians of %d rounds; the worker process's, warm-up excluded; %s"
                                          % (args.rounds, SHAPE_NOTES[shape])}))
            else:
                print("%-44s %8.1f faults per step (goal <= 200)" % (case, value))

if __name__ == "__main__":
    main()
