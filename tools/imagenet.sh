#!/bin/bash
# ImageNet (ILSVRC2012) with the large-batch ResNet-50 recipe of docs/imagenet.md: packs an
# ILSVRC2012 folder into RecordIO with MXNet's im2rec settings, then trains with LARS, warm-up
# and poly decay, label smoothing and no weight decay on batch norm and biases, through
# tools/launch.py at a given worker count.
#
#   tools/imagenet.sh ILSVRC_DIR WORKERS [extra tally train flags, which win over the recipe's]
#
# ILSVRC_DIR holds train/<wnid>/*.JPEG and val/ in one of three layouts:
#   - val/*.JPEG with LOC_val_solution.csv (Kaggle's ImageNet: "ImageId,PredictionString",
#     the wnid first in PredictionString) in ILSVRC_DIR or beside it;
#   - val/*.JPEG with ILSVRC2012_validation_ground_truth.txt (the devkit's: line i is the
#     ILSVRC2012_ID of ILSVRC2012_val_<i>.JPEG) and a synset map, TALLY_VAL_SYNSETS, whose
#     line k is the wnid of ILSVRC2012_ID k (the devkit's meta.mat order; a line may go on
#     after the wnid);
#   - val/<wnid>/*.JPEG (as after the usual valprep script).
# Class k is the k-th wnid of train/ in sorted order (im2rec --list --recursive), written to
# $TALLY_DATA/synsets.txt.
#
# Environment (defaults in brackets):
#   TALLY_DATA [data/imagenet]   the packs: train.rec/.idx, val.rec/.idx, made once
#   TALLY_RUN [runs/imagenet]    the log (train.log) and checkpoints (resnet50-NNNN)
#   TALLY [build/bin/tally]      the binary
#   TALLY_SERVERS [WORKERS / 2, at least 1]; TALLY_LAUNCH_ARGS: more tools/launch.py options
#                                (--launcher ssh -H hosts ...)
#   TALLY_GPUS [0,1,2,3,4,5,6,7] each worker's GPUs; empty: CPU workers
#   TALLY_BATCH [408 per GPU]    images per worker per step
#   TALLY_PACK_THREADS [nproc]   im2rec threads
#   TALLY_RESIZE [480], TALLY_QUALITY [95]: the training pack (MXNet's image-classification
#   README); TALLY_VAL_RESIZE [256], TALLY_VAL_QUALITY [90]: the validation pack (MXNet's
#   data/imagenet1k-val.sh)
#   TALLY_PACK_ONLY [0]          1: stop after packing
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "tools/imagenet.sh: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: tools/imagenet.sh ILSVRC_DIR WORKERS [tally train flags]"
SRC=$1; WORKERS=$2; shift 2
[[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || die "WORKERS '$WORKERS' is not a positive number"
DATA=${TALLY_DATA:-data/imagenet}
RUN=${TALLY_RUN:-runs/imagenet}
TALLY=${TALLY:-build/bin/tally}
[ -x "$TALLY" ] || die "$TALLY is missing: run tools/build.sh first"
[ -d "$SRC/train" ] || die "$SRC/train is not a folder (expected train/<wnid>/*.JPEG)"
[ -d "$SRC/val" ] || die "$SRC/val is not a folder"
THREADS=${TALLY_PACK_THREADS:-$(nproc)}
mkdir -p "$DATA"

# The classes: train's folders in code-point order, as im2rec --recursive numbers them.
(cd "$SRC/train" && find . -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | LC_ALL=C sort) > "$DATA/synsets.txt"
[ -s "$DATA/synsets.txt" ] || die "$SRC/train holds no class folder"

# Writes $DATA/val.lst ("index<TAB>label<TAB>path under val/") from whichever labels val/ has.
write_val_list() {
  local loc="" gt=""
  for d in "$SRC" "$SRC/.."; do
    [ -z "$loc" ] && [ -f "$d/LOC_val_solution.csv" ] && loc="$d/LOC_val_solution.csv"
    [ -z "$gt" ] && [ -f "$d/ILSVRC2012_validation_ground_truth.txt" ] && gt="$d/ILSVRC2012_validation_ground_truth.txt"
  done
  local images
  images=$(mktemp)
  (cd "$SRC/val" && find . -type f -iname '*.jpeg' -printf '%P\n' | LC_ALL=C sort) > "$images"
  [ -s "$images" ] || die "$SRC/val holds no .JPEG"
  if grep -q / "$images"; then
    echo "tools/imagenet.sh: val/<wnid>/ folders"
    awk -F/ 'NR == FNR { label[$1] = NR - 1; next }
             !($1 in label) { print "val/" $0 ": " $1 " is not a class of train/" > "/dev/stderr"; bad = 1; exit }
             { printf "%d\t%d\t%s\n", FNR - 1, label[$1], $0 }
             END { exit bad }' "$DATA/synsets.txt" "$images" > "$DATA/val.lst"
  elif [ -n "$loc" ]; then
    echo "tools/imagenet.sh: val labels from $loc"
    awk -F, '{ sub(/\r$/, "") }
             FILENAME == ARGV[1] { label[$1] = FNR - 1; next }
             FILENAME == ARGV[2] { if (FNR > 1) { split($2, p, " "); wnid[$1] = p[1] }; next }
             { id = $0; sub(/\.[^.]*$/, "", id)
               if (!(id in wnid)) { print "val/" $0 ": not in " ARGV[2] > "/dev/stderr"; bad = 1; exit }
               if (!(wnid[id] in label)) { print "val/" $0 ": " wnid[id] " is not a class of train/" > "/dev/stderr"; bad = 1; exit }
               printf "%d\t%d\t%s\n", FNR - 1, label[wnid[id]], $0 }
             END { exit bad }' "$DATA/synsets.txt" "$loc" "$images" > "$DATA/val.lst"
  elif [ -n "$gt" ]; then
    [ -f "${TALLY_VAL_SYNSETS:-}" ] ||
      die "$gt numbers classes by ILSVRC2012_ID: set TALLY_VAL_SYNSETS to a file whose line k is the wnid of ID k"
    echo "tools/imagenet.sh: val labels from $gt and $TALLY_VAL_SYNSETS"
    # ILSVRC2012_val_00000042.JPEG is line 42 of the ground truth.
    awk '{ sub(/\r$/, "") }
         FILENAME == ARGV[1] { label[$1] = FNR - 1; next }
         FILENAME == ARGV[2] { wnid[FNR] = $1; next }
         FILENAME == ARGV[3] { id[FNR] = $1; next }
         { n = $0; sub(/\.[^.]*$/, "", n); sub(/.*_/, "", n); n += 0
           if (!(n in id)) { print "val/" $0 ": no line " n " in " ARGV[3] > "/dev/stderr"; bad = 1; exit }
           k = id[n]
           if (!(k in wnid) || !(wnid[k] in label)) { print "val/" $0 ": ILSVRC2012_ID " k " names no class of train/" > "/dev/stderr"; bad = 1; exit }
           printf "%d\t%d\t%s\n", FNR - 1, label[wnid[k]], $0 }
         END { exit bad }' "$DATA/synsets.txt" "$TALLY_VAL_SYNSETS" "$gt" "$images" > "$DATA/val.lst"
  else
    die "no validation labels: val/ has no <wnid>/ folders and neither LOC_val_solution.csv nor ILSVRC2012_validation_ground_truth.txt is in $SRC or beside it"
  fi
  rm -f "$images"
}

if [ ! -f "$DATA/train.rec" ] || [ ! -f "$DATA/train.idx" ]; then
  "$TALLY" im2rec "$DATA/train" "$SRC/train" --list --recursive > /dev/null
  "$TALLY" im2rec "$DATA/train.lst" "$SRC/train" --resize "${TALLY_RESIZE:-480}" --quality "${TALLY_QUALITY:-95}" \
    --num-thread "$THREADS"
fi
if [ ! -f "$DATA/val.rec" ] || [ ! -f "$DATA/val.idx" ]; then
  write_val_list
  "$TALLY" im2rec "$DATA/val.lst" "$SRC/val" --resize "${TALLY_VAL_RESIZE:-256}" --quality "${TALLY_VAL_QUALITY:-90}" \
    --num-thread "$THREADS"
fi
[ "${TALLY_PACK_ONLY:-0}" = 1 ] && exit 0

CLASSES=$(wc -l < "$DATA/synsets.txt")
GPUS=${TALLY_GPUS-0,1,2,3,4,5,6,7}
if [ -n "$GPUS" ]; then
  NGPU=$(awk -F, '{ print NF }' <<< "$GPUS")
  DEVICE=(--gpus "$GPUS" --dtype float16 --kv-store dist_device_sync)
else
  NGPU=1
  DEVICE=(--kv-store dist_sync)
fi
SERVERS=${TALLY_SERVERS:-$(( WORKERS / 2 > 0 ? WORKERS / 2 : 1 ))}
mkdir -p "$RUN"
LOG="$RUN/train.log"
set +e
# shellcheck disable=SC2086  # TALLY_LAUNCH_ARGS is a list of options
python3 tools/launch.py -n "$WORKERS" -s "$SERVERS" ${TALLY_LAUNCH_ARGS:-} \
  "$TALLY" train "${DEVICE[@]}" \
    --network resnet --num-layers 50 --image-shape 3,224,224 --num-classes "$CLASSES" \
    --data-train "$DATA/train.rec" --data-val "$DATA/val.rec" \
    --random-resized-crop 1 --min-random-area 0.08 --max-random-area 1 \
    --min-random-aspect-ratio 0.75 --max-random-aspect-ratio 1.3333 --random-mirror 1 \
    --rgb-mean 123.68,116.779,103.939 --rgb-std 58.393,57.12,57.375 \
    --batch-size "${TALLY_BATCH:-$(( 408 * NGPU ))}" --num-epochs 37 \
    --optimizer lars --lr 10.5 --mom 0.9 --wd 5e-5 --wd-exclude bn,bias --label-smoothing 0.1 \
    --lr-scheduler poly --lr-poly-power 2 --final-lr 0.0001 --warmup-epochs 2 \
    --top-k 5 --model-prefix "$RUN/resnet50" --resume auto "$@" 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
set -e
[ "$status" = 0 ] || { echo "tools/imagenet.sh: the job failed (status $status; log: $LOG); run it again to resume" >&2; exit "$status"; }
grep 'Validation-accuracy=' "$LOG" | tail -n 1
