#!/usr/bin/env bash
# Prepares bench/gpu.sh's run on a GPU machine (bench/README.md, "On a GPU"): builds the CUDA
# build here and bundles its test and benchmark programs with every shared library they need
# that a bare CUDA image lacks — oneDNN, fmt, sentencepiece, ..., and Open MPI's runtime (mpirun,
# orted, its plugins and PMIx's, relocated by OPAL_PREFIX) — into .gpu/bundle.tar.xz, which git
# ignores and the device tool carries. Left out on purpose: the C runtime, and the CUDA libraries
# (cuBLASLt, NCCL: hundreds of MB, and the GPU image has its own, matching its driver).
#
# Usage: bash bench/gpu-pack.sh [BUILD_DIR]    (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSEL_CUDA=ON > /dev/null
cmake --build "$build" -j "$(nproc)" --target tessel tessel_tests tessel_mpi_tests cuda_bench

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/lib/fallback" "$stage/root"
cp "$build/tessel" "$build/tessel_tests" "$build/tessel_mpi_tests" "$build/bench/cuda_bench" "$stage/bin/"
strip "$stage/bin/"*

# Open MPI's runtime with the paths it was installed under, so that OPAL_PREFIX=<root>/usr
# finds its plugins, help files and orted there.
ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi
pmix_lib=/usr/lib/x86_64-linux-gnu/pmix2
for path in "$ompi_lib" "$pmix_lib" /usr/share/openmpi /usr/share/pmix /etc/openmpi; do
  if [ -e "$path" ]; then mkdir -p "$stage/root$(dirname "$path")"; cp -a "$path" "$stage/root$path"; fi
done
mkdir -p "$stage/root/usr/bin"
for tool in orterun orted; do cp -L "/usr/bin/$tool" "$stage/root/usr/bin/"; done
ln -s orterun "$stage/root/usr/bin/mpirun"

# Every library the programs and Open MPI's plugins load, resolved here, flat in lib/.
skip='^(libc|libm|libpthread|libdl|librt|libutil|ld-linux-x86-64|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
objects=("$stage/bin/"* $(find "$stage/root" -name '*.so*' -type f) "$stage/root/usr/bin/orterun"
         "$stage/root/usr/bin/orted")
ldd "${objects[@]}" 2>/dev/null | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  name=$(basename "$lib")
  [[ $name =~ $skip ]] && continue
  case $name in
    libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$stage/lib/fallback/" ;;  # only if the image's are older
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
mkdir -p .gpu
tar -C "$stage" -cJf .gpu/bundle.tar.xz bin lib root
git -C "$(git rev-parse --show-toplevel)" rev-parse HEAD > .gpu/commit
du -h .gpu/bundle.tar.xz
echo "carry .gpu with the device tool; run: bash bench/gpu.sh"
