# Where a GPU machine keeps the CUDA libraries tandem's binaries take from the machine
# rather than from the bundle (cudart, cuBLAS / cuBLASLt, NCCL, the driver). Sourced
# by tests/gpu/bundle.sh (which records what the build expects) and tests/gpu/run.sh
# (whose preflight finds each on the device and says where).
#
#   SYSTEM_LIBRARIES        the sonames left to the machine (a regular expression)
#   find_system_library SO  the path of SO on this machine, or nothing
#   library_version PATH    the version: in the real file's name (13.0.96 of
#                           libcudart.so.13.0.96), else of the Python wheel that
#                           installed it, else what the library says (NCCL), else the
#                           soname's

SYSTEM_LIBRARIES='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas|libcublasLt|libnccl|libnvidia)'

# The sonames among those that are CUDA's (the rest are glibc's and GCC's).
CUDA_LIBRARIES='^(libcuda\.so|libcudart\.so|libcublas|libcublasLt|libnccl|libnvidia)'

find_system_library() {
  local so=$1 d p
  # The toolkit, the distribution, the driver's mount.
  for d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/lib \
    /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
    /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    if [ -e "$d/$so" ]; then
      echo "$d/$so"
      return
    fi
  done
  p=$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s { print $NF; exit }')
  if [ -n "$p" ]; then
    echo "$p"
    return
  fi
  # Python wheels (nvidia-nccl-cu13, nvidia-cublas, ...): site-packages/nvidia/*/lib.
  for d in /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib /opt/*/lib/python3*/site-packages/nvidia/*/lib; do
    if [ -e "$d/$so" ]; then
      echo "$d/$so"
      return
    fi
  done
  find /usr/local /opt -maxdepth 8 -name "$so" 2>/dev/null | head -n 1
}

library_version() {
  local real so tail rec v
  real=$(readlink -f "$1")
  so=$(basename "$1")
  tail=$(basename "$real")
  tail=${tail#*.so.}
  if [[ "$tail" =~ ^[0-9]+\.[0-9]+ ]]; then  # libcudart.so.13.0.96
    echo "$tail"
    return
  fi
  # A toolkit assembled from Python wheels (nvidia-cuda-runtime, nvidia-nccl-cu13, ...):
  # the version of the wheel whose RECORD lists the library.
  for rec in "$(dirname "$real")"/../dist-info/*.dist-info/RECORD \
    "$(dirname "$real")"/../../*.dist-info/RECORD "$(dirname "$real")"/../../../*.dist-info/RECORD; do
    if [ -f "$rec" ] && grep -q "/$so," "$rec"; then
      v=$(basename "$(dirname "$rec")")
      v=${v%.dist-info}
      echo "${v##*-}"
      return
    fi
  done
  # NCCL says its version inside.
  v=$(strings -a "$real" 2>/dev/null | grep -m 1 -oE 'NCCL version [0-9][^ ]*')
  if [ -n "$v" ]; then
    echo "${v#NCCL version }"
    return
  fi
  echo "$tail"
}
