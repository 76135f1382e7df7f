#!/usr/bin/env bash
# For a GPU call with too little device time left to build there (a CUDA build takes ~4 of the
# 15 minutes): packs this machine's build (onnxdp and onnxdp_tests, built with the CUDA backend,
# stripped) and the non-CUDA shared libraries they load (from the Debian packages; the CUDA
# libraries come from the GPU host) into .gpu-carry/onnxdp-gpu.tar.xz (git-ignored), for
# tests/gpu/prebuilt-run.sh there:
#
#   here:   tests/gpu/prebuilt-pack.sh [BUILD_DIR]          (default build)
#   device: bash tests/gpu/prebuilt-run.sh                  (carrying .gpu-carry)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" .gpu-carry
cp "$build/onnxdp" "$build/onnxdp_tests" "$stage/"
strip "$stage/onnxdp" "$stage/onnxdp_tests"
# Every library ldd resolves outside glibc and the CUDA toolkit, as its soname.
ldd "$build/onnxdp" "$build/onnxdp_tests" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r soname path; do
    case "$soname" in
      libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libgcc_s.so* | libstdc++.so* | libz.so* | \
      libcrypto.so* | libudev.so* | libbz2.so*) continue ;;  # the host's own
      libcudart* | libcublas* | libcudnn* | libnccl*) continue ;;  # the GPU host's CUDA libraries
    esac
    cp -L "$path" "$stage/lib/$soname"
  done
tar -C "$stage" -cJf .gpu-carry/onnxdp-gpu.tar.xz .
git -C "$(git rev-parse --show-toplevel)" rev-parse --short HEAD > .gpu-carry/commit
ls -la .gpu-carry
