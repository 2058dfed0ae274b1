"""Tests of tools/launch.py: real jobs of fake_role.py under each launcher, each checked to
leave no process behind (launch_case.LaunchCase). ssh runs against an sshd this file starts
on a free port of 127.0.0.1, mpi against Debian's OpenMPI; slurm by its command lines here
(launch_plan_test.py) and on a real cluster in tests/slurm/slurm_launch_test.py.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from launch_case import FAKE, JOB_BOUND_S, ROLE_LINE, TASK_IDS_3_2, LaunchCase, cmdline
from launcher import job  # tools/ is on the path: launch_case puts it there
from local_sshd import LocalSshd  # noqa: E402
# ctest runs every class as launch_test.<Class>.
from launch_plan_test import DryRunTest, HostfileTest  # noqa: E402,F401
from launch_elastic_test import ElasticLauncherTest, ElasticTallyTest  # noqa: E402,F401


class LocalLauncherTest(LaunchCase):

    def test_every_role_gets_its_environment_and_the_job_exits_0(self):
        rc, out, err, _ = self.launch(["-n", "3", "-s", "2"], "worker=exit0,*=exit0:1")
        self.assertEqual(rc, 0, err)
        roles = self.roles(out)
        self.assertEqual(sorted(roles), ["scheduler", "server 0", "server 1",
                                         "worker 0", "worker 1", "worker 2"])
        ports = set()
        for name, (role, rank, root, workers, servers, host, cwd, task, attempt,
                   cluster) in roles.items():
            self.assertEqual(name, role if role == "scheduler" else f"{role} {rank}")
            self.assertEqual((workers, servers, host), ("3", "2", "127.0.0.1"))
            self.assertEqual((task, attempt, cluster), (TASK_IDS_3_2[name], "0", "local"))
            self.assertTrue(root.startswith("127.0.0.1:"))
            ports.add(root)
        self.assertEqual(len(ports), 1)
        self.assertIn("[worker 2] worker 2 on stderr", err)
        for line in out.splitlines():
            self.assertRegex(line, r"^\[(scheduler|server \d|worker \d)\] ")
        self.assertNothingLeft()

    def test_a_failing_worker_stops_the_job_naming_it(self):
        self.check_failing_worker("localhost")

    def test_log_dir_holds_each_processs_output_without_the_prefix(self):
        with tempfile.TemporaryDirectory() as logs:
            rc, out, err, _ = self.launch(["-n", "2", "-s", "1", "--log-dir", os.path.join(logs, "run")],
                                          "worker=exit0,*=exit0:1")
            self.assertEqual(rc, 0, err)
            names = sorted(os.listdir(os.path.join(logs, "run")))
            self.assertEqual(names, ["scheduler.log", "server-0.log", "worker-0.log", "worker-1.log"])
            for name in names:
                role = name[:-len(".log")].replace("-", " ")
                with open(os.path.join(logs, "run", name)) as f:
                    text = f.read()
                # Every line the launcher printed with this role's prefix, and nothing else.
                printed = [line[len(role) + 3:] for line in (out + err).splitlines()
                           if line.startswith(f"[{role}] ")]
                self.assertEqual(sorted(text.splitlines()), sorted(printed), name)
                # stdout and stderr reach the file through two threads, in either order.
                self.assertRegex(text, r"(?m)^role=")
                self.assertRegex(text, r"(?m)^(scheduler 0|%s) on stderr$" % role)

    def test_a_signal_stops_everything(self):
        for signum, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            with self.subTest(signal=signum.name):
                rc, err, seconds, _ = self.interrupt_when_started(
                    ["-n", "2", "-s", "1"], "*=grandchild", signum, 4)
                self.assertEqual(rc, status, err)
                self.assertIn(f"received {signum.name}; stopping the job", err)
                self.assertLess(seconds, 4)
                self.assertNothingLeft()

    def test_a_sigterm_with_the_checkpoint_saved_ends_the_launcher_with_0(self):
        # As Slurm's --signal=B:TERM@60 does: the launcher gets SIGTERM and passes it on; the
        # workers stop at their agreed step with the checkpoint saved, so nothing was lost.
        rc, err, seconds, _ = self.interrupt_when_started(["-n", "2", "-s", "1"], "worker=savestop,*=sleep",
                                                          signal.SIGTERM, 4)
        self.assertEqual(rc, 0, err)
        self.assertIn("received SIGTERM; stopping the job", err)
        self.assertIn("the workers stopped at their agreed step with the checkpoint saved: the same command with "
                      "--resume auto (or a Slurm requeue) continues the run", err)
        self.assertNothingLeft()

    def test_servers_outliving_the_workers_are_stopped(self):
        rc, _, err, seconds = self.launch(["-n", "2", "-s", "1", "--shutdown-timeout", "1"],
                                          "worker=exit0,*=sleep")
        self.assertEqual(rc, 1, err)
        self.assertIn("the workers finished but scheduler on localhost, server 0 on localhost "
                      "did not exit within 1 s", err)
        self.assertLess(seconds, 8)
        self.assertNothingLeft()

    def test_a_clean_end_says_the_job_finished_and_nothing_else(self):
        # The scheduler exits first, then the servers, and the workers 2 s after them: the
        # normal order of a Tally job's end, which is no failure.
        rc, _, err, _ = self.launch(["-n", "3", "-s", "2", "--shutdown-timeout", "5"],
                                    "scheduler=exit0,server=exit0:0.5,worker=exit0:2.5")
        self.assertEqual(rc, 0, err)
        said = [line for line in err.splitlines() if line.startswith("launch.py: ")]
        self.assertEqual(len(said), 1, err)
        self.assertRegex(said[0], r"^launch.py: the job finished: the scheduler, 2 servers and 3 "
                                  r"workers exited 0 after \d+\.\d s$")
        self.assertNothingLeft()

    def test_workers_outliving_the_scheduler_and_servers_are_waited_for(self):
        rc, _, err, _ = self.launch(["-n", "2", "-s", "1", "--shutdown-timeout", "1"],
                                    "worker=exit0:3,*=exit0")
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: the scheduler and servers exited 0 1 s ago; still waiting for "
                      "worker 0 on localhost, worker 1 on localhost\n", err)
        self.assertIn("launch.py: the job finished: the scheduler, 1 server and 2 workers", err)
        self.assertNothingLeft()

    def test_a_failure_names_the_first_process_to_fail_and_its_last_line(self):
        # Server 0 would fail a second later (as peers of a dead process do): only the first
        # failure is named.
        rc, _, err, _ = self.launch(["-n", "2", "-s", "1", "--grace", "1"],
                                    "worker1=exit3:0.5,server0=exit4:1.5,*=sleep")
        self.assertEqual(rc, 3, err)
        said = [line for line in err.splitlines() if line.startswith("launch.py: ")]
        self.assertEqual(said, ["launch.py: worker 1 on localhost exited with status 3; stopping "
                                "the job",
                                "launch.py: worker 1's last line: fake_role: exiting with status 3 "
                                "as planned"], err)
        self.assertNotIn("finished", err)
        self.assertNothingLeft()

    def test_env_options(self):
        rc, out, err, _ = self.launch(
            ["-n", "1", "-s", "1", "--env", "FOO:bar:baz", "--env", "FORWARDED"],
            env={"FORWARDED": "from launcher", "FAKE_PRINT_VARS": "FOO,FORWARDED"})
        self.assertEqual(rc, 0, err)
        for name in ("scheduler", "server 0", "worker 0"):
            self.assertIn(f"[{name}] var FOO=bar:baz", out)
            self.assertIn(f"[{name}] var FORWARDED=from launcher", out)
        for option, message in (("DMLC_ROLE:x", "DMLC_ROLE is set by the launcher"),
                                ("DMLC_WORKER_ID:0", "DMLC_WORKER_ID is set by the launcher"),
                                ("DMLC_NUM_ATTEMPT:1", "DMLC_NUM_ATTEMPT is set by the launcher"),
                                ("NOT_SET_ANYWHERE", "not set in the launching environment"),
                                ("1BAD:x", "expected NAME:VALUE or NAME")):
            with self.subTest(option=option):
                rc, _, err, _ = self.launch(["-n", "1", "--env", option])
                self.assertEqual(rc, 2)
                self.assertIn(message, err)

    def test_mxnet_variables_of_each_role(self):
        names = ("DMLC_TASK_ID", "DMLC_WORKER_ID", "DMLC_SERVER_ID", "DMLC_NUM_ATTEMPT",
                 "DMLC_JOB_CLUSTER")
        rc, out, err, _ = self.launch(["-n", "3", "-s", "2", "--env", "FAKE_PRINT_VARS"],
                                      env={"FAKE_PRINT_VARS": ",".join(names)})
        self.assertEqual(rc, 0, err)
        for name, task in TASK_IDS_3_2.items():
            role, _, rank = name.partition(" ")
            expected = (task, rank if role == "worker" else "None",
                        rank if role == "server" else "None", "0", "local")
            for var, value in zip(names, expected):
                self.assertIn(f"[{name}] var {var}={value}\n", out)
        self.assertNothingLeft()

    def test_the_secret_is_in_a_private_file_and_in_no_environment(self):
        # A secret in the launching environment is not the job's: no process inherits it.
        rc, out, err, _ = self.launch(["-n", "2", "-s", "1"], "worker=exit0,*=exit0:1",
                                      env={"FAKE_SECRET_REPORT": "1", "TALLY_JOB_SECRET": "f" * 64,
                                           "TALLY_JOB_SECRET_FILE": "/elsewhere"})
        self.assertEqual(rc, 0, err)
        files = self.assertPrivateSecretFiles(self.secret_reports(out), 4, one_file=True)
        self.assertRemoved(files)
        rc, out, err, _ = self.launch(["-n", "1", "-s", "1", "--plain"], env={"FAKE_SECRET_REPORT": "1"})
        self.assertEqual(rc, 0, err)
        self.assertEqual({r["file"] for r in self.secret_reports(out).values()}, {"None"}, out)
        self.assertNothingLeft()

    def test_bad_command_lines_are_refused(self):
        for args, message in ((["-n", "1", "--bogus"], "unrecognized arguments: --bogus"),
                              (["-n", "0"], "-n must be at least 1"),
                              (["-n", "1", "-s", "0"], "-s must be at least 1"),
                              (["-n", "1", "-H", "/dev/null"], "-H is for --launcher"),
                              (["-n", "1", "--ssh-port", "22"], "--ssh-port is for"),
                              (["-n", "1", "--launcher", "pbs"], "invalid choice")):
            with self.subTest(args=args):
                rc, _, err, _ = self.launch(args)
                self.assertEqual(rc, 2)
                self.assertIn(message, err)
        rc, _, err, _ = self.launch(["-n", "1"], command=["/nonexistent/tally"])
        self.assertEqual(rc, 127)
        self.assertIn("cannot start scheduler on localhost", err)
        self.assertNothingLeft()


class RestartTest(LaunchCase):
    """--max-restarts: the whole job starts again after a failure, up to K times."""

    RESUMABLE = ["--model-prefix", "run/m", "--resume", "auto"]

    def setUp(self):
        super().setUp()
        state = tempfile.TemporaryDirectory()
        self.addCleanup(state.cleanup)
        self.env = {"FAKE_STATE_DIR": state.name}

    def launch_resumable(self, args, plan, timeout=JOB_BOUND_S):
        return self.launch(args, plan, timeout=timeout, env=self.env,
                           command=[sys.executable, FAKE] + self.RESUMABLE)

    def starts(self, out):
        """[(name, scheduler address)] of every role line, in order."""
        return [(m.group(1), m.group(4)) for m in map(ROLE_LINE.match, out.splitlines()) if m]

    def attempts(self, out, name):
        """DMLC_NUM_ATTEMPT of each start of the process `name`, in order."""
        return [m.group(10) for m in map(ROLE_LINE.match, out.splitlines())
                if m and m.group(1) == name]

    def test_a_failed_process_restarts_the_whole_job_on_a_new_port(self):
        rc, out, err, _ = self.launch_resumable(["-n", "2", "-s", "1", "--max-restarts", "2"],
                                                "worker1=once:exit3:1,*=once:sleep")
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: worker 1 on localhost exited with status 3; stopping the job", err)
        self.assertIn("launch.py: restart 1 of 2 after worker 1 on localhost exited with status 3: "
                      "starting every process again", err)
        self.assertIn("launch.py: the job completed on attempt 2 of 3", err)
        self.assertNotIn("restart 2 of 2", err)
        starts = self.starts(out)
        names = sorted(name for name, _ in starts)
        self.assertEqual(names, sorted(["scheduler", "server 0", "worker 0", "worker 1"] * 2), out)
        self.assertEqual(self.attempts(out, "worker 1"), ["0", "1"], out)
        ports = [root for name, root in starts if name == "scheduler"]
        self.assertNotEqual(ports[0], ports[1], "the restart reused the scheduler's port")
        self.assertEqual({root for _, root in starts}, set(ports))
        self.assertNothingLeft()

    def test_each_attempt_has_a_secret_of_its_own(self):
        rc, out, err, _ = self.launch(["-n", "1", "-s", "1", "--max-restarts", "1"],
                                      "worker0=once:exit3:1,*=once:sleep",
                                      env=dict(self.env, FAKE_SECRET_REPORT="1"),
                                      command=[sys.executable, FAKE] + self.RESUMABLE)
        self.assertEqual(rc, 0, err)
        # Attempt 0's processes have all ended (and printed) before attempt 1's start.
        lines = [line for line in out.splitlines() if "] secret file=" in line]
        self.assertEqual(len(lines), 6, out)
        attempts = [self.secret_reports("\n".join(lines[:3])), self.secret_reports("\n".join(lines[3:]))]
        files = set()
        for reports in attempts:
            files |= self.assertPrivateSecretFiles(reports, 3, one_file=True)
        self.assertEqual(len(files), 2, "one file for each attempt")
        self.assertNotEqual(attempts[0]["worker 0"]["digest"], attempts[1]["worker 0"]["digest"])
        self.assertRemoved(files)
        self.assertNothingLeft()

    def test_a_given_port_is_kept(self):
        port = job.free_port()
        rc, out, err, _ = self.launch_resumable(
            ["-n", "1", "-s", "1", "--max-restarts", "1", "--port", str(port)],
            "server0=once:exit4:1,*=once:sleep")
        self.assertEqual(rc, 0, err)
        self.assertIn("restart 1 of 1 after server 0 on localhost exited with status 4", err)
        self.assertEqual({root for _, root in self.starts(out)}, {f"127.0.0.1:{port}"})
        self.assertNothingLeft()

    def test_gives_up_after_k_restarts_with_the_last_status(self):
        rc, out, err, _ = self.launch_resumable(
            ["-n", "2", "-s", "1", "--max-restarts", "2", "--grace", "1"],
            "worker1=exit3:0.5,*=sleep")
        self.assertEqual(rc, 3, err)
        for attempt in (1, 2):
            self.assertIn(f"restart {attempt} of 2 after worker 1 on localhost exited with status 3",
                          err)
        self.assertIn("launch.py: no restarts left (2 used); the last failure: worker 1 on "
                      "localhost exited with status 3", err)
        self.assertEqual([name for name, _ in self.starts(out)].count("worker 1"), 3, out)
        for name in ("scheduler", "server 0", "worker 0", "worker 1"):
            self.assertEqual(self.attempts(out, name), ["0", "1", "2"], out)
        self.assertNothingLeft()

    def test_without_max_restarts_a_failure_ends_the_job(self):
        rc, out, err, _ = self.launch_resumable(["-n", "1", "-s", "1"], "worker0=once:exit3:0.5")
        self.assertEqual(rc, 3, err)
        self.assertNotIn("restart", err)
        self.assertNothingLeft()

    def test_a_stop_on_sigterm_from_outside_is_waited_for_and_not_restarted(self):
        # As `scancel --signal=TERM` does under Slurm: every process gets SIGTERM, the workers
        # exit 143 one after the other once the checkpoint is saved, the others 0.
        rc, out, err, _ = self.launch_resumable(
            ["-n", "2", "-s", "1", "--max-restarts", "2", "--grace", "10"],
            "worker0=exit143:1.5,worker1=exit143:0.5,*=exit0:2")
        self.assertEqual(rc, 143, err)
        self.assertIn("launch.py: worker 1 on localhost exited with status 143: stopped on SIGTERM; "
                      "waiting up to 10 s for the rest of the job to stop at the same step", err)
        self.assertIn("launch.py: the job stopped on SIGTERM: the scheduler, 1 server and 2 workers "
                      "have exited", err)
        self.assertNotIn("restart", err)
        self.assertNotIn("stopping the job", err)
        self.assertEqual(self.attempts(out, "worker 0"), ["0"], out)
        self.assertNothingLeft()

    def test_a_stop_from_outside_with_the_checkpoint_saved_ends_with_0(self):
        # The same with `--model-prefix`: the workers exit TALLY_STOPPED_STATUS (75), the
        # launcher 0, and the job can be run again (or requeued) with --resume auto.
        rc, out, err, _ = self.launch_resumable(
            ["-n", "2", "-s", "1", "--max-restarts", "2", "--grace", "10"],
            "worker0=exit75:1.5,worker1=exit75:0.5,*=exit0:2")
        self.assertEqual(rc, 0, err)
        self.assertIn("launch.py: worker 1 on localhost exited with status 75: stopped on SIGTERM", err)
        self.assertIn("launch.py: the job stopped on SIGTERM: the scheduler, 1 server and 2 workers have exited; "
                      "the workers stopped at their agreed step with the checkpoint saved", err)
        self.assertNotIn("restart", err)
        self.assertEqual(self.attempts(out, "worker 0"), ["0"], out)
        self.assertNothingLeft()

    def test_a_signal_to_the_launcher_is_not_restarted(self):
        rc, err, seconds, _ = self.interrupt_when_started(
            ["-n", "1", "-s", "1", "--max-restarts", "3"], "*=sleep", signal.SIGINT, 3,
            command=[sys.executable, FAKE] + self.RESUMABLE)
        self.assertEqual(rc, 130, err)
        self.assertNotIn("restart", err)
        self.assertLess(seconds, 4)
        self.assertNothingLeft()

    def test_a_stopped_process_is_continued_so_that_sigterm_ends_it(self):
        rc, _, err, seconds = self.launch_resumable(["-n", "2", "-s", "1", "--grace", "20"],
                                                    "worker1=stop,worker0=exit3:1,*=sleep")
        self.assertEqual(rc, 3, err)
        self.assertNotIn("still running after", err)
        self.assertLess(seconds, 10, "the stopped worker waited for SIGKILL")
        self.assertNothingLeft()

    def test_the_command_must_continue_from_its_checkpoints(self):
        message = "--max-restarts restarts the job from its latest checkpoint; the command needs "
        for extra, missing in (([], "--model-prefix PREFIX and --resume auto"),
                               (["--model-prefix", "m"], "--resume auto"),
                               (["--resume=auto"], "--model-prefix PREFIX"),
                               (["--model-prefix", "m", "--resume", "no"], "--resume auto")):
            with self.subTest(extra=extra):
                rc, _, err, _ = self.launch(["-n", "1", "--max-restarts", "1"],
                                            command=[sys.executable, FAKE] + extra)
                self.assertEqual(rc, 2, err)
                self.assertIn(message + missing, err)
        rc, _, err, _ = self.launch(["-n", "1", "--max-restarts", "-1"])
        self.assertEqual(rc, 2)
        self.assertIn("--max-restarts must be at least 0", err)
        for command in (["--model_prefix=m", "-resume", "auto"], ["-model-prefix", "m", "--resume=auto"]):
            with self.subTest(command=command):
                job.check_restartable(["tally", "train"] + command)


class SshLauncherTest(LaunchCase):
    """The ssh launcher against an sshd on 127.0.0.1; "localhost" is a second host."""

    @classmethod
    def setUpClass(cls):
        cls.sshd = LocalSshd()
        why = cls.sshd.start()
        if why:
            print(f"\nSKIPPED SshLauncherTest: {why}", file=sys.stderr)
            raise unittest.SkipTest(why)
        cls.hostfile = os.path.join(cls.sshd.dir.name, "hosts")
        with open(cls.hostfile, "w") as f:
            f.write("127.0.0.1\nlocalhost slots=2\n")
        cls.launcher_args = ["--launcher", "ssh", "-H", cls.hostfile, "--ssh-port",
                             str(cls.sshd.port), "--ssh-opts", cls.sshd.ssh_opts]

    @classmethod
    def tearDownClass(cls):
        cls.sshd.stop()

    def tearDown(self):
        # Every remote shell's secret file is gone with its job: removed by the shell when
        # the command ended, or by the launcher's ssh that sent the SIGKILL.
        left = os.listdir(self.sshd.remote_tmp)
        for name in left:
            shutil.rmtree(os.path.join(self.sshd.remote_tmp, name), ignore_errors=True)
        self.assertEqual(left, [], "secret files outlived the job")

    def check_synced_job(self):
        """Runs a job of -n 3 -s 2 with --sync-dst-dir and checks where each role ran."""
        with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as dst:
            shutil.copy(FAKE, src)
            rc, out, err, _ = self.launch(
                ["-n", "3", "-s", "2", "--sync-dst-dir", dst], "worker=exit0,*=exit0:1.5",
                command=[sys.executable, "fake_role.py"], cwd=src)
            self.assertEqual(rc, 0, err)
            roles = self.roles(out)
            self.assertEqual(len(roles), 6, out)
            hosts = {name: fields[5] for name, fields in roles.items()}
            self.assertEqual(hosts, {"scheduler": "127.0.0.1", "server 0": "127.0.0.1",
                                     "server 1": "localhost", "worker 0": "127.0.0.1",
                                     "worker 1": "localhost", "worker 2": "localhost"})
            for name, fields in roles.items():
                self.assertEqual(fields[2:5], ("127.0.0.1:" + fields[2].split(":")[1], "3", "2"))
                self.assertEqual(fields[6], dst)
                self.assertEqual(fields[7:], (TASK_IDS_3_2[name], "0", "ssh"))
            self.assertIn("[worker 2] worker 2 on stderr", err)
            self.assertNotIn("TALLY_REMOTE_PGID", out + err)
        self.assertNothingLeft()
        return err

    def test_sync_dst_dir_and_a_job_that_exits_0(self):
        self.check_synced_job()

    def test_the_hostfile_ssh_port_is_used(self):
        # The test's sshd listens on its port only, and --ssh-port names a port nothing
        # listens on: the job runs only if each line's own port wins, for the copy too.
        hostfile = os.path.join(self.sshd.dir.name, "hosts-with-ports")
        with open(hostfile, "w") as f:
            f.write(f"127.0.0.1:{self.sshd.port}\nlocalhost:{self.sshd.port} slots=2\n")
        self.launcher_args = ["--launcher", "ssh", "-H", hostfile, "--ssh-port",
                              str(job.free_port()), "--ssh-opts", self.sshd.ssh_opts]
        err = self.check_synced_job()
        self.assertNotIn("means ssh port", err)

    def test_mxnet_variables_are_forwarded_and_credentials_stay_off_command_lines(self):
        forwarded = {"OMP_NUM_THREADS": "3", "KMP_AFFINITY": "compact",
                     "LD_LIBRARY_PATH": "/opt/forwarded/lib", "DMLC_INTERFACE": "lo",
                     "AWS_ACCESS_KEY_ID": "AKIDFORWARDTEST",
                     "AWS_SECRET_ACCESS_KEY": "s3cret value/with+chars'\"$x"}
        env = dict(forwarded, FAKE_PRINT_VARS=",".join(forwarded))

        def no_secret_on_a_command_line():
            # ssh clients here and the remote shells (sshd's children) alike.
            lines = [cmdline(pid) for pid in map(int, filter(str.isdigit, os.listdir("/proc")))]
            self.assertGreaterEqual(sum("TALLY_REMOTE_PGID" in line for line in lines), 4)
            for secret in (forwarded["AWS_SECRET_ACCESS_KEY"], forwarded["AWS_ACCESS_KEY_ID"]):
                self.assertEqual([line for line in lines if secret in line], [],
                                 "a credential is on a command line")

        rc, err, _, out = self.interrupt_when_started(
            ["-n", "2", "-s", "1", "--env", "FAKE_PRINT_VARS", "--env", "KMP_AFFINITY:scatter"],
            "*=sleep", signal.SIGINT, 4, env=env, while_running=no_secret_on_a_command_line)
        self.assertEqual(rc, 130, err)
        for name in ("scheduler", "server 0", "worker 0", "worker 1"):
            for var, value in dict(forwarded, KMP_AFFINITY="scatter").items():
                self.assertIn(f"[{name}] var {var}={value}\n", out)
        self.assertNothingLeft()

    def test_a_failing_worker_stops_the_remote_processes(self):
        self.check_failing_worker("localhost")

    def test_sigint_stops_the_remote_processes(self):
        rc, err, _, _ = self.interrupt_when_started(["-n", "2", "-s", "1"], "*=grandchild",
                                                 signal.SIGINT, 4)
        self.assertEqual(rc, 130, err)
        self.assertNothingLeft()

    def test_the_secret_reaches_each_process_in_a_private_file(self):
        # Each remote shell writes the secret from ssh's stdin to a file of its own and
        # removes it when the command ends: by itself, or stopped by the launcher.
        rc, out, err, _ = self.launch(["-n", "2", "-s", "1", "--env", "FAKE_SECRET_REPORT:1"],
                                      "worker=exit0,*=exit0:1")
        self.assertEqual(rc, 0, err)
        files = self.assertPrivateSecretFiles(self.secret_reports(out), 4, one_file=False)
        self.assertEqual({os.path.dirname(os.path.dirname(f)) for f in files}, {self.sshd.remote_tmp})
        self.assertRemoved(files)
        rc, err, _, out = self.interrupt_when_started(
            ["-n", "1", "-s", "1", "--env", "FAKE_SECRET_REPORT:1"], "*=sleep", signal.SIGTERM, 3)
        self.assertEqual(rc, 143, err)
        files = self.assertPrivateSecretFiles(self.secret_reports(out), 3, one_file=False)
        self.assertRemoved(files)
        self.assertNothingLeft()

    def use_known_hosts(self, text, *options):
        """Runs the next jobs with a known_hosts file holding `text`; returns its path."""
        path = os.path.join(self.sshd.dir.name, f"known_hosts.{self.tag}")
        with open(path, "w") as f:
            f.write(text)
        self.launcher_args = ["--launcher", "ssh", "-H", self.hostfile, "--ssh-port", str(self.sshd.port),
                              "--ssh-opts", self.sshd.client_opts(path), *options]
        return path

    def assertRefusedHost(self):
        rc, out, err, _ = self.launch(["-n", "2", "-s", "1"], "*=exit0")
        self.assertEqual(rc, 255, err)
        self.assertIn("last line: Host key verification failed.", err)
        self.assertEqual(self.roles(out), {}, "a process ran on a host whose key was not checked")
        self.assertNothingLeft()

    def test_a_host_that_ssh_does_not_know_is_refused_by_default(self):
        # A spoofed host is one whose key ssh does not know, or knows otherwise: it gets no
        # secret, since ssh refuses it before the remote command (and its stdin) starts.
        self.use_known_hosts("")
        self.assertRefusedHost()

    def test_accept_new_host_keys_adds_a_new_host_and_refuses_a_changed_one(self):
        path = self.use_known_hosts("", "--ssh-accept-new-host-keys")
        rc, out, err, _ = self.launch(["-n", "2", "-s", "1"], "*=exit0")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(self.roles(out)), 4, out)
        for name in ("127.0.0.1", "localhost"):  # both hosts' keys are known now
            found = subprocess.run(["ssh-keygen", "-F", f"[{name}]:{self.sshd.port}", "-f", path],
                                   capture_output=True, text=True)
            self.assertEqual(found.returncode, 0, f"{name} is not in {path}")
        # A key other than the one known (the user's key stands for an impostor's) is refused.
        self.use_known_hosts(self.sshd.known_hosts_lines("user_key.pub"), "--ssh-accept-new-host-keys")
        self.assertRefusedHost()


@unittest.skipUnless(shutil.which("mpirun"), "mpirun is not installed (Debian package openmpi-bin)")
class MpiLauncherTest(LaunchCase):
    """The mpi launcher with OpenMPI's mpirun on this machine."""

    launcher_args = ["--launcher", "mpi"]

    def setUp(self):
        # mpirun makes its session directory under the temporary directory, named after the
        # host and the user (/tmp/ompi.HOST.UID): two tests' mpiruns at once (ctest -j2) race
        # to make it ("mkdir /tmp/ompi.vm.0: File exists"). Each test has a directory of its
        # own; Open MPI 4 reads orte_tmpdir_base, 5 prte_tmpdir_base.
        super().setUp()
        tmp = tempfile.TemporaryDirectory(prefix="tally-mpi-")
        self.addCleanup(tmp.cleanup)
        self.launch_env = {"TMPDIR": tmp.name, "OMPI_MCA_orte_tmpdir_base": tmp.name,
                           "OMPI_MCA_prte_tmpdir_base": tmp.name}

    def test_a_job_that_exits_0(self):
        rc, out, err, _ = self.launch(["-n", "2", "-s", "1"], "worker=exit0,*=exit0:1")
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(self.roles(out)),
                         ["scheduler", "server 0", "worker 0", "worker 1"])
        self.assertNothingLeft()

    def test_a_hostfile_with_slots_and_one_port(self):
        # localhost is this machine to mpirun, so no ssh is made: this checks that mpirun
        # takes the port's --mca plm_rsh_args and that slots place the roles.
        with tempfile.NamedTemporaryFile("w", suffix=".hosts") as hosts:
            hosts.write("localhost:22 slots=2\n")
            hosts.flush()
            rc, out, err, _ = self.launch(["-n", "3", "-s", "2", "-H", hosts.name],
                                          "worker=exit0,*=exit0:1")
        self.assertEqual(rc, 0, err)
        roles = self.roles(out)
        self.assertEqual(sorted(roles), sorted(TASK_IDS_3_2))
        for name, fields in roles.items():
            self.assertEqual(fields[5], "localhost")
            self.assertEqual(fields[7:], (TASK_IDS_3_2[name], "0", "mpi"))
        self.assertNothingLeft()

    def test_a_failing_worker_stops_the_job(self):
        # mpirun passes the SIGTERM on and escalates to SIGKILL by itself, at times before
        # the launcher's grace period ends: who kills the server that ignores SIGTERM varies,
        # that nothing of the job is left does not.
        self.check_failing_worker("localhost", launcher_kills=False)


if __name__ == "__main__":
    unittest.main()
