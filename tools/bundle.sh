#!/usr/bin/env bash
# Packs a relocatable Tally into build/tally-bundle.tar.zst (and the same as
# build/tally-bundle.tar.gz, for machines without zstd): what a machine with a GPU driver
# and nothing else needs to train, to run the GPU tests, and to run tools/run-gpu-checks.sh.
#
#   tools/build.sh && tools/bundle.sh          # then: tar --zstd -xf build/tally-bundle.tar.zst
#                                              # (or tar -xzf build/tally-bundle.tar.gz)
#   tally-bundle/bin/tally train --gpus 0 ...  # from any directory, on any x86-64 Linux with
#                                              # glibc >= this machine's
#   tally-bundle/run-gpu-checks.sh OUTDIR      # every CUDA test, the GPU bench, short jobs
#
# Layout of the archive (one top folder, tally-bundle/):
#   bin/tally            a wrapper: sets LD_LIBRARY_PATH to lib/ and the CUDA libraries it
#                        finds (libexec/cuda-libs.sh), TALLY_HOME to the bundle, then runs
#   libexec/tally        the real executable
#   lib/                 every shared library the executables load that is neither glibc's,
#                        libstdc++/libgcc_s (present wherever glibc is) nor CUDA's (the
#                        driver, runtime, cuBLAS, cuDNN and NCCL come from the target machine)
#   tests/               the test executables that exercise CUDA (those whose sources ask
#                        for a GPU or ask whether one is there)
#   tools/launch.py, tools/launcher/, tools/bench/   the launcher and the benchmarks' peers
#   run-gpu-checks.sh, tools/gpu_checks_summary.py   the GPU validation (docs/gpu.md)
#   BUNDLE_INFO          commit, build date, glibc it was built against
#
#   tools/bundle.sh --check DIR   checks an unpacked bundle: every library its executables
#                                 load resolves inside it, or is glibc's or CUDA's
#
# Environment: TALLY_BUILD (default build), TALLY_BUNDLE_DIR (where the archives and the
# staging folder go; default TALLY_BUILD), TALLY_BUNDLE_ZSTD_LEVEL (default 19).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TALLY_BUILD:-build}
dest=${TALLY_BUNDLE_DIR:-$build}
level=${TALLY_BUNDLE_ZSTD_LEVEL:-19}
stage="$dest/bundle/tally-bundle"
out="$dest/tally-bundle.tar.zst"

die() { echo "bundle.sh: $*" >&2; exit 1; }

# A library is shipped unless the target machine must supply it: glibc's own, the C++
# runtime that comes with glibc's compiler, and CUDA's (they must match the driver).
system_lib() {
  [[ "$1" =~ ^(ld-linux.*|libc|libm|libdl|librt|libpthread|libresolv|libutil|libanl|libnss_.*|libstdc\+\+|libgcc_s)\.so ]] ||
  [[ "$1" =~ ^lib(cuda|cudart|cublas|cublasLt|cudnn.*|nccl|nvrtc.*|nvJitLink|nvidia-ml|cupti)\.so ]]
}

# check DIR: every ELF file's libraries resolve inside DIR/lib, or are system_lib's.
check() {
  local dir=$1 f name arrow path bad=0
  [[ -x "$dir/libexec/tally" ]] || die "--check: $dir is not an unpacked bundle (no libexec/tally)"
  while IFS= read -r f; do
    [[ "$(head -c4 "$f")" == $'\x7fELF' ]] || continue
    while read -r name arrow path _; do
      [[ "$arrow" == "=>" ]] || continue
      system_lib "$name" && continue
      if [[ "$path" != "$dir/lib/"* ]]; then
        echo "bundle.sh --check: ${f#"$dir"/} needs $name, found at '$path', not in the bundle" >&2
        bad=1
      fi
    done < <(LD_LIBRARY_PATH="$dir/lib" ldd "$f" 2>/dev/null)
  done < <(find "$dir/libexec" "$dir/lib" "$dir/tests" -type f)
  ((bad == 0)) || exit 1
  echo "bundle.sh --check: every library of $(find "$dir/libexec" "$dir/lib" "$dir/tests" -type f | wc -l) files resolves inside $dir or is glibc's or CUDA's"
}
if [[ "${1:-}" == "--check" ]]; then
  [[ $# -eq 2 ]] || die "usage: tools/bundle.sh --check UNPACKED_BUNDLE_DIR"
  check "$(cd "$2" && pwd)"
  exit 0
fi
[[ -x "$build/bin/tally" ]] || die "$build/bin/tally is missing: run tools/build.sh first"
command -v zstd >/dev/null || die "zstd is missing (apt-get install zstd)"

# The tests to ship: every test source that asks for a GPU or whether one is present.
mapfile -t gpu_tests < <(grep -rlE "TALLY_REQUIRE_GPU|CudaDeviceCount|BuiltWithCuda" tests \
                           --include='*_test.cc' | xargs -n1 basename | sed 's/\.cc$//' | sort)
for t in "${gpu_tests[@]}"; do
  [[ -x "$build/tests/$t" ]] || die "$build/tests/$t is missing: build it (tools/build.sh builds every test)"
done

rm -rf "$dest/bundle"
mkdir -p "$stage"/{bin,libexec,lib,tests,tools}
cp "$build/bin/tally" "$stage/libexec/tally"
for t in "${gpu_tests[@]}"; do cp "$build/tests/$t" "$stage/tests/"; done
strip --strip-unneeded "$stage/libexec/tally" "$stage"/tests/*

for exe in "$stage/libexec/tally" "$stage"/tests/*; do
  while read -r name _ path _; do
    system_lib "$name" && continue
    [[ "$path" == /* && -f "$path" ]] || die "$exe needs $name, which does not resolve here"
    [[ -e "$stage/lib/$name" ]] || cp -L "$path" "$stage/lib/$name"
  done < <(ldd "$exe" | grep '=>')
done
strip --strip-unneeded "$stage"/lib/*

# torch_cifar_resnet.py: the PyTorch peer of `tally bench compute` imports it.
cp tools/launch.py tools/torch_cifar_resnet.py "$stage/tools/"
cp -r tools/launcher tools/bench "$stage/tools/"
find "$stage/tools" -name __pycache__ -prune -exec rm -rf {} +
cp tools/run-gpu-checks.sh "$stage/run-gpu-checks.sh"
cp tools/gpu_checks_summary.py "$stage/tools/"
cp tools/cuda-libs.sh "$stage/libexec/cuda-libs.sh"
cat >"$stage/bin/tally" <<'EOF'
#!/usr/bin/env bash
# Runs the bundle's tally with its own libraries and the CUDA libraries of this machine.
here=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
. "$here/libexec/cuda-libs.sh"
export LD_LIBRARY_PATH="$here/lib${TALLY_CUDA_LIB_PATH:+:$TALLY_CUDA_LIB_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TALLY_HOME="$here"
exec "$here/libexec/tally" "$@"
EOF
chmod +x "$stage/bin/tally" "$stage/run-gpu-checks.sh"
{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "cuda $(grep -ho 'CUDA_VERSION [0-9]*' /usr/local/cuda/include/cuda.h 2>/dev/null | awk '{print $2}')" \
       "cudnn $(awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{printf "%s%s", sep, $3; sep="."}' \
                 /usr/local/cuda/include/cudnn_version.h 2>/dev/null)"
  echo "tests ${gpu_tests[*]}"
} >"$stage/BUNDLE_INFO"

tar -C "$dest/bundle" -cf - tally-bundle | zstd -q -T0 -"$level" -f -o "$out"
# The same as a gzip'd tar, for machines without zstd (bare GPU nodes often lack it).
tar -C "$dest/bundle" -cf - tally-bundle | gzip -6 >"${out%.zst}.gz"
for f in "$out" "${out%.zst}.gz"; do
  size=$(stat -c %s "$f")
  echo "bundle.sh: wrote $f ($((size / 1048576)) MiB, ${#gpu_tests[@]} test executables, $(ls "$stage/lib" | wc -l) libraries)"
  ((size <= 60 * 1048576)) || die "$f is $((size / 1048576)) MiB, over the 60 MiB a GPU machine's transfer allows"
done
