"""Tests of tools/launch.py that start no process of a job: hostfile lines, placement and
the command lines of the ssh, mpi and slurm launchers as --dry-run prints them.

ctest runs these classes as launch_test.HostfileTest and launch_test.DryRunTest
(launch_test.py imports them), beside the classes that run real jobs.
"""

import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
LAUNCH = os.path.join(ROOT, "tools", "launch.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from launcher import commands, elastic, hosts, job  # noqa: E402


class HostfileCase(unittest.TestCase):

    def write(self, text):
        handle = tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False)
        self.addCleanup(os.unlink, handle.name)
        with handle:
            handle.write(text)
        return handle.name


class HostfileTest(HostfileCase):
    """Hostfile lines as MXNet's launcher reads them, and where roles go."""

    def test_each_form(self):
        path = self.write("# cluster\n\nnode1 slots=2\n  node2   # the slow one\n"
                          "node3:2222\nnode4:4 slots=2\n\tnode5:22\tslots=3  \n")
        self.assertEqual(hosts.parse_hostfile(path), [
            hosts.Host("node1", 2, None, f"{path}:3"), hosts.Host("node2", 1, None, f"{path}:4"),
            hosts.Host("node3", 1, 2222, f"{path}:5"), hosts.Host("node4", 2, 4, f"{path}:6"),
            hosts.Host("node5", 3, 22, f"{path}:7")])

    def test_each_error_names_the_file_and_line(self):
        for line, why in (("a slots=0", "slots must be a positive integer, not '0'"),
                          ("a slots=x", "slots must be a positive integer, not 'x'"),
                          ("a slots=", "slots must be a positive integer, not ''"),
                          ("a slots=2 slots=3", "slots= given twice"),
                          ("a:abc", "'abc' after the colon is not an ssh port (1-65535)"),
                          ("a:0", "'0' after the colon is not an ssh port"),
                          ("a:70000", "'70000' after the colon is not an ssh port"),
                          ("a:", "'' after the colon is not an ssh port"),
                          ("a:\uff12\uff12", "'\uff12\uff12' after the colon is not an ssh port"),
                          ("a b", "unexpected 'b'"),
                          ("a max_slots=4", "unexpected 'max_slots=4'"),
                          ("a:4:2", "more than one colon"),
                          ("fe80::1", "more than one colon (an IPv6 address is not accepted"),
                          (":2", "no host name"),
                          ("slots=2", "no host name")):
            with self.subTest(line=line):
                path = self.write(f"# hosts\ngood\n{line}  # third line\n")
                with self.assertRaises(job.UsageError) as caught:
                    hosts.parse_hostfile(path)
                self.assertTrue(str(caught.exception).startswith(f"{path}:3: {why}"),
                                str(caught.exception))
                self.assertIn(f" in {line!r}; a line is `host`, `host:port` (port: the host's "
                              f"ssh port) or either followed by `slots=N`", str(caught.exception))
        path = self.write("# only comments\n\n")
        with self.assertRaisesRegex(job.UsageError, re.escape(f"{path}: no hosts; a line is")):
            hosts.parse_hostfile(path)

    def test_a_port_that_looks_like_a_slot_count_is_warned_about(self):
        path = self.write("node1:2\nnode2:22\nnode3:2222\nnode4 slots=2\n")
        warnings = []
        self.assertEqual([h.port for h in hosts.parse_hostfile(path, warnings.append)],
                         [2, 22, 2222, None])
        self.assertEqual(warnings, [f"{path}:1: 'node1:2' means ssh port 2 (as in MXNet's "
                                    f"launcher); for 2 slots write `node1 slots=2`"])

    def test_ports_for_mpi_and_slurm(self):
        one = [hosts.Host("a", port=2201, where="f:1"), hosts.Host("b", where="f:2")]
        self.assertEqual([h.port for h in hosts.with_default_port(one, 2222)], [2201, 2222])
        self.assertEqual(hosts.common_ssh_port(hosts.with_default_port(one, 2201)), 2201)
        self.assertIsNone(hosts.common_ssh_port([hosts.Host("a"), hosts.Host("b")]))
        with self.assertRaisesRegex(job.UsageError, r"the hostfile has f:1: 2201, f:2: none "
                                                    r"\(ssh default\)\. Give every line the "
                                                    r"same port"):
            hosts.common_ssh_port(one)
        with self.assertRaisesRegex(job.UsageError, r"^f:1: a:2201 gives an ssh port, which "
                                                    r"means nothing to --launcher slurm"):
            hosts.refuse_ports(one)
        hosts.refuse_ports([hosts.Host("a", 3)])

    def test_placement_spreads_roles_across_hosts(self):
        placed_on = [hosts.Host("a", 2, 2201), hosts.Host("b", 1), hosts.Host("c", 2)]
        self.assertEqual([h.name for h in job.rotation(placed_on, 5)], ["a", "b", "c", "a", "c"])
        self.assertEqual([h.name for h in job.rotation(placed_on, 2)], ["a", "b", "c"])
        self.assertEqual(len(job.rotation([hosts.Host("a", 10 ** 12)], 3)), 3)
        procs = job.plan_job(6, 3, placed_on, "a", 9000, {"X": "1"}, cluster="ssh")
        placed = [(p.name, p.host, p.ssh_port, p.env["DMLC_NODE_HOST"], p.env["TALLY_RANK"],
                   p.env["DMLC_TASK_ID"]) for p in procs]
        self.assertEqual(placed, [
            ("scheduler", "a", 2201, "a", "0", "9"),
            ("server 0", "a", 2201, "a", "0", "6"), ("server 1", "b", None, "b", "1", "7"),
            ("server 2", "c", None, "c", "2", "8"),
            ("worker 0", "a", 2201, "a", "0", "0"), ("worker 1", "b", None, "b", "1", "1"),
            ("worker 2", "c", None, "c", "2", "2"), ("worker 3", "a", 2201, "a", "3", "3"),
            ("worker 4", "c", None, "c", "4", "4"), ("worker 5", "a", 2201, "a", "5", "5")])
        for p in procs:
            self.assertEqual((p.env["DMLC_PS_ROOT_URI"], p.env["DMLC_PS_ROOT_PORT"],
                              p.env["DMLC_NUM_WORKER"], p.env["DMLC_NUM_SERVER"],
                              p.env["DMLC_ROLE"], p.env["X"], p.env["DMLC_NUM_ATTEMPT"],
                              p.env["DMLC_JOB_CLUSTER"]),
                             ("a", "9000", "6", "3", p.role, "1", "0", "ssh"))
            self.assertEqual(p.env.get("DMLC_WORKER_ID"), p.env["TALLY_RANK"]
                             if p.role == "worker" else None)
            self.assertEqual(p.env.get("DMLC_SERVER_ID"), p.env["TALLY_RANK"]
                             if p.role == "server" else None)
        job.set_attempt(procs, 2)
        self.assertEqual({p.env["DMLC_NUM_ATTEMPT"] for p in procs}, {"2"})

    def test_spare_servers_follow_the_servers_with_ids_of_their_own(self):
        procs = job.plan_job(2, 2, [hosts.Host("a", 1), hosts.Host("b", 1)], "a", 9000, {},
                             server_replicas=1, spare_servers=1)
        placed = [(p.name, p.host, p.env["TALLY_RANK"], p.env["DMLC_TASK_ID"], p.env.get("TALLY_SPARE_SERVERS"))
                  for p in procs]
        self.assertEqual(placed, [
            ("scheduler", "a", "0", "5", "1"), ("server 0", "a", "0", "2", "1"), ("server 1", "b", "1", "3", "1"),
            ("server 2", "a", "2", "4", "1"), ("worker 0", "a", "0", "0", "1"), ("worker 1", "b", "1", "1", "1")])
        self.assertEqual({p.env["DMLC_NUM_SERVER"] for p in procs}, {"2"})  # spares are not counted there
        self.assertNotIn("TALLY_SPARE_SERVERS", job.plan_job(1, 1, [hosts.Host("a", 1)], "a", 9000, {})[0].env)

    def test_elastic_tells_every_process(self):
        procs = job.plan_job(2, 1, [hosts.Host("a", 1)], "a", 9000, {}, elastic=True)
        self.assertEqual({p.env.get("TALLY_ELASTIC") for p in procs}, {"1"})
        self.assertNotIn("TALLY_ELASTIC", job.plan_job(1, 1, [hosts.Host("a", 1)], "a", 9000, {})[0].env)

    def test_the_scheduler_port_is_free_and_below_the_ephemeral_range(self):
        # A port from the ephemeral range could go to a server's or worker's bind to port 0
        # before the scheduler binds it (fault.StopTest failed so: "Address already in use").
        low = job._ephemeral_low()
        for _ in range(20):
            port = job.free_port("127.0.0.1")
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))  # free: this must not raise
            if low >= 10000:
                self.assertLess(port, low)
                self.assertGreaterEqual(port, low - 8192)


class DryRunTest(HostfileCase):
    """The command lines of the ssh, slurm and mpi launchers, as --dry-run prints them."""

    def run_dry(self, launcher, hostfile_text, *args, env=None):
        """(launch.py's result, hostfile path); the forwarded variables are set only as
        env says, whatever the test's own environment holds."""
        path = self.write(hostfile_text)
        argv = [sys.executable, LAUNCH, "--launcher", launcher, "--dry-run", "--port", "9091",
                "-H", path] + list(args) + ["train", "--kv-store", "dist_sync"]
        environ = {k: v for k, v in os.environ.items() if k not in job.FORWARDED_VARS}
        result = subprocess.run(argv, capture_output=True, text=True, timeout=20,
                                env=dict(environ, **(env or {})))
        return result, path

    def dry_run(self, launcher, hostfile_text, *args, env=None):
        result, _ = self.run_dry(launcher, hostfile_text, *args, env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        return [shlex.split(line) for line in result.stdout.splitlines()]

    def refused(self, launcher, hostfile_text, *args):
        """launch.py's error message, and the hostfile's path."""
        result, path = self.run_dry(launcher, hostfile_text, *args)
        self.assertEqual(result.returncode, 2, result.stdout)
        self.assertEqual(result.stdout, "")
        return result.stderr, path

    def test_ssh_command_lines(self):
        lines = self.dry_run("ssh", "h1\nh2\n", "-n", "2", "-s", "1", "--ssh-port", "2222",
                             "--env", "OMP_NUM_THREADS:4")
        self.assertEqual(len(lines), 4)
        for argv, host, role in zip(lines, ["h1", "h1", "h1", "h2"],
                                    ["scheduler", "server", "worker", "worker"]):
            # ssh checks the host's key itself: no StrictHostKeyChecking option.
            self.assertEqual(argv[:7], ["ssh", "-o", "BatchMode=yes", "-p", "2222", host, argv[6]])
            remote = argv[6]
            # The secret comes through ssh's stdin, never on a command line, and goes on
            # into a file of mode 600 that the command finds in TALLY_JOB_SECRET_FILE.
            self.assertTrue(remote.startswith(commands.REMOTE_SECRET_FILE), remote)
            self.assertNotIn("TALLY_JOB_SECRET=", remote)
            self.assertIn(f"cd {shlex.quote(os.getcwd())} && env TALLY_JOB_SECRET_FILE=\"$d/secret\" "
                          f"DMLC_ROLE={role} ", remote)
            self.assertIn("DMLC_PS_ROOT_URI=h1 DMLC_PS_ROOT_PORT=9091 ", remote)
            self.assertIn(f"DMLC_NODE_HOST={host} ", remote)
            self.assertIn(" DMLC_NUM_ATTEMPT=0 DMLC_JOB_CLUSTER=ssh ", remote)
            self.assertIn("OMP_NUM_THREADS=4 train --kv-store dist_sync", remote)

    def test_a_server_hostfile_puts_the_servers_apart_from_the_workers(self):
        servers = self.write("s1\ns2:2202\n")
        lines = self.dry_run("ssh", "w1\nw2\n", "-n", "3", "-s", "3", "--server-hostfile", servers)
        placed = [(argv[-2], re.search(r"DMLC_ROLE=(\w+)", argv[-1]).group(1),
                   re.search(r"DMLC_NODE_HOST=(\S+)", argv[-1]).group(1),
                   "-p" in argv and argv[argv.index("-p") + 1]) for argv in lines]
        self.assertEqual(placed, [("w1", "scheduler", "w1", False),
                                  ("s1", "server", "s1", False), ("s2", "server", "s2", "2202"),
                                  ("s1", "server", "s1", False),
                                  ("w1", "worker", "w1", False), ("w2", "worker", "w2", False),
                                  ("w1", "worker", "w1", False)])
        for argv in lines:
            self.assertIn("DMLC_PS_ROOT_URI=w1 ", argv[-1])

    def test_a_server_hostfile_needs_ssh_and_a_hostfile(self):
        servers = self.write("s1\n")
        err, _ = self.refused("mpi", "w1\n", "-n", "1", "--server-hostfile", servers)
        self.assertIn("--server-hostfile is for --launcher ssh", err)
        result = subprocess.run([sys.executable, LAUNCH, "--launcher", "ssh", "--dry-run", "-n", "1",
                                 "--server-hostfile", servers, "train"], capture_output=True, text=True,
                                timeout=20)
        self.assertEqual(result.returncode, 2, result.stdout)
        self.assertIn("--launcher ssh needs -H HOSTFILE", result.stderr)

    def test_ssh_ports_per_host(self):
        text = "h1:2201\nh2 slots=2\n"
        for extra, h2_port in (([], []), (["--ssh-port", "2222"], ["-p", "2222"])):
            with self.subTest(extra=extra):
                lines = self.dry_run("ssh", text, "-n", "3", "-s", "1", *extra)
                hosts_and_ports = [argv[3:argv.index(argv[-1])] for argv in lines]
                h1 = ["-p", "2201", "h1"]
                self.assertEqual(hosts_and_ports, [h1, h1, h1, h2_port + ["h2"], h2_port + ["h2"]])

    def test_ssh_forwards_mxnet_variables_and_reads_credentials_from_stdin(self):
        env = {"OMP_NUM_THREADS": "2", "KMP_AFFINITY": "compact", "LD_LIBRARY_PATH": "/l",
               "DMLC_INTERFACE": "eth0", "AWS_ACCESS_KEY_ID": "AKID",
               "AWS_SECRET_ACCESS_KEY": "k3y"}
        lines = self.dry_run("ssh", "h1\n", "-n", "1", "-s", "1", "--env", "DMLC_INTERFACE:ib0",
                             env=env)
        self.assertEqual(len(lines), 3)
        for argv in lines:
            remote = argv[-1]
            self.assertTrue(remote.startswith(
                commands.REMOTE_SECRET_FILE +
                "IFS= read -r AWS_ACCESS_KEY_ID && export AWS_ACCESS_KEY_ID && "
                "IFS= read -r AWS_SECRET_ACCESS_KEY && export AWS_SECRET_ACCESS_KEY && echo "),
                remote)
            self.assertIn(" OMP_NUM_THREADS=2 KMP_AFFINITY=compact LD_LIBRARY_PATH=/l "
                          "DMLC_INTERFACE=ib0 train ", remote)
            self.assertNotIn("AKID", remote)
            self.assertNotIn("k3y", remote)
        result, _ = self.run_dry("ssh", "h1\n", "-n", "1",
                                 env={"AWS_SECRET_ACCESS_KEY": "two\nlines"})
        self.assertEqual(result.returncode, 2)
        self.assertIn("launch.py: error: AWS_SECRET_ACCESS_KEY holds a newline; over ssh it "
                      "travels as one line of ssh's stdin", result.stderr)
        # The local launcher's processes inherit them: nothing to add.
        argv = [sys.executable, LAUNCH, "--dry-run", "-n", "1", "train"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20,
                             env=dict(os.environ, **env)).stdout
        self.assertNotIn("OMP_NUM_THREADS", out)
        self.assertNotIn("AWS_", out)

    def test_a_bad_hostfile_is_refused_naming_its_line(self):
        for launcher in ("ssh", "mpi", "slurm"):
            with self.subTest(launcher=launcher):
                err, path = self.refused(launcher, "h1\n\nh2:70000\n", "-n", "1")
                self.assertIn(f"launch.py: error: {path}:3: '70000' after the colon is not an "
                              f"ssh port (1-65535) in 'h2:70000'; a line is `host`, `host:port` "
                              f"(port: the host's ssh port) or either followed by `slots=N`", err)
        err, _ = self.refused("ssh", "h1\n", "-n", "1", "--ssh-port", "0")
        self.assertIn("--ssh-port 0: not a TCP port", err)

    def test_slurm_command_lines(self):
        lines = self.dry_run("slurm", "n1\nn2 slots=2\n", "-n", "3", "-s", "2", "--env", "LIST:a,b")
        self.assertEqual(len(lines), 6)
        expected = [("scheduler", 0, "n1", "DMLC_TASK_ID=5"),
                    ("server", 0, "n1", "DMLC_TASK_ID=3,DMLC_SERVER_ID=0"),
                    ("server", 1, "n2", "DMLC_TASK_ID=4,DMLC_SERVER_ID=1"),
                    ("worker", 0, "n1", "DMLC_TASK_ID=0,DMLC_WORKER_ID=0"),
                    ("worker", 1, "n2", "DMLC_TASK_ID=1,DMLC_WORKER_ID=1"),
                    ("worker", 2, "n2", "DMLC_TASK_ID=2,DMLC_WORKER_ID=2")]
        for argv, (role, rank, host, ids) in zip(lines, expected):
            # A value with a comma travels in srun's environment, named in --export.
            # So does the job's secret (shown masked by --dry-run).
            self.assertEqual(argv[:6], ["LIST=a,b", "TALLY_JOB_SECRET=<secret>", "srun", "--nodes=1",
                                        "--ntasks=1", f"--nodelist={host}"])
            self.assertEqual(argv[7:9], ["--overlap", f"--job-name={role}" + (
                f"-{rank}" if role != "scheduler" else "")])
            self.assertEqual(argv[9], f"--export=ALL,DMLC_ROLE={role},DMLC_PS_ROOT_URI=n1,"
                                      f"DMLC_PS_ROOT_PORT=9091,DMLC_NUM_WORKER=3,"
                                      f"DMLC_NUM_SERVER=2,DMLC_NODE_HOST={host},"
                                      f"TALLY_RANK={rank},{ids},DMLC_NUM_ATTEMPT=0,"
                                      f"DMLC_JOB_CLUSTER=slurm,TALLY_STOPPED_STATUS=75,"
                                      f"TALLY_SERVER_REPLICAS=0,OMP_WAIT_POLICY=passive,LIST,"
                                      f"TALLY_JOB_SECRET")
            self.assertEqual(argv[10:], ["train", "--kv-store", "dist_sync"])

    def test_mpi_command_lines(self):
        lines = self.dry_run("mpi", "m1\nm2\n", "-n", "2", "-s", "2")
        # The secret is in mpirun's environment, forwarded by name.
        self.assertEqual([argv[:6] for argv in lines],
                         [["TALLY_JOB_SECRET=<secret>", "mpirun", "-n", "1", "--host", h]
                          for h in ("m1", "m1", "m2", "m1", "m2")])
        for argv, rank in zip(lines, ["0", "0", "1", "0", "1"]):
            self.assertEqual(argv[argv.index("TALLY_JOB_SECRET") - 1], "-x")
            self.assertIn(f"TALLY_RANK={rank}", argv[argv.index("TALLY_RANK=" + rank) - 1:])
            self.assertEqual(argv[argv.index("TALLY_RANK=" + rank) - 1], "-x")
            self.assertEqual(argv[-3:], ["train", "--kv-store", "dist_sync"])

    def test_spares_need_replicas(self):
        err, _ = self.refused("ssh", "h1\n", "-n", "1", "-s", "2", "--spare-servers", "1")
        self.assertIn("--spare-servers 1: a spare takes a lost server's place in its chains, which needs "
                      "--server-replicas 1 or more", err)

    def test_slurm_refuses_an_ssh_port(self):
        err, path = self.refused("slurm", "n1\nn2:2\n", "-n", "1")
        self.assertIn(f"launch.py: error: {path}:2: n2:2 gives an ssh port, which means nothing "
                      f"to --launcher slurm (srun starts the processes); write `n2` or "
                      f"`n2 slots=N`", err)

    def test_mpi_takes_one_ssh_port_for_every_host(self):
        agent = "-o BatchMode=yes -p 2201"
        for text, extra in (("m1:2201\nm2:2201 slots=2\n", []),
                            ("m1:2201\nm2\n", ["--ssh-port", "2201"]),
                            ("m1\nm2\n", ["--ssh-port", "2201"])):
            with self.subTest(text=text, extra=extra):
                for argv in self.dry_run("mpi", text, "-n", "2", "-s", "1", *extra):
                    self.assertEqual(argv[argv.index("plm_rsh_args") + 1], agent)
        for argv in self.dry_run("mpi", "m1\nm2 slots=2\n", "-n", "2"):
            self.assertNotIn("plm_rsh_args", argv)
        for text, extra, ports in (
                ("m1:2201\nm2\n", [], "{path}:1: 2201, {path}:2: none (ssh default)"),
                ("m1:2201\nm2\n", ["--ssh-port", "2222"], "{path}:1: 2201, {path}:2: 2222"),
                ("m1:2201\nm2:2202\n", [], "{path}:1: 2201, {path}:2: 2202")):
            with self.subTest(text=text, extra=extra):
                err, path = self.refused("mpi", text, "-n", "2", *extra)
                self.assertIn("launch.py: error: --launcher mpi needs one ssh port for every host, "
                              "since mpirun takes one for all of them; the hostfile has "
                              + ports.format(path=path) + ". Give every line the same port, or "
                              "use --launcher ssh", err)

    def test_mpi_forwards_mxnet_variables(self):
        lines = self.dry_run("mpi", "m1\n", "-n", "1", "-s", "1",
                             env={"OMP_NUM_THREADS": "2", "AWS_SECRET_ACCESS_KEY": "k3y"})
        for argv in lines:
            self.assertEqual(argv[:2], ["TALLY_JOB_SECRET=<secret>",
                                        "AWS_SECRET_ACCESS_KEY=<secret>"])
            self.assertEqual(argv[argv.index("OMP_NUM_THREADS=2") - 1], "-x")
            self.assertEqual(argv[argv.index("AWS_SECRET_ACCESS_KEY", 2) - 1], "-x")
            self.assertEqual(argv[argv.index("DMLC_JOB_CLUSTER=mpi") - 1], "-x")

    def test_elastic_reaches_remote_processes(self):
        for argv in self.dry_run("mpi", "m1\n", "-n", "2", "-s", "1", "--elastic"):
            self.assertEqual(argv[argv.index("TALLY_ELASTIC=1") - 1], "-x")

    def test_elastic_worker_counts(self):
        # -n may be left out for --max-workers, which then gives it.
        lines = self.dry_run("ssh", "m1\n", "--elastic", "--max-workers", "3")
        self.assertEqual(sum("DMLC_ROLE=worker" in argv[-1] and "DMLC_NUM_WORKER=3" in argv[-1] for argv in lines), 3)
        for args, why in ((["-n", "2", "--min-workers", "1"], "--min-workers needs --elastic"),
                          (["-n", "2", "--max-workers", "2"], "--max-workers needs --elastic"),
                          (["-n", "2", "--elastic", "--max-joins", "2"], "--max-joins bounds the new processes "
                                                                         "of --max-workers, which is not given"),
                          (["--elastic"], "-n/--num-workers is required (or --elastic --max-workers N)"),
                          (["-n", "2", "--elastic", "--max-workers", "3"], "--max-workers 3 and -n 2 differ"),
                          (["--elastic", "--max-workers", "3", "--min-workers", "4"],
                           "--min-workers 4: from 1 to the job's workers (3, --max-workers)"),
                          (["-n", "2", "--elastic", "--min-workers", "0"], "--min-workers 0: from 1 to the job's "
                                                                          "workers (2, -n)"),
                          (["--elastic", "--max-workers", "2", "--max-joins", "0"], "--max-joins 0: at least 1"),
                          # Only the launcher's joiners join: --env cannot make every worker one.
                          (["--elastic", "-n", "2", "--env", "TALLY_JOIN:1"],
                           "--env TALLY_JOIN:1: TALLY_JOIN is set by the launcher for each process")):
            with self.subTest(args=args):
                err, _ = self.refused("ssh", "m1\n", *args)
                self.assertIn(f"launch.py: error: {why}", err)

    def test_a_joiners_step_has_a_name_of_its_own(self):
        proc = job.plan_job(3, 1, [hosts.Host("n1")], "n1", 9000, {})[-1]
        self.assertEqual(commands.step_name(proc), "worker-2")
        self.assertEqual(commands.step_name(elastic.joiner_proc(proc, 2)), "worker-2-join2")
        self.assertEqual(elastic.joiner_proc(proc, 2).env, dict(proc.env, TALLY_JOIN="1"))
        self.assertNotIn("TALLY_JOIN", proc.env)

    def test_plain_has_no_secret(self):
        lines = self.dry_run("mpi", "m1\n", "-n", "1", "-s", "1", "--plain")
        for argv in lines:
            self.assertEqual(argv[0], "mpirun")
            self.assertNotIn("TALLY_JOB_SECRET", argv)
            self.assertEqual(argv[argv.index("TALLY_PLAIN=1") - 1], "-x")

    def test_host_keys_are_checked_unless_new_ones_are_accepted(self):
        # A spoofed host would receive the job's secret: ssh checks every host's key.
        accept_new = ["-o", "StrictHostKeyChecking=accept-new"]
        for extra in ([], ["--ssh-accept-new-host-keys"]):
            for launcher in ("ssh", "mpi"):
                with self.subTest(launcher=launcher, extra=extra):
                    lines = self.dry_run(launcher, "h1:2201\n", "-n", "1", "--sync-dst-dir", "/d", *extra)
                    text = "\n".join(shlex.join(argv) for argv in lines)
                    self.assertNotIn("StrictHostKeyChecking=no", text)
                    self.assertEqual("StrictHostKeyChecking=accept-new" in text, bool(extra), text)
                    if extra and launcher == "ssh":
                        for argv in lines:  # the copy's ssh, then each process's
                            ssh = argv[argv.index("ssh"):]
                            self.assertEqual(ssh[5:7], accept_new, argv)
        result = subprocess.run([sys.executable, LAUNCH, "--dry-run", "-n", "1", "--ssh-accept-new-host-keys",
                                 "train"], capture_output=True, text=True, timeout=20)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--ssh-accept-new-host-keys is for --launcher ssh or mpi", result.stderr)

    def test_a_remote_sigkill_removes_the_secret_directory_the_shell_reported(self):
        made = "/scratch/u/tally-job.Ab3dEf9hIj"  # as REMOTE_SECRET_FILE's mktemp names it
        self.assertEqual(commands.remote_kill("h", 12, "KILL", [], 2201, made)[-2:],
                         ["h", f"kill -s KILL -- -12; rm -rf -- {made}"])
        for signal_name, path in (("TERM", made), ("KILL", None), ("KILL", "/home/u"),
                                  ("KILL", "/tmp/tally-job.x; rm -rf ~")):
            with self.subTest(signal=signal_name, path=path):
                self.assertEqual(commands.remote_kill("h", 12, signal_name, [], None, path)[-1],
                                 f"kill -s {signal_name} -- -12")

    def test_local_processes_get_the_secret_in_a_file(self):
        result = subprocess.run([sys.executable, LAUNCH, "--dry-run", "-n", "1", "train"],
                                capture_output=True, text=True, timeout=20)
        for argv in map(shlex.split, result.stdout.splitlines()):
            self.assertIn(f"TALLY_JOB_SECRET_FILE={commands.DRY_RUN_SECRET_FILE}", argv)
            self.assertFalse([item for item in argv if item.startswith("TALLY_JOB_SECRET=")], argv)

    def test_secret_cannot_be_overridden(self):
        argv = [sys.executable, LAUNCH, "--dry-run", "-n", "1", "--env", "TALLY_JOB_SECRET:00",
                "train"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        self.assertEqual(result.returncode, 2)
        self.assertIn("TALLY_JOB_SECRET is set by the launcher", result.stderr)


if __name__ == "__main__":
    unittest.main()
