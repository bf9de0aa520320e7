#!/usr/bin/env sh
# Builds the CUDA driver simulator: build.sh OUT_DIR → OUT_DIR/libcudasim.so (point BUNGPU_LIBCUDA
# at it). Extra arguments go to the compiler (e.g. -fsanitize=address). Needs a C11 compiler ($CC).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUT_DIR [cflags...]}
shift
mkdir -p "$out"
${CC:-cc} -std=c11 -O2 -g -fPIC -shared "$@" -o "$out/libcudasim.so" "$here/sim.c" -lpthread -ldl
echo "$out/libcudasim.so"
