#!/usr/bin/env bash
# Installs what Tally needs to build and test: Debian's packages, and from PyPI the tensorboard
# package (and nvJPEG where a CUDA toolkit is).
# Idempotent: packages already present are left as they are.
#
#   tools/install_deps.sh          build and test dependencies
#   tools/install_deps.sh --bench  also PIL, which `tally bench io` measures against
#
# The CUDA toolkit is not installed here: CMake uses /usr/local/cuda when it exists and
# builds a CPU-only Tally when it does not.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev libssl-dev
  libprotobuf-dev protobuf-compiler
  libeigen3-dev libgoogle-glog-dev libgflags-dev libgtest-dev
  # oneDNN's CMake package asks for OpenCL headers even for CPU use.
  libturbojpeg0-dev libdnnl-dev ocl-icd-opencl-dev
  # PNG decoding and encoding in the data pipeline (data/image_codec.cc).
  libpng-dev
  # The profiler's run files (JSON) and `tally report`; its test renders the report in
  # headless Chromium.
  nlohmann-json3-dev chromium
  # `tally make-data fashion-mnist` packs Debian's Fashion-MNIST (its tests use it too);
  # zlib reads its gzipped IDX files.
  dataset-fashion-mnist zlib1g-dev
  python3 python3-numpy
  # The tally Python extension (python/, docs/python.md): pybind11 and the interpreter's headers.
  pybind11-dev python3-dev
  # tools/bundle.sh compresses the relocatable bundle with zstd.
  zstd
  # tests/tools/export_test.py loads `tally export`'s files into PyTorch's ResNets; `tally
  # bench` measures against PyTorch.
  python3-torch python3-torchvision
  # tools/launch.py's tests run real jobs through an sshd they start on 127.0.0.1 and
  # through OpenMPI's mpirun.
  openssh-server openssh-client openmpi-bin
  # ... and through a one-node Slurm cluster that tests/slurm/ starts (slurmctld, slurmd,
  # the client commands) with munge for its authentication.
  slurm-wlm munge
  # The fuzzers (tests/fuzz/, docs/fuzzing.md): clang with libFuzzer and the sanitizers'
  # runtimes, LLVM's OpenMP for the kernels they link; ZeroMQ from Python for the test
  # that throws mutated frames at a live job.
  clang libclang-rt-14-dev libomp-14-dev python3-zmq
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-pil)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
else
  echo "install_deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# TensorBoard (PyPI's tensorboard): tests/tools/tensorboard_test.py reads the event files of
# `tally train --tensorboard` back with it. Debian does not package it, so pip installs it for
# Debian's python3, which runs the tests (--break-system-packages where Debian's pip asks
# for it). Left as it is when importable; a failure (no network) only makes that test
# report itself skipped.
if ! /usr/bin/python3 -c "import tensorboard" >/dev/null 2>&1; then
  /usr/bin/python3 -m pip --version >/dev/null 2>&1 ||
    $sudo apt-get install -y -qq --no-install-recommends python3-pip
  pip_flags=(--quiet --disable-pip-version-check)
  # pip's whole help first: `pip | grep -q` under pipefail fails when grep's early exit cuts
  # pip off (SIGPIPE).
  pip_help=$(/usr/bin/python3 -m pip install --help 2>/dev/null || true)
  if grep -q -- --break-system-packages <<<"$pip_help"; then
    pip_flags+=(--break-system-packages)
  fi
  if $sudo env PIP_ROOT_USER_ACTION=ignore /usr/bin/python3 -m pip install "${pip_flags[@]}" tensorboard; then
    echo "install_deps: tensorboard installed for /usr/bin/python3"
  else
    echo "install_deps: tensorboard could not be installed; the tensorboard.* tests will say they are skipped"
  fi
fi

# nvJPEG for the GPU input path (data/gpu_loader.h). CUDA 13's toolkit no longer ships it;
# NVIDIA publishes it as the PyPI wheel nvidia-nvjpeg. Debian's pip refuses to install into
# the system Python, so the wheel is downloaded (pinned version, no dependencies) and
# unpacked into a fixed prefix that CMake searches. Only where a CUDA toolkit is.
nvjpeg_version=13.3.2.43
nvjpeg_prefix=/opt/tally-nvjpeg
if [[ -d /usr/local/cuda && ! -e "$nvjpeg_prefix/.version-$nvjpeg_version" ]]; then
  command -v unzip >/dev/null || { $sudo apt-get install -y -qq --no-install-recommends unzip; }
  python3 -m pip --version >/dev/null 2>&1 ||
    $sudo apt-get install -y -qq --no-install-recommends python3-pip
  wheel_dir=$(mktemp -d)
  trap 'rm -rf "$wheel_dir"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheel_dir" \
    "nvidia-nvjpeg==$nvjpeg_version"
  unzip -q -o "$wheel_dir"/nvidia_nvjpeg-*.whl 'nvidia/cu13/*' -d "$wheel_dir"
  $sudo mkdir -p "$nvjpeg_prefix/include" "$nvjpeg_prefix/lib"
  $sudo cp "$wheel_dir/nvidia/cu13/include/nvjpeg.h" "$nvjpeg_prefix/include/"
  $sudo cp "$wheel_dir"/nvidia/cu13/lib/libnvjpeg.so.* "$nvjpeg_prefix/lib/"
  # The wheel has only the versioned name; the linker looks for libnvjpeg.so.
  $sudo ln -sf "$(basename "$(ls "$nvjpeg_prefix"/lib/libnvjpeg.so.* | head -1)")" "$nvjpeg_prefix/lib/libnvjpeg.so"
  $sudo touch "$nvjpeg_prefix/.version-$nvjpeg_version"
  echo "install_deps: nvJPEG $nvjpeg_version in $nvjpeg_prefix"
fi
