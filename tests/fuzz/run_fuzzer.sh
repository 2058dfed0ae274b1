#!/usr/bin/env bash
# Runs one of Tally's fuzzers for a bounded time, starting from its seed corpus, and fails on
# any finding: a crash, a sanitizer report, a leak, a failed check, a slow input or one that
# takes too much memory (docs/fuzzing.md).
#
#   tests/fuzz/run_fuzzer.sh FUZZ_BUILD_DIR NAME SECONDS [more libFuzzer flags]
#
# NAME is message, recordio, image, secure, ndarray, safetensors or checkpoint. The seeds
# (FUZZ_BUILD_DIR/seeds/NAME) are only read; what the run adds to the corpus goes to a
# scratch directory, removed afterwards. A finding
# is kept as FUZZ_BUILD_DIR/findings/NAME-crash-<sha1> (or leak-, timeout-, oom-); rerun
# it with `FUZZ_BUILD_DIR/NAME_fuzzer FILE`.
set -euo pipefail
if (($# < 3)); then
  echo "usage: $0 FUZZ_BUILD_DIR NAME SECONDS [libFuzzer flags]" >&2
  exit 2
fi
dir=$(cd "$1" 2>/dev/null && pwd) || { echo "run_fuzzer: no fuzz build at $1" >&2; exit 1; }
name=$2
seconds=$3
shift 3
fuzzer=$dir/${name}_fuzzer
seeds=$dir/seeds/$name
if [[ ! -x $fuzzer || ! -d $seeds ]]; then
  echo "run_fuzzer: $fuzzer or $seeds is missing: the fuzzers are built with clang" \
       "(tools/install_deps.sh installs it) as part of the main build" >&2
  exit 1
fi
corpus=$(mktemp -d "${TMPDIR:-/tmp}/tally-fuzz-$name-XXXXXX")
trap 'rm -rf "$corpus"' EXIT
mkdir -p "$dir/findings"
# A fixed seed: a run that finds nothing is not made to pass by luck of the draw, and a run
# that finds something can be repeated (as far as a time bound allows).
"$fuzzer" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$dir/findings/$name-" "$@" "$corpus" "$seeds"
