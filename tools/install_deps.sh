#!/usr/bin/env bash
# Installs what Tally needs to build and test, from Debian's packages only.
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
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  libeigen3-dev libgoogle-glog-dev libgflags-dev libgtest-dev
  # oneDNN's CMake package asks for OpenCL headers even for CPU use.
  libturbojpeg0-dev libdnnl-dev ocl-icd-opencl-dev
  # PNG decoding and encoding in the data pipeline (worker/image_codec.cc).
  libpng-dev
  # The profiler's run files (JSON) and `tally report`; its test renders the report in
  # headless Chromium.
  nlohmann-json3-dev chromium
  # `tally make-data fashion-mnist` packs Debian's Fashion-MNIST (its tests use it too);
  # zlib reads its gzipped IDX files.
  dataset-fashion-mnist zlib1g-dev
  python3 python3-numpy
  # tests/tools/export_test.py loads `tally export`'s files into PyTorch's ResNets; `tally
  # bench` measures against PyTorch.
  python3-torch python3-torchvision
  # tools/launch.py's tests run real jobs through an sshd they start on 127.0.0.1 and
  # through OpenMPI's mpirun.
  openssh-server openssh-client openmpi-bin
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
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
