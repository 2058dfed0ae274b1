#!/usr/bin/env bash
# A build without CUDA (-DTALLY_WITH_CUDA=OFF) of the ops library and a probe on it:
# the library and the probe contain and link no CUDA symbol, and asking for a GPU prints a
# clear error naming the device and the reason. Builds only what it checks (a few minutes
# on 2 cores), in WORK_DIR, reusing it when run again.
#   cpu_only_test.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1 work=$2
fail() { echo "FAIL: $*"; exit 1; }

cmake -S "$src" -B "$work" -DTALLY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >"$work.configure.log" 2>&1 \
  || { cat "$work.configure.log"; fail "configure without CUDA"; }
grep -q "Tally: CUDA ops OFF" "$work.configure.log" || fail "the configure step did not turn CUDA off"
cmake --build "$work" --target tally_ops cpu_only_probe -j2 >"$work.build.log" 2>&1 \
  || { tail -50 "$work.build.log"; fail "build without CUDA"; }

lib=$(find "$work" -name libtally_ops.a | head -1)
probe=$(find "$work" -type f -name cpu_only_probe | head -1)
[[ -n $lib && -n $probe ]] || fail "libtally_ops.a or cpu_only_probe not built"

# CUDA runtime (cudaX), cuDNN, cuBLAS and NCCL symbols, and Tally's own CUDA backend.
pattern='(^|[^A-Za-z])(cuda[A-Z_]|cudnn|cublas|nccl|__cuda)|tally::cuda::'
if found=$(nm -C "$lib" "$probe" 2>/dev/null | grep -E "$pattern"); then
  echo "$found" | head -20
  fail "CUDA symbols in a build without CUDA"
fi
if linked=$(ldd "$probe" | grep -Ei 'libcuda|libcudnn|libcublas|libnccl'); then
  echo "$linked"
  fail "the probe links CUDA libraries"
fi
echo "no CUDA symbol in $(basename "$lib") ($(nm "$lib" | wc -l) symbols) or the probe"

set +e
out=$("$probe" parse cuda:0 2>&1); rc=$?
set -e
echo "probe parse cuda:0 -> rc $rc: $out"
[[ $rc == 1 ]] || fail "cuda:0 was not refused"
[[ $out == *"cuda:0: this tally was built without CUDA"* ]] || fail "the refusal does not say why"

set +e
out=$("$probe" alloc 2>&1); rc=$?
set -e
echo "probe alloc -> rc $rc: $(echo "$out" | grep -m1 'cannot allocate')"
[[ $rc != 0 ]] || fail "a tensor was allocated on cuda:0 without CUDA"
[[ $out == *"cannot allocate on cuda:0: "*"built without CUDA"* ]] || fail "the allocation failure does not say why"
echo "PASS"
