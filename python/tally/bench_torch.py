"""tally.bench_torch: the step time of examples/text_classifier.py on 2 CPU workers, through
tally.torch's DDP hook and through torch's DDP over gloo, in the same run.

    PYTHONPATH=build/python /usr/bin/python3 -m tally.bench_torch [--steps 30] [--rounds 3]

    tally-hook  tools/launch.py -n 2 -s 1 --launcher local: 2 workers, 1 server, 1 scheduler,
                the gradients averaged by the server (tally.torch.allreduce_hook)
    gloo        2 processes, torch's DDP allreduce over gloo (the peer)

Each job times --steps steps after 5 warm-up ones; the figure is worker 0's mean step time.
The jobs alternate --rounds times and each figure is the median over the rounds, so that a
neighbour's load weighs on both alike. The goal: tally-hook within 10% of gloo (ratio <= 1.1).
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys

STEP_LINE = re.compile(r"worker 0: mode (\w+) step_ms ([0-9.]+)")


def source_dir():
    # build/python/tally/bench_torch.py -> the source tree holding build/ (tools/build.sh's layout)
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step_ms(output, what):
    m = STEP_LINE.search(output)
    if m is None:
        raise SystemExit("tally.bench_torch: the %s job printed no step time:\n%s" % (what, output[-3000:]))
    return float(m.group(2))


def run_tally(args, env):
    cmd = [sys.executable, args.launch, "-n", "2", "-s", "1", "--launcher", "local", "--",
           sys.executable, args.example, "--mode", "tally", "--steps", str(args.steps)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise SystemExit("tally.bench_torch: the tally job failed:\n%s" % (done.stdout + done.stderr)[-3000:])
    return step_ms(done.stdout + done.stderr, "tally")


def run_gloo(args, env):
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, args.example, "--mode", "gloo", "--steps", str(args.steps)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(env, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in (0, 1)]
    outputs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outputs)):
        if p.returncode != 0:
            raise SystemExit("tally.bench_torch: gloo rank %d failed:\n%s" % (r, out[-3000:]))
    return step_ms(outputs[0], "gloo")


def main():
    p = argparse.ArgumentParser(prog="python3 -m tally.bench_torch", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30, help="timed steps per job (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="jobs of each kind, alternating (default: %(default)s)")
    p.add_argument("--example", default=os.path.join(source_dir(), "examples", "text_classifier.py"))
    p.add_argument("--launch", default=os.path.join(source_dir(), "tools", "launch.py"))
    p.add_argument("--timeout", type=float, default=600, help="seconds per job (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON object per line and measurement")
    args = p.parse_args()
    if args.steps < 1 or args.rounds < 1:
        p.error("--steps and --rounds must be positive")
    for flag, path in (("--example", args.example), ("--launch", args.launch)):
        if not os.path.exists(path):
            p.error("%s %s does not exist" % (flag, path))
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=package_root, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")

    times = {"tally-hook": [], "gloo": []}
    for r in range(args.rounds):
        times["gloo"].append(run_gloo(args, env))
        times["tally-hook"].append(run_tally(args, env))
        print("round %d: tally-hook %.2f ms, gloo %.2f ms" % (r, times["tally-hook"][-1], times["gloo"][-1]),
              file=sys.stderr, flush=True)
    hook, gloo = statistics.median(times["tally-hook"]), statistics.median(times["gloo"])
    ratio = hook / gloo
    if args.json:
        print(json.dumps({"bench": "torch", "case": "text_classifier-2w1s-ddp-step", "value": round(hook, 3),
                          "unit": "ms", "peer": round(gloo, 3), "ratio": round(ratio, 3), "steps": args.steps,
                          "rounds": args.rounds, "rounds_ms": times}))
    else:
        print("%-34s %12s %12s %8s" % ("case", "tally-hook", "gloo", "ratio"))
        print("%-34s %9.2f ms %9.2f ms %7.3fx" % ("text_classifier 2 workers step", hook, gloo, ratio))
        print("goal: tally-hook within 10%% of gloo (ratio <= 1.10): %s" % ("met" if ratio <= 1.10 else "not met"))


if __name__ == "__main__":
    main()
