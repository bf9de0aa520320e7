#!/usr/bin/env bash
# Builds the CUDA backend against a fake libcuda (mockcuda.c) under ASan and UBSan and runs a
# flow through every mapped call: the backend's bookkeeping (contexts, capture records, kernel
# node order, argument updates, error mapping) is exercised without a GPU.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shim=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
gcc -std=c11 -g -O1 -fPIC -shared -o "$out/libmockcuda.so" "$here/mockcuda.c"
gcc -std=c11 -g -O1 $san -I"$shim" -o "$out/flow" "$here/flow.c" "$shim/bungpu.c" "$shim/cuda/"*.c "$here/stubs.c" "$out/libmockcuda.so" -Wl,-rpath,"$out" -lpthread -ldl -lm
BUNGPU_LIBCUDA="$out/libmockcuda.so" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 "$out/flow"
