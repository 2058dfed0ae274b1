#!/usr/bin/env bash
# The relocatable bundle (tools/bundle.sh) cannot rot between GPU runs: it is built from this
# build, unpacked into an empty folder, checked with ldd (every library resolves inside it
# or is glibc's or CUDA's), and used from there: a CPU training, a dist_sync job through its
# launcher, and run-gpu-checks.sh, whose GPU tests must say they were skipped for want of a
# GPU and none of which may fail.
#
#   bundle_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d /tmp/tally-bundle-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

TALLY_BUILD="$build" TALLY_BUNDLE_DIR="$tmp/out" TALLY_BUNDLE_ZSTD_LEVEL=3 "$src/tools/bundle.sh"
mkdir "$tmp/unpacked"
tar --zstd -xf "$tmp/out/tally-bundle.tar.zst" -C "$tmp/unpacked"
bundle="$tmp/unpacked/tally-bundle"
rm -rf "$tmp/out"
"$src/tools/bundle.sh" --check "$bundle"
# The check can fail: without its copy of libzmq the bundle would load the system's.
mv "$bundle/lib/libzmq.so.5" "$tmp/libzmq.so.5"
if "$src/tools/bundle.sh" --check "$bundle" 2>"$tmp/check.err"; then fail "--check passed a bundle without libzmq"; fi
grep -q "needs libzmq.so.5" "$tmp/check.err" || { cat "$tmp/check.err"; fail "--check did not name libzmq"; }
mv "$tmp/libzmq.so.5" "$bundle/lib/libzmq.so.5"

# From an unrelated folder, with an environment that names nothing of the build.
mkdir "$tmp/run" && cd "$tmp/run"
small=(--num-layers 8 --image-shape 3,12,12 --num-classes 4 --batch-size 16 --num-examples 128
       --disp-batches 4 --num-epochs 2 --progress=false)
env -i PATH=/usr/bin:/bin HOME="$tmp/run" OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive \
  "$bundle/bin/tally" train "${small[@]}" >train.log 2>&1 || { cat train.log; fail "tally train from the bundle"; }
grep -q 'Epoch\[1\] Batch \[' train.log || { cat train.log; fail "no Speedometer line from the bundle's tally"; }
grep -q 'Epoch\[1\] Train-accuracy=' train.log || { cat train.log; fail "no Train- line from the bundle's tally"; }

env -i PATH=/usr/bin:/bin HOME="$tmp/run" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive \
  python3 "$bundle/tools/launch.py" -n 1 -s 1 --launcher local "$bundle/bin/tally" train \
  --kv-store dist_sync "${small[@]}" >dist.log 2>&1 || { cat dist.log; fail "a dist_sync job through the bundle's launcher"; }
grep -q 'Epoch\[1\] Train-accuracy=' dist.log || { cat dist.log; fail "no Train- line from the bundle's dist_sync job"; }

"$bundle/run-gpu-checks.sh" "$tmp/checks" --only tests --time-limit 300 >checks.log 2>&1 || true
python3 - "$tmp/checks/summary.json" <<'EOF' || { cat checks.log; fail "run-gpu-checks.sh on a machine without a GPU"; }
import json, sys
s = json.load(open(sys.argv[1]))
t = s["tests"]
assert t["failed"] == 0 and t["crashed"] == 0, [c for c in t["cases"] if c["result"] in ("failed", "crashed")]
skipped = [c for c in t["cases"] if c["result"] == "skipped"]
assert skipped, "no GPU test was skipped on a machine without a GPU"
unexplained = [c["name"] for c in skipped if "no GPU present" not in c["message"]]
assert not unexplained, f"skipped without saying a GPU is missing: {unexplained}"
assert s["passed"] is False, "a run without bench and jobs must not claim to have passed"
print(f"run-gpu-checks: {t['passed']} passed, {len(skipped)} skipped for want of a GPU")
EOF
echo "bundle test: passed"
