# Sourced (bash) by the bundle's bin/tally and run-gpu-checks.sh: finds the CUDA libraries
# Tally loads on this machine and sets
#   TALLY_CUDA_LIB_PATH   the folders to put on LD_LIBRARY_PATH (colon-separated)
#   TALLY_CUDA_LIB_FOUND  one line per library: "name path (where it was found)" or
#                         "name not found"
# Already set TALLY_CUDA_LIB_PATH is kept as it is (a parent found them). Places, in order:
# $TALLY_CUDA_LIBS (folders, colon-separated), the dynamic linker's own (ldconfig,
# LD_LIBRARY_PATH), /usr/local/cuda, and NVIDIA's wheels under python3's site-packages
# (nvidia/*/lib: PyTorch's cuDNN, cuBLAS and NCCL).
#
#   . libexec/cuda-libs.sh; echo "$TALLY_CUDA_LIB_FOUND"

tally_cuda_libs=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2)

tally_find_cuda_libs() {
  local -a dirs=()
  local d lib found site
  IFS=: read -r -a dirs <<<"${TALLY_CUDA_LIBS:-}"
  dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  if command -v python3 >/dev/null; then
    for site in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
      for d in "$site"/nvidia/*/lib "$site"/nvidia/cu13/lib; do [[ -d "$d" ]] && dirs+=("$d"); done
    done
  fi
  TALLY_CUDA_LIB_FOUND=""
  local path=""
  for lib in "${tally_cuda_libs[@]}"; do
    found=""
    # The dynamic linker's own: LD_LIBRARY_PATH first, then its cache.
    for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
      [[ -e "$d/$lib" ]] && { found="$d/$lib (LD_LIBRARY_PATH)"; break; }
    done
    if [[ -z "$found" ]]; then
      d=$(/sbin/ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
      [[ -n "$d" ]] && found="$d (ldconfig)"
    fi
    if [[ -z "$found" ]]; then
      for d in "${dirs[@]}"; do
        if [[ -e "$d/$lib" ]]; then
          found="$d/$lib"
          [[ ":$path:" == *":$d:"* ]] || path="${path:+$path:}$d"
          break
        fi
      done
    fi
    TALLY_CUDA_LIB_FOUND+="$lib ${found:-not found}"$'\n'
  done
  export TALLY_CUDA_LIB_PATH="$path" TALLY_CUDA_LIB_FOUND
}

if [[ -z "${TALLY_CUDA_LIB_PATH+set}" ]]; then tally_find_cuda_libs; fi
