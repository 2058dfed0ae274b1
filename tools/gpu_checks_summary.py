#!/usr/bin/env python3
"""Writes OUTDIR/summary.json from what run-gpu-checks.sh left in OUTDIR, and prints a
short table. Usage: gpu_checks_summary.py OUTDIR BUNDLE_INFO TIME_LIMIT_S
Or: gpu_checks_summary.py --markdown summary.json   (the tables of docs/gpu-results.md)
Or: gpu_checks_summary.py --median-speed LOG         (a job's median Speedometer samples/s)

summary.json: {"commit", "bundle", "env", "time_limit_s", "steps": [{name, rc, seconds}],
"tests": {"passed", "failed", "skipped", "crashed", "cases": [{executable, name, result,
seconds, message}]}, "bench": [the JSON lines of tally bench], "jobs": [{name, rc,
first_loss, last_loss, loss_fell, speed}], "input_path_share" (the JPEG job's speed over
the --benchmark 1 job's), "input_path_jobs" (every JPEG job: name, its decoder and tuning,
that share, and the profiler's rules that fired in it), "two_to_one" (one GPU worker and two
CPU servers against --kv-store device: each job's median samples/s, the ratios secure and
plain, and the CPU emulation's ratio of its step with communication to its compute alone),
"passed"}.
A test result is passed, failed, skipped (with gtest's reason) or crashed (the process died
inside it). "passed" is true only if every step ran and exited 0, no test failed or crashed,
and every job's loss fell.
"""
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def test_cases(out):
    cases = []
    for xml in sorted(glob.glob(os.path.join(out, "tests", "*.xml"))):
        exe = os.path.basename(xml).split(".")[0]
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError as e:
            cases.append({"executable": exe, "name": os.path.basename(xml), "result": "failed",
                          "seconds": 0, "message": f"unreadable XML: {e}"})
            continue
        for case in root.iter("testcase"):
            failure = case.find("failure")
            skipped = case.find("skipped")
            if failure is not None:
                result, message = "failed", failure.get("message", "")
            elif skipped is not None or case.get("result") == "skipped":
                result = "skipped"
                message = skipped.get("message", "") if skipped is not None else ""
            else:
                result, message = "passed", ""
            cases.append({"executable": exe, "name": f"{case.get('classname')}.{case.get('name')}",
                          "result": result, "seconds": float(case.get("time", 0) or 0),
                          "message": message.strip()[:2000]})
    for crashed in sorted(glob.glob(os.path.join(out, "tests", "*.crashed"))):
        exe = os.path.basename(crashed)[: -len(".crashed")]
        for line in read(crashed).splitlines():
            if line.strip():
                name, _, tail = line.partition(" ")
                cases.append({"executable": exe, "name": name, "result": "crashed", "seconds": 0,
                              "message": tail.strip()})
    return cases


SPEED = re.compile(r"Speed: ([0-9.]+) samples/sec")
# The profiler's findings in a log ("tally: worker 0 step 40: data_starvation: ..."): the
# JPEG jobs must keep data_starvation silent.
RULE = re.compile(r"^tally: [^\n]*?: (data_starvation|io_bottleneck|low_gpu_util|step_outliers|"
                  r"loss_not_decreasing|nan_inf|exploding_gradients): ", re.M)
LOSS = re.compile(r"cross-entropy=([0-9.eE+-]+|nan|inf)")


def job(name, rc, log):
    text = read(log)
    # The Speedometer's lines ("Epoch[0] Batch [5-10]\tSpeed: ...\tcross-entropy=..."), not
    # the epoch's "Train-cross-entropy=" line.
    batch_lines = [l for l in text.splitlines() if "Batch [" in l]
    losses = [float(m.group(1)) for l in batch_lines for m in [LOSS.search(l)] if m]
    speeds = [float(m.group(1)) for l in batch_lines for m in [SPEED.search(l)] if m]
    fell = len(losses) >= 2 and all(map(lambda v: v == v, losses)) and losses[-1] < losses[0]
    return {"name": name, "rc": rc, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None, "loss_fell": fell,
            "speed_samples_per_s": speeds[-1] if speeds else None,
            "log_tail": text[-600:] if rc != 0 or not fell else ""}


def median_speed(log):
    """The median samples/s of a job's Speedometer lines, the first two (warm-up) left out."""
    speeds = [float(m.group(1)) for l in read(log).splitlines() if "Batch [" in l for m in [SPEED.search(l)] if m]
    speeds = sorted(speeds[2:] if len(speeds) > 2 else speeds)
    return speeds[len(speeds) // 2] if speeds else None


REPLAY = re.compile(r"REPLAY (\{.*\})")


def replay_median_step(log):
    """The median step (s) of a bench replay's REPLAY record, its first five left out."""
    found = REPLAY.search(read(log))
    if not found:
        return None
    starts = [s[0] for s in json.loads(found.group(1))["steps"]]
    steps = sorted((b - a) / 1e3 for a, b in zip(starts, starts[1:]))[5:] if len(starts) > 7 else []
    return steps[len(steps) // 2] if steps else None


def two_to_one(out):
    """The mission's shape against the same GPU alone, and its emulation (run-gpu-checks
    twotoone); None when it did not run."""
    logs = {name: os.path.join(out, "jobs", name + ".log") for name in
            ("2to1-device", "2to1-dist-secure", "2to1-dist-plain", "2to1-emulation", "2to1-emulation-alone")}
    if not os.path.exists(logs["2to1-device"]):
        return None
    speed = {name: median_speed(logs[name]) for name in ("2to1-device", "2to1-dist-secure", "2to1-dist-plain")}
    ratio = lambda a, b: round(a / b, 3) if a and b else None
    emulated, alone = replay_median_step(logs["2to1-emulation"]), replay_median_step(logs["2to1-emulation-alone"])
    return {"samples_per_s": speed,
            "secure_over_device": ratio(speed["2to1-dist-secure"], speed["2to1-device"]),
            "plain_over_device": ratio(speed["2to1-dist-plain"], speed["2to1-device"]),
            "emulation_step_s": emulated, "emulation_compute_alone_step_s": alone,
            "emulation_ratio": ratio(alone, emulated),
            "goal": "secure >= 0.90, plain >= 0.95 of the device job; the emulation's ratio near the secure one"}


def main():
    out, info, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    steps = []
    for line in read(os.path.join(out, "steps.tsv")).splitlines():
        name, rc, seconds = line.split("\t")
        steps.append({"name": name, "rc": rc, "seconds": int(seconds)})
    cases = test_cases(out)
    counts = {k: sum(c["result"] == k for c in cases) for k in ("passed", "failed", "skipped", "crashed")}
    bench = [json.loads(l) for l in read(os.path.join(out, "bench.jsonl")).splitlines() if l.startswith("{")]
    jobs = [job(s["name"][4:], s["rc"], os.path.join(out, "jobs", s["name"][4:] + ".log"))
            for s in steps if s["name"].startswith("job:")]
    bundle = read(info)
    commit = bundle.split("\n", 1)[0].replace("commit ", "") if bundle.startswith("commit") else "unknown"
    # A test step that died but was rerun without its crashed test is counted by its cases.
    bad_steps = [s for s in steps if s["rc"] != "0" and not s["name"].startswith("test:")]
    passed = (not bad_steps and counts["failed"] == 0 and counts["crashed"] == 0 and
              all(j["rc"] == "0" and j["loss_fell"] for j in jobs) and jobs != [] and bench != []
              and counts["passed"] > 0)
    # Training from the JPEG pack (decoded on the GPU) against the same step on its synthetic
    # batch: how well the input path keeps the GPU fed (the goal is 0.95 or more).
    speed = {j["name"]: j["speed_samples_per_s"] for j in jobs}
    base = speed.get("device-float16-b256-benchmark")
    # Every JPEG job: the default, and those run with another decoder or decode tuning, each
    # with the line its log gives the decoder and tuning in.
    input_jobs = []
    for j in jobs:
        if j["name"].startswith("device-float16-b256-jpeg"):
            log = read(os.path.join(out, "jobs", j["name"] + ".log"))
            how = re.search(r"by nvJPEG \(([^)]*)\)", log)
            input_jobs.append({"name": j["name"], "decode": how.group(1) if how else None,
                               "share": round(j["speed_samples_per_s"] / base, 3)
                               if j["speed_samples_per_s"] and base else None,
                               "rules": sorted(set(RULE.findall(log)))})
    input_share = next((j["share"] for j in input_jobs if j["name"] == "device-float16-b256-jpeg"), None)
    summary = {"commit": commit, "bundle": bundle, "env": read(os.path.join(out, "env.txt")),
               "time_limit_s": limit, "steps": steps, "tests": dict(counts, cases=cases),
               "bench": bench, "jobs": jobs, "input_path_share": input_share,
               "input_path_jobs": input_jobs, "two_to_one": two_to_one(out), "passed": passed}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped, "
          f"{counts['crashed']} crashed")
    for c in cases:
        if c["result"] in ("failed", "crashed"):
            print(f"  {c['result']}: {c['executable']} {c['name']}: {c['message'][:300]}")
    for b in bench:
        print(f"bench {b.get('case')}: {b.get('value')} {b.get('unit')} peer {b.get('peer')} ratio {b.get('ratio')}")
    for j in jobs:
        print(f"job {j['name']}: rc {j['rc']} loss {j['first_loss']} -> {j['last_loss']} "
              f"speed {j['speed_samples_per_s']}")
    for j in input_jobs:
        if j["share"] is not None:
            print(f"training from JPEGs decoded on the GPU ({j['decode']}): {j['share']:.0%} of the "
                  f"--benchmark 1 speed; the profiler's findings: {', '.join(j['rules']) or 'none'}")
    if summary["two_to_one"]:
        t = summary["two_to_one"]
        print(f"one GPU worker, two CPU servers: {t['secure_over_device']} of the device job secure, "
              f"{t['plain_over_device']} plain; the emulation: {t['emulation_ratio']}")
    for s in bad_steps:
        print(f"step {s['name']}: rc {s['rc']} after {s['seconds']} s")
    print("passed" if passed else "NOT passed", "->", os.path.join(out, "summary.json"))
    return 0 if passed else 1


def markdown(path):
    s = json.load(open(path))
    print("| executable | passed | failed | skipped | crashed |\n|---|---|---|---|---|")
    by_exe = {}
    for c in s["tests"]["cases"]:
        by_exe.setdefault(c["executable"], {"passed": 0, "failed": 0, "skipped": 0, "crashed": 0})[c["result"]] += 1
    for exe, n in sorted(by_exe.items()):
        print(f"| {exe} | {n['passed']} | {n['failed']} | {n['skipped']} | {n['crashed']} |")
    t = s["tests"]
    print(f"| **all** | {t['passed']} | {t['failed']} | {t['skipped']} | {t['crashed']} |\n")
    for c in t["cases"]:
        if c["result"] != "passed":
            print(f"- {c['result']}: `{c['name']}` ({c['executable']}): {c['message'].splitlines()[-1]}")
    print("\n| bench case | Tally | peer | ratio | note |\n|---|---|---|---|---|")
    for b in s["bench"]:
        print(f"| {b['case']} | {b['value']} {b['unit']} | {b.get('peer')} ({b.get('peer_name', '')}) | "
              f"{b.get('ratio')} | {b.get('note', '')} |")
    print("\n| job | exit | first loss | last loss | samples/s (last Speedometer line) |\n|---|---|---|---|---|")
    for j in s["jobs"]:
        print(f"| {j['name']} | {j['rc']} | {j['first_loss']} | {j['last_loss']} | {j['speed_samples_per_s']} |")
    print("\n| step | exit | seconds |\n|---|---|---|")
    for st in s["steps"]:
        print(f"| {st['name']} | {st['rc']} | {st['seconds']} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--median-speed":
        v = median_speed(sys.argv[2])
        if v is None:
            sys.exit(1)
        print(v)
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "--markdown":
        markdown(sys.argv[2])
        sys.exit(0)
    sys.exit(main())
