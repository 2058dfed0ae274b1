#!/usr/bin/env bash
# Installs Tally's dependencies (Debian packages) and builds build/bin/tally and the tests.
# Safe to run again: installs only what is missing and rebuilds only what changed.
#   TALLY_JOBS  parallel build jobs (default: the number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh "$@"
start=$SECONDS  # the packages' installation is not the build's time
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${TALLY_JOBS:-$(nproc)}"
echo "build.sh: built in $((SECONDS - start)) s on $(nproc) cores"
