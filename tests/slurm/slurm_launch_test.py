"""`tools/launch.py --launcher slurm` inside real allocations, on a one-node Slurm cluster
that this file starts (slurm_cluster.py): jobs of fake_role.py (every role's variables, a
failure, the job's secret kept off command lines and out of scontrol, cancellation), and
real `tally train` dist_sync jobs: one that exits 0; jobs stopped inside an epoch by
`scancel --signal=TERM`, by SIGTERM to the batch script (`--signal=B:TERM`), by
`scontrol requeue` of the running job and by preemption from a higher-priority partition
(PreemptMode=REQUEUE), each requeued and resumed (`--resume auto`) to an uninterrupted run's
final weights, bit for bit; and the README's Fashion-MNIST job, shortened, with its accuracy
lines. SlurmElasticTest: under --elastic --max-workers, one worker's step preempted alone
(`scancel --signal=TERM JOB.STEP`) leaves, a new step with TALLY_JOIN=1 joins back, and the job
ends with every worker.

Usage: python3 slurm_launch_test.py TALLY_BINARY [unittest args]
Without root or without Debian's slurm-wlm and munge, each class prints
`SKIPPED <Class>: why` and passes.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fault"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools", "launch"))
import fault_job  # noqa: E402
from fault_job import FINAL, MODEL, STEPS_PER_EPOCH, FaultCase  # noqa: E402
from launch_case import ROLE_LINE, cmdline, tagged_pids  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

LAUNCH = os.path.join(ROOT, "tools", "launch.py")
FAKE = os.path.join(ROOT, "tests", "tools", "launch", "fake_role.py")
# How long a job may stand still (no new output, no change of state) before a wait fails.
# Waits have no bound on total time: a machine many times slower than usual still passes.
STALL_S = 300
# fault_job's model on larger images with more layers: a few seconds an epoch instead of a
# third of one, so that an interruption that takes Slurm seconds (preemption) lands inside
# the run.
SLOW_MODEL = [{"8": "20", "3,16,16": "3,32,32"}.get(arg, arg) for arg in MODEL]


class ClusterCase(FaultCase):
    """One cluster for the class; batch scripts, their output and job states."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = SlurmCluster()
        why = cls.cluster.start()
        if why:
            print(f"\nSKIPPED {cls.__name__}: {why}", file=sys.stderr)
            raise unittest.SkipTest(why.splitlines()[0])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def submit(self, launch_args, command, name, sbatch_args=(), env=None):
        """sbatch of a script that execs launch.py --launcher slurm; returns (job id, path
        of its output, which a requeued run appends to)."""
        out = os.path.join(self.dir, name + ".out")
        script = os.path.join(self.dir, name + ".sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho \"=== run $SLURM_RESTART_COUNT of job $SLURM_JOB_ID\"\n"
                    f"exec {sys.executable} {LAUNCH} --launcher slurm "
                    + " ".join(launch_args + command) + "\n")
        environ = self.environ(env)
        environ.update(self.cluster.env)
        environ.pop("TALLY_JOB_SECRET")  # launch.py makes the job's own
        result = self.cluster.run(["sbatch", "--parsable", "-N1", "-n2", f"--output={out}",
                                   "--open-mode=append", f"--chdir={self.dir}"]
                                  + list(sbatch_args) + [script], env=environ)
        job = result.stdout.strip().split(";")[0]
        self.addCleanup(self.cluster.run, ["scancel", job], check=False)
        return job, out

    def job_field(self, job, name):
        text = self.cluster.run(["scontrol", "show", "job", job]).stdout
        match = re.search(rf"\b{name}=(\S+)", text)
        return match.group(1) if match else None

    def wait_for(self, what, check, job=None, out=None):
        """Polls check() until it returns something true, and returns that. A slow machine is
        waited for as long as the job moves: the bound is on standing still (STALL_S without
        the output growing or the job's state changing), not on the total time."""
        last, deadline = None, time.monotonic() + STALL_S
        while True:
            result = check()
            if result:
                return result
            state = self.job_field(job, "JobState") if job else None
            moved = (os.path.getsize(out) if out and os.path.exists(out) else -1, state)
            if moved != last:
                last, deadline = moved, time.monotonic() + STALL_S
            elif time.monotonic() > deadline:
                self.fail(f"{what}: nothing moved for {STALL_S} s (job {job} {state})\n"
                          + (fault_job.tail(out) if out and os.path.exists(out) else "(no output)")
                          + "\n" + self.cluster.logs(1500))
            time.sleep(0.3)

    def wait_state(self, job, states, out=None):
        return self.wait_for(f"job {job} not {'/'.join(states)}",
                             lambda: (lambda s: s if s in states else None)(self.job_field(job, "JobState")),
                             job, out)

    def wait_end(self, job, out):
        """Waits for the job to end; returns (state, exit status, its output)."""
        state = self.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                      "NODE_FAIL", "OUT_OF_MEMORY"), out=out)
        return state, int(self.job_field(job, "ExitCode").split(":")[0]), fault_job.read(out)

    def wait_output(self, out, pattern, count=1, job=None):
        self.wait_for(f"no {pattern!r} x{count}",
                      lambda: os.path.exists(out) and len(re.findall(pattern, fault_job.read(out), re.M)) >= count,
                      job, out)


class SlurmLaunchTest(ClusterCase):
    """launch.py --launcher slurm on fake_role.py."""

    def fake_job(self, plan, name, launch_args=("-n", "3", "-s", "2")):
        # fake_role.py ignores its arguments; --max-restarts wants to see these.
        return self.submit(list(launch_args), [sys.executable, FAKE, "--model-prefix", "m",
                                               "--resume", "auto"], name,
                           env={"FAKE_ROLE_PLAN": plan, "FAKE_JOB_TAG": self.tag})

    def test_each_role_is_a_job_step_with_its_variables_and_the_job_exits_0(self):
        job, out = self.fake_job("worker=exit0:1,*=exit0:2", "ok")
        state, code, text = self.wait_end(job, out)
        self.assertEqual((state, code), ("COMPLETED", 0), text)
        roles = {m.group(1): m.groups()[1:] for m in map(ROLE_LINE.match, text.splitlines()) if m}
        self.assertEqual(sorted(roles), ["scheduler", "server 0", "server 1", "worker 0",
                                         "worker 1", "worker 2"], text)
        for name, (role, rank, root, workers, servers, host, cwd, task, attempt, cluster) \
                in roles.items():
            self.assertEqual((workers, servers, host, attempt, cluster),
                             ("3", "2", "localhost", "0", "slurm"))
            self.assertRegex(root, r"^localhost:\d+$")
            self.assertEqual(cwd, self.dir)
        self.assertIn("launch.py: the job finished: the scheduler, 2 servers and 3 workers "
                      "exited 0", text)
        self.assertNotIn("srun:", text)

    def test_a_failing_worker_fails_the_job_naming_it(self):
        job, out = self.fake_job("worker1=exit3:1,*=sleep", "fail")
        state, code, text = self.wait_end(job, out)
        self.assertEqual((state, code), ("FAILED", 3), text)
        self.assertIn("launch.py: worker 1 on localhost exited with status 3; stopping the job",
                      text)
        self.assertIn("launch.py: worker 1's last line: fake_role: exiting with status 3", text)
        # The others were stopped with SIGTERM through scancel, not cancelled by their srun.
        self.assertNotIn("srun: forcing job termination", text)
        self.assertEqual(tagged_pids(self.tag), [])

    def test_the_secret_is_on_no_command_line_nor_in_scontrol_and_scancel_ends_all(self):
        job, out = self.fake_job("*=grandchild", "secret", ("-n", "2", "-s", "1"))
        self.wait_output(out, r"^\[\w+( \d)?\] \w+ \d on stderr$", count=4, job=job)
        secret = None
        for pid in tagged_pids(self.tag):
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"TALLY_JOB_SECRET="):
                        secret = item.split(b"=", 1)[1].decode()
        self.assertRegex(secret or "", r"^[0-9a-f]{64}$", "the processes have no secret")
        lines = [cmdline(int(p)) for p in os.listdir("/proc") if p.isdigit()]
        self.assertGreaterEqual(sum("srun" in line for line in lines), 4)
        self.assertEqual([line for line in lines if secret in line], [])
        for query in (["scontrol", "show", "job", "-d", job], ["scontrol", "show", "step", "-d"],
                      ["squeue", "-s", "-o", "%all"]):
            shown = self.cluster.run(query).stdout
            self.assertNotIn(secret, shown, " ".join(query))
        self.assertIn("worker-1", self.cluster.run(["squeue", "-s", "-h", "-o", "%j"]).stdout)
        self.cluster.run(["scancel", job])
        state, _, text = self.wait_end(job, out)
        self.assertEqual(state, "CANCELLED", text)
        deadline = time.monotonic() + 120
        while tagged_pids(self.tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual([cmdline(p) for p in tagged_pids(self.tag)], [],
                         "processes outlived their allocation")

    def test_a_sigterm_to_the_steps_stops_the_job_without_a_restart(self):
        job, out = self.fake_job("*=sleep", "term", ("-n", "2", "-s", "1", "--max-restarts", "2",
                                                     "--grace", "5"))
        self.wait_output(out, r"^\[\w+( \d)?\] \w+ \d on stderr$", count=4, job=job)
        self.cluster.run(["scancel", "--signal=TERM", job])
        state, code, text = self.wait_end(job, out)
        self.assertEqual(code, 143, text)
        self.assertIn("stopped on SIGTERM", text)
        self.assertNotIn("restart", text)

    def test_a_sigterm_to_the_batch_script_reaches_every_process_through_slurm(self):
        # As `#SBATCH --signal=B:TERM@60` does: only launch.py (exec'd by the script) gets it.
        job, out = self.fake_job("*=sleep", "batchterm", ("-n", "2", "-s", "1", "--grace", "5"))
        self.wait_output(out, r"^\[\w+( \d)?\] \w+ \d on stderr$", count=4, job=job)
        self.cluster.run(["scancel", "--batch", "--signal=TERM", job])
        state, code, text = self.wait_end(job, out)
        self.assertEqual(code, 143, text)
        self.assertIn("launch.py: received SIGTERM; stopping the job", text)
        # scancel --signal=TERM of each step, not srun's own cancellation (SIGKILL soon after).
        self.assertNotIn("forcing job termination", text)
        self.assertNotIn("still running after", text)
        self.assertEqual(tagged_pids(self.tag), [])


class SlurmTallyTest(ClusterCase):
    """Real `tally train` dist_sync jobs (fault_job.MODEL) under launch.py --launcher slurm."""

    ref_prefix = None

    @classmethod
    def tearDownClass(cls):
        if cls.ref_prefix is not None:
            shutil.rmtree(cls.ref_dir, ignore_errors=True)
        super().tearDownClass()

    def tally_job(self, prefix, name, extra=(), sbatch_args=(), model=MODEL):
        command = [fault_job.TALLY, "train", "--kv-store", "dist_sync"] + model + \
            ["--model-prefix", prefix] + list(extra)
        return self.submit(["-n", "2", "-s", "1", "--grace", "30"], command, name, sbatch_args)

    def test_a_dist_sync_job_exits_0(self):
        job, out = self.tally_job(os.path.join(self.dir, "run", "m"), "train")
        state, code, text = self.wait_end(job, out)
        self.assertEqual((state, code), ("COMPLETED", 0), text[-4000:])
        self.assertIn("launch.py: the job finished: the scheduler, 1 server and 2 workers", text)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "run", "m") + FINAL + ".params"))

    def reference(self):
        """The uninterrupted job's final checkpoint prefix; run once for the class."""
        cls = type(self)
        if getattr(cls, "ref_prefix", None) is None:
            # Outside this test's directory: the class's other tests compare with it too.
            cls.ref_dir = tempfile.mkdtemp(prefix="tally-slurm-ref-")
            prefix = os.path.join(cls.ref_dir, "m")
            job, out = self.tally_job(prefix, "reference", model=SLOW_MODEL)
            state, code, text = self.wait_end(job, out)
            self.assertEqual((state, code), ("COMPLETED", 0), text[-4000:])
            cls.ref_prefix = prefix
        return cls.ref_prefix + FINAL

    def interrupted_job(self, name, interrupt, slurm_requeues):
        """A --requeue job interrupted inside epoch 1 by `interrupt(job)`, requeued (by Slurm
        itself, or here with scontrol) and resumed with --resume auto: it must stop at an
        agreed step with its checkpoint, and end with the uninterrupted job's weights."""
        reference = self.reference()
        prefix = os.path.join(self.dir, name, "m")
        job, out = self.tally_job(prefix, name, ["--resume", "auto"], ["--requeue"], SLOW_MODEL)
        self.wait_output(out, rf"^\[worker 0\] Epoch\[1\] Batch \[\d+-{STEPS_PER_EPOCH // 3}\]", job=job)
        interrupt(job)
        if slurm_requeues:
            self.wait_output(out, r"launch.py: (received SIGTERM|.*stopped on SIGTERM)", job=job)
            self.wait_state(job, ("PENDING",), out)
        else:
            state, code, text = self.wait_end(job, out)
            # Stopped with its checkpoint saved, nothing lost: a success to Slurm.
            self.assertEqual((state, code), ("COMPLETED", 0), text[-4000:])
            self.cluster.run(["scontrol", "requeue", job])
        text = fault_job.read(out)
        self.assertIn("stopping, the job was asked to (SIGTERM)", text)
        self.assertIn("the workers stopped at their agreed step with the checkpoint saved", text)
        saved = self.assertLatestLoads(prefix)
        print(f"  {name}: stopped; checkpoint {saved} saved")
        self.release(job, out)
        state, code, text = self.wait_end_of_run(job, out, 1)
        self.assertEqual((state, code), ("COMPLETED", 0), text[-4000:])
        self.assertSameCheckpoint(prefix + FINAL, reference)
        return text

    def release(self, job, out):
        """Slurm holds a requeued batch job back two minutes (BeginTime), so that its node has
        forgotten the last run: slurmd refuses to launch a job it killed moments ago ("already
        killed, do not launch batch job"). Five seconds do here, once the requeue has taken
        effect (the job PENDING)."""
        released = []

        def started_again():
            state = self.job_field(job, "JobState")
            if state in ("RUNNING", "COMPLETING", "COMPLETED") and self.job_field(job, "Restarts") not in (None, "0"):
                return True
            if state == "PENDING" and not released:
                self.cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now+5"])
                released.append(True)
            return False
        self.wait_for(f"job {job} not started again", started_again, job, out)

    def wait_end_of_run(self, job, out, run):
        """Waits for run `run` (SLURM_RESTART_COUNT) of the job to start and end."""
        self.wait_output(out, rf"^=== run {run} of job {job}$", job=job)
        return self.wait_end(job, out)

    def test_scancel_signal_term_then_requeue_ends_with_the_uninterrupted_weights(self):
        self.interrupted_job("scancel", lambda job: self.cluster.run(["scancel", "--signal=TERM", job]),
                             slurm_requeues=False)

    def test_sigterm_to_the_batch_script_then_requeue_ends_with_the_uninterrupted_weights(self):
        # `#SBATCH --signal=B:TERM@60` near the time limit: only launch.py gets SIGTERM.
        text = self.interrupted_job("batchterm", lambda job: self.cluster.run(
            ["scancel", "--batch", "--signal=TERM", job]), slurm_requeues=False)
        self.assertIn("launch.py: received SIGTERM; stopping the job", text)

    def test_requeue_of_the_running_job_resumes_with_the_uninterrupted_weights(self):
        self.interrupted_job("requeue", lambda job: self.cluster.run(["scontrol", "requeue", job]),
                             slurm_requeues=True)

    def test_preemption_by_a_higher_priority_partition_requeues_and_resumes_exactly(self):
        # PreemptMode=REQUEUE: a job of partition urgent needs the CPUs the job holds.
        def preempt(job):
            urgent = self.cluster.run(["sbatch", "--parsable", "-p", "urgent", "-n1",
                                       f"--output={self.dir}/urgent.out", "--wrap", "sleep 2"]).stdout.strip()
            self.addCleanup(self.cluster.run, ["scancel", urgent], check=False)
            self.urgent = urgent
        self.interrupted_job("preempted", preempt, slurm_requeues=True)
        self.assertEqual(self.job_field(self.urgent, "JobState"), "COMPLETED")

    def test_the_readme_job_shortened_reports_its_accuracy(self):
        # The README's main job (tools/fashion_mnist.sh): Debian's Fashion-MNIST, a ResNet
        # under dist_device_sync, scheduler + server + 2 workers, here three epochs of 3000
        # images with 8 layers so that it takes seconds.
        data = os.path.join(self.dir, "fashion")
        made = subprocess.run([fault_job.TALLY, "make-data", "fashion-mnist", "--out", data, "--limit", "3000"],
                              capture_output=True, text=True)
        if made.returncode != 0 and "fashion-mnist" in made.stderr and "no such" in made.stderr.lower():
            self.skipTest("Debian's dataset-fashion-mnist is not installed: " + made.stderr.strip())
        self.assertEqual(made.returncode, 0, made.stderr)
        command = [fault_job.TALLY, "train", "--kv-store", "dist_device_sync", "--network", "resnet",
                   "--num-layers", "8", "--image-shape", "3,28,28", "--num-classes", "10",
                   "--data-train", os.path.join(data, "train.rec"), "--data-val", os.path.join(data, "test.rec"),
                   "--rgb-mean", "72.94,72.94,72.94", "--rgb-std", "90.0,90.0,90.0",
                   "--batch-size", "64", "--num-epochs", "3", "--lr", "0.1", "--mom", "0.9", "--wd", "5e-4",
                   "--data-nthreads", "1", "--disp-batches", "10", "--top-k", "0"]
        job, out = self.submit(["-n", "2", "-s", "1", "--grace", "30"], command, "fashion")
        state, code, text = self.wait_end(job, out)
        self.assertEqual((state, code), ("COMPLETED", 0), text[-4000:])
        found = re.findall(r"^\[worker 0\] Epoch\[(\d)\] Validation-accuracy=([0-9.]+)$", text, re.M)
        self.assertEqual([e for e, _ in found], ["0", "1", "2"], text[-4000:])
        print(f"  Fashion-MNIST through Slurm, 3 epochs of 3000 images: validation accuracy {found[-1][1]}")
        # Far from the README's 93% (70 steps, batch-norm statistics still settling), but
        # well above chance (0.1): the job learned through Slurm.
        self.assertGreater(float(found[-1][1]), 0.3, "10 classes: chance is 0.1")


class SlurmElasticTest(ClusterCase):
    """tools/launch.py --elastic --max-workers inside an allocation: a worker task preempted
    alone joins back as a new job step (docs/launch.md, "A worker task preempted alone")."""

    def step_of(self, job, name):
        """JOB.STEP of the running step named `name`, or None."""
        listed = self.cluster.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"], check=False).stdout
        return next((step for step, _, n in (line.strip().partition(" ") for line in listed.splitlines())
                     if n == name), None)

    def test_a_worker_step_preempted_alone_joins_back_and_the_job_ends_with_every_worker(self):
        prefix = os.path.join(self.dir, "elastic", "m")
        model = list(SLOW_MODEL)
        model[model.index("--num-epochs") + 1] = "6"  # time for the leave and the join inside the run
        command = [fault_job.TALLY, "train", "--kv-store", "dist_sync"] + model + ["--model-prefix", prefix]
        job, out = self.submit(["-n", "2", "-s", "1", "--elastic", "--max-workers", "2", "--grace", "30"],
                               command, "elastic")
        self.wait_output(out, r"^\[worker 1\] Epoch\[0\] Batch \[\d+-10\]", job=job)
        step = self.wait_for("worker-1's step", lambda: self.step_of(job, "worker-1"), job, out)
        self.cluster.run(["scancel", "--signal=TERM", step])
        state, code, text = self.wait_end(job, out)
        self.assertEqual((state, code), ("COMPLETED", 0), text[-4000:])
        self.assertRegex(text, r"launch.py: worker 1 on localhost left the job \(exited 0 after its SIGTERM\); a new "
                               r"worker 1 on localhost joins in 1 s \(TALLY_JOIN=1\)")
        self.assertIn("launch.py: started worker 1 on localhost to join the job (TALLY_JOIN=1, join 1 of at most 3",
                      text)
        joined = re.search(r"launch.py: worker 1 on localhost joined the job: from step (\d+)", text)
        self.assertIsNotNone(joined, text[-4000:])
        self.assertIn("launch.py: the job finished: the scheduler, 1 server and 2 workers exited 0", text)
        # The joiner trained to the end: worker 1's lines of the last epoch come after its join.
        after = text[joined.end():]
        self.assertRegex(after, r"(?m)^\[worker 1\] Epoch\[5\] Batch", text[-4000:])
        self.assertTrue(os.path.exists(prefix + "-0006.params"))
        print(f"  worker 1's step {step} preempted alone; its joiner pushed from step {joined.group(1)}")


if __name__ == "__main__":
    fault_job.main()
