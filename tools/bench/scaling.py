#!/usr/bin/env python3
"""`tally bench scaling`: how a synchronous parameter-server job scales, measured with real
processes over shaped links and emulated GPUs.

Each configuration (N workers, S servers, the wire's dtype, overlap on or off) is one job
started by tools/launch.py's ssh launcher, every node in its own network namespace whose
link is shaped by `tc tbf` (tools/bench/netns.py; the launcher's ssh reaches a namespace
through tools/bench/netns_ssh.py). Each worker runs `tally bench replay`: ResNet-50's step
with its compute emulated by timed waits and its 161 arrays pushed and pulled through the
real kvstore. Link rate and compute speed are both divided by --scale, so that their ratio
is the real cluster's (default: 25 Gb/s links and 2,800 img/s per GPU) while this machine
keeps up. Scaling efficiency is the job's img/s over N times one worker's compute-only
img/s, the emulated compute run alone in the same run.

    tally bench scaling                          # N = 1, 2, 4, 8; S = N/2 and N; fp16, fp32; overlap on, off
    tally bench scaling --workers 8 --server-ratios 0.5 --wires fp16 --json
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402

HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPLAY = re.compile(r"REPLAY (\{.*\})")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tally bench scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--tally", required=True, help="the tally executable the jobs run")
    p.add_argument("--workers", default="1,2,4,8", help="worker counts N (default: 1,2,4,8)")
    p.add_argument("--server-ratios", default="0.5,1",
                   help="server counts as fractions of N, at least 1 (default: 0.5,1)")
    p.add_argument("--wires", default="fp16,fp32", help="wire dtypes: fp16, fp32, 2bit (pushes compressed as --gradient-compression 2bit, "
                   "answers fp16) (default: fp16,fp32)")
    p.add_argument("--overlap", default="on,off", help="overlap settings (default: on,off)")
    p.add_argument("--gbps", type=float, default=25.0, help="the real cluster's link rate (default: 25)")
    p.add_argument("--img-per-s", type=float, default=2800.0,
                   help="the real GPU's ResNet-50 training speed (default: 2800)")
    p.add_argument("--batch", type=int, default=256, help="batch per worker (default: 256)")
    p.add_argument("--scale", type=float, default=40.0,
                   help="divide link rate and compute speed by this (default: 40)")
    p.add_argument("--steps", type=int, default=5, help="measured steps per job (default: 5)")
    p.add_argument("--warmup", type=int, default=2, help="steps left out first (default: 2)")
    p.add_argument("--plain", action="store_true", help="jobs without authentication and encryption")
    p.add_argument("--server-gbs", type=float, default=2.0,
                   help="what `tally plan` is told a server sums and updates per second, GB of pushed "
                        "bytes (not scaled: the servers' CPUs are this machine's; default: 2)")
    p.add_argument("--credit-kb", type=int,
                   help="the send credit per connection (TALLY_SEND_CREDIT_KB); default: Tally's for N "
                        "workers divided by --scale (a queue's bytes scale with the link's rate), at least 1 MB")
    p.add_argument("--timeline", action="store_true", help="print every worker's step timeline")
    p.add_argument("--json", action="store_true", help="one JSON object per measurement")
    args = p.parse_args(argv)
    try:
        args.workers = [int(x) for x in args.workers.split(",")]
        args.server_ratios = [float(x) for x in args.server_ratios.split(",")]
    except ValueError as e:
        p.error(f"--workers / --server-ratios: {e}")
    args.wires = args.wires.split(",")
    args.overlap = [{"on": True, "off": False}.get(x) for x in args.overlap.split(",")]
    if any(w not in ("fp16", "fp32", "2bit") for w in args.wires):
        p.error("--wires: fp16, fp32 and/or 2bit (pushes 2-bit compressed, answers fp16)")
    if None in args.overlap:
        p.error("--overlap: on and/or off")
    if min(args.workers) < 1 or min(args.server_ratios) <= 0 or args.scale <= 0 or args.steps < 1:
        p.error("--workers, --server-ratios, --scale and --steps must be positive")
    return args


def configurations(args):
    seen = []
    for n in args.workers:
        for ratio in args.server_ratios:
            s = max(1, round(n * ratio))
            for wire in args.wires:
                for overlap in args.overlap:
                    if (n, s, wire, overlap) not in seen:
                        seen.append((n, s, wire, overlap))
    return seen


def replay_args(args, wire, overlap):
    return ["bench", "replay", "--batch-size", str(args.batch),
            "--img-per-s", repr(args.img_per_s / args.scale), "--wire", wire,
            "--steps", str(args.warmup + args.steps), f"--overlap={int(overlap)}"]


def step_times(replay):
    """The durations of a worker's measured steps (s), from its REPLAY record."""
    starts = [s[0] for s in replay["steps"]]
    return [(b - a) / 1e3 for a, b in zip(starts, starts[1:])]


def compute_only(args):
    """One worker's emulated compute alone: its median step (s)."""
    cmd = [args.tally] + replay_args(args, "fp16", False) + ["--no-comm"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    found = REPLAY.search(out.stdout)
    if out.returncode != 0 or not found:
        raise SystemExit(f"tally bench scaling: the compute-only replay failed:\n{out.stderr}")
    return statistics.median(step_times(json.loads(found.group(1)))[args.warmup:])


def write_hosts(path, addresses):
    with open(path, "w") as f:
        f.write("".join(a + "\n" for a in addresses))


def run_job(args, n, s, wire, overlap, workdir):
    """The workers' REPLAY records of one job over a fresh fabric."""
    nodes = [f"w{i}" for i in range(n)] + [f"s{i}" for i in range(s)]
    mbit = max(1, round(args.gbps * 1000 / args.scale))
    with netns.Fabric(nodes, mbit) as fabric:
        whosts, shosts = os.path.join(workdir, "workers"), os.path.join(workdir, "servers")
        write_hosts(whosts, [fabric.address(f"w{i}") for i in range(n)])
        write_hosts(shosts, [fabric.address(f"s{i}") for i in range(s)])
        env = dict(os.environ, PATH=workdir + os.pathsep + os.environ.get("PATH", ""),
                   TALLY_NETNS_HOSTS=",".join(f"{a}={ns}" for a, ns in fabric.hosts().items()))
        cmd = [sys.executable, os.path.join(HOME, "tools", "launch.py"), "-n", str(n), "-s", str(s),
               "--launcher", "ssh", "-H", whosts, "--server-hostfile", shosts]
        cmd += ["--plain"] if args.plain else []
        # Tally's default for N workers (net/send_queue.h) scaled with the link, but not
        # below its floor of 1 MB: the acknowledgements' delay, which the credit must cover,
        # is this machine's and does not scale.
        credit_kb = args.credit_kb or max(1024, round(65536 / n / args.scale))
        cmd += ["--env", f"TALLY_SEND_CREDIT_KB:{credit_kb}"]
        cmd += ["--", args.tally] + replay_args(args, wire, overlap)
        timeout = 120 + 20 * (args.warmup + args.steps) * args.batch / (args.img_per_s / args.scale)
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    records = [json.loads(m.group(1)) for m in REPLAY.finditer(out.stdout)]
    if out.returncode != 0 or len(records) != n:
        raise SystemExit(f"tally bench scaling: the job of {n} workers and {s} servers failed "
                         f"(exit {out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return records


def summarise(args, records, reference):
    """The job's step (s, the median over measured steps of the slowest worker), img/s and
    efficiency; and the mean timeline of its workers' measured steps (ms)."""
    per_worker = [step_times(r)[args.warmup:] for r in records]
    steps = [max(ws) for ws in zip(*per_worker)]
    step = statistics.median(steps)
    n = len(records)
    timeline = {}
    for i, name in enumerate(("fwd", "fwd_wait", "bwd", "end_wait"), start=1):
        timeline[name] = statistics.mean(st[i] for r in records for st in r["steps"][args.warmup:-1])
    return {"step_s": step, "img_s": n * args.batch / step, "efficiency": reference / step,
            "timeline": timeline}


def predict(args, n, s, wire, overlap):
    """`tally plan`'s prediction for the job as run here (scaled links and compute)."""
    cmd = [args.tally, "plan", "--json", "--workers", str(n), "--servers", str(s),
           "--gbps", repr(args.gbps / args.scale), "--img-per-s", repr(args.img_per_s / args.scale),
           "--wire", wire, "--batch", str(args.batch), f"--overlap={int(overlap)}",
           "--server-gbs", repr(args.server_gbs),
           # tc tbf counts each packet's IP bytes and its 14-byte Ethernet header; veth's MTU is 1500.
           "--mtu", "1500", "--frame-bytes", "14"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"tally bench scaling: `{' '.join(cmd)}` failed: {out.stderr}")
    return json.loads(out.stdout)


def row(name, value, unit, peer, peer_name, note, lower=False):
    ratio = (peer / value if lower else value / peer) if peer else None
    return {"bench": "scaling", "case": name, "value": round(value, 4), "unit": unit,
            "limit": round(peer, 4), "limit_name": peer_name, "ratio": round(ratio, 4), "note": note}


def print_rows(rows, as_json):
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"{'case':<34} {'tally':>10} {'unit':<8} {'limit':>10} {'ratio':>7}  limit / note")
    for r in rows:
        print(f"{r['case']:<34} {r['value']:>10.4g} {r['unit']:<8} {r['limit']:>10.4g} "
              f"{r['ratio']:>7.3f}  {r['limit_name']}; {r['note']}")


def main(argv):
    args = parse_args(argv)
    try:
        netns.check()
    except netns.FabricError as e:
        print(f"tally bench scaling: {e}", file=sys.stderr)
        return 2
    configs = configurations(args)
    step_s = args.batch / (args.img_per_s / args.scale)
    print(f"tally bench scaling: {len(configs)} jobs; links {args.gbps:g} Gb/s and {args.img_per_s:g} img/s "
          f"per worker, both divided by {args.scale:g}; batch {args.batch}; an emulated step of "
          f"{step_s:.2f} s", file=sys.stderr)
    reference = compute_only(args)
    print(f"compute alone: {reference:.3f} s per step ({args.batch / reference:.2f} img/s)", file=sys.stderr)
    rows, results = [], {}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="tally-scaling-") as workdir:
        with open(os.path.join(workdir, "ssh"), "w") as f:
            f.write(f"#!/bin/sh\nexec {sys.executable} {os.path.join(HOME, 'tools', 'bench', 'netns_ssh.py')} \"$@\"\n")
        os.chmod(os.path.join(workdir, "ssh"), 0o755)
        for i, (n, s, wire, overlap) in enumerate(configs):
            records = run_job(args, n, s, wire, overlap, workdir)
            r = summarise(args, records, reference)
            plan = predict(args, n, s, wire, overlap)
            r["plan_step_s"] = plan["step_ms"] / 1e3
            r["plan_error"] = r["plan_step_s"] / r["step_s"] - 1
            results[(n, s, wire, overlap)] = r
            elapsed = time.time() - started
            left = elapsed / (i + 1) * (len(configs) - i - 1)
            print(f"[{i + 1}/{len(configs)}] {n} workers, {s} servers, {wire}, overlap {'on' if overlap else 'off'}: "
                  f"step {r['step_s']:.3f} s, efficiency {100 * r['efficiency']:.1f}%; plan "
                  f"{r['plan_step_s']:.3f} s ({100 * r['plan_error']:+.1f}%) "
                  f"(about {left / 60:.0f} min left)", file=sys.stderr)
            tl = r["timeline"]
            timeline = (f"fwd {tl['fwd']:.0f} ms (waits {tl['fwd_wait']:.0f}), bwd {tl['bwd']:.0f} ms, "
                        f"end wait {tl['end_wait']:.0f} ms")
            if args.timeline:
                print(f"    timeline: {timeline}", file=sys.stderr)
            name = f"{n}w{s}s-{wire}-overlap-{'on' if overlap else 'off'}"
            rows.append(row(name, r["img_s"], "img/s", n * args.batch / reference,
                            f"{n} x compute alone", f"efficiency {100 * r['efficiency']:.1f}%; plan's step "
                            f"{100 * r['plan_error']:+.1f}% off; {timeline}"))
            rows[-1]["plan_error_pct"] = round(100 * r["plan_error"], 2)
    for (n, s, wire, overlap), r in results.items():
        off = results.get((n, s, wire, False))
        if overlap and off:
            rows.append(row(f"{n}w{s}s-{wire}-overlap-gain", r["step_s"], "s/step", off["step_s"],
                            "the step with overlap off", "ratio > 1: overlap shortens the step", lower=True))
    worst = max(results.values(), key=lambda r: abs(r["plan_error"]))
    rows.append(row("plan-worst-error", 100 * abs(worst["plan_error"]), "%", 5.0, "the goal, 5%",
                    f"the largest |plan - measured| / measured step over {len(results)} jobs", lower=True))
    print_rows(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
