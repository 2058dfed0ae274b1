#!/usr/bin/env bash
# Runs the multi-process tests (fault.*, launch.*, slurm.*, python.*) on a fraction of this
# machine's CPU time, as a machine that many times slower would run them: the check that no
# test waits a fixed time for something a slow machine does late.
#
#   tools/slow_machine.sh                 # a quarter of the machine, ctest -j2
#   tools/slow_machine.sh 8 -R '^fault\.' # an eighth, only the fault tests
#
# The first argument, when a number, is the slowdown N: the tests get 1/N of the cores'
# time through a CPU cgroup quota (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us`). The rest
# go to ctest, after the default selection. Needs root (to make the cgroup) and a build in
# build/ (tools/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
slowdown=4
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then slowdown=$1; shift; fi
period=100000
quota=$(( $(nproc) * period / slowdown ))
name="tally-slow-$$"

if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  group=/sys/fs/cgroup/$name
  mkdir "$group"
  echo "$quota $period" > "$group/cpu.max"
elif [[ -d /sys/fs/cgroup/cpu ]]; then
  group=/sys/fs/cgroup/cpu/$name
  mkdir "$group"
  echo "$period" > "$group/cpu.cfs_period_us"
  echo "$quota" > "$group/cpu.cfs_quota_us"
else
  echo "slow_machine.sh: no CPU cgroup controller here (neither cgroup v2 cpu.max nor v1 cpu)" >&2
  exit 2
fi
# The group can be removed only once empty: ctest and every process it started have exited.
trap 'rmdir "$group" 2>/dev/null || true' EXIT

echo "slow_machine.sh: $(nproc) cores at 1/$slowdown of their time ($quota us per $period us, $group)"
start=$SECONDS
status=0
bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$group" \
  ctest --test-dir build -L quick -R '^(fault|launch|slurm|python)\.' --output-on-failure -j2 "$@" \
  || status=$?
echo "slow_machine.sh: ctest exited $status after $((SECONDS - start)) s at 1/$slowdown of the CPU"
exit $status
