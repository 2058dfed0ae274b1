#!/usr/bin/env bash
# tally_scheduler links no CUDA library: scheduler_probe, linked with tally_scheduler alone,
# must need no libcudart, libcublas, libcudnn or libnccl (ldd) and hold no CUDA symbol (nm),
# and refuse cuda:0 as a build without CUDA does. In a build with CUDA the control,
# cpu_only_probe (linked with tally_ops), must show libcudart under the same ldd check, so
# the check is seen to catch a library that drags CUDA in.
#   scheduler_probe_test.sh PROBE CONTROL HAVE_CUDA(ON|OFF)
set -euo pipefail
probe=$1 control=$2 have_cuda=$3
fail() { echo "FAIL: $*"; exit 1; }
cuda_libs='libcuda|libcudart|libcublas|libcudnn|libnccl'

if linked=$(ldd "$probe" | grep -Ei "$cuda_libs"); then
  echo "$linked"
  fail "scheduler_probe (tally_scheduler alone) links CUDA libraries"
fi
pattern='(^|[^A-Za-z])(cuda[A-Z_]|cudnn|cublas|nccl|__cuda)|tally::cuda::'
if found=$(nm -C "$probe" | grep -E "$pattern"); then
  echo "$found" | head -20
  fail "CUDA symbols in scheduler_probe"
fi
echo "scheduler_probe: $(ldd "$probe" | wc -l) shared libraries, none of CUDA; no CUDA symbol"
"$probe" || fail "scheduler_probe did not run"

set +e
out=$("$probe" parse cuda:0 2>&1); rc=$?
set -e
echo "scheduler_probe parse cuda:0 -> rc $rc: $out"
[[ $rc == 1 ]] || fail "cuda:0 was not refused"
[[ $out == *"cuda:0: this tally was built without CUDA"* ]] || fail "the refusal does not say why"

if [[ $have_cuda == ON ]]; then
  # ldd's whole output first: `ldd | grep -q` under pipefail fails when grep's early exit
  # cuts ldd off (SIGPIPE), which happened on a loaded machine.
  control_libs=$(ldd "$control")
  grep -Eqi 'libcudart' <<<"$control_libs" || fail "the control (tally_ops) shows no libcudart: the check would see nothing"
  echo "control: cpu_only_probe (tally_ops) links $(grep -Eci "$cuda_libs" <<<"$control_libs") CUDA libraries"
fi
echo PASS
