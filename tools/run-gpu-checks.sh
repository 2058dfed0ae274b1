#!/usr/bin/env bash
# Validates Tally on a GPU machine from the relocatable bundle (tools/bundle.sh), with nothing
# but a driver, python3 and NVIDIA's libraries there. Shipped as tally-bundle/run-gpu-checks.sh.
#
#   tally-bundle/run-gpu-checks.sh OUTDIR [--time-limit SECONDS] [--only tests,bench,jobs|input]
#
# In order, each step bounded by what is left of --time-limit (default 480 s):
#   env     the CUDA libraries found and where (libexec/cuda-libs.sh), the GPU, the driver,
#           the cuDNN, cuBLAS and NCCL versions loaded                  -> OUTDIR/env.txt
#   tests   every test executable in tests/, gtest XML per executable  -> OUTDIR/tests/
#           (a crash is recorded against the test that was running, and the executable is
#           run again without it, so one crash does not hide the rest)
#   bench   tally bench compute --gpu --json, PyTorch AMP the peer      -> OUTDIR/bench.jsonl
#   pack    an ImageNet-sized synthetic JPEG pack (tally make-data, im2rec) -> OUTDIR/work/
#   bench-io  tally bench io --gpu on it: nvJPEG decode + augmentation    -> OUTDIR/bench.jsonl
#   bench-io-overlap  tally bench io --gpu --decode-overlap: each way of driving nvJPEG timed
#           idle and beside busy work on another stream                 -> OUTDIR/bench.jsonl
#   jobs    ResNet-50 --benchmark 1 in fp16 and bf16 with --kv-store device; fp16 at batch
#           256 on its synthetic batch and on the JPEG pack decoded on the GPU (again with
#           the decode tuning that bench-io-overlap found fastest beside busy kernels, when
#           that is not the default, and with the cuda decoder and yuv-output); one GPU
#           worker with two CPU servers (dist_device_sync) through tools/launch.py; each
#           must exit 0 with its loss falling                           -> OUTDIR/jobs/
#   twotoone  the mission's shape: one GPU worker and two CPU servers (dist_device_sync,
#           fp16, batch 256, 200 steps, secure and --plain) against --kv-store device in the
#           same run, and the CPU emulation of that job (bench replay at the device job's
#           speed, 1 worker, 2 servers, full speed) and its compute alone  -> OUTDIR/jobs/
# --only input runs what concerns the GPU input path alone: the pack, bench-io,
# bench-io-overlap and the batch-256 jobs (about 2 minutes on an H100).
# Then OUTDIR/summary.json (tools/gpu_checks_summary.py): commit, device, every test's
# result, the figures, the jobs' losses, and "passed". At the time limit, or on SIGTERM,
# the step running is stopped and the summary is written from what was finished. Exits 0
# only when everything passed.
set -uo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
usage() { echo "usage: $0 OUTDIR [--time-limit SECONDS] [--only tests,bench,jobs,twotoone|input]" >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || usage
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "run-gpu-checks: cannot make $1" >&2; exit 2; }
shift
limit=480
only="tests,bench,jobs,twotoone"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --time-limit) [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "run-gpu-checks: --time-limit needs seconds" >&2; exit 2; }
                  limit=$2; shift 2 ;;
    --only) only=${2:-}; shift 2 ;;
    *) usage ;;
  esac
done
for word in ${only//,/ }; do
  [[ $word =~ ^(tests|bench|jobs|twotoone|input)$ ]] ||
    { echo "run-gpu-checks: --only $only: $word is not tests, bench, jobs, twotoone or input" >&2; exit 2; }
done
deadline=$((SECONDS + limit))
mkdir -p "$out/tests" "$out/jobs"
: >"$out/steps.tsv"

# The JPEG pack (OUTDIR/work, some 300 MB) is scratch: removed before the summary.
summarize() {
  rm -rf "$out/work"
  python3 "$here/tools/gpu_checks_summary.py" "$out" "$here/BUNDLE_INFO" "$limit"
}
# The step running is a background child waited for, so a signal is handled at once rather
# than when the step ends: the child is stopped and the summary written from what finished.
child=""
on_signal() {
  echo "run-gpu-checks: stopped by a signal; writing the summary" >&2
  [[ -n "$child" ]] && kill -TERM "$child" 2>/dev/null && wait "$child"
  summarize
  exit 143
}
trap on_signal TERM INT

left() { echo $((deadline - SECONDS)); }
# step NAME MAX_SECONDS LOG COMMAND...: runs COMMAND under the smaller of MAX_SECONDS and the
# time left, its output into LOG, and records "NAME rc seconds" in steps.tsv (rc 124: timed out).
step() {
  local name=$1 max=$2 log=$3 t0=$SECONDS rc
  shift 3
  local budget=$(($(left) < max ? $(left) : max))
  if ((budget <= 5)); then
    printf '%s\tnot-run\t0\n' "$name" >>"$out/steps.tsv"
    echo "run-gpu-checks: $name not run: the time limit is reached" >&2
    return 124
  fi
  echo "run-gpu-checks: $name (at most ${budget}s)" >&2
  timeout --kill-after=10 "$budget" "$@" >"$log" 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  child=""
  printf '%s\t%s\t%s\n' "$name" "$rc" $((SECONDS - t0)) >>"$out/steps.tsv"
  return $rc
}

. "$here/libexec/cuda-libs.sh"
export LD_LIBRARY_PATH="$here/lib${TALLY_CUDA_LIB_PATH:+:$TALLY_CUDA_LIB_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TALLY_HOME="$here" TALLY_BINARY="$here/bin/tally" PYTHONUNBUFFERED=1
tally="$here/bin/tally"

{
  echo "== bundle"; cat "$here/BUNDLE_INFO"
  echo "== host"; (. /etc/os-release && echo "$PRETTY_NAME"); ldd --version | head -1; nproc
  echo "== cuda libraries"; printf '%s' "$TALLY_CUDA_LIB_FOUND"
  echo "== gpu"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1
  echo "== versions"
  python3 - <<'EOF' 2>&1
import ctypes
def load(name):
    try:
        return ctypes.CDLL(name)
    except OSError as e:
        print(f"{name}: cannot load ({e})")
lib = load("libcudnn.so.9")
if lib: print("cudnn", lib.cudnnGetVersion())
lib = load("libcublasLt.so.13")
if lib: print("cublasLt", lib.cublasLtGetVersion())
lib = load("libnccl.so.2")
if lib:
    v = ctypes.c_int()
    lib.ncclGetVersion(ctypes.byref(v))
    print("nccl", v.value)
lib = load("libcudart.so.13")
if lib:
    v = ctypes.c_int(); lib.cudaRuntimeGetVersion(ctypes.byref(v)); print("cudart", v.value)
    lib.cudaDriverGetVersion(ctypes.byref(v)); print("driver_api", v.value)
EOF
} >"$out/env.txt" 2>&1
cat "$out/env.txt" >&2

# run_tests EXE: runs a test executable; when it dies without its XML, the test that was
# running is recorded in OUTDIR/tests/NAME.crashed and the executable runs again without it.
run_tests() {
  local exe=$1 name attempt=0 filter="" crashed
  name=$(basename "$exe")
  : >"$out/tests/$name.crashed"
  while ((attempt < 4)); do
    local log="$out/tests/$name.$attempt.log" xml="$out/tests/$name.$attempt.xml"
    step "test:$name:$attempt" 300 "$log" "$exe" --gtest_output="xml:$xml" ${filter:+--gtest_filter="-$filter"}
    [[ -s "$xml" ]] && return 0
    # No XML: it crashed or ran out of time inside the last test it started.
    crashed=$(grep -a '^\[ RUN      \]' "$log" | tail -1 | awk '{print $NF}')
    [[ -n "$crashed" ]] && ! grep -aq "^\[       OK \] $crashed \|^\[  FAILED  \] $crashed \|^\[  SKIPPED \] $crashed " "$log" || return 1
    echo "$crashed $(tail -3 "$log" | tr '\n' ' ' | cut -c1-400)" >>"$out/tests/$name.crashed"
    filter="${filter:+$filter:}$crashed"
    attempt=$((attempt + 1))
    (($(left) > 10)) || return 1
  done
}

want() { [[ ",$only," == *,"$1",* ]]; }

if want tests; then
  for exe in "$here"/tests/*; do
    [[ -x "$exe" ]] && run_tests "$exe"
  done
fi

# An ImageNet-sized JPEG pack (about 500x375, 4,096 images, 100 classes) for the GPU input
# path's bench and the training job that reads it.
pack="$out/work/synthetic"
if want bench || want jobs || want input; then
  step pack 120 "$out/pack.log" bash -c 'set -e; mkdir -p "$2"
    "$1" make-data synthetic-jpeg --out "$2/jpeg" --classes 100 --per-class 41
    "$1" im2rec --list --recursive "$3" "$2/jpeg"
    "$1" im2rec --pass-through --num-thread 8 "$3" "$2/jpeg"' _ "$tally" "$out/work" "$pack"
fi

if want bench || want input; then
  # Tally against PyTorch eager, torch.compile and the compiled step as CUDA graphs, fp16 and bf16.
  for dtype in float16 bfloat16; do
    want bench && step "bench-$dtype" 420 "$out/bench-$dtype.log" "$tally" bench compute --gpu --json \
      --python python3 --bench-dtype "$dtype"
  done
  cat "$out/bench-float16.log" "$out/bench-bfloat16.log" >"$out/bench.log" 2>/dev/null
  step bench-io 120 "$out/bench-io.log" "$tally" bench io --gpu --json --data "$pack.rec"
  step bench-io-overlap 150 "$out/bench-io-overlap.log" "$tally" bench io --gpu --decode-overlap --json \
    --data "$pack.rec"
  cat "$out/bench.log" "$out/bench-io.log" "$out/bench-io-overlap.log" 2>/dev/null | grep '^{' >"$out/bench.jsonl"
fi

resnet50=(--network resnet --num-layers 50 --image-shape 3,224,224 --num-classes 1000
          --benchmark 1 --num-epochs 1 --disp-batches 5 --lr 0.05 --progress=false)
if want jobs; then
  for dtype in float16 bfloat16; do
    step "job:device-$dtype" 150 "$out/jobs/device-$dtype.log" \
      "$tally" train --gpus 0 --kv-store device --dtype "$dtype" --batch-size 128 \
      --num-examples $((128 * 40)) "${resnet50[@]}"
  done
fi
if want jobs || want input; then
  # The same step at batch 256, on its synthetic batch and on the JPEG pack decoded on the
  # GPU: the second should keep up with the first (issue: >= 95%).
  for source in benchmark jpeg; do
    data=(--benchmark 1 --num-examples $((256 * 40)) --num-epochs 1)
    [[ $source == jpeg ]] && data=(--data-train "$pack.rec" --random-resized-crop 1 --min-random-area 0.08
                                   --max-random-aspect-ratio 1.333 --min-random-aspect-ratio 0.75 --num-epochs 3
                                   --data-nthreads 8)
    step "job:device-float16-b256-$source" 150 "$out/jobs/device-float16-b256-$source.log" \
      "$tally" train --gpus 0 --kv-store device --dtype float16 --batch-size 256 --network resnet \
      --num-layers 50 --image-shape 3,224,224 --num-classes 1000 --disp-batches 5 --lr 0.05 \
      --progress=false "${data[@]}"
  done
  # The hardware decoder's fastest way beside busy kernels, if bench-io-overlap ran and it is
  # not the default: the JPEG job again with it, to see whether it keeps the step fed.
  best=$(python3 - "$out/bench-io-overlap.log" <<'EOF' 2>/dev/null
import json, sys
prefix = "gpu-decode-beside-kernels-hardware-"
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = [r for r in rows if r["case"].startswith(prefix) and r["value"] > 0]
if rows:
    print(min(rows, key=lambda r: r["value"])["case"][len(prefix):])
EOF
  )
  jpeg_job() {  # NAME, then --gpu-decoder and --gpu-decode-tuning
    step "job:device-float16-b256-jpeg-$1" 150 "$out/jobs/device-float16-b256-jpeg-$1.log" \
      "$tally" train --gpus 0 --kv-store device --dtype float16 --batch-size 256 --network resnet \
      --num-layers 50 --image-shape 3,224,224 --num-classes 1000 --disp-batches 5 --lr 0.05 \
      --progress=false --data-train "$pack.rec" --random-resized-crop 1 --min-random-area 0.08 \
      --max-random-aspect-ratio 1.333 --min-random-aspect-ratio 0.75 --num-epochs 3 --data-nthreads 8 \
      --gpu-decoder "$2" --gpu-decode-tuning "$3"
  }
  [[ -n "$best" && "$best" != default ]] && jpeg_job tuned hardware "$best"
  # The decoder on the SMs, spared nvJPEG's colour pass: it runs beside the step but takes
  # SM time from it, which only a training job shows.
  jpeg_job cuda-yuv cuda yuv-output
fi
if want jobs; then
  step "job:dist_device_sync" 180 "$out/jobs/dist_device_sync.log" \
    python3 "$here/tools/launch.py" -n 1 -s 2 --launcher local "$tally" train --gpus 0 \
    --kv-store dist_device_sync --dtype float16 --batch-size 64 --num-examples $((64 * 30)) \
    "${resnet50[@]}"
fi
if want twotoone; then
  # The mission's shape against the same GPU alone (goal: >= 0.90 secure, >= 0.95 plain), and
  # the emulation of it that needs no GPU: bench replay at the device job's measured speed
  # (gpu_checks_summary.py puts the ratios side by side: an emulation that misses the real
  # ratio misses what the real path does).
  b256=("${resnet50[@]}" --dtype float16 --batch-size 256 --num-examples $((256 * 200)) --disp-batches 20)
  step "job:2to1-device" 150 "$out/jobs/2to1-device.log" "$tally" train --gpus 0 --kv-store device "${b256[@]}"
  rate=$(python3 "$here/tools/gpu_checks_summary.py" --median-speed "$out/jobs/2to1-device.log" 2>/dev/null)
  # Each thread's CPU per step in the jobs (tools/bench/thread_load.py), against the device
  # job's step: a thread every step's bytes cross that needs more than the step is the wall.
  load=()
  [[ -n "$rate" ]] && load=(--step-ms "$(python3 -c "print(256000 / $rate)")")
  for security in secure plain; do
    flag=(); [[ $security == plain ]] && flag=(--plain)
    step "job:2to1-dist-$security" 200 "$out/jobs/2to1-dist-$security.log" \
      python3 "$here/tools/bench/thread_load.py" "${load[@]}" --json "$out/jobs/2to1-dist-$security-threads.json" -- \
      python3 "$here/tools/launch.py" -n 1 -s 2 --launcher local "${flag[@]}" \
      "$tally" train --gpus 0 --kv-store dist_device_sync "${b256[@]}"
  done
  # Two worker processes on the one GPU and four servers: the servers at the 2:1 ratio under
  # two workers' load (each worker has half the GPU, so its img/s is not the device job's).
  step "job:2to1-two-workers" 240 "$out/jobs/2to1-two-workers.log" \
    python3 "$here/tools/bench/thread_load.py" --json "$out/jobs/2to1-two-workers-threads.json" -- \
    python3 "$here/tools/launch.py" -n 2 -s 4 --launcher local \
    "$tally" train --gpus 0 --kv-store dist_device_sync "${b256[@]}"
  if [[ -n "$rate" ]]; then
    replay=(bench replay --batch-size 256 --img-per-s "$rate" --wire fp16 --steps 60)
    step "emulation:2to1" 120 "$out/jobs/2to1-emulation.log" \
      python3 "$here/tools/bench/thread_load.py" "${load[@]}" --json "$out/jobs/2to1-emulation-threads.json" -- \
      python3 "$here/tools/launch.py" -n 1 -s 2 --launcher local "$tally" "${replay[@]}"
    step "emulation:2to1-alone" 60 "$out/jobs/2to1-emulation-alone.log" "$tally" "${replay[@]}" --no-comm
  fi
fi

trap - TERM INT
summarize
